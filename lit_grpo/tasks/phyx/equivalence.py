"""The paper's evaluation of open-ended answers as a scorer: ``open_equivalence``.

Source: "Reward Design for Physical Reasoning in Vision-Language Models", evaluation: "For open-ended questions,
we additionally extract the <think> tag [...]. The extracted answer, unit, and principle are evaluated using
GPT-oss 120b as an LLM-as-judge that determines semantic equivalence between the predictions and the ground-truth
answers." So the judge sees the extracted fields (not the whole completion) and answers yes/no per field
(:data:`~lit_grpo.tasks.phyx.judge.EQUIVALENCE`), once per completion (``num_judges: 1``, whatever the judge block
says, so one block serves the jury of the reward and this scorer): the paper names one judge for its evaluation,
where its accuracy *reward* asks a jury of three for correctness 0/1/2 (``open_accuracy``). A completion is correct
when every field of ``require`` is equivalent (by default the answer: the paper reports accuracy).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any, Literal
from annotated_types import Ge

from lit_grpo.tasks.phyx.judge.config import JudgeConfig
from lit_grpo.tasks.phyx.judge import EQUIVALENCE, Judge, aggregate_votes
from lit_grpo.tasks.phyx.judged import COLUMNS, _columns, _item, _judge, _open_rows
from lit_grpo.rewards.parsing import extract_answer, extract_tag, tagged_answer
from lit_grpo.rewards.registry import RewardOutput, register_reward

FIELDS = tuple(EQUIVALENCE.fields)
"""What the judge is asked about: ``answer``, ``unit``, ``principle``."""


def extracted_fields(completion: str) -> str:
    """What the judge grades: the completion's graded answer, unit and principle as tags (absent ones left out).

    >>> extracted_fields("<think>F = ma</think><answer>7.55 N</answer><unit>N</unit>")
    '<answer>7.55 N</answer>\\n<unit>N</unit>'
    """
    found = {"answer": extract_answer(completion), "unit": extract_tag(completion, "unit"),
             "principle": extract_tag(completion, "principle")}
    return "\n".join(f"<{k}>{v}</{k}>" for k, v in found.items() if v is not None)


@register_reward("open_equivalence", columns=COLUMNS, extractor=tagged_answer,
                 protocol="the judge decides whether the extracted answer, unit and principle are each semantically "
                          "equivalent to the reference, correct = the required ones are (by default the answer; the "
                          "paper's evaluation of open-ended answers)")
class OpenEquivalence:
    """1.0 when the judge finds every field of ``require`` equivalent to the reference, else 0.0; ``None`` on rows
    that are not open-ended or have no gold answer; NaN when the judge's calls failed (fewer than ``min_votes``).
    The three verdicts are returned as components (``answer``, ``unit``, ``principle``) and the judge's call
    statistics as metrics.

    Args:
        judge: judge settings (:class:`~lit_grpo.tasks.phyx.judge.config.JudgeConfig` fields; default: the
            offline judge), e.g. the server the accuracy reward's jury uses.
        require: the fields that must be equivalent for a completion to count as correct (default: the answer).
        num_judges: calls per completion, in place of the judge's ``num_judges`` (the paper asks one judge; several
            are combined by majority); ``None`` keeps the judge's.
    """

    def __init__(self, judge: Judge | JudgeConfig | dict[str, Any] | None = None,
                 require: list[Literal["answer", "unit", "principle"]] | None = None,
                 num_judges: Annotated[int, Ge(1)] | None = 1):
        self.require = list(require or ["answer"])
        unknown = [f for f in self.require if f not in FIELDS]
        if unknown or not self.require:
            raise ValueError(f"open_equivalence require must list some of {list(FIELDS)}, got {require!r}")
        if num_judges is not None and not hasattr(judge, "grade"):  # settings, not a judge object: set K
            cfg = judge if isinstance(judge, JudgeConfig) else JudgeConfig.from_dict(judge)
            judge = dataclasses.replace(cfg, num_judges=num_judges,
                                        min_votes=None if cfg.min_votes is None else min(cfg.min_votes, num_judges))
        self.judge, self.min_votes = _judge(judge)

    def __call__(self, completions: list[str], **columns) -> RewardOutput:
        cols = _columns(completions, columns)
        rows = _open_rows(cols)
        out: list[float | None] = [None] * len(completions)
        parts: dict[str, list[float | None]] = {f: [None] * len(completions) for f in FIELDS}
        if rows:
            shown = [extracted_fields(c) for c in completions]  # the judge sees the extracted fields only
            items = [_item(i, shown, cols) for i in rows]
            for i, votes in zip(rows, self.judge.grade(items, EQUIVALENCE)):
                verdict = aggregate_votes(votes, EQUIVALENCE, self.min_votes)
                for f in FIELDS:
                    parts[f][i] = verdict[f]
                required = [verdict[f] for f in self.require]
                out[i] = math.nan if any(math.isnan(v) for v in required) else min(required)  # NaN: the calls failed
        return RewardOutput(out, components=parts, metrics=self.judge.pop_metrics())
