"""VisualSphinx reader: RL-20K (``train``), Benchmark (``test``, ``testmini``), 4- and 10-option puzzles.

Columns (``../shared/docs/datasets.md``): ``id``, ``images`` (list; older cards ``image``), ``problem``
(with an ``<image>`` placeholder), ``choice`` (JSON label -> label), ``answer``, ``explanation``,
``difficulty`` (Benchmark only), quality fields kept in ``meta``.
"""

from __future__ import annotations

import json
from typing import Any

from lit_grpo.data.io import open_table
from lit_grpo.data.sample import DEFAULT_MAX_PIXELS, BadRowError, Sample, SampleDataset, decode_image

_META = ("explanation", "difficulty", "has_duplicate", "reasonableness", "readability", "accuracy")


def visualsphinx_sample(row: dict[str, Any], index: int, *, source: str = "visualsphinx",
                        max_pixels: int = DEFAULT_MAX_PIXELS) -> Sample:
    """One VisualSphinx row -> :class:`Sample` (``mcq``; options are the labels of ``choice``).

    Raises:
        BadRowError: missing/undecodable image, malformed ``choice``, missing answer or one not among
        the options; the message names the source, row index and id.
    """
    rid = row.get("id", index)
    where = f"{source} row {index} (id {rid})"
    images = row.get("images")
    if images is None and row.get("image") is not None:
        images = [row["image"]]
    if not images:
        raise BadRowError(f"{where}: field 'images' is empty")
    try:
        choice = json.loads(row["choice"]) if isinstance(row.get("choice"), str) else dict(row["choice"])
    except (TypeError, ValueError, KeyError) as exc:
        raise BadRowError(f"{where}: field 'choice' is not a JSON object of options ({exc})") from None
    answer = row.get("answer")
    if answer is None or str(answer).strip() == "":
        raise BadRowError(f"{where}: field 'answer' is missing")
    if str(answer).strip() not in choice:
        raise BadRowError(f"{where}: answer {answer!r} is not one of the options {sorted(choice)}")
    return Sample(
        id=str(rid),
        images=[decode_image(im, where=where, max_pixels=max_pixels) for im in images],
        question=str(row.get("problem", "")).replace("<image>", "").strip(),
        options={str(k): str(v) for k, v in choice.items()},
        answer=str(answer).strip(),
        answer_format="mcq",
        meta={k: row[k] for k in _META if row.get(k) is not None},
    )


def read_visualsphinx(path: str, split: str = "train", rows: str | None = None,
                      max_pixels: int = DEFAULT_MAX_PIXELS) -> SampleDataset:
    """Open a VisualSphinx parquet file, folder or hub id lazily (rows become samples on access)."""
    table = open_table(path, split=split, rows=rows)
    return SampleDataset(
        table, lambda row, i: visualsphinx_sample(row, i, source=f"{path}[{split}]", max_pixels=max_pixels),
        name=f"{path}[{split}]",
    )
