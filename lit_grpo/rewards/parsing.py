"""Pure string helpers shared by rewards and evaluation metrics: boxes, tags, option letters.

Everything here maps ``str -> str | None``; ``None`` means "not found" and is never confused with an
empty answer.
"""

from __future__ import annotations

import re

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_OFFICIAL_BOX = re.compile(r"\\boxed\{(.*?)\}")  # no DOTALL: "." never crosses a newline, as in the official scorer
_OFFICIAL_BOX_DOTALL = re.compile(_OFFICIAL_BOX.pattern, re.DOTALL)


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


def extract_boxed_official(text: str, multiline: bool = False) -> str | None:
    """The VisualSphinx scorer's extraction: the regex ``\\boxed{(.*?)}``, stripped (``None`` without a match).

    Exactly the official rule: no brace matching (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1``) and ``.`` does
    not cross a newline, so a box whose content spans lines does not match and the search goes on to a
    later box (``\\boxed{\\nC\\n}`` gives ``None``). ``multiline=True`` lets ``.`` cross newlines (the
    ``binary`` reward's lenient ``multiline`` mode; not the official rule).
    """
    m = (_OFFICIAL_BOX_DOTALL if multiline else _OFFICIAL_BOX).search(text)
    return None if m is None else m.group(1).strip()


_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def think_blocks(text: str) -> list[str]:
    """Contents of the complete ``<think>...</think>`` blocks, in order (each from a ``<think>`` to the next
    ``</think>``; a ``<think>`` that is never closed starts no block)."""
    return _THINK_BLOCK.findall(text)


def outside_think(text: str) -> str:
    """``text`` with every complete ``<think>...</think>`` block removed (what the answer tags are read from)."""
    return _THINK_BLOCK.sub(" ", text)


def extract_tag(text: str, tag: str) -> str | None:
    """The graded ``<tag>`` block: the content of the FINAL ``<tag>...</tag>`` pair outside the complete
    ``<think>...</think>`` blocks, stripped; ``None`` when there is none.

    A pair quoted inside ``<think>`` is reasoning, not an answer (``<think>maybe <answer>A</answer>? no</think>
    <answer>B</answer>`` is graded as B); a later pair overrides an earlier one. ``tag="think"`` gives the
    first complete think block. Every reward and evaluation record reads tags through this function.

    >>> extract_tag("<think>maybe <answer>A</answer>?</think><answer>\\n B \\n</answer>", "answer")
    'B'
    """
    if tag == "think":
        blocks = think_blocks(text)
        return blocks[0].strip() if blocks else None
    found = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", outside_think(text), re.DOTALL)
    return found[-1].strip() if found else None


def extract_answer(text: str, tag: str = "answer") -> str | None:
    """The final answer of a completion: the graded ``<tag>`` block (:func:`extract_tag`), else the last
    ``\\boxed{}`` outside ``<think>``; ``None`` when neither.

    What the open-ended judges grade and what evaluation records show for an open answer.

    >>> extract_answer(r"<think>so \\boxed{3}</think><answer>7.55 N</answer>"), extract_answer(r"x \\boxed{1} \\boxed{2}")
    ('7.55 N', '2')
    """
    found = extract_tag(text, tag)
    return found if found is not None else extract_boxed(outside_think(text), which="last")


def count_tag(text: str, tag: str) -> tuple[int, int]:
    """Number of opening and closing occurrences of ``tag`` outside the complete ``<think>`` blocks (for
    ``think`` itself: the stray tags, outside every complete block)."""
    where = outside_think(text)
    return where.count(f"<{tag}>"), where.count(f"</{tag}>")


_LEAD = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+|correct\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:：]?\s*)", re.IGNORECASE
)
_LETTER = re.compile(r"^\(\s*([A-Za-z])\s*\)|^\[\s*([A-Za-z])\s*\]|^([A-Za-z])(?=$|[.):,;]|\s*$)")
_WRAPPER = re.compile(r"\\(?:boxed|text|mathrm|textbf|mathbf)\s*\{\s*([^{}]*?)\s*\}|\$")
_CUE = r"(?:\b(?i:is|was|be|answer|option|choice|choose|select|pick)\b|[:=：])"
_AT_END = re.compile(  # "... it is C", "Answer seems to be A", "the answer is (B).": a cue word, then one letter, end
    rf"{_CUE}\s*(?:\(\s*([A-Za-z])\s*\)|\[\s*([A-Za-z])\s*\]|\*{{0,2}}([A-Z])\*{{0,2}})\s*[.!]?\s*$")
_IS_CORRECT = re.compile(r"^\(?([A-Z])\)?\s+(?i:is\s+(?:the\s+)?(?:correct|right|best)\b|is\s+the\s+answer\b)")
_REASON = r"\s*(?:[,;:—–-]+\s*)?(?i:because|since|as(?!\s+well)|given|due\s+to|owing\s+to)\b"
_PHRASE = r"\s*(?:[—–]+|\s-{1,2}\s|:)\s*(?![A-Z]\b)\(?[A-Za-z0-9]"  # "B — a safe choice", "C - the field",
# "D: uniform"; not a lone capital after it ("A - B = 3" is arithmetic, "A — B" two options)
_AFTER = rf"(?:{_REASON}|{_PHRASE})"
_JUSTIFIED = re.compile(rf"^(?:\(([A-Z])\)|\*{{0,2}}([A-Z])\*{{0,2}}){_AFTER}")  # "C because I computed..."
_CUE_JUSTIFIED = re.compile(rf"{_CUE}\s*(?:\(([A-Z])\)|\*{{0,2}}([A-Z])\*{{0,2}}){_AFTER}")  # "I pick B — a"


def extract_option_letter(text: str | None, labels: str = "ABCDEFGHIJ") -> str | None:
    """Option letter of a short answer field, upper-cased, or ``None``.

    Read where a letter stands as the answer, never inside a word: the field starts with it (``B``, ``b``,
    ``(B)``, ``[B]``, ``B.``, ``B)``, ``B: 7.55 N``, ``**B**``, ``\\boxed{B}``, after a lead such as
    ``Answer:`` / ``The answer is``), it starts ``C is correct``, or it ends with it right after a cue word
    (``is``, ``be``, ``answer``, ``option``, ``choice``, ``choose``, ``:``, ``=``: ``I think it is C``,
    ``Answer seems to be A``, ``the answer is (B).``); a bare letter at the end must be a capital. A capital letter
    followed by its reason counts in either place (``The answer is C because I computed the integral``, ``B since
    the slope doubles``, ``I choose D, as the field is uniform``), and so does one followed by a dash (em, en, or a
    hyphen with a space each side) or a colon and a phrase (``I would pick B — a safe choice.``, ``C - the field is
    uniform``, ``C–uniform``, ``the answer is (D): the slope doubles``). Sentences
    that merely hold a capital (``A force of 5 N``, ``Based on...``, ``the force at A is larger than at B``,
    ``either A or B``, ``not C``) give ``None``: no letter is better than a wrong one. Only ``labels`` count.

    >>> extract_option_letter("Answer seems to be A"), extract_option_letter("A force of 5 N")
    ('A', None)
    """
    if text is None:
        return None
    s = _WRAPPER.sub(lambda m: m.group(1) or "", text).strip().strip("*").strip()
    lead_free = _LEAD.sub("", s).strip()
    m = (_LETTER.match(lead_free.strip("*").strip()) or _IS_CORRECT.match(s) or _AT_END.search(s)
         or _JUSTIFIED.match(lead_free) or _CUE_JUSTIFIED.search(s))
    if m is None:
        return None
    letter = next(g for g in m.groups() if g).upper()
    return letter if letter in labels else None


def extract_answer_letter(text: str, tag: str = "answer", labels: str = "ABCDEFGHIJ") -> str | None:
    """The option letter of the graded ``<tag>`` block (:func:`extract_option_letter` of :func:`extract_tag`):
    what the multiple-choice accuracy reward compares with the gold letter.

    >>> extract_answer_letter("<think>A force</think><answer>(b)</answer>")
    'B'
    """
    return extract_option_letter(extract_tag(text, tag), labels)


def tagged_answer(text: str, answer_format: str) -> str | None:
    """The ``<answer>`` letter for MCQ (what ``accuracy`` and the MCQ rubric compare), else the final answer
    (what the judges of ``open_accuracy`` and the open-ended rubric grade)."""
    return extract_answer_letter(text) if answer_format == "mcq" else extract_answer(text)


def official_box(text: str, answer_format: str) -> str | None:
    """The first box as the official VisualSphinx scorer reads it (any answer format)."""
    return extract_boxed_official(text)

