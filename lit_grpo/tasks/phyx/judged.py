"""Judge-backed rewards of the physics reward-design paper: ``open_accuracy`` (jury) and ``rubric``.

Source: "Reward Design for Physical Reasoning in Vision-Language Models": the accuracy reward for
open-ended answers (K=3 judges score correctness 0/1/2, averaged, ``r_a = correctness / 2``), and the
rubric reward (R3.A rule-based for MCQ, R3.B one structured judge call for open-ended, combined by
:func:`~lit_grpo.tasks.phyx.rubric.combine_rubric`). The judge is configured by the ``judge`` kwarg (a
:class:`~lit_grpo.tasks.phyx.judge.JudgeConfig` as a dict; no ``base_url`` = the offline judge) or given
as any object with the :class:`~lit_grpo.tasks.phyx.judge.Judge` interface (tests pass fakes here).
Rows a reward does not apply to give ``None``; a failed jury gives NaN ("failed": the completion's total
cannot be scored), never 0.
"""

from __future__ import annotations

import math
from typing import Annotated, Any
from annotated_types import Ge, Gt, Le

from lit_grpo.settings import Finite
from lit_grpo.rewards.basic import DEFAULT_TAGS, accuracy_reward, format_score
from lit_grpo.tasks.phyx.judge import ACCURACY, RUBRIC, Judge, JudgeConfig, JudgeItem, aggregate_votes, build_judge
from lit_grpo.rewards.parsing import extract_tag, tagged_answer
from lit_grpo.rewards.registry import RewardOutput, register_reward
from lit_grpo.tasks.phyx.rubric import DEFAULT_WEIGHTS, combine_rubric, length_penalty, principle_match, unit_match

NAN = math.nan


def _judge(judge: Judge | JudgeConfig | dict[str, Any] | None) -> tuple[Judge, int | None]:
    if judge is not None and hasattr(judge, "grade"):
        return judge, getattr(getattr(judge, "cfg", None), "min_votes", None)
    cfg = judge if isinstance(judge, JudgeConfig) else JudgeConfig.from_dict(judge)
    return build_judge(cfg), cfg.min_votes


def _column(columns: dict[str, list], name: str, n: int, default: Any = None) -> list:
    values = columns.get(name)
    return list(values) if values is not None else [default] * n


def _open_rows(cols: dict[str, list]) -> list[int]:
    """The rows an open-ended judge grades: open-ended, with a gold answer."""
    return [i for i in range(len(cols["answer"])) if cols["answer_format"][i] == "open" and cols["answer"][i] is not None]


def _item(i: int, completions: list[str], cols: dict[str, list]) -> JudgeItem:
    return JudgeItem(question=str(cols["question"][i] or ""), gold_answer=str(cols["answer"][i]),
                     completion=completions[i], gold_unit=cols["unit"][i], gold_principle=cols["principle"][i])


COLUMNS = ("answer", "answer_format", "question", "unit", "principle", "completion_length", "options")
"""The columns the judge-backed rewards read."""


def _columns(completions: list[str], columns: dict[str, list]) -> dict[str, list]:
    n = len(completions)
    return {k: _column(columns, k, n, "open" if k == "answer_format" else None)
            for k in COLUMNS}


@register_reward("open_accuracy", columns=COLUMNS, extractor=tagged_answer,
                 protocol="a jury of judge calls grades the correctness of each completion 0/1/2, averaged / 2 (the "
                          "paper's accuracy reward for open-ended answers; 1.0 = every juror says fully correct)")
class OpenAccuracyReward:
    """Open-ended accuracy r_a: a jury of K judge calls scores correctness 0/1/2; ``mean / 2`` in [0, 1].

    Rows whose ``answer_format`` is not ``open`` (multiple choice: use ``accuracy``) or that lack a gold
    answer give ``None`` (the term does not apply); a jury with fewer than ``judge.min_votes`` successful
    calls gives NaN (failed: the completion's total cannot be scored). Judge
    statistics (latency, failures, tokens, ...) are returned as metrics for logging.

    Args:
        judge: judge settings (:class:`~lit_grpo.tasks.phyx.judge.JudgeConfig` fields; default: offline).

    As an evaluation scorer, ``evaluation.pass_threshold`` turns the graded score into 0/1 for the tables.
    """

    def __init__(self, judge: Judge | JudgeConfig | dict[str, Any] | None = None):
        self.judge, self.min_votes = _judge(judge)

    def __call__(self, completions: list[str], **columns) -> RewardOutput:
        cols = _columns(completions, columns)
        rows = _open_rows(cols)
        out: list[float | None] = [None] * len(completions)
        if rows:
            votes = self.judge.grade([_item(i, completions, cols) for i in rows], ACCURACY)
            for i, row_votes in zip(rows, votes):
                out[i] = aggregate_votes(row_votes, ACCURACY, self.min_votes)["correctness"]
        return RewardOutput(out, metrics=self.judge.pop_metrics())


@register_reward("rubric", columns=COLUMNS, extractor=tagged_answer,
                 protocol="the paper's rubric reward (format, accuracy, principle, unit, reasoning, combined)")
class RubricReward:
    """Rubric reward r_rub: format, accuracy, principle, unit and (open-ended) reasoning, combined.

    MCQ rows are scored by rules (R3.A): format over the four tag pairs, accuracy = the ``<answer>``
    letter equals the gold (the ``accuracy`` reward's rule), principle and unit by
    :func:`~lit_grpo.rewards.principle_match` / :func:`~lit_grpo.rewards.unit_match`, reasoning 0.
    Open-ended rows (R3.B) get format by rule and the rest from one structured judge call per juror:
    correctness and reasoning averaged over the K calls, principle and unit by majority vote.
    Both go through :func:`~lit_grpo.tasks.phyx.rubric.combine_rubric`; the components are returned for
    logging (``format``, ``accuracy``, ``principle``, ``unit``, ``reasoning``, ``length_penalty``,
    ``reasoning_absent``). A missing gold principle leaves that term out (weights rescaled).

    Args:
        weights: rubric weights (default :data:`~lit_grpo.tasks.phyx.rubric.DEFAULT_WEIGHTS`; the paper
            does not give them).
        strict: hack-resistant principle/unit matching for MCQ (``False`` = the paper's rules).
        judge: judge settings for open-ended rows (default: offline).
        absent_factor: multiplier when reasoning is absent (the paper: 0.6).
        length_scale, length_cap: length penalty ``min(|y| / length_scale, length_cap)`` (the paper: 4000, 0.05).
        length_unit: what ``|y|`` counts, ``chars`` (default; the paper does not say) or ``tokens``
            (the completion's token count from the rollout).
        literal_mcq_penalty: MCQ has ``r_reason = 0`` by definition; read literally the 0.6 penalty would
            then hit every MCQ completion. By default (False) MCQ reasoning counts as absent only when the
            ``<think>`` block is missing or empty; True applies the literal reading.
        tags: tag pairs of the format term (default: think, answer, unit, principle).
    """

    def __init__(self, weights: dict[str, Annotated[float, Ge(0), Finite]] | None = None, strict: bool = False,
                 judge: Judge | JudgeConfig | dict[str, Any] | None = None,
                 absent_factor: Annotated[float, Ge(0), Le(1), Finite] = 0.6,
                 length_scale: Annotated[float, Gt(0), Finite] = 4000.0,
                 length_cap: Annotated[float, Ge(0), Finite] = 0.05, length_unit: str = "chars",
                 literal_mcq_penalty: bool = False, tags: list[str] | None = None):
        if length_unit not in ("chars", "tokens"):
            raise ValueError(f"rubric length_unit must be 'chars' or 'tokens', got {length_unit!r}")
        self.weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
        combine_rubric({}, self.weights, reasoning_absent=False, length=0)  # rejects unknown weight names now
        self.strict, self.absent_factor, self.literal_mcq_penalty = strict, absent_factor, literal_mcq_penalty
        self.length_scale, self.length_cap, self.length_unit = length_scale, length_cap, length_unit
        self.tags = tuple(DEFAULT_TAGS if tags is None else tags)
        self._judge_arg, self._judge = judge, None

    def _jury(self) -> tuple[Judge, int | None]:
        """The judge and its quorum, built on first use (MCQ-only runs never open a judge connection)."""
        if self._judge is None:
            self._judge = _judge(self._judge_arg)
        return self._judge

    def _mcq(self, text: str, gold: str, principle: str | None, unit: str | None,
             options: dict | None) -> dict[str, float]:
        return {
            "accuracy": accuracy_reward([text], answer=[gold], answer_format=["mcq"], options=[options])[0],
            "principle": principle_match(extract_tag(text, "principle"), principle, self.strict) if principle else NAN,
            "unit": unit_match(extract_tag(text, "unit"), unit, self.strict),
            "reasoning": 0.0,
            "reasoning_absent": float(self.literal_mcq_penalty or not (extract_tag(text, "think") or "").strip()),
        }

    def _open(self, completions: list[str], rows: list[int], cols: dict[str, list]) -> dict[int, dict[str, float]]:
        if not rows:
            return {}
        judge, min_votes = self._jury()
        votes = judge.grade([_item(i, completions, cols) for i in rows], RUBRIC)
        out = {}
        for i, row_votes in zip(rows, votes):
            agg = aggregate_votes(row_votes, RUBRIC, min_votes)
            out[i] = {"accuracy": agg["correctness"], "principle": agg["principle"] if cols["principle"][i] else NAN,
                      "unit": agg["unit"], "reasoning": agg["reasoning"],
                      "reasoning_absent": NAN if math.isnan(agg["reasoning"]) else float(agg["reasoning"] == 0)}
        return out

    def _length(self, text: str, tokens: int | None) -> float:
        if self.length_unit == "chars":
            return float(len(text))
        if tokens is None:
            raise ValueError("rubric length_unit='tokens' needs the 'completion_length' column (set by GRPOModule)")
        return float(tokens)

    def __call__(self, completions: list[str], **columns) -> RewardOutput:
        n, cols = len(completions), _columns(completions, columns)
        names = ("format", "accuracy", "principle", "unit", "reasoning", "length_penalty", "reasoning_absent")
        comps = {k: [NAN] * n for k in names}
        totals: list[float | None] = [None] * n  # None: not applicable (no gold); NaN below: a failed jury
        scored = {i: self._mcq(completions[i], cols["answer"][i], cols["principle"][i], cols["unit"][i],
                               cols["options"][i])
                  for i in range(n) if cols["answer_format"][i] == "mcq" and cols["answer"][i] is not None}
        scored.update(self._open(completions, [i for i in range(n) if cols["answer_format"][i] == "open"
                                               and cols["answer"][i] is not None], cols))
        for i, parts in scored.items():
            length = self._length(completions[i], cols["completion_length"][i])
            parts.update(format=format_score(completions[i], self.tags),
                         length_penalty=length_penalty(length, self.length_scale, self.length_cap))
            for k in names:
                comps[k][i] = parts[k]
            totals[i] = NAN
            if not math.isnan(parts["reasoning_absent"]):
                totals[i] = combine_rubric(parts, self.weights, reasoning_absent=bool(parts["reasoning_absent"]),
                                           length=length, absent_factor=self.absent_factor,
                                           length_scale=self.length_scale, length_cap=self.length_cap)
        metrics = self._judge[0].pop_metrics() if self._judge is not None else {}
        return RewardOutput(totals, components=comps, metrics=metrics)
