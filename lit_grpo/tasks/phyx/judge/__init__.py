"""LLM-judge jury for open-ended answers: prompts, a pure vote/aggregation layer, an OpenAI-compatible
HTTP client and a rule-based offline judge (a scripted loopback server for tests: :mod:`lit_grpo.testing`)."""

from lit_grpo.tasks.phyx.judge.base import Judge, build_judge
from lit_grpo.tasks.phyx.judge.client import JudgeUnavailableError, OpenAIJudge
from lit_grpo.tasks.phyx.judge.config import JudgeConfig
from lit_grpo.tasks.phyx.judge.offline import OfflineJudge, OfflineJudgeConfig
from lit_grpo.tasks.phyx.judge.jury import (Vote, VerdictError, aggregate_votes, parse_vote_strict,
                                         parse_vote_tolerant)
from lit_grpo.tasks.phyx.judge.prompts import (ACCURACY, EQUIVALENCE, RUBRIC, TASKS, JudgeItem, JudgeTask, messages,
                                            quote_completion)

__all__ = [
    "ACCURACY", "EQUIVALENCE", "RUBRIC", "TASKS", "Judge", "JudgeConfig", "JudgeItem", "JudgeTask",
    "JudgeUnavailableError",
    "OfflineJudge", "OfflineJudgeConfig", "OpenAIJudge",
    "VerdictError", "Vote", "aggregate_votes", "build_judge", "messages", "parse_vote_strict",
    "parse_vote_tolerant", "quote_completion",
]
