"""Pure jury layer: judge reply text -> one vote, and K votes -> one score per field. No I/O here.

A vote is a ``dict`` field -> integer (``{"correctness": 2, "principle": 1, ...}``); a failed call is
``None``. The paper (R3.B) averages the continuous dimensions (correctness, reasoning) over the K=3
judges and takes a majority vote on the binary ones (principle, unit).

A reply is read from its final channel only (:func:`final_channel`: the paper's judge, gpt-oss, writes an
analysis channel first, whose draft verdicts are never graded), strictly as the schema's JSON object, else by the
tolerant parser (the last complete verdict object); both are linear in the reply's length.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from lit_grpo.tasks.phyx.judge.prompts import JudgeTask

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


_HARMONY_FINAL = re.compile(r"<\|channel\|>\s*final\b[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>")
"""The header of a harmony final message: ``<|channel|>final<|message|>``, ``<|channel|>final <|constrain|>json<|message|>``."""
_HARMONY_STOP = re.compile(r"<\|(?:end|return|call|endoftext|start)\|>")
_STRIPPED_FINAL = "assistantfinal"
"""What ``<|start|>assistant<|channel|>final<|message|>`` leaves when a server drops special tokens."""
_CONSTRAIN = re.compile(r"^\s*(?:<\|constrain\|>\s*)?json(?=\s*[{\[])", re.IGNORECASE)


def final_channel(text: str | None) -> str:
    """The part of a judge reply that holds its verdict: for a gpt-oss (harmony) reply, the text of its LAST final
    channel, never its analysis; any other reply as it is.

    Reply shapes (the ``content`` of a chat completion; the analysis channel is never graded):

    - ``<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>{...}<|return|>``
      (special tokens kept; vLLM issue #23694 shows ``<|channel|>final<|message|>{...}<|return|>``);
    - ``<|channel|>final <|constrain|>json<|message|>{...}`` (llama.cpp / LM Studio serving gpt-oss with a JSON
      constraint; vLLM's gpt-oss reasoning parser allows tokens between ``final`` and ``<|message|>``);
    - ``analysis...assistantfinal{...}`` (special tokens dropped by the server, as text-generation-webui issue
      #7374 shows: ``analysisUser says ... assistantfinalHello!``);
    - a server with a reasoning parser (vLLM ``--reasoning-parser openai_gptoss``) puts the analysis into the
      message's ``reasoning`` (formerly ``reasoning_content``) field and the final channel alone into ``content``,
      which is read as it is.

    Raises:
        VerdictError: a harmony reply with an analysis channel and no final one (reasoning only).
    """
    text = text or ""
    finals = list(_HARMONY_FINAL.finditer(text))
    if finals:
        text = text[finals[-1].end():]
        stop = _HARMONY_STOP.search(text)
        return _CONSTRAIN.sub("", text[:stop.start()] if stop else text)
    at = text.rfind(_STRIPPED_FINAL)
    if at >= 0:
        return _CONSTRAIN.sub("", text[at + len(_STRIPPED_FINAL):])
    if "<|channel|>" in text or re.match(r"\s*analysis(?=[^\s:.,;!?-])", text):
        raise VerdictError("the reply has an analysis channel but no final one (reasoning is never graded)")
    return text


def parse_vote_strict(text: str, task: JudgeTask) -> Vote:
    """The reply's final channel (:func:`final_channel`) must be exactly a JSON object with the task's integer fields
    in range (the schema).

    Raises:
        VerdictError: anything else.
    """
    final = final_channel(text)
    try:
        obj = json.loads(final)
    except (TypeError, ValueError, RecursionError) as exc:
        raise VerdictError(f"reply is not JSON ({type(exc).__name__})") from None
    return _check(obj, task, lenient=False)


def flat_objects(text: str) -> list[str]:
    """Every ``{...}`` span without a nested object in it, in order, found in one pass (linear in the text's
    length, whatever its braces): braces inside a JSON string of an object do not count. A verdict is such an
    object."""
    spans, stack, in_string, escaped = [], [], False, False
    for i, ch in enumerate(text):
        if in_string:
            escaped, in_string = (not escaped and ch == "\\"), in_string and not (ch == '"' and not escaped)
        elif ch == '"' and stack:
            in_string = True
        elif ch == "{":
            if stack:
                stack[-1][1] = True  # the enclosing object is not flat
            stack.append([i, False])
        elif ch == "}" and stack:
            start, nested = stack.pop()
            if not nested:
                spans.append(text[start:i + 1])
    return spans


def parse_vote_tolerant(text: str, task: JudgeTask) -> Vote:
    """Fallback parser of the reply's final channel (:func:`final_channel`): the LAST complete verdict object in it
    (code fences, prose around it, extra fields, ``"2"`` or ``2.0`` for 2: an earlier draft never wins over a later
    verdict), else the last ``field: N`` / ``"field" = N`` pair of every field. Linear in the reply's length.

    Raises:
        VerdictError: no reading gives every field in range.
    """
    text = final_channel(text)
    for span in reversed(flat_objects(text)):
        try:
            return _check(json.loads(span), task, lenient=True)
        except (ValueError, VerdictError, RecursionError):
            continue
    found = {}
    for field in task.fields:
        pairs = list(re.finditer(rf"[\"']?\b{field}\b[\"']?[ \t]*[:=][ \t]*[\"']?(\d+)", text, re.IGNORECASE))
        if not pairs:
            raise VerdictError(f"no value for {field!r} in the reply")
        found[field] = int(pairs[-1].group(1))
    return _check(found, task, lenient=True)


def aggregate_votes(votes: list[Vote | None], task: JudgeTask, min_votes: int | None = None) -> dict[str, float]:
    """Jury score of each field from K votes, or NaN for every field when too few calls succeeded.

    Averaged fields give ``mean(vote) / max`` in [0, 1] (correctness 2, 1, 2 -> 5/6). Majority fields
    give 1.0 when more than half of the valid votes are 1, else 0.0 (a tie is 0). ``min_votes``
    (default: all K) valid votes are needed; fewer give NaN ("cannot score"), never 0.

    >>> from lit_grpo.tasks.phyx.judge.prompts import RUBRIC
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
