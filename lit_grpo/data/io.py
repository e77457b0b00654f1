"""Opening tables with HF ``datasets``: local parquet/JSONL/TSV files, folders, or hub ids."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import datasets

from lit_grpo.data.sample import BAD_BYTES_COLUMN, BadRowError

_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".tsv": "csv", ".csv": "csv"}


def open_table(path: str, split: str = "train", rows: str | None = None, image_columns=("images", "image"),
               **kwargs) -> datasets.Dataset:
    """Open ``path`` (a file, a folder of files named by split, or a hub id) and select ``split``.

    TSV/CSV cells are read as verbatim strings (no type inference, no NaN).

    A JSONL/TSV/CSV line holding bytes that are not UTF-8 becomes a row whose only field is
    :data:`~lit_grpo.data.sample.BAD_BYTES_COLUMN` with the reason (file, line, byte offset), so the
    readers' bad-row policy raises it naming the row, or skips and counts it.

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
        unreadable = _non_utf8_lines(p) if builder in ("json", "csv") else {}
        if unreadable:
            ds = _table_marking_lines(p, builder, unreadable)
        else:
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


def _non_utf8_lines(path: Path) -> dict[int, str]:
    """Line number (1-based) -> reason, for each line of a text table whose bytes are not UTF-8."""
    bad = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad[number] = _reason(path, number, line[exc.start:exc.end], exc.start)
    return bad


def _reason(path: Path, line: int, raw: bytes, at: int | None = None) -> str:
    where = "" if at is None else f" at byte {at} of the line"
    return (f"{path} line {line}: bytes {raw!r}{where} are not UTF-8 (re-encode the file as UTF-8, or set "
            "on_bad_row: skip)")


def _table_marking_lines(path: Path, builder: str, unreadable: dict[int, str]) -> datasets.Dataset:
    """The table read record by record (JSON objects, or text cells under the header, quoted newlines
    included), each unreadable record kept as a row holding only its reason, so later rows keep their numbers.

    Raises:
        BadRowError: the header of a TSV/CSV is unreadable.
    """
    if builder == "csv":
        rows = _csv_records(path)
    else:
        rows = []
        for n, line in enumerate(path.read_bytes().splitlines(), start=1):
            if n in unreadable or not line.strip():
                rows += [unreadable[n]] if n in unreadable else []
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                rows.append(f"{path} line {n}: not a JSON object ({exc})")
    keys = dict.fromkeys(k for r in rows if isinstance(r, dict) for k in r)
    table = {k: [r.get(k) if isinstance(r, dict) else None for r in rows] for k in keys}
    table[BAD_BYTES_COLUMN] = [None if isinstance(r, dict) else r for r in rows]
    return datasets.Dataset.from_dict(table)


def _csv_records(path: Path) -> list[dict | str]:
    """Records of a TSV/CSV as verbatim strings; a record holding non-UTF-8 bytes becomes its reason."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = next(reader, [])
    first = next((c for c in "".join(header) if "\udc80" <= c <= "\udcff"), None)
    if first is not None:
        raise BadRowError(f"{_reason(path, 1, bytes([ord(first) - 0xDC00]))}; the header must be readable")
    rows: list[dict | str] = []
    for record in reader:
        bad = next((c for c in "".join(record) if "\udc80" <= c <= "\udcff"), None)
        rows.append(_reason(path, reader.line_num, bytes([ord(bad) - 0xDC00])) if bad is not None
                    else dict(zip(header, record)))
    return rows
