"""Opening tables with HF ``datasets``: local parquet/JSONL/TSV files, folders, or hub ids."""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
from pathlib import Path
from typing import Iterator

import datasets

from lit_grpo.data.sample import BAD_BYTES_COLUMN, BadRowError
from lit_grpo.errors import InputError

_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".tsv": "csv", ".csv": "csv"}
DATA_SUFFIXES = tuple(_BUILDERS)
"""The suffixes of the data files a dataset's ``path`` may name."""


def open_table(path: str, split: str = "train", rows: str | None = None, image_columns=("images", "image"),
               **kwargs) -> datasets.Dataset:
    """Open ``path`` (a file, a folder of files named by split, or a hub id) and select ``split``.

    TSV/CSV cells are read as verbatim strings (no type inference, no NaN).

    A local file that cannot be read at all (no permission, empty, not a parquet file: a copy cut short) is an error
    naming it. A JSONL/TSV/CSV record that cannot be read (bytes that are not UTF-8, a line that is not a JSON
    object, a JSON record cut short, a TSV record with another number of fields than the header, an unclosed quote)
    becomes a row whose only field is :data:`~lit_grpo.data.sample.BAD_BYTES_COLUMN` with the reason (file, line),
    so the readers' bad-row policy raises it naming the row, or skips and counts it.

    Image columns are left undecoded (``{"bytes", "path"}`` dicts) so that the readers decode them with
    errors that name the row. ``rows`` is a Python slice string applied after loading (``"1000:3000"``).
    Raises:
        FileNotFoundError: a local-looking path that does not exist.
        InputError: a local file or folder that cannot be read, naming it and what is wrong; a ``rows`` slice that
            selects no row.
        ValueError: a malformed ``rows`` slice, or a split the source does not have.
    """
    p = Path(path)
    if p.is_file():
        builder = _BUILDERS.get("".join(p.suffixes[-1:]).lower())
        if builder is None:
            raise ValueError(f"{path}: unsupported file type; use one of {', '.join(_BUILDERS)}")
        check_readable(p, builder)
        if builder in ("json", "csv") and any(isinstance(r, str) for _, r in _records(p, builder)):
            ds = _table_marking_records(p, builder)
        else:
            extra = _text_table_args(p) if builder == "csv" else {}
            ds = _load(path, builder, data_files={split: str(p)}, split=split, **extra, **kwargs)
    elif p.is_dir() or is_local(path):
        if not p.exists():
            raise FileNotFoundError(f"dataset path {path} does not exist")
        files = _data_files(p)
        if p.is_dir() and not files:
            raise InputError(f"dataset folder {path} holds no data file ({', '.join(_BUILDERS)}); point data.*.path at "
                             "the folder of the data files, or at a file")
        for file, builder in files:
            check_readable(file, builder)
        ds = _load(path, str(p), split=split, **kwargs)
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
        picked = range(len(ds))[parse_slice(rows)]
        if not picked:
            raise InputError(f"{path}: rows {rows!r} selects none of its {len(ds)} rows (split {split!r}); give a "
                             "slice within them, e.g. '0:100'")
        ds = ds.select(picked)
    return ds


def check_readable(path: Path, builder: str) -> None:
    """Refuse a data file that cannot be read at all: unreadable, empty, a parquet file without its footer (cut
    short) or whose metadata is damaged, a JSON array file that is not valid JSON.

    Raises:
        InputError: naming the file, its size and what is wrong.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{path} cannot be read ({exc.strerror or exc}): check its permissions and the disk") from None
    if size == 0:
        raise InputError(f"{path} is empty (0 bytes): it was never written completely; write or copy it again")
    if builder == "parquet":
        import pyarrow.parquet as pq

        try:
            pq.ParquetFile(path)
        except Exception as exc:  # pyarrow: ArrowInvalid, OSError...
            raise InputError(f"{path} ({size} bytes) is not a readable parquet file ({_short(exc)}): a copy cut short, "
                             "or another format under a .parquet name? copy or write it again") from None
    elif builder == "json" and head.lstrip()[:1] == b"[":  # one JSON array, not JSON lines: no record to skip
        try:
            json.loads(path.read_bytes())
        except ValueError as exc:
            where = f" line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise InputError(f"{path}{where}: not valid JSON ({getattr(exc, 'msg', exc)}); a JSON array file cannot be "
                             "read record by record: fix it, or write one record per line (.jsonl)") from None


def _data_files(folder: Path) -> list[tuple[Path, str]]:
    """The data files in a dataset folder (and its subfolders) with the builder of each, by suffix."""
    found = []
    for file in sorted(folder.rglob("*")):
        builder = _BUILDERS.get(file.suffix.lower())
        hidden = any(part.startswith(".") for part in file.relative_to(folder).parts)
        if builder is not None and file.is_file() and not hidden:
            found.append((file, builder))
    return found


def _short(exc: BaseException) -> str:
    """The innermost error under ``exc`` (datasets wraps the reader's), as ``Type: message`` on one line."""
    while (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _load(path: str, *args, **kwargs) -> datasets.Dataset:
    """``datasets.load_dataset`` on local data; a file it cannot read is an error naming it.

    Raises:
        InputError: the reader failed on the data (arrow, parse or I/O error), naming ``path`` and the reason.
        ValueError: a split the source does not have (as ``datasets`` says it).
    """
    import pyarrow as pa
    from datasets.exceptions import DatasetGenerationError

    builders = logging.getLogger("datasets.packaged_modules")  # says it too, as an ERROR log line
    level = builders.level
    builders.setLevel(logging.CRITICAL)
    try:
        return datasets.load_dataset(*args, **kwargs)
    except (DatasetGenerationError, pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        folder = Path(path)
        broken = next((r for f, b in _data_files(folder) if b != "parquet" for _, r in _records(f, b)
                       if isinstance(r, str)), None) if folder.is_dir() else None
        if broken is not None:  # name the record; a folder's records are not skipped one by one
            raise InputError(f"{broken.split(': fix')[0]}: fix it, or give that file itself as the data path (its "
                             "broken records are then bad rows)") from None
        raise InputError(f"{path} cannot be read as a table ({_short(exc)}); fix or replace the data") from None
    finally:
        builders.setLevel(level)


def is_local(path: str) -> bool:
    """Whether ``path`` names a local file or folder rather than a hub id ``owner/name``: it exists, starts with
    ``.``, ``/`` or ``~``, has other than one ``/``, ends in a data file suffix, or its first part is a folder
    here (``data/x``)."""
    p = Path(path).expanduser()
    return (p.exists() or path.startswith((".", "/", "~")) or path.count("/") != 1
            or p.suffix.lower() in _BUILDERS or p.parent.is_dir())


def offline() -> bool:
    """Whether the hub is off limits (``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` set to a true value)."""
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_dataset_cached(repo_id: str) -> bool:
    """Whether the hub dataset ``owner/name`` has been downloaded here (the hub cache or the datasets cache)."""
    from huggingface_hub.constants import HF_HUB_CACHE

    owner, _, name = repo_id.partition("/")
    return ((Path(HF_HUB_CACHE) / f"datasets--{owner}--{name}").is_dir()
            or (Path(datasets.config.HF_DATASETS_CACHE) / f"{owner}___{name}").is_dir())


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


def _reason(path: Path, line: int, raw: bytes, at: int | None = None) -> str:
    where = "" if at is None else f" at byte {at} of the line"
    return (f"{path} line {line}: bytes {raw!r}{where} are not UTF-8 (re-encode the file as UTF-8, or set "
            "on_bad_row: skip)")


def _records(path: Path, builder: str) -> Iterator[tuple[int, dict | str]]:
    """``(line, record)`` for every record of a JSONL or TSV/CSV file, read one at a time; a record that cannot be
    read is its reason instead (file, line, what is wrong). ``line``: where the record starts (1-based)."""
    if builder == "csv":
        yield from _csv_records(path)
        return
    with open(path, "rb") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8-sig" if n == 1 else "utf-8")  # a byte-order mark may open the file
            except UnicodeDecodeError as exc:
                yield n, _reason(path, n, line[exc.start:exc.end], exc.start)
                continue
            try:
                record = json.loads(text)
            except ValueError as exc:
                what = f"{exc.msg}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
                yield n, (f"{path} line {n}: not valid JSON ({what}; a record cut short?): fix the line, or set "
                          "on_bad_row: skip")
                continue
            yield n, record if isinstance(record, dict) else (
                f"{path} line {n}: a JSON {type(record).__name__}, not an object of fields: fix the line, or set "
                "on_bad_row: skip")


def _table_marking_records(path: Path, builder: str) -> datasets.Dataset:
    """The table read record by record (JSON objects, or text cells under the header, quoted newlines
    included), each unreadable record kept as a row holding only its reason, so later rows keep their numbers.

    Raises:
        BadRowError: the header of a TSV/CSV is unreadable.
    """
    rows = [r for _, r in _records(path, builder)]
    keys = dict.fromkeys(k for r in rows if isinstance(r, dict) for k in r)
    table = {k: [r.get(k) if isinstance(r, dict) else None for r in rows] for k in keys}
    table[BAD_BYTES_COLUMN] = [None if isinstance(r, dict) else r for r in rows]
    return datasets.Dataset.from_dict(table)


def _csv_records(path: Path) -> Iterator[tuple[int, dict | str]]:
    """Records of a TSV/CSV as verbatim strings, under the header; a record holding non-UTF-8 bytes, or another
    number of fields than the header (cut short, a stray delimiter, an unclosed quote), becomes its reason.

    Raises:
        BadRowError: the header is unreadable.
    """
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    csv.field_size_limit(sys.maxsize)  # a base64 image is one cell of megabytes
    with open(path, newline="", encoding="utf-8-sig", errors="surrogateescape") as f:
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader, [])
        first = next((c for c in "".join(header) if "\udc80" <= c <= "\udcff"), None)
        if first is not None:
            raise BadRowError(f"{_reason(path, 1, bytes([ord(first) - 0xDC00]))}; the header must be readable")
        while True:
            start = reader.line_num + 1
            try:
                record = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield start, f"{path} line {start}: {exc}: fix the record, or set on_bad_row: skip"
                return
            if not record:
                continue
            bad = next((c for c in "".join(record) if "\udc80" <= c <= "\udcff"), None)
            if bad is not None:
                yield start, _reason(path, start, bytes([ord(bad) - 0xDC00]))
            elif len(record) != len(header):
                span = f"lines {start}-{reader.line_num}" if reader.line_num > start else f"line {start}"
                yield start, (f"{path} {span}: a record of {len(record)} fields under a header of {len(header)} (cut "
                              "short, a stray delimiter, or a quote left open?): fix it, or set on_bad_row: skip")
            else:
                yield start, dict(zip(header, record))
