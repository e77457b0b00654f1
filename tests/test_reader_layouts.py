"""Reader layouts seen in the wild, all under the bad-row policy: image folders of raw mirrors, renamed
description columns, odd VisualSphinx rows, duplicate ids and non-UTF-8 bytes (raise naming file/row/field, or
skip and count)."""

import csv
import functools
import io
import json
import logging
import re
import shutil

import datasets
import pytest
from PIL import Image

from lit_grpo.data import BadRowError
from lit_grpo.tasks.phyx.reader import read_phyx
from lit_grpo.tasks.phyx.writer import prerendered_row, raw_row
from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx


def _png(colour=(90, 90, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), colour).save(buf, format="PNG")
    return buf.getvalue()


def _item(i: int) -> dict:
    return {"id": str(i), "question": f"What is the tension {i}?", "question_description": f"A mass {i} hangs.",
            "question_description_simplified": f"Mass {i} hangs as shown.",
            "options": ["A: 7.55N", "B: 5.55N", "C: 7.65N", "D: 6.65N"], "answer": "A", "image": _png((i, 9, 9)),
            "image_caption": "", "category": "Mechanics", "subfield": "Statics", "reasoning_type": []}


def _raw(tmp_path, folder: str, n: int = 3, name: str = "PhyX_test.jsonl"):
    """A raw-layout JSONL at ``tmp_path/name`` with its images under ``tmp_path/folder``."""
    (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        row = raw_row(_item(i))
        (tmp_path / folder / row["image"]).write_bytes(_item(i)["image"])
        lines.append(json.dumps(row))
    (tmp_path / name).write_text("\n".join(lines) + "\n")
    return str(tmp_path / name)


@pytest.mark.parametrize("folder,split", [("test/test_image", "test"), ("test_image", "test"), ("images", "test"),
                                          (".", "test"), ("test_mini/test_mini_image", "test_mini")])
def test_raw_images_are_found_where_mirrors_keep_them(tmp_path, folder, split):
    path = _raw(tmp_path, folder)
    ds = read_phyx(path, split=split)
    assert [s.id for s in ds] == ["0", "1", "2"]
    assert ds[2].images[0].getpixel((0, 0)) == (2, 9, 9)


def test_a_missing_raw_image_names_every_folder_looked_in(tmp_path):
    path = _raw(tmp_path, "test/test_image")
    (tmp_path / "images").mkdir()
    (tmp_path / "test" / "test_image" / "1.png").unlink()
    with pytest.raises(BadRowError) as exc:
        read_phyx(path)[1]
    msg = str(exc.value)
    assert "row 1 (id 1)" in msg and "'image'" in msg and "'1.png' does not exist" in msg
    assert str(tmp_path / "images") in msg and str(tmp_path / "test" / "test_image") in msg and "image_dir" in msg
    other = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "test" / "test_image", other)
    with pytest.raises(BadRowError, match="elsewhere; set reader_args.image_dir"):
        read_phyx(path, image_dir=str(other))[1]


def _default_parquet(tmp_path, rename: dict[str, str]) -> str:
    rows = [{rename.get(k, k): v for k, v in _item(i).items()} for i in range(2)]
    features = datasets.Features({**{rename.get(k, k): datasets.Value("string") for k in _item(0)
                                     if k not in ("options", "image", "reasoning_type")},
                                  "options": datasets.List(datasets.Value("string")), "image": datasets.Image(),
                                  "reasoning_type": datasets.List(datasets.Value("string"))})
    path = tmp_path / "phyx.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return str(path)


@pytest.mark.parametrize("rename,variant,expected", [
    ({"question_description_simplified": "question_simplified"}, "simplified", "Mass 1 hangs as shown. What is the "
                                                                                "tension 1?"),  # an older card
    ({"question_description": "description"}, "full", "A mass 1 hangs. What is the tension 1?"),  # a fork
    ({"question_description_simplified": "question_simply"}, "simplified", "Mass 1 hangs as shown. What is the "
                                                                           "tension 1?"),
])
def test_renamed_description_columns_are_read_as_their_variant(tmp_path, rename, variant, expected):
    assert read_phyx(_default_parquet(tmp_path, rename), question_variant=variant)[1].question == expected


def test_a_raw_file_with_the_older_simplified_column(tmp_path):
    path = _raw(tmp_path, "images")
    lines = [json.loads(line) for line in open(path)]
    for row in lines:
        row["question_simplified"] = row.pop("question_simply")
    (tmp_path / "PhyX_test.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    assert read_phyx(path)[0].question == "Mass 0 hangs as shown. What is the tension 0?"


def _puzzle(i: int, **over) -> dict:
    row = {"id": f"p{i}", "images": [{"bytes": _png(), "path": None}], "problem": "<image>Which option fits?",
           "choice": json.dumps({k: k for k in "ABCD"}), "answer": "B"}
    return {**row, **over}


def _vs(tmp_path, rows) -> str:
    features = datasets.Features({"id": datasets.Value("string"), "images": datasets.List(datasets.Image()),
                                  "problem": datasets.Value("string"), "choice": datasets.Value("string"),
                                  "answer": datasets.Value("string")})
    path = tmp_path / "rl.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return str(path)


VS_ODD = [  # (what, overrides of row 1, id of row 1, field named, words)
    ("empty problem", {"problem": ""}, "p1", "problem", "is empty"),
    ("problem with the image placeholder only", {"problem": " <image> "}, "p1", "problem", "is empty"),
    ("problem None", {"problem": None}, "p1", "problem", "is missing"),
    ("a single option", {"choice": json.dumps({"B": "B"})}, "p1", "choice", "1 option(s)"),
    ("no option", {"choice": "{}"}, "p1", "choice", "0 option(s)"),
    ("choice a JSON list", {"choice": json.dumps(list("ABCD"))}, "p1", "choice", "list, not an object"),
    ("choice a JSON string", {"choice": json.dumps("ABCD")}, "p1", "choice", "str, not an object"),
    ("duplicate id", {"id": "p0"}, "p0", "id", "repeats row 0"),
]


@pytest.mark.parametrize("what,over,rid,field,words", VS_ODD, ids=[c[0] for c in VS_ODD])
def test_odd_visualsphinx_rows_raise_naming_row_and_field(tmp_path, what, over, rid, field, words):
    path = _vs(tmp_path, [_puzzle(0), _puzzle(1, **over), _puzzle(2)])
    with pytest.raises(BadRowError) as exc:
        read_visualsphinx(path)
    msg = str(exc.value)
    assert path in msg and f"row 1 (id {rid})" in msg and f"'{field}'" in msg and words in msg


def test_odd_visualsphinx_rows_are_skipped_and_counted(tmp_path, caplog):
    rows = [_puzzle(0)] + [_puzzle(i + 1, **over) for i, (_, over, *_) in enumerate(VS_ODD)] + [_puzzle(99)]
    with caplog.at_level(logging.WARNING):
        ds = read_visualsphinx(_vs(tmp_path, rows), on_bad_row="skip")
    assert [s.id for s in ds] == ["p0", "p99"] and ds.skipped == len(VS_ODD)
    assert f"skipped {len(VS_ODD)} of {len(VS_ODD) + 2} bad rows" in caplog.text
    assert "Which option fits?" == ds[0].question


def test_duplicate_phyx_ids_raise(tmp_path):
    path = _raw(tmp_path, "images", n=3)
    lines = open(path).read().splitlines()
    row = json.loads(lines[2])
    row["index"] = 0
    lines[2] = json.dumps(row)
    (tmp_path / "PhyX_test.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(BadRowError, match=r"row 2 \(id 0\): field 'id' repeats row 0"):
        read_phyx(path)
    assert [s.id for s in read_phyx(path, on_bad_row="skip")] == ["0", "1"]


def _with_bad_bytes(path, row: int, raw: bytes = b"\xff\xfe") -> None:
    """Put non-UTF-8 bytes into the question of data row ``row`` of a JSONL file."""
    lines = open(path, "rb").read().splitlines()
    lines[row] = lines[row].replace(b"What is", b"What " + raw + b"is")
    open(path, "wb").write(b"\n".join(lines) + b"\n")


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"\xe9", b"\xc3("])  # not UTF-8: latin-1 bytes, a broken pair
def test_non_utf8_jsonl_names_file_and_row_and_skip_works(tmp_path, caplog, raw):
    path = _raw(tmp_path, "images", n=4)
    _with_bad_bytes(path, 1, raw)
    with pytest.raises(BadRowError) as exc:
        read_phyx(path)
    msg = str(exc.value)
    assert path in msg and "row 1" in msg and "line 2" in msg and "not UTF-8" in msg
    with caplog.at_level(logging.WARNING):
        ds = read_phyx(path, on_bad_row="skip")
    assert [s.id for s in ds] == ["0", "2", "3"] and "skipped 1 of 4 bad rows" in caplog.text


def test_rows_after_an_unreadable_line_keep_their_numbers(tmp_path):
    path = _raw(tmp_path, "images", n=4)
    _with_bad_bytes(path, 0)
    (tmp_path / "images" / "2.png").write_bytes(b"not an image")
    ds = read_phyx(path, on_bad_row="skip")
    assert [s.id for s in ds] == ["1", "3"]
    lines = open(path, "rb").read().splitlines()
    open(path, "wb").write(b"\n".join(lines[1:]) + b"\n")  # without the bad line: row 1 of the file is id 2
    with pytest.raises(BadRowError, match=r"row 1 \(id 2\): field 'image'"):
        read_phyx(path)[1]


def _tsv(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "PhyX_MC.tsv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def test_non_utf8_tsv_names_file_and_row_and_skip_works(tmp_path, caplog):
    rows = [prerendered_row(_item(i), "mc") for i in range(3)]
    rows[0]["question"] = rows[0]["question"].replace("What is", "What\nis")  # a quoted cell spanning lines
    path = _tsv(tmp_path, rows)
    data = open(path, "rb").read().replace(b"tension 1?", b"tension \xb5 1?")
    open(path, "wb").write(data)
    with pytest.raises(BadRowError) as exc:
        read_phyx(path)
    msg = str(exc.value)
    assert path in msg and "row 1" in msg and "line 4" in msg and "b'\\xb5'" in msg
    with caplog.at_level(logging.WARNING):
        ds = read_phyx(path, on_bad_row="skip")
    assert [s.id for s in ds] == ["0", "2"] and "skipped 1 of 3 bad rows" in caplog.text
    assert ds[0].question.startswith("Mass 0 hangs as shown. What\nis the tension 0?")
    open(path, "wb").write(data.replace(b"question", b"qu\xe9stion", 1))
    with pytest.raises(BadRowError, match="line 1.*header"):
        read_phyx(path)


def _outside(tmp_path, how: str) -> tuple[str, str]:
    """The raw layout under ``tmp_path/data`` whose row 1 reaches an image outside it (colour (200, 1, 1)) through a
    link ``how`` (``file``: ``images/1.png``; ``folder``: ``images/sub`` with the row naming ``sub/private.png``);
    returns the JSONL and the image path row 1 names."""
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    path = _raw(data, "images")
    elsewhere.mkdir()
    (elsewhere / "private.png").write_bytes(_png((200, 1, 1)))
    if how == "file":
        (data / "images" / "1.png").unlink()
        (data / "images" / "1.png").symlink_to(elsewhere / "private.png")
        return path, "1.png"
    (data / "images" / "sub").symlink_to(elsewhere, target_is_directory=True)
    rows = [json.loads(line) for line in (data / "PhyX_test.jsonl").read_text().splitlines()]
    rows[1]["image"] = "sub/private.png"
    (data / "PhyX_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, "sub/private.png"


@pytest.mark.parametrize("how,given", [("file", False), ("folder", False), ("file", True)])
def test_a_raw_image_linked_out_of_the_image_folder_is_a_bad_row(tmp_path, caplog, how, given):
    """A symbolic link in the raw layout's image folder (found next to the file, or ``given`` as ``image_dir``)
    leading out of it is a bad row naming the row and the path (raise, skip), not read; ``images_outside_root: true``
    reads the image it points to."""
    path, name = _outside(tmp_path, how)
    images = (tmp_path / "data" / "images").resolve()
    read = functools.partial(read_phyx, image_dir=str(tmp_path / "data" / "images") if given else None)
    ds = read(path)
    assert ds[0].images[0].getpixel((0, 0)) == (0, 9, 9)
    named = re.escape(str(tmp_path / "data" / "images" / name))
    with pytest.raises(BadRowError, match=rf"row 1 \(id 1\): field 'image': image path '{named}' leads out of the "
                                          rf"image folder {re.escape(str(images))} \(to "
                                          rf"{re.escape(str((tmp_path / 'elsewhere' / 'private.png').resolve()))}\)"):
        ds[1]
    with pytest.raises(BadRowError, match=rf"row 1: field 'image': image path .*{name}' leads out"):
        ds.image_digest(1)  # the overlap check's digest does not read it either
    with caplog.at_level(logging.INFO):
        assert [s.id for s in read(path, on_bad_row="skip")] == ["0", "2"]
    allowed = read(path, images_outside_root=True)
    assert allowed[1].images[0].getpixel((0, 0)) == (200, 1, 1)


def test_a_raw_image_linked_inside_the_image_folder_is_read(tmp_path):
    """A link leading to another file inside the image folder stays inside it: read as the file it points to."""
    path = _raw(tmp_path, "images")
    (tmp_path / "images" / "1.png").unlink()
    (tmp_path / "images" / "1.png").symlink_to(tmp_path / "images" / "2.png")
    assert read_phyx(path)[1].images[0].getpixel((0, 0)) == (2, 9, 9)
