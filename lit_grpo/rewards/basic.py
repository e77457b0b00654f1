"""First reward set: VisualSphinx binary reward, tag-format reward, multiple-choice accuracy.

Sources: VisualSphinx (Feng et al. 2025, arXiv:2505.23977, sec. 4: "1 for a correct response and 0 for
an incorrect response, without additional rewards for formatting"), and the physics reward-design
paper (Granite Vision on PhyX: format reward R1 over four tag pairs, accuracy reward R2 for MCQ).
"""

from __future__ import annotations

import math

from lit_grpo.rewards.parsing import count_tag, extract_answer_letter, extract_boxed, extract_boxed_official
from lit_grpo.rewards.registry import REWARDS

DEFAULT_TAGS = ("think", "answer", "unit", "principle")


def boxed_answer(text: str, mode: str = "official") -> str | None:
    """The boxed answer under ``mode``: ``official`` (VisualSphinx regex), ``first`` or ``last`` (brace-matched)."""
    if mode == "official":
        return extract_boxed_official(text)
    if mode in ("first", "last"):
        return extract_boxed(text, which=mode)
    raise ValueError(f"mode must be 'official', 'first' or 'last', got {mode!r}")


@REWARDS.register("binary")
def binary_reward(completions: list[str], answer: list[str], mode: str = "official", **_) -> list[float]:
    """VisualSphinx binary reward: 1.0 when the boxed answer equals the gold exactly, else 0.0.

    ``mode="official"`` (default) reproduces the official scorer: the first ``\\boxed{``, non-greedy
    up to the first ``}``, stripped, compared case-sensitively with ``answer`` (``\\boxed{C}`` scores,
    ``\\boxed{(C)}`` and ``\\boxed{c}`` do not; no box scores 0). ``mode="last"`` / ``"first"`` use the
    brace-matching :func:`~lit_grpo.rewards.extract_boxed` instead. A missing gold gives NaN.

    >>> binary_reward([r"\\boxed{C}", r"\\boxed{c}", "C"], answer=["C", "C", "C"])
    [1.0, 0.0, 0.0]
    """
    out = []
    for text, gold in zip(completions, answer):
        if gold is None:
            out.append(math.nan)
            continue
        pred = boxed_answer(text, mode)
        out.append(1.0 if pred is not None and pred == str(gold).strip() else 0.0)
    return out


def format_score(text: str, tags: tuple[str, ...] | list[str] = DEFAULT_TAGS) -> float:
    """Fraction of ``tags`` whose pair is well formed: ``<t>`` and ``</t>`` each exactly once, in order."""
    good = 0
    for tag in tags:
        opens, closes = count_tag(text, tag)
        if opens == 1 and closes == 1 and text.index(f"<{tag}>") < text.index(f"</{tag}>"):
            good += 1
    return good / len(tags)


@REWARDS.register("format")
def format_reward(completions: list[str], tags: list[str] = list(DEFAULT_TAGS), **_) -> list[float]:
    """Format reward r_f: each tag pair contributes ``1 / len(tags)`` when present exactly once and well formed.

    Content correctness is ignored. Default tags: ``think``, ``answer``, ``unit``, ``principle``.

    >>> format_reward(["<think>x</think><answer>B</answer>"])
    [0.5]
    """
    return [format_score(text, tuple(tags)) for text in completions]


@REWARDS.register("accuracy")
def accuracy_reward(
    completions: list[str], answer: list[str], answer_format: list[str] | None = None, tag: str = "answer", **_
) -> list[float]:
    """Multiple-choice accuracy r_a: the option letter in ``<answer>`` equals the gold letter (case-insensitive).

    The letter is read with :func:`~lit_grpo.rewards.parsing.extract_answer_letter` (``B``, ``(B)``, ``B.``,
    ``B)``, ``Answer: B``; never a capital inside a word). No ``<answer>`` tag scores 0. Rows whose
    ``answer_format`` is not ``mcq`` (open-ended, graded by a judge) give NaN here.

    >>> accuracy_reward(["<answer>(b)</answer>", "<answer>Based on</answer>"], answer=["B", "B"])
    [1.0, 0.0]
    """
    formats = answer_format or ["mcq"] * len(completions)
    out = []
    for text, gold, fmt in zip(completions, answer, formats):
        if fmt != "mcq" or gold is None:
            out.append(math.nan)
            continue
        letter = extract_answer_letter(text, tag)
        out.append(1.0 if letter is not None and letter == str(gold).strip().upper() else 0.0)
    return out


@REWARDS.register("boxed_format")
def boxed_format_reward(completions: list[str], options: list[dict] | None = None,
                        truncated: list[bool] | None = None, **_) -> list[float]:
    """Format compliance of the boxed task: 1.0 when the completion stopped on its own (not truncated) and the
    official extraction finds a box holding one of the option labels (any label, right or wrong), else 0.0.

    >>> boxed_format_reward([r"so \\boxed{B}", r"\\boxed{B}}", "B"], options=[{"A": "A", "B": "B"}] * 3)
    [1.0, 1.0, 0.0]
    """
    out = []
    for i, text in enumerate(completions):
        labels = set(options[i]) if options else None
        pred = extract_boxed_official(text)
        ok = pred is not None and (labels is None or pred in labels)
        out.append(1.0 if ok and not (truncated and truncated[i]) else 0.0)
    return out
