"""VisualSphinx reader: RL-20K (``images`` list) and older-card (``image``) layouts, Benchmark fields, 10 options."""

import dataclasses
import io
import json

import datasets
import pytest
from PIL import Image

from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx


def _png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 32), colour).save(buf, format="PNG")
    return buf.getvalue()


ROWS = [
    {"id": "vs-1", "problem": "<image>Which option fills the question mark?", "answer": "C",
     "choice": json.dumps({k: k for k in "ABCD"}), "explanation": "count rises", "difficulty": 2,
     "has_duplicate": False, "reasonableness": 5, "readability": 4, "accuracy": 0.5, "img": _png((255, 0, 0))},
    {"id": "vs-2", "problem": "<image>Pick the missing panel.", "answer": "J",
     "choice": json.dumps({k: k for k in "ABCDEFGHIJ"}), "explanation": "colour cycles", "difficulty": 5,
     "has_duplicate": True, "reasonableness": 3, "readability": 5, "accuracy": 0.125, "img": _png((0, 0, 255))},
]
_FIELDS = {"id": datasets.Value("string"), "problem": datasets.Value("string"), "choice": datasets.Value("string"),
           "answer": datasets.Value("string"), "explanation": datasets.Value("string"),
           "difficulty": datasets.Value("int32"), "has_duplicate": datasets.Value("bool"),
           "reasonableness": datasets.Value("int32"), "readability": datasets.Value("int32"),
           "accuracy": datasets.Value("float32")}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("vs")
    rl = [{**{k: v for k, v in r.items() if k != "img"}, "images": [{"bytes": r["img"], "path": None}]} for r in ROWS]
    datasets.Dataset.from_list(rl, features=datasets.Features({**_FIELDS, "images": datasets.List(datasets.Image())})
                               ).to_parquet(str(root / "rl.parquet"))
    old = [{**{k: v for k, v in r.items() if k != "img"}, "image": {"bytes": r["img"], "path": None}} for r in ROWS]
    datasets.Dataset.from_list(old, features=datasets.Features({**_FIELDS, "image": datasets.Image()})
                               ).to_parquet(str(root / "old.parquet"))
    bench = root / "bench"  # a folder with one file per split, as the Benchmark release has (data/<split>-...)
    (bench / "data").mkdir(parents=True)
    feats = datasets.Features({**_FIELDS, "images": datasets.List(datasets.Image())})
    datasets.Dataset.from_list(rl, features=feats).to_parquet(str(bench / "data" / "testmini-00000-of-00001.parquet"))
    datasets.Dataset.from_list(rl[::-1], features=feats).to_parquet(str(bench / "data" / "test-00000-of-00001.parquet"))
    return {"rl": str(root / "rl.parquet"), "old": str(root / "old.parquet"), "bench": str(bench)}


def _plain(sample):
    return dataclasses.replace(sample, images=[(im.size, im.tobytes()) for im in sample.images])


def test_images_list_and_single_image_layouts_read_back_identical(files):
    rl, old = read_visualsphinx(files["rl"]), read_visualsphinx(files["old"])
    assert [_plain(s) for s in rl] == [_plain(s) for s in old]


def test_fields_by_hand(files):
    s = read_visualsphinx(files["rl"])[1]
    assert (s.id, s.question, s.answer, s.answer_format) == ("vs-2", "Pick the missing panel.", "J", "mcq")
    assert s.options == {k: k for k in "ABCDEFGHIJ"}  # 10-option puzzle
    assert s.meta["difficulty"] == 5 and s.meta["explanation"] == "colour cycles"
    assert s.meta["accuracy"] == pytest.approx(0.125)
    assert s.images[0].size == (64, 32) and s.images[0].getpixel((0, 0)) == (0, 0, 255)
    assert s.fields == {}  # no task fields: the columns are the record's own
    assert s.columns().keys() == {"id", "images", "question", "options", "answer", "answer_format", "meta"}


def test_benchmark_folder_split_by_name(files):
    ds = read_visualsphinx(files["bench"], split="testmini")
    assert [s.id for s in ds] == ["vs-1", "vs-2"] and ds[0].meta["difficulty"] == 2
    assert [s.id for s in read_visualsphinx(files["bench"], split="test")] == ["vs-2", "vs-1"]
