"""Rewards: pure parsing helpers, a registry of reward functions, the weighted total, rubric and judge rewards."""

from lit_grpo.rewards.basic import (accuracy_reward, binary_reward, boxed_answer, boxed_format_reward, format_reward,
                                   format_score)
from lit_grpo.rewards.parsing import extract_boxed, extract_boxed_official, extract_option_letter, extract_tag
from lit_grpo.rewards.phyx import phyx_extract, phyx_official_reward, phyx_official_score
from lit_grpo.rewards.registry import (REWARDS, RewardOutput, RewardSpec, build_reward, build_rewards,
                                       required_columns, score_completions)
from lit_grpo.rewards.rubric import STOPWORDS, combine_rubric, principle_match, unit_match
from lit_grpo.rewards.judged import OpenAccuracyReward, RubricReward
from lit_grpo.rewards.equivalence import OpenEquivalence
from lit_grpo.rewards.attention import attention_reward

__all__ = [
    "REWARDS",
    "STOPWORDS",
    "OpenAccuracyReward",
    "OpenEquivalence",
    "RewardOutput",
    "RewardSpec",
    "RubricReward",
    "accuracy_reward",
    "attention_reward",
    "binary_reward",
    "boxed_answer",
    "boxed_format_reward",
    "build_reward",
    "build_rewards",
    "combine_rubric",
    "extract_boxed",
    "extract_boxed_official",
    "extract_option_letter",
    "extract_tag",
    "format_reward",
    "format_score",
    "phyx_extract",
    "phyx_official_reward",
    "phyx_official_score",
    "principle_match",
    "required_columns",
    "score_completions",
    "unit_match",
]
