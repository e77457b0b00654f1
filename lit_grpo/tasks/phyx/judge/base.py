"""The judge seam: the small interface every judge implements, and the factory.

A judge grades :class:`~lit_grpo.tasks.phyx.judge.prompts.JudgeItem` rows for a
:class:`~lit_grpo.tasks.phyx.judge.prompts.JudgeTask` and returns K votes per row (``None`` for a failed
call). Rewards only see this interface, so tests swap in a fake at this one seam. Two judges exist:
an OpenAI-compatible HTTP client (:class:`~lit_grpo.tasks.phyx.judge.client.OpenAIJudge`) when
``base_url`` is set, and the rule-based :class:`~lit_grpo.tasks.phyx.judge.offline.OfflineJudge` when it
is not (their settings: :mod:`lit_grpo.tasks.phyx.judge.config`).
"""

from __future__ import annotations

from typing import Any, Protocol

from lit_grpo.tasks.phyx.judge.client import OpenAIJudge
from lit_grpo.tasks.phyx.judge.config import JudgeConfig
from lit_grpo.tasks.phyx.judge.jury import Vote
from lit_grpo.tasks.phyx.judge.offline import OfflineJudge
from lit_grpo.tasks.phyx.judge.prompts import JudgeItem, JudgeTask


class Judge(Protocol):
    """What rewards need from a judge."""

    endpoint: str
    """Where verdicts come from (a URL, or ``offline``), for messages."""

    def grade(self, items: list[JudgeItem], task: JudgeTask) -> list[list[Vote | None]]:
        """K votes per item (``None`` = failed call). Raises JudgeUnavailableError when too many fail."""
        ...

    def pop_metrics(self) -> dict[str, float]:
        """Statistics since the last call (latency, failures, tokens, ...), then reset."""
        ...


def build_judge(config: JudgeConfig | dict[str, Any] | None) -> Judge:
    """The HTTP judge when ``base_url`` is set, else the offline judge."""
    cfg = config if isinstance(config, JudgeConfig) else JudgeConfig.from_dict(config)
    if cfg.base_url:
        return OpenAIJudge(cfg)
    return OfflineJudge(cfg.offline, cfg.num_judges)
