"""Pure string helpers shared by rewards and evaluation metrics: boxes, tags, option letters.

Everything here maps ``str -> str | None``; ``None`` means "not found" and is never confused with an
empty answer.
"""

from __future__ import annotations

import re

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_OFFICIAL_BOX = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)


def _matching_brace(text: str, open_at: int) -> int | None:
    """Index of the ``}`` that closes the ``{`` at ``open_at``, or ``None`` when unclosed."""
    depth = 0
    for i in range(open_at, len(text)):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            continue
        if ch == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif ch == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return i
    return None


def extract_boxed(text: str, which: str = "first") -> str | None:
    """Content of a ``\\boxed{...}`` (also ``\\boxed {...}`` and ``\\fbox{...}``), braces matched.

    ``which`` picks the ``"first"`` or ``"last"`` box. Nested braces are kept (``\\boxed{\\frac{1}{2}}``
    gives ``\\frac{1}{2}``); escaped braces ``\\{`` ``\\}`` do not count. Returns the content stripped
    of surrounding whitespace, or ``None`` when there is no box or the chosen box is unclosed.

    >>> extract_boxed(r"so \\boxed{A} or \\boxed{B}", which="last")
    'B'
    """
    if which not in ("first", "last"):
        raise ValueError(f"which must be 'first' or 'last', got {which!r}")
    starts = list(_BOX_START.finditer(text))
    if not starts:
        return None
    m = starts[0] if which == "first" else starts[-1]
    close = _matching_brace(text, m.end() - 1)
    return None if close is None else text[m.end() : close].strip()


def extract_boxed_official(text: str) -> str | None:
    """The VisualSphinx scorer's extraction: first ``\\boxed{``, non-greedy up to the first ``}``, stripped.

    No brace matching (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1``), exactly as the official rule.
    ``None`` when no ``\\boxed{...}`` is present.
    """
    m = _OFFICIAL_BOX.search(text)
    return None if m is None else m.group(1).strip()


def extract_tag(text: str, tag: str) -> str | None:
    """Content of the first ``<tag>...</tag>`` pair (multi-line), stripped; ``None`` when absent.

    >>> extract_tag("<answer>\\n B \\n</answer>", "answer")
    'B'
    """
    m = re.search(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.DOTALL)
    return None if m is None else m.group(1).strip()


def extract_answer(text: str, tag: str = "answer") -> str | None:
    """The final answer of a completion: the ``<tag>`` content, else the last ``\\boxed{}``; ``None`` when neither.

    What the open-ended judges grade and what evaluation records show for an open answer.

    >>> extract_answer(r"<think>so \\boxed{3}</think><answer>7.55 N</answer>"), extract_answer(r"x \\boxed{1} \\boxed{2}")
    ('7.55 N', '2')
    """
    found = extract_tag(text, tag)
    return found if found is not None else extract_boxed(text, which="last")


def count_tag(text: str, tag: str) -> tuple[int, int]:
    """Number of opening and closing occurrences of ``tag``."""
    return text.count(f"<{tag}>"), text.count(f"</{tag}>")


_LEAD = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+|correct\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:：]?\s*)", re.IGNORECASE
)
_LETTER = re.compile(r"^\(\s*([A-Za-z])\s*\)|^\[\s*([A-Za-z])\s*\]|^([A-Za-z])(?=$|[.):,;]|\s*$)")


def extract_option_letter(text: str | None, labels: str = "ABCDEFGHIJ") -> str | None:
    """Option letter of a short answer field, upper-cased, or ``None``.

    Accepts ``B``, ``b``, ``(B)``, ``[B]``, ``B.``, ``B)``, ``B: 7.55 N``, ``**B**``, ``Answer: B``,
    ``The answer is (B)``. Never reads a capital inside a word or a sentence (``A force of 5 N``,
    ``Based on...``), and only letters in ``labels`` count.
    """
    if text is None:
        return None
    s = text.strip().strip("*").strip()
    s = _LEAD.sub("", s).strip().strip("*").strip()
    m = _LETTER.match(s)
    if m is None:
        return None
    letter = next(g for g in m.groups() if g).upper()
    return letter if letter in labels else None


def extract_answer_letter(text: str, tag: str = "answer") -> str | None:
    """The option letter inside ``<tag>`` (:func:`extract_option_letter` of :func:`extract_tag`): what the
    multiple-choice accuracy reward compares with the gold letter.

    >>> extract_answer_letter("<think>A force</think><answer>(b)</answer>")
    'B'
    """
    return extract_option_letter(extract_tag(text, tag))
