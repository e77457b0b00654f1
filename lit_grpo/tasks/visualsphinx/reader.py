"""VisualSphinx reader: RL-20K (``train``), Benchmark (``test``, ``testmini``), 4- and 10-option puzzles.

Columns (the published dataset cards): ``id``, ``images`` (list; older cards ``image``), ``problem``
(with an ``<image>`` placeholder), ``choice`` (JSON label -> label), ``answer``, ``explanation``,
``difficulty`` (Benchmark only), quality fields kept in ``meta``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lit_grpo.data.io import open_table
from lit_grpo.data.images import DEFAULT_MAX_PIXELS, dataset_folder, decode_image
from lit_grpo.data.sample import BadRowError, Sample, SampleDataset, load_rows, text_row

_META = ("explanation", "difficulty", "has_duplicate", "reasonableness", "readability", "accuracy")


def visualsphinx_fields(row: dict[str, Any], where: str) -> dict[str, Any]:
    """Every :class:`Sample` field of one row except the images, validated.

    Raises:
        BadRowError: ``choice`` not a JSON object of at least two options (a JSON list, one option), a missing
        or empty ``problem``, a missing answer or one not among the options; the message names ``where``
        (source, row index and id) and the field.
    """
    row = text_row(row, where)
    try:
        choice = json.loads(row["choice"]) if isinstance(row.get("choice"), str) else row["choice"]
        if not isinstance(choice, dict):
            raise TypeError(f"it is a {type(choice).__name__}, not an object of label -> text")
        choice = dict(choice)
    except (TypeError, ValueError, KeyError) as exc:
        raise BadRowError(f"{where}: field 'choice' is not a JSON object of options ({exc})") from None
    if len(choice) < 2:
        raise BadRowError(f"{where}: field 'choice' holds {len(choice)} option(s); a puzzle needs at least two")
    problem = row.get("problem")
    question = "" if problem is None else str(problem).replace("<image>", "").strip()
    if not question:
        raise BadRowError(f"{where}: field 'problem' is {'missing' if problem is None else 'empty'}")
    answer = row.get("answer")
    if answer is None or str(answer).strip() == "":
        raise BadRowError(f"{where}: field 'answer' is missing")
    if str(answer).strip() not in choice:
        raise BadRowError(f"{where}: field 'answer' {answer!r} is not one of the options {sorted(choice)}")
    return dict(
        id=str(row.get("id", "")),
        question=question,
        options={str(k): str(v) for k, v in choice.items()},
        answer=str(answer).strip(),
        answer_format="mcq",
        meta={k: row[k] for k in _META if row.get(k) is not None},
    )


def _where(source: str, row: dict, index: int) -> str:
    return f"{source} row {index} (id {row.get('id', index)})"


def visualsphinx_sample(row: dict[str, Any], index: int, *, source: str = "visualsphinx",
                        max_pixels: int = DEFAULT_MAX_PIXELS, image_root: str | Path | None = None,
                        images_outside_root: bool = False) -> Sample:
    """One VisualSphinx row -> :class:`Sample` (``mcq``; options are the labels of ``choice``).

    ``images`` (a list) or, on older cards, ``image`` (one image); an image stored as a path is read inside
    ``image_root`` (:func:`lit_grpo.data.images.decode_image`). Raises :class:`BadRowError` as
    :func:`visualsphinx_fields` does, or for a missing/undecodable/over-large image or one outside the root.
    """
    where = _where(source, row, index)
    row = text_row(row, where)
    fields = visualsphinx_fields(row, where)
    images = row.get("images") or ([row["image"]] if row.get("image") is not None else [])
    if not images:
        raise BadRowError(f"{where}: field 'images' is empty")
    fields["id"] = str(row.get("id", index))
    return Sample(images=[decode_image(im, where=f"{where}: field 'images'", max_pixels=max_pixels,
                                       base_dir=image_root, outside_root=images_outside_root)
                          for im in images], **fields)


def read_visualsphinx(path: str, split: str = "train", rows: str | None = None,
                      max_pixels: int = DEFAULT_MAX_PIXELS, on_bad_row: str = "raise",
                      images_outside_root: bool = False) -> SampleDataset:
    """Open a VisualSphinx parquet file, folder or hub id lazily (rows become samples on access).

    Splits: RL-20K ``train``; Benchmark ``test`` and ``testmini``. ``on_bad_row``: ``raise`` (text
    fields validated up front, images decoded lazily, errors name the row) or ``skip`` (bad rows dropped
    up front and counted in the log). An image stored as a path is read inside the dataset's folder (the file's
    folder, or the folder given); ``images_outside_root: true`` allows paths anywhere.
    """
    table = open_table(path, split=split, rows=rows)
    source = f"{path}[{split}]"
    text_rows = table.remove_columns([c for c in ("images", "image") if c in table.column_names])

    def check_text(row: dict, i: int) -> dict:
        return {**visualsphinx_fields(row, _where(source, row, i)), "id": str(row.get("id", i))}

    root = dataset_folder(path)

    def to_sample(row: dict, i: int) -> Sample:
        return visualsphinx_sample(row, i, source=source, max_pixels=max_pixels, image_root=root,
                                   images_outside_root=images_outside_root)

    return load_rows(table, to_sample,
                     name=source, on_bad_row=on_bad_row, check_text=check_text, text_rows=text_rows,
                     image_sources=lambda row, i: row.get("images") or [row.get("image")])

