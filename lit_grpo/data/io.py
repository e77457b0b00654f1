"""Opening tables with HF ``datasets``: local parquet/JSONL/TSV files, folders, or hub ids."""

from __future__ import annotations

import csv
from pathlib import Path

import datasets

_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".tsv": "csv", ".csv": "csv"}


def open_table(path: str, split: str = "train", rows: str | None = None, image_columns=("images", "image"),
               **kwargs) -> datasets.Dataset:
    """Open ``path`` (a file, a folder of files named by split, or a hub id) and select ``split``.

    TSV/CSV cells are read as verbatim strings (no type inference, no NaN).

    Image columns are left undecoded (``{"bytes", "path"}`` dicts) so that the readers decode them with
    errors that name the row. ``rows`` is a Python slice string applied after loading (``"1000:3000"``).
    Raises:
        FileNotFoundError: a local-looking path that does not exist.
        ValueError: a malformed ``rows`` slice, or a split the source does not have.
    """
    p = Path(path)
    if p.is_file():
        builder = _BUILDERS.get("".join(p.suffixes[-1:]).lower())
        if builder is None:
            raise ValueError(f"{path}: unsupported file type; use one of {', '.join(_BUILDERS)}")
        extra = _text_table_args(p) if builder == "csv" else {}
        ds = datasets.load_dataset(builder, data_files={split: str(p)}, split=split, **extra, **kwargs)
    elif p.is_dir() or is_local(path):
        if not p.exists():
            raise FileNotFoundError(f"dataset path {path} does not exist")
        ds = datasets.load_dataset(str(p), split=split, **kwargs)
    else:  # hub id "owner/name"
        ds = datasets.load_dataset(path, split=split, **kwargs)
    for col in image_columns:
        if col in ds.features:
            feat = ds.features[col]
            if isinstance(feat, datasets.Image):
                ds = ds.cast_column(col, datasets.Image(decode=False))
            elif isinstance(feat, (datasets.List, datasets.Sequence)) and isinstance(feat.feature, datasets.Image):
                ds = ds.cast_column(col, datasets.List(datasets.Image(decode=False)))
    if rows:
        ds = ds.select(range(len(ds))[parse_slice(rows)])
    return ds


def is_local(path: str) -> bool:
    """Whether ``path`` names a local file or folder rather than a hub id ``owner/name``: it exists, starts with
    ``.``, ``/`` or ``~``, has other than one ``/``, ends in a data file suffix, or its first part is a folder
    here (``data/x``)."""
    p = Path(path).expanduser()
    return (p.exists() or path.startswith((".", "/", "~")) or path.count("/") != 1
            or p.suffix.lower() in _BUILDERS or p.parent.is_dir())


def _text_table_args(path: Path) -> dict:
    """TSV/CSV cells are read as text, verbatim: no number inference (``"0.50"`` stays ``"0.50"``), no NaN
    for ``"NA"`` or empty cells."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader([f.readline()], delimiter=delimiter), [])
    features = datasets.Features({name: datasets.Value("string") for name in header})
    return {"delimiter": delimiter, "features": features, "keep_default_na": False}


def parse_slice(text: str) -> slice:
    """``"1000:3000"`` -> ``slice(1000, 3000)``; ``":100"``, ``"::2"`` work too."""
    try:
        parts = [int(x) if x.strip() else None for x in text.split(":")]
        if not 2 <= len(parts) <= 3:
            raise ValueError
        return slice(*parts)
    except ValueError:
        raise ValueError(f"rows must be a slice like '1000:3000', got {text!r}") from None
