"""LLM-judge jury for open-ended answers: prompts, a pure vote/aggregation layer, an OpenAI-compatible
HTTP client, a rule-based offline judge, and a scripted loopback server for tests and benchmarks."""

from lit_grpo.rewards.judge.base import Judge, JudgeConfig, JudgeUnavailableError, build_judge
from lit_grpo.rewards.judge.jury import (Vote, VerdictError, aggregate_votes, parse_vote_strict,
                                         parse_vote_tolerant)
from lit_grpo.rewards.judge.prompts import ACCURACY, RUBRIC, TASKS, JudgeItem, JudgeTask, messages, quote_completion

__all__ = [
    "ACCURACY", "RUBRIC", "TASKS", "Judge", "JudgeConfig", "JudgeItem", "JudgeTask", "JudgeUnavailableError",
    "VerdictError", "Vote", "aggregate_votes", "build_judge", "messages", "parse_vote_strict",
    "parse_vote_tolerant", "quote_completion",
]
