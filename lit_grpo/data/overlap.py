"""Train/evaluation overlap: a problem that is trained on must not be evaluated on.

**The same problem** = the same normalised question text (Unicode NFKC, case-folded, whitespace collapsed,
``<image>`` placeholders dropped; options and the answer form are left out, so an MCQ training row and an
open-ended test row of one item match) AND the same image (the sha1 of the image bytes as stored, so the
parquet copy, the raw layout's file and the base64 copy of one published image match; when a question text
is specific to a few rows, their decoded pixels are compared too, so a re-encoded copy of a picture
matches). Text alone is not enough (VisualSphinx puzzles share one question text; PhyX problems may share a generic question over different
diagrams), and an image alone is not either (one diagram may serve several questions).

Images are hashed only for training rows whose text matches an evaluation row, and decoded only under
:data:`PIXEL_CHECK_MAX`.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Sequence

from torch.utils.data import Dataset, Subset

OVERLAP_POLICIES = ("refuse", "drop", "allow")


def normalise_question(text: str) -> str:
    """The comparison form of a question: NFKC, case-folded, ``<image>`` dropped, whitespace collapsed.

    >>> normalise_question("  What is\\n the <image>TENSION? ")
    'what is the tension?'
    """
    s = unicodedata.normalize("NFKC", text).replace("<image>", " ").casefold()
    return " ".join(s.split())


def _base(ds: Dataset, i: int) -> tuple[Dataset, int]:
    while isinstance(ds, Subset):
        ds, i = ds.dataset, ds.indices[i]
    return ds, i


def fields(ds: Dataset, i: int) -> dict:
    """Text fields (``id``, ``question``) of row ``i`` of ``ds`` (through :class:`~torch.utils.data.Subset`),
    without decoding images when the dataset offers ``fields(i)``."""
    ds, i = _base(ds, i)
    return ds.fields(i) if hasattr(ds, "fields") else ds[i].columns()


def image_digest(ds: Dataset, i: int) -> str:
    """sha1 of row ``i``'s images: their stored bytes when the dataset offers ``image_digest(i)``, else
    :func:`pixel_digest`."""
    base, j = _base(ds, i)
    return base.image_digest(j) if hasattr(base, "image_digest") else pixel_digest(ds, i)


def pixel_digest(ds: Dataset, i: int) -> str:
    """sha1 over the size and RGB pixels of every decoded image of row ``i``."""
    h = hashlib.sha1()
    for im in ds[i].images:
        h.update(f"{im.size}".encode() + im.convert("RGB").tobytes())
    return h.hexdigest()


PIXEL_CHECK_MAX = 4
"""When a training row's text matches at most this many evaluation rows but no stored image does, the decoded
pixels are compared too (the same picture stored as other bytes); template texts shared by many rows
(VisualSphinx puzzles) rely on the stored bytes alone, so their images are never decoded."""


def find_overlap(train: Dataset, evals: dict[str, Dataset]) -> dict[int, str]:
    """Training rows that are the same problem as an evaluation row: ``{train index: "val row 3 (id x)"}``.

    ``evals`` maps a split name to its dataset. Images are hashed only for rows whose text matches.
    """
    by_text: dict[str, list[tuple[str, Dataset, int]]] = {}
    for name, ds in evals.items():
        for j in range(len(ds)):
            by_text.setdefault(normalise_question(fields(ds, j)["question"]), []).append((name, ds, j))
    found: dict[int, str] = {}
    by_image: dict[tuple[str, bool], dict[str, str]] = {}  # (text, pixels?) -> digest -> "val row 3 (id x)"
    for i in range(len(train)):
        text = normalise_question(fields(train, i)["question"])
        if text not in by_text:
            continue
        for pixels in (False, True):
            if pixels and (len(by_text[text]) > PIXEL_CHECK_MAX or not hasattr(_base(train, i)[0], "image_digest")):
                break  # a shared template text, or the first pass compared pixels already
            digest = pixel_digest if pixels else image_digest
            if (text, pixels) not in by_image:
                by_image[(text, pixels)] = {digest(ds, j): f"{name} row {j} (id {fields(ds, j)['id']})"
                                            for name, ds, j in reversed(by_text[text])}  # the first row wins
            other = by_image[(text, pixels)].get(digest(train, i))
            if other is not None:
                found[i] = other
                break
    return found


def describe(train: Dataset, found: dict[int, str], limit: int = 3) -> str:
    """``"train row 5 (id 12) = val row 0 (id 12); ..."`` for the first ``limit`` matches."""
    return "; ".join(f"train row {i} (id {fields(train, i)['id']}) = {other}"
                     for i, other in list(found.items())[:limit])


def without(train: Dataset, rows: Sequence[int]) -> Dataset:
    """``train`` without ``rows`` (a :class:`~torch.utils.data.Subset`; ``train`` itself when none)."""
    drop = set(rows)
    return Subset(train, [i for i in range(len(train)) if i not in drop]) if drop else train
