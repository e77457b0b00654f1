"""Evaluation records and the paper's accuracy table (pure functions; callbacks write them out).

A *record* is one completion of one evaluation prompt: ``id``, ``mode`` (``greedy`` | ``sampled``),
``prompt``, ``completion``, ``extracted`` (the answer the scorer reads), ``answer``, ``answer_format``,
``domain``, ``reasoning_type``, ``rewards`` (each reward), ``total`` and ``correct`` (the scorer's 0/1,
NaN when it cannot score). The scorer is any registered reward (``accuracy`` for the paper's MCQ
protocol, ``open_accuracy`` with a pass threshold for its open-ended protocol, ``phyx_official`` for
PhyX's rule-mode scorer, ``binary`` for VisualSphinx); :func:`correctness` turns its values into 0/1.

:func:`accuracy_table` gives accuracy overall, per PhyX domain and per reasoning type, as in the
reward-design paper's tables; :func:`table_markdown` and :func:`table_csv` render it.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any, Callable

from lit_grpo.data.phyx import DOMAINS, REASONING_TYPES
from lit_grpo.data.sample import Sample
from lit_grpo.registry import Registry
from lit_grpo.rewards.judge.base import JudgeConfig
from lit_grpo.rewards.parsing import extract_answer, extract_answer_letter, extract_boxed_official, extract_option_letter
from lit_grpo.rewards.phyx import phyx_extract
from lit_grpo.rewards.registry import RewardFn, RewardSpec, build_reward

EXTRACTORS: Registry[Callable[[str, str], str | None]] = Registry("answer extractor")
"""Scorer (reward) name -> ``fn(completion, answer_format)`` giving the answer that scorer reads."""


def _tag_answer(text: str, answer_format: str) -> str | None:
    """The ``<answer>`` letter for MCQ (what ``accuracy`` and the MCQ rubric compare), else the final answer
    (what the judges of ``open_accuracy`` and the open-ended rubric grade)."""
    return extract_answer_letter(text) if answer_format == "mcq" else extract_answer(text)


for _name in ("accuracy", "rubric", "open_accuracy"):
    EXTRACTORS.register(_name)(_tag_answer)
EXTRACTORS.register("binary")(lambda text, fmt: extract_boxed_official(text))
EXTRACTORS.register("phyx_official")(phyx_extract)


def extracted_answer(scorer: str | None, text: str, answer_format: str) -> str | None:
    """The answer ``scorer`` reads from ``text``; other scorers: the final answer (``<answer>``, else the last
    box), as an option letter for MCQ."""
    if scorer in EXTRACTORS:
        return EXTRACTORS.get(scorer)(text, answer_format)
    found = extract_answer(text)
    return extract_option_letter(found) if answer_format == "mcq" else found


def build_scorer(scorer: str | None, kwargs: dict[str, Any], configured: list[RewardSpec],
                 judge: JudgeConfig | None = None) -> RewardFn | None:
    """The evaluation scorer ``scorer`` built with ``kwargs`` (and ``judge`` as its ``judge`` kwarg), or ``None``
    when there is no scorer or when a ``configured`` reward (or metric) with that label and the same kwargs (or
    none given) already computes it: its values are then reused, so a judge is not asked twice. Judge settings
    compare as :class:`JudgeConfig` (a dict of the reward equals the typed judge holding the same values).

    Raises:
        ValueError: a judge given both in ``kwargs`` and as ``judge``.
    """
    if scorer is None:
        return None
    if judge is not None:
        if "judge" in kwargs:
            raise ValueError("the scorer's judge is given twice: in evaluation.scorer_kwargs and evaluation.judge")
        kwargs = {**kwargs, "judge": judge}
    same = [s for s in configured if s.label == scorer]
    if same and (kwargs == {} or _comparable(kwargs) == _comparable(same[0].kwargs)):
        return None
    return build_reward(RewardSpec(scorer, kwargs=kwargs))


def _comparable(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with a ``judge`` dict as a :class:`JudgeConfig` (defaults filled in)."""
    judge = kwargs.get("judge")
    return {**kwargs, "judge": JudgeConfig.from_dict(judge)} if isinstance(judge, dict) else dict(kwargs)


def correctness(scores: list[float | None], pass_threshold: float | None = None) -> list[float]:
    """A scorer's values as the correctness of each completion: ``None``, NaN and +-inf become NaN ("cannot
    score", never wrong); with ``pass_threshold`` a score counts as correct (1.0) when it is at least the threshold,
    else 0.0 (a graded scorer such as the jury's ``open_accuracy`` made 0/1); without, the score as is.

    >>> correctness([1.0, 5 / 6, 0.5, None], pass_threshold=1.0)
    [1.0, 0.0, 0.0, nan]
    """
    out = []
    for v in scores:
        v = math.nan if v is None or not math.isfinite(float(v)) else float(v)
        out.append(v if math.isnan(v) or pass_threshold is None else float(v >= pass_threshold))
    return out


def prompt_text(messages: list[dict]) -> str:
    """Chat messages as plain text: ``[role] text`` per turn, images as ``<image>``."""
    parts = []
    for m in messages:
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        body = " ".join("<image>" if c["type"] == "image" else c.get("text", "") for c in content)
        parts.append(f"[{m['role']}] {body}")
    return "\n".join(parts)


def build_records(samples: list[Sample], messages: list[list[dict]], completions: list[str],
                  rewards: dict[str, list[float]], total: list[float], correct: list[float] | None,
                  group_size: int, mode: str, scorer: str | None) -> list[dict[str, Any]]:
    """One record per completion; completion ``i`` belongs to sample ``i // group_size``."""
    records = []
    for i, text in enumerate(completions):
        s = samples[i // group_size]
        records.append({
            "id": s.id, "mode": mode, "prompt": prompt_text(messages[i // group_size]), "completion": text,
            "extracted": extracted_answer(scorer, text, s.answer_format), "answer": s.answer,
            "answer_format": s.answer_format, "domain": s.domain,
            "reasoning_type": list(s.meta.get("reasoning_type", [])),
            "rewards": {k: float(v[i]) for k, v in rewards.items()}, "total": float(total[i]),
            "correct": float(correct[i]) if correct is not None else math.nan,
        })
    return records


def _row(group: str, name: str, values: list[float]) -> dict[str, Any]:
    scored = [v for v in values if not math.isnan(v)]
    return {"group": group, "name": name, "n": len(values), "unscorable": len(values) - len(scored),
            "correct": sum(scored), "accuracy": sum(scored) / len(scored) if scored else math.nan}


def accuracy_table(records: list[dict[str, Any]], domains: tuple[str, ...] = DOMAINS,
                   reasoning_types: tuple[str, ...] = REASONING_TYPES) -> list[dict[str, Any]]:
    """Accuracy rows: ``overall``, then each domain, then each reasoning type (a record counts under every
    type it has), each ``{group, name, n, unscorable, correct, accuracy}``.

    Accuracy is the mean of ``correct`` over the records that could be scored (NaN excluded and counted
    in ``unscorable``); a group with no scorable record has NaN accuracy. Domain and reasoning-type rows
    appear when some record has a domain (PhyX), all six of each, in the paper's order.
    """
    rows = [_row("overall", "all", [r["correct"] for r in records])]
    if any(r.get("domain") for r in records):
        rows += [_row("domain", d, [r["correct"] for r in records if r.get("domain") == d]) for d in domains]
        rows += [_row("reasoning_type", t, [r["correct"] for r in records if t in r.get("reasoning_type", [])])
                 for t in reasoning_types]
    return rows


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.3f}"


def table_markdown(rows: list[dict[str, Any]], title: str) -> str:
    """The paper's layout: one line of accuracies (Overall + the six domains), then reasoning types."""
    by = {(r["group"], r["name"]): r for r in rows}
    overall = by[("overall", "all")]
    heads = ["Overall"] + [r["name"] for r in rows if r["group"] == "domain"]
    cells = [overall] + [r for r in rows if r["group"] == "domain"]
    out = [f"### {title}", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads),
           "| " + " | ".join(_pct(c["accuracy"]) for c in cells) + " |",
           "| " + " | ".join(f"n={c['n']}" for c in cells) + " |"]
    types = [r for r in rows if r["group"] == "reasoning_type"]
    if types:
        out += ["", "| Reasoning type | Accuracy | n |", "|---|---|---|"]
        out += [f"| {r['name']} | {_pct(r['accuracy'])} | {r['n']} |" for r in types]
    if overall["unscorable"]:
        out += ["", f"{overall['unscorable']} of {overall['n']} completions could not be scored (NaN)."]
    return "\n".join(out) + "\n"


def table_csv(rows: list[dict[str, Any]], mode: str) -> str:
    """Long-form CSV: ``mode,group,name,accuracy,correct,n,unscorable`` (accuracy empty when NaN)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["mode", "group", "name", "accuracy", "correct", "n", "unscorable"])
    for r in rows:
        acc = "" if math.isnan(r["accuracy"]) else f"{r['accuracy']:.6f}"
        w.writerow([mode, r["group"], r["name"], acc, f"{r['correct']:g}", r["n"], r["unscorable"]])
    return buf.getvalue()


def scalar_name(row: dict[str, Any]) -> str:
    """A TensorBoard-safe tag suffix: ``overall``, ``domain/Wave_Acoustics``, ``reasoning_type/Numerical_Reasoning``."""
    if row["group"] == "overall":
        return "overall"
    return f"{row['group']}/" + row["name"].replace("/", "_").replace(" ", "_").replace("&", "and")
