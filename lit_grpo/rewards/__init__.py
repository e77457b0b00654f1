"""Rewards: the registry of reward functions and the weighted total, the generic parsing helpers and answer
rewards (``binary``, ``format``, ``accuracy``, ``boxed_format``). The tasks' rewards (``rubric``, ``open_accuracy``,
``phyx_official``, ``attention``) live in ``lit_grpo.tasks``, imported when a configuration names one of them."""

from lit_grpo.rewards.basic import (accuracy_reward, binary_reward, boxed_answer, boxed_format_reward, format_reward,
                                    format_score)
from lit_grpo.rewards.parsing import extract_boxed, extract_boxed_official, extract_option_letter, extract_tag
from lit_grpo.rewards.registry import (REWARDS, RewardOutput, RewardSpec, build_reward, build_rewards,
                                       register_reward, required_columns, score_completions, unmet_columns)

__all__ = [
    "REWARDS",
    "RewardOutput",
    "RewardSpec",
    "accuracy_reward",
    "binary_reward",
    "boxed_answer",
    "boxed_format_reward",
    "build_reward",
    "build_rewards",
    "extract_boxed",
    "extract_boxed_official",
    "extract_option_letter",
    "extract_tag",
    "format_reward",
    "format_score",
    "register_reward",
    "required_columns",
    "unmet_columns",
    "score_completions",
]
