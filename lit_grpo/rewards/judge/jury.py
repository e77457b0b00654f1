"""Pure jury layer: judge reply text -> one vote, and K votes -> one score per field. No I/O here.

A vote is a ``dict`` field -> integer (``{"correctness": 2, "principle": 1, ...}``); a failed call is
``None``. The paper (R3.B) averages the continuous dimensions (correctness, reasoning) over the K=3
judges and takes a majority vote on the binary ones (principle, unit).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from lit_grpo.rewards.judge.prompts import JudgeTask

Vote = dict[str, int]


class VerdictError(ValueError):
    """A judge reply that is not a valid verdict (the call counts as failed, never as a score)."""


def _as_int(value: Any, field: str, top: int, lenient: bool) -> int:
    if isinstance(value, bool):
        raise VerdictError(f"field {field!r} is a boolean, not an integer")
    if lenient and isinstance(value, str) and re.fullmatch(r"\s*\d+(?:\.0+)?\s*", value):
        value = float(value)
    if lenient and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise VerdictError(f"field {field!r} is {value!r}, not an integer")
    if not 0 <= value <= top:
        raise VerdictError(f"field {field!r} = {value} is outside 0..{top}")
    return value


def _check(obj: Any, task: JudgeTask, lenient: bool) -> Vote:
    if not isinstance(obj, dict):
        raise VerdictError(f"reply is {type(obj).__name__}, not a JSON object")
    missing = [f for f in task.fields if f not in obj]
    if missing:
        raise VerdictError(f"reply lacks {missing}")
    extra = set(obj) - set(task.fields)
    if extra and not lenient:
        raise VerdictError(f"reply has unexpected fields {sorted(extra)}")
    return {f: _as_int(obj[f], f, top, lenient) for f, top in task.fields.items()}


def parse_vote_strict(text: str, task: JudgeTask) -> Vote:
    """The reply must be exactly a JSON object with the task's integer fields in range (the schema).

    Raises:
        VerdictError: anything else.
    """
    try:
        obj = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise VerdictError(f"reply is not JSON ({exc})") from None
    return _check(obj, task, lenient=False)


def _json_objects(text: str):
    """Every ``{...}`` span with balanced braces, outermost first."""
    for start in [m.start() for m in re.finditer(r"\{", text)]:
        depth = 0
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                yield text[start:i + 1]
                break


def parse_vote_tolerant(text: str, task: JudgeTask) -> Vote:
    """Fallback parser: a JSON object anywhere in the text (code fences, prose around it, extra fields,
    ``"2"`` or ``2.0`` for 2), else ``field: N`` / ``"field" = N`` pairs for every field.

    Raises:
        VerdictError: no reading gives every field in range.
    """
    for span in _json_objects(text or ""):
        try:
            return _check(json.loads(span), task, lenient=True)
        except (ValueError, VerdictError):
            continue
    found = {}
    for field in task.fields:
        m = re.search(rf"[\"']?\b{field}\b[\"']?\s*[:=]\s*[\"']?(\d+)", text or "", re.IGNORECASE)
        if m is None:
            raise VerdictError(f"no value for {field!r} in the reply")
        found[field] = int(m.group(1))
    return _check(found, task, lenient=True)


def aggregate_votes(votes: list[Vote | None], task: JudgeTask, min_votes: int | None = None) -> dict[str, float]:
    """Jury score of each field from K votes, or NaN for every field when too few calls succeeded.

    Averaged fields give ``mean(vote) / max`` in [0, 1] (correctness 2, 1, 2 -> 5/6). Majority fields
    give 1.0 when more than half of the valid votes are 1, else 0.0 (a tie is 0). ``min_votes``
    (default: all K) valid votes are needed; fewer give NaN ("cannot score"), never 0.

    >>> from lit_grpo.rewards.judge.prompts import RUBRIC
    >>> aggregate_votes([{"correctness": 2, "principle": 1, "unit": 0, "reasoning": 2},
    ...                  {"correctness": 1, "principle": 1, "unit": 0, "reasoning": 0},
    ...                  {"correctness": 2, "principle": 0, "unit": 1, "reasoning": 1}], RUBRIC)["principle"]
    1.0
    """
    valid = [v for v in votes if v is not None]
    need = len(votes) if min_votes is None else min_votes
    if not valid or len(valid) < need:
        return {f: math.nan for f in task.fields}
    out = {}
    for field, top in task.fields.items():
        values = [v[field] for v in valid]
        if field in task.majority:
            out[field] = 1.0 if sum(1 for x in values if x >= 1) * 2 > len(values) else 0.0
        else:
            out[field] = sum(values) / len(values) / top
    return out
