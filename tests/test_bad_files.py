"""A bad data file is one line naming it (and the record's line for text formats) and what is wrong: a file cut short,
empty or unreadable is an error; a broken JSONL/TSV record is a bad row (raised naming the line, or skipped and
counted); a prompt longer than the model's context is a bad row too, even with no max_prompt_length."""

import csv
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from lit_grpo.cli import main
from lit_grpo.data.io import open_table
from lit_grpo.tasks.phyx.reader import read_phyx
from lit_grpo.tasks.phyx.writer import prerendered_row, raw_row
from lit_grpo.tasks.visualsphinx.puzzles import write_puzzles
from lit_grpo.data.sample import BadRowError
from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx
from lit_grpo.errors import InputError
from tiny_runs import fit_args

sys.path.insert(0, str(Path(__file__).parent))
from test_reader_layouts import _item  # noqa: E402


def _raw(tmp_path: Path, n: int = 4) -> Path:
    """A raw-layout PhyX JSONL of ``n`` records (ids 0..n-1) with its images."""
    (tmp_path / "images").mkdir(exist_ok=True)
    lines = []
    for i in range(n):
        row = raw_row(_item(i))
        (tmp_path / "images" / row["image"]).write_bytes(_item(i)["image"])
        lines.append(json.dumps(row))
    path = tmp_path / "PhyX_test.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _tsv(tmp_path: Path, n: int = 4) -> Path:
    path = tmp_path / "PhyX_MC.tsv"
    rows = [prerendered_row(_item(i), "mc") for i in range(n)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _cut_last_record(path: Path) -> None:
    data = path.read_bytes().rstrip(b"\n")
    path.write_bytes(data[: data.rindex(b"\n") + 40])  # the last record cut after 39 bytes


# ------------------------------------------------------------------------------ whole files
def test_a_parquet_cut_in_half_is_named_with_its_size(tmp_path):
    good = write_puzzles(tmp_path / "good.parquet", num=8)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(InputError) as failed:
        read_visualsphinx(str(cut))
    assert str(failed.value).startswith(f"{cut} ({cut.stat().st_size} bytes) is not a readable parquet file (")
    assert "a copy cut short" in str(failed.value) and "\n" not in str(failed.value)


def test_a_parquet_damaged_inside_is_named(tmp_path, caplog):
    """The footer is whole but 2,000 bytes of its data pages are flipped: the reader's own error, naming the file."""
    good = write_puzzles(tmp_path / "good.parquet", num=20)
    data = bytearray(good.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 2000):
        data[i] ^= 0xFF
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError, match=f"^{bad} cannot be read as a table \\(ArrowInvalid: "):
        read_visualsphinx(str(bad))
    assert "Failed to read file" not in caplog.text  # no second report of it


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".tsv"])
def test_an_empty_file_is_named(tmp_path, suffix):
    empty = tmp_path / f"x{suffix}"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match=f"^{empty} is empty \\(0 bytes\\)"):
        open_table(str(empty))


def test_a_file_that_cannot_be_read_is_an_error_even_with_skip(tmp_path):
    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # a folder another user can enter (pytest's is private)
    folder.chmod(0o755)
    path = _raw(folder)
    path.chmod(0)
    root = os.geteuid() == 0
    try:
        if root:  # root reads any file: read as nobody
            os.seteuid(65534)
        with pytest.raises(InputError, match=f"^{path} cannot be read \\(Permission denied\\)"):
            read_phyx(str(path), on_bad_row="skip")
    finally:
        if root:
            os.seteuid(0)
        shutil.rmtree(folder)


def test_in_a_dataset_folder_the_bad_file_and_record_are_named(tmp_path):
    """A folder of split files: no data file at all, a parquet cut short, a JSONL record cut short."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "README.md").write_text("no data here")
    with pytest.raises(InputError, match=f"^dataset folder {folder} holds no data file \\(.parquet, .jsonl"):
        open_table(str(folder), split="test")
    cut = write_puzzles(folder / "test.parquet", num=8)
    cut.write_bytes(cut.read_bytes()[:1000])
    with pytest.raises(InputError, match=f"^{cut} \\(1000 bytes\\) is not a readable parquet file"):
        open_table(str(folder), split="test")
    cut.unlink()
    path = _raw(folder)
    path.rename(folder / "test.jsonl")
    _cut_last_record(folder / "test.jsonl")
    with pytest.raises(InputError, match=f"^{folder / 'test.jsonl'} line 4: not valid JSON \\(Unterminated string "
                                         "starting at, column 26; a record cut short\\?\\): fix it, or give that file "
                                         "itself as the data path"):
        open_table(str(folder), split="test")


def test_a_broken_json_array_file_is_named_with_line_and_column(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('[\n {"id": "a", "answer": "A"},\n {"id": "b", "answer": \n')
    with pytest.raises(InputError, match=f"^{path} line 4 column 1: not valid JSON \\(Expecting value\\); a JSON array "
                                         "file cannot be read record by record"):
        open_table(str(path))


# ------------------------------------------------------------------------------ broken records
RECORDS = {  # what -> (damage to a 4-record raw JSONL, the line named, the words)
    "last_record_cut": (_cut_last_record, 4, "not valid JSON (Unterminated string starting at, column 26; a record cut "
                                                  "short?)"),
    "a_list_not_an_object": (lambda p: _replace_line(p, 2, b"[1, 2]"), 2, "a JSON list, not an object of fields"),
    "a_bare_number": (lambda p: _replace_line(p, 3, b"17"), 3, "a JSON int, not an object of fields"),
    "a_line_of_garbage": (lambda p: _replace_line(p, 1, b"{id: 0, }"), 1,
                          "not valid JSON (Expecting property name enclosed in double quotes, column 2"),
}


def _replace_line(path: Path, line: int, raw: bytes) -> None:
    lines = path.read_bytes().splitlines()
    lines[line - 1] = raw
    path.write_bytes(b"\n".join(lines) + b"\n")


@pytest.mark.parametrize("what", list(RECORDS))
def test_a_broken_jsonl_record_is_a_bad_row_named_by_its_line(tmp_path, caplog, what):
    damage, line, words = RECORDS[what]
    path = _raw(tmp_path)
    damage(path)
    with pytest.raises(BadRowError) as failed:
        read_phyx(str(path))
    message = str(failed.value)
    assert message.startswith(f"{path}[test] row {line - 1}: {path} line {line}: {words}") and "\n" not in message
    with caplog.at_level(logging.WARNING):
        ds = read_phyx(str(path), on_bad_row="skip")
    assert [s.id for s in ds] == [str(i) for i in range(4) if i != line - 1]
    assert "skipped 1 of 4 bad rows" in caplog.text


TSV_RECORDS = {  # what -> (damage to a 4-record TSV, the row named, the words)
    "last_record_cut": (_cut_last_record, 3, "line 5: a record of 2 fields under a header of 7 (cut short"),
    "a_stray_tab": (lambda p: p.write_bytes(p.read_bytes().replace(b"Mass 1 hangs", b"Mass 1\thangs")), 1,
                    "line 3: a record of 8 fields under a header of 7"),
    "a_quote_left_open": (lambda p: p.write_bytes(p.read_bytes().replace(b"Mass 2 hangs", b'"Mass 2 hangs')), 2,
                          "lines 4-5: a record of"),
}


@pytest.mark.parametrize("what", list(TSV_RECORDS))
def test_a_broken_tsv_record_is_a_bad_row_named_by_its_line(tmp_path, caplog, what):
    damage, row, words = TSV_RECORDS[what]
    path = _tsv(tmp_path)
    damage(path)
    with pytest.raises(BadRowError) as failed:
        read_phyx(str(path))
    assert str(failed.value).startswith(f"{path}[test] row {row}: {path} {words}")
    with caplog.at_level(logging.WARNING):
        ds = read_phyx(str(path), on_bad_row="skip")
    if what == "a_quote_left_open":  # the open quote runs to the end: records 2 and 3 are one bad record
        assert [s.id for s in ds] == ["0", "1"] and "skipped 1 of 3 bad rows" in caplog.text
    else:
        assert [s.id for s in ds] == [str(i) for i in range(4) if i != row] and "skipped 1 of 4 bad rows" in caplog.text


def test_a_byte_order_mark_is_no_broken_record(tmp_path):
    """Files saved by some editors start with a UTF-8 byte-order mark: it is not part of the first record."""
    path = _raw(tmp_path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    tsv = _tsv(tmp_path)
    tsv.write_bytes(b"\xef\xbb\xbf" + tsv.read_bytes())
    tsv.write_bytes(tsv.read_bytes().replace(b"Mass 1 hangs", b"Mass 1\thangs"))  # one broken record: read by us
    assert [s.id for s in read_phyx(str(path))] == ["0", "1", "2", "3"]
    assert [s.id for s in read_phyx(str(tsv), on_bad_row="skip")] == ["0", "2", "3"]


# ------------------------------------------------------------------------------ in a run
def _config(tmp_path: Path, train: str, reader: str = "phyx", **data) -> list[str]:
    """One step of the tiny fit on the file ``train`` (split ``train``), without a logger."""
    return fit_args(tmp_path, checkpoint={"dirpath": str(tmp_path / "ckpt")}, **{
        "trainer.max_steps": 1, "trainer.logger": False, "data.on_overlap": "allow",
        "data.train": {"path": train, "reader": reader, "split": "train"}, **{f"data.{k}": v for k, v in data.items()}})


def test_on_the_command_line_a_cut_jsonl_record_is_one_error_line(tmp_path, monkeypatch, capsys):
    path = _raw(tmp_path)
    _cut_last_record(path)
    monkeypatch.setattr(sys, "argv", ["lit_grpo", *_config(tmp_path, str(path), template="phyx_official")])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "rror" in line or "Traceback" in line]
    assert lines == [f"error: {path}[train] row 3: {path} line 4: not valid JSON (Unterminated string starting at, "
                     "column 26; a record cut short?): fix the line, or set on_bad_row: skip"]


def _long_question(tmp_path: Path) -> Path:
    """4 puzzles; the third's problem is 50,000 characters (about 19,000 tokens of the embedded tokenizer, whose
    model has 4,096 positions)."""
    import pandas as pd

    path = write_puzzles(tmp_path / "p.parquet", num=4)
    table = pd.read_parquet(path)
    table.loc[2, "problem"] = "<image> How many red shapes are there? " + "Look again. " * 4200
    table.to_parquet(tmp_path / "long.parquet")
    return tmp_path / "long.parquet"


def test_a_prompt_longer_than_the_model_context_is_a_bad_row(tmp_path, caplog):
    """With no max_prompt_length: ``raise`` stops before any forward over that prompt, naming the row id and both
    lengths; ``skip`` measures every row up front and drops it, counted."""
    path = _long_question(tmp_path)
    with pytest.raises(BadRowError) as failed:
        main([*_config(tmp_path, str(path), reader="visualsphinx"), "--data.batch_size", "4"])
    message = str(failed.value)
    assert message.startswith("row id embedded-0-000002: its prompt is ") and "\n" not in message
    assert "longer than the model's context allows (4090 tokens: max_position_embeddings less the completion's " \
        "max_completion_length)" in message
    assert int(message.split("its prompt is ")[1].split()[0]) > 4096
    with caplog.at_level(logging.WARNING):
        cli = main([*_config(tmp_path, str(path), reader="visualsphinx", on_bad_row="skip"), "--data.batch_size",
                    "3"])
    assert cli.trainer.global_step == 1 and len(cli.datamodule.datasets["train"]) == 3
    assert "train: dropped 1 of 4 samples longer than the model's context (4090 tokens" in caplog.text


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_file_whose_every_record_is_bad_is_an_error_with_skip(tmp_path, encoding):
    """A JSONL file written in another encoding has no readable record: skipping them all would leave an empty
    dataset (and a sampler's traceback), so it is one error naming the file and the first reason."""
    path = _raw(tmp_path, n=3)
    path.write_bytes(path.read_text().encode(encoding))
    with pytest.raises(BadRowError) as refused:
        read_phyx(str(path), on_bad_row="skip")
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{path}")
    assert re.search(r": all \d+ rows are bad, so on_bad_row: skip leaves none; first: .* line 1: .* not UTF-8", message)


@pytest.mark.parametrize("rows", ["100:200", "4:", "-1:0"])
def test_a_row_slice_that_selects_no_row_is_one_error_naming_it(tmp_path, rows):
    """``rows`` past the end of a 4-row file (or an empty range) selects nothing: one line naming the file, the slice
    and the row count, not an IndexError from the table library."""
    path = _raw(tmp_path, n=4)
    with pytest.raises(InputError) as refused:
        read_phyx(str(path), rows=rows)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: rows {rows!r} selects none of its 4 rows")
