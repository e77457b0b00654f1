"""First reward set: VisualSphinx binary reward, tag-format reward, multiple-choice accuracy.

Sources: VisualSphinx (Feng et al. 2025, arXiv:2505.23977, sec. 4: "1 for a correct response and 0 for
an incorrect response, without additional rewards for formatting"), and the physics reward-design
paper (Granite Vision on PhyX: format reward R1 over four tag pairs, accuracy reward R2 for MCQ).
"""

from __future__ import annotations

from lit_grpo.rewards.parsing import (count_tag, extract_answer_letter, extract_boxed, extract_boxed_official,
                                     official_box, outside_think, tagged_answer, think_blocks)
from lit_grpo.rewards.registry import register_reward

DEFAULT_TAGS = ("think", "answer", "unit", "principle")


BOXED_MODES = ("official", "multiline", "first", "last")


def boxed_answer(text: str, mode: str = "official") -> str | None:
    """The boxed answer under ``mode``: ``official`` (the VisualSphinx regex, ``.`` not crossing a newline),
    ``multiline`` (the same regex with ``.`` crossing newlines), ``first`` or ``last`` (brace-matched)."""
    if mode in ("official", "multiline"):
        return extract_boxed_official(text, multiline=mode == "multiline")
    if mode in ("first", "last"):
        return extract_boxed(text, which=mode)
    raise ValueError(f"mode must be one of {BOXED_MODES}, got {mode!r}")


@register_reward("binary", columns=("answer",), extractor=official_box,
                 protocol="the boxed answer equals the gold answer exactly (VisualSphinx's scorer)")
def binary_reward(completions: list[str], answer: list[str], mode: str = "official", **_) -> list[float | None]:
    """VisualSphinx binary reward: 1.0 when the boxed answer equals the gold exactly, else 0.0.

    ``mode="official"`` (default) reproduces the official scorer: the regex ``\\boxed{(.*?)}`` without
    DOTALL (first match; ``.`` does not cross a newline, so ``\\boxed{\\nC\\n}`` does not match and a later
    box may), stripped, compared case-sensitively with ``answer`` (``\\boxed{C}`` scores, ``\\boxed{(C)}``
    and ``\\boxed{c}`` do not; no box scores 0). ``mode="multiline"`` is the lenient variant whose ``.``
    crosses newlines; ``"last"`` / ``"first"`` use the brace-matching :func:`~lit_grpo.rewards.extract_boxed`.
    A missing gold gives ``None`` (the term does not apply).

    Args:
        mode: how the box is found: ``official``, ``multiline``, ``first`` or ``last`` (see above).

    >>> binary_reward([r"\\boxed{C}", r"\\boxed{c}", "C"], answer=["C", "C", "C"])
    [1.0, 0.0, 0.0]
    """
    boxed_answer("", mode)  # an unknown mode fails even on an empty batch
    out: list[float | None] = []
    for text, gold in zip(completions, answer):
        if gold is None:
            out.append(None)
            continue
        pred = boxed_answer(text, mode)
        out.append(1.0 if pred is not None and pred == str(gold).strip() else 0.0)
    return out


def format_score(text: str, tags: tuple[str, ...] | list[str] = DEFAULT_TAGS) -> float:
    """Fraction of ``tags`` whose pair is well formed: ``<t>`` and ``</t>`` each exactly once, in order.

    Tags quoted inside the ``<think>`` block are reasoning and do not count; ``think`` itself is well formed
    when there is exactly one complete ``<think>...</think>`` block and no stray think tag outside it.
    """
    outside = outside_think(text)
    good = 0
    for tag in tags:
        opens, closes = count_tag(text, tag)
        if tag == "think":
            good += len(think_blocks(text)) == 1 and opens == closes == 0
        elif opens == 1 and closes == 1 and outside.index(f"<{tag}>") < outside.index(f"</{tag}>"):
            good += 1
    return good / len(tags)


@register_reward("format")
def format_reward(completions: list[str], tags: list[str] = list(DEFAULT_TAGS), **_) -> list[float]:
    """Format reward r_f: each tag pair contributes ``1 / len(tags)`` when present exactly once and well formed.

    Content correctness is ignored. Default tags: ``think``, ``answer``, ``unit``, ``principle``.

    Args:
        tags: the tag pairs that count, each ``1 / len(tags)``.

    >>> format_reward(["<think>x</think><answer>B</answer>"])
    [0.5]
    """
    if isinstance(tags, str) or not tags or not all(isinstance(t, str) and t for t in tags):
        raise ValueError(f"tags must be a non-empty list of tag names such as [think, answer], got {tags!r}")
    return [format_score(text, tuple(tags)) for text in completions]


@register_reward("accuracy", columns=("answer", "answer_format", "options"), extractor=tagged_answer,
                 protocol="the <answer> letter equals the gold option letter (the paper's evaluation of multiple choice)")
def accuracy_reward(
    completions: list[str], answer: list[str], answer_format: list[str] | None = None, tag: str = "answer",
    options: list[dict] | None = None, **_
) -> list[float | None]:
    """Multiple-choice accuracy r_a: the option letter of the graded ``<answer>`` block equals the gold letter.

    The block is the final ``<answer>`` pair outside ``<think>``; its letter is read with
    :func:`~lit_grpo.rewards.parsing.extract_answer_letter` (``B``, ``(B)``, ``B.``, ``Answer: B``, ``I think
    it is B``; never a capital inside a word or a sentence), among the row's option labels when ``options``
    is given. No ``<answer>`` tag scores 0. Rows whose ``answer_format`` is not ``mcq`` (open-ended, graded
    by a judge) or that lack a gold give ``None``: the term does not apply there.

    Args:
        tag: the tag whose final block outside ``<think>`` holds the answer.

    >>> accuracy_reward(["<answer>(b)</answer>", "<answer>Based on</answer>"], answer=["B", "B"])
    [1.0, 0.0]
    """
    formats = answer_format or ["mcq"] * len(completions)
    opts = options or [None] * len(completions)
    out: list[float | None] = []
    for text, gold, fmt, row_options in zip(completions, answer, formats, opts):
        if fmt != "mcq" or gold is None:
            out.append(None)
            continue
        labels = "".join(str(k) for k in row_options) if row_options else "ABCDEFGHIJ"
        letter = extract_answer_letter(text, tag, labels)
        out.append(1.0 if letter is not None and letter == str(gold).strip().upper() else 0.0)
    return out


@register_reward("boxed_format", columns=("options", "truncated"))
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
