"""Bad rows: a clear error naming the file, row id and field by default; skipped and counted with ``skip``."""

import io
import json
import re
import logging

import datasets
import pytest
from PIL import Image

from lit_grpo.data import BadRowError, DatasetSpec, VLMDataModule
from lit_grpo.tasks.phyx.reader import read_phyx
from lit_grpo.tasks.phyx.writer import prerendered_row, raw_row
from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx


def _png(size=(40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (90, 90, 90)).save(buf, format="PNG")
    return buf.getvalue()


def _item(i: int) -> dict:
    return {"id": str(i), "question": "What is the tension?", "question_description": "A mass hangs.",
            "question_description_simplified": "A mass hangs as shown.",
            "options": ["A: 7.55N", "B: 5.55N", "C: 7.65N", "D: 6.65N"], "answer": "A", "image": _png(),
            "image_caption": "", "category": "Mechanics", "subfield": "Statics", "reasoning_type": []}


def _raw_file(tmp_path, bad_rows: list[dict]) -> str:
    """A raw-layout JSONL: row 0 good, then one row per entry of ``bad_rows`` (fields overriding a good row)."""
    (tmp_path / "images").mkdir(exist_ok=True)
    (tmp_path / "images" / "garbage.png").write_bytes(b"definitely not an image")
    (tmp_path / "images" / "big.png").write_bytes(_png((100, 100)))
    lines = []
    for i, bad in enumerate([{}] + bad_rows + [{}]):
        row = {**raw_row(_item(i)), **bad}
        if row["image"] == f"{i}.png":
            (tmp_path / "images" / row["image"]).write_bytes(_png())
        lines.append(json.dumps(row))
    path = tmp_path / "PhyX_test.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


RAW_CASES = [  # (what, field overrides of row 1, field named, words in the message, found up front?)
    ("missing image file", {"image": "nope.png"}, "image", "does not exist", False),
    ("undecodable image", {"image": "garbage.png"}, "image", "cannot be decoded", False),
    ("image over the pixel limit", {"image": "big.png"}, "image", "over the limit of 5000", False),
    ("missing answer", {"answer": ""}, "answer", "is missing", True),
    ("answer not an option", {"answer": "E"}, "answer", "not one of the options", True),
    ("unknown domain", {"category": "Astrophysics"}, "category", "not a PhyX domain", True),
    ("malformed options", {"options": "A: 1, B: 2"}, "options", "malformed", True),
]


@pytest.mark.parametrize("what,bad,field,words,eager", RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_phyx_bad_row_error_names_file_row_and_field(tmp_path, what, bad, field, words, eager):
    path = _raw_file(tmp_path, [bad])
    with pytest.raises(BadRowError) as exc:
        ds = read_phyx(path, max_pixels=5000)  # text fields are checked here, up front
        assert not eager, "a bad text field must fail before any row is read"
        ds[0]
        ds[1]  # images decode lazily, with the same row-naming error
    msg = str(exc.value)
    assert path in msg and "row 1 (id 1)" in msg and f"'{field}'" in msg and words in msg


def test_phyx_default_layout_missing_image_and_bad_base64(tmp_path):
    items = [_item(0), {**_item(1), "image": None}]
    table = datasets.Dataset.from_list(items, features=datasets.Features({
        **{k: datasets.Value("string") for k in ("id", "question", "question_description",
                                                   "question_description_simplified", "answer", "image_caption",
                                                   "category", "subfield")},
        "options": datasets.List(datasets.Value("string")), "image": datasets.Image(),
        "reasoning_type": datasets.List(datasets.Value("string"))}))
    table.to_parquet(str(tmp_path / "d.parquet"))
    with pytest.raises(BadRowError, match=r"d\.parquet\[test\] row 1 \(id 1\): field 'image': image is missing"):
        read_phyx(str(tmp_path / "d.parquet"))[1]
    rows = [prerendered_row(_item(0), "mc"), {**prerendered_row(_item(1), "mc"), "image": "%%% not base64"}]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "mc.parquet"))
    with pytest.raises(BadRowError, match=r"mc\.parquet\[test\] row 1 \(id 1\): field 'image' is not valid base64"):
        read_phyx(str(tmp_path / "mc.parquet"))[1]


def test_phyx_skip_drops_every_bad_row_and_counts_them(tmp_path, caplog):
    path = _raw_file(tmp_path, [bad for _, bad, *_ in RAW_CASES])
    with caplog.at_level(logging.WARNING):
        ds = read_phyx(path, max_pixels=5000, on_bad_row="skip")
    assert [s.id for s in ds] == ["0", str(len(RAW_CASES) + 1)]
    assert ds.skipped == len(RAW_CASES)
    assert f"skipped {len(RAW_CASES)} of {len(RAW_CASES) + 2} bad rows" in caplog.text and "row 1 (id 1)" in caplog.text


def _puzzle(i: int, **bad) -> dict:
    row = {"id": f"p{i}", "images": [{"bytes": _png(), "path": None}], "problem": "<image>Which option fits?",
           "choice": json.dumps({k: k for k in "ABCDEFGHIJ"}), "answer": "J", "difficulty": 3}
    return {**row, **bad}


VS_CASES = [  # (what, overrides of row 1, field named, words, found up front?)
    ("no image", {"images": []}, "images", "is empty", False),
    ("undecodable image", {"images": [{"bytes": b"junk", "path": None}]}, "images", "cannot be decoded", False),
    ("image over the pixel limit", {"images": [{"bytes": _png((100, 100)), "path": None}]}, "images",
     "over the limit", False),
    ("missing answer", {"answer": ""}, "answer", "is missing", True),
    ("answer not an option", {"answer": "K"}, "answer", "not one of the options", True),
    ("malformed choice", {"choice": "{A: A"}, "choice", "not a JSON object", True),
]


def _vs_features(text: str = "string", decode: bool = True) -> datasets.Features:
    """A VisualSphinx table's features: text columns of type ``text`` (``string`` or ``binary``), images decoded or
    kept as stored."""
    return datasets.Features({"id": datasets.Value("string"), "images": datasets.List(datasets.Image(decode=decode)),
                              "problem": datasets.Value(text), "choice": datasets.Value(text),
                              "answer": datasets.Value(text), "difficulty": datasets.Value("int32")})


def _vs_file(tmp_path, bad_rows: list[dict]) -> str:
    rows = [_puzzle(i, **bad) for i, bad in enumerate([{}] + bad_rows + [{}])]
    features = _vs_features()
    path = tmp_path / "bench.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return str(path)


@pytest.mark.parametrize("what,bad,field,words,eager", VS_CASES, ids=[c[0] for c in VS_CASES])
def test_visualsphinx_bad_row_error_names_file_row_and_field(tmp_path, what, bad, field, words, eager):
    path = _vs_file(tmp_path, [bad])
    with pytest.raises(BadRowError) as exc:
        ds = read_visualsphinx(path, split="test", max_pixels=5000)
        assert not eager, "a bad text field must fail before any row is read"
        ds[1]
    msg = str(exc.value)
    assert path in msg and "row 1 (id p1)" in msg and f"'{field}'" in msg and words in msg


def test_visualsphinx_skip_counts(tmp_path, caplog):
    path = _vs_file(tmp_path, [bad for _, bad, *_ in VS_CASES])
    with caplog.at_level(logging.WARNING):
        ds = read_visualsphinx(path, split="test", max_pixels=5000, on_bad_row="skip")
    assert [s.id for s in ds] == ["p0", f"p{len(VS_CASES) + 1}"]
    assert f"skipped {len(VS_CASES)} of {len(VS_CASES) + 2} bad rows" in caplog.text


def test_datamodule_raises_the_row_error_not_a_collate_crash_and_skips_on_request(tmp_path, caplog):
    path = _raw_file(tmp_path, [{"image": "garbage.png"}])
    spec = DatasetSpec(path=path, reader="phyx", reader_args={"answer_format": "mcq"})
    dm = VLMDataModule(train=spec, batch_size=3, template="physics_rubric")
    dm.setup("fit")
    with pytest.raises(BadRowError, match=r"row 1 \(id 1\): field 'image'"):
        next(iter(dm.train_dataloader()))
    dm = VLMDataModule(train=spec, batch_size=3, template="physics_rubric", on_bad_row="skip")
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert sorted(s.id for s in batch.samples) == ["0", "2"] and "skipped 1 of 3 bad rows" in caplog.text
    with pytest.raises(ValueError, match="on_bad_row"):
        VLMDataModule(train=spec, on_bad_row="ignore")


def _binary_vs_file(tmp_path, problems: list[bytes]) -> str:
    """A VisualSphinx parquet whose text columns are stored as ``binary`` (parquet BYTE_ARRAY without a UTF-8 type)."""
    rows = [{**_puzzle(i), "problem": p, "answer": b"J", "choice": _puzzle(i)["choice"].encode()}
            for i, p in enumerate(problems)]
    features = _vs_features("binary")
    path = tmp_path / "binary.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return str(path)


def test_text_stored_as_binary_is_read_as_utf8_text_never_as_its_repr(tmp_path):
    """``problem``, ``choice`` and ``answer`` as binary columns: the question is the UTF-8 text (accents and all),
    not ``"b'...'"``; the prompt the model sees says so too."""
    path = _binary_vs_file(tmp_path, ["<image>Which option fits? Café, 5 µm".encode(), b"<image>Second one"])
    ds = read_visualsphinx(path, split="test")
    assert [s.question for s in ds] == ["Which option fits? Café, 5 µm", "Second one"]
    assert ds[0].answer == "J" and ds[0].options["A"] == "A"


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_binary_text_that_is_not_utf8_is_a_bad_row_named(tmp_path, caplog, policy):
    path = _binary_vs_file(tmp_path, [b"<image>fine", b"<image>caf\xe9 in latin-1", b"<image>also fine"])
    if policy == "raise":
        with pytest.raises(BadRowError, match=r"row 1 \(id p1\): field 'problem' is binary and not UTF-8 text "
                                              r"\(byte 10\); store it as a string column, encoded as UTF-8"):
            read_visualsphinx(path, split="test")
        return
    with caplog.at_level(logging.WARNING):
        ds = read_visualsphinx(path, split="test", on_bad_row="skip")
    assert [s.id for s in ds] == ["p0", "p2"] and "skipped 1 of 3 bad rows" in caplog.text


def test_phyx_text_stored_as_binary_is_read_as_text(tmp_path):
    """The default PhyX layout with its text columns stored as binary reads as the same samples as with strings."""
    text = [_item(0), _item(1)]
    binary = [{k: v.encode() if isinstance(v, str) else v for k, v in it.items()} for it in text]
    paths = []
    for name, rows in (("text", text), ("binary", binary)):
        paths.append(tmp_path / name / "PhyX_test.parquet")
        paths[-1].parent.mkdir()
        datasets.Dataset.from_list(rows).to_parquet(str(paths[-1]))
    want, got = (read_phyx(str(p)) for p in paths)
    assert [(s.id, s.question, s.options, s.answer, s.fields) for s in got] == \
        [(s.id, s.question, s.options, s.answer, s.fields) for s in want]
    assert got[0].question.startswith("A mass hangs") and got[0].fields["domain"] == "Mechanics"


def test_an_image_path_leading_out_of_the_dataset_folder_is_a_bad_row_unless_allowed(tmp_path):
    """A VisualSphinx row whose image is a path (an HF image dict with no bytes): inside the dataset's folder it is
    read; ``../`` out of it, an absolute path elsewhere, or a symbolic link inside pointing out are refused naming
    the row, unless ``images_outside_root``."""
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    data.mkdir(), elsewhere.mkdir()
    (data / "in.png").write_bytes(_png())
    (elsewhere / "secret.png").write_bytes(_png((20, 20)))
    (data / "link.png").symlink_to(elsewhere / "secret.png")
    paths = ["in.png", "../elsewhere/secret.png", str(elsewhere / "secret.png"), "link.png"]
    rows = [_puzzle(i, images=[{"bytes": None, "path": p}]) for i, p in enumerate(paths)]
    features = _vs_features(decode=False)
    path = data / "bench.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    ds = read_visualsphinx(str(path), split="test")
    assert ds[0].images[0].size == (40, 30)
    for i, p in enumerate(paths[1:], 1):
        with pytest.raises(BadRowError, match=rf"row {i} \(id p{i}\): field 'images': image path '{re.escape(p)}' "
                                              rf"leads out of the dataset's folder {re.escape(str(data.resolve()))}"):
            ds[i]
    allowed = read_visualsphinx(str(path), split="test", images_outside_root=True)
    assert [allowed[i].images[0].size for i in range(4)] == [(40, 30), (20, 20), (20, 20), (20, 20)]


@pytest.mark.parametrize("size", [(1000, 4), (4, 1000)], ids=["wide", "tall"])
def test_an_image_the_models_processor_refuses_is_a_bad_row_named_and_skipped(tmp_path, zoo_dir, caplog, size):
    """Qwen2-VL's image processor refuses an aspect ratio over 200 (its own rule, checked on the processor first),
    an image PIL opens fine: the batch's error names the row and the reason; under ``on_bad_row: skip`` the data
    check drops it before training and counts it."""
    from lit_grpo import GRPOModule
    from lit_grpo.policy import PolicyConfig
    from lit_grpo.rewards import RewardSpec
    from lit_grpo.rollout import SamplingConfig

    module = GRPOModule(policy=PolicyConfig(name_or_path=zoo_dir("qwen2_vl")), rewards=[RewardSpec("binary")],
                        sampling=SamplingConfig(num_generations=2, max_completion_length=4))
    bad = Image.new("RGB", size, "white")
    with pytest.raises(ValueError, match="aspect ratio"):  # the processor's own refusal
        module.processor(images=[[bad]], text=["<|vision_start|><|image_pad|><|vision_end|>q"], return_tensors="pt")
    rows = [_puzzle(i) for i in range(3)]
    buf = io.BytesIO()
    bad.save(buf, format="PNG")
    rows[1]["images"] = [{"bytes": buf.getvalue(), "path": None}]
    features = _vs_features()
    path = tmp_path / "wide.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    spec = DatasetSpec(path=str(path), reader="visualsphinx", split="test")
    dm = VLMDataModule(train=spec, batch_size=3)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    with pytest.raises(BadRowError, match=rf"sample p1: the model's processor refuses it \(image {size[0]}x{size[1]}; "
                                          r"ValueError: absolute aspect ratio must be smaller than 200"):
        module.rollout(batch, 2)
    dm = VLMDataModule(train=spec, batch_size=2, on_bad_row="skip")
    dm.prompt_length, dm.prompt_limit = module.prompt_length, 10 ** 6
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert sorted(s.id for s in next(iter(dm.train_dataloader())).samples) == ["p0", "p2"]
    assert "skipped 1 of 3 rows the model's processor refuses (on_bad_row: skip); first: sample p1" in caplog.text
