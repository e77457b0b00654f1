"""Rewards: pure parsing helpers, a registry of reward functions, and the weighted total."""

from lit_grpo.rewards.basic import (accuracy_reward, binary_reward, boxed_answer, boxed_format_reward, format_reward,
                                   format_score)
from lit_grpo.rewards.parsing import extract_boxed, extract_boxed_official, extract_option_letter, extract_tag
from lit_grpo.rewards.phyx import phyx_extract, phyx_official_reward, phyx_official_score
from lit_grpo.rewards.registry import REWARDS, RewardSpec, build_reward, build_rewards, score_completions

__all__ = [
    "REWARDS",
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
    "phyx_extract",
    "phyx_official_reward",
    "phyx_official_score",
    "score_completions",
]
