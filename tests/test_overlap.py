"""Train/evaluation overlap: the same problem (normalised question text and image) is refused by default, or
dropped and counted; on the embedded physics data, on a fake PhyX test / test_mini pair (test_mini a shuffled
random subset, stored in another layout or re-encoded), and in the documented PhyX configs."""

import io
import logging
import random

import pytest
from PIL import Image
from tiny_runs import composed
from torch.utils.data import Subset

from lit_grpo.data import DatasetSpec, VLMDataModule
from lit_grpo.data.overlap import find_overlap, normalise_question
from lit_grpo.tasks.phyx.reader import read_phyx
from lit_grpo.tasks.phyx.writer import write_phyx
from lit_grpo.tasks.phyx.physics import write_physics


def _oracle(train, evals) -> set[int]:
    """Training rows equal to an evaluation row by (normalised text, decoded pixels): the slow, obvious check."""
    keys = {(normalise_question(s.question), tuple((im.size, im.tobytes()) for im in s.images))
            for ev in evals for s in ev}
    return {i for i, s in enumerate(train)
            if (normalise_question(s.question), tuple((im.size, im.tobytes()) for im in s.images)) in keys}


@pytest.fixture(scope="module")
def physics(tmp_path_factory):
    return str(write_physics(tmp_path_factory.mktemp("physics") / "phyx.parquet", num=160, seed=0))


def _dm(train, val, test=None, **kw):
    return VLMDataModule(train=train, val=val, test=test, template="physics_rubric", **kw)


def _spec(path, rows=None, **reader_args):
    return DatasetSpec(path=path, reader="phyx", split="test", rows=rows, reader_args=reader_args)


def test_embedded_physics_carve_repeats_problems_and_drop_removes_exactly_those(physics, caplog):
    train, val = read_phyx(physics, rows="32:"), read_phyx(physics, rows=":32")
    expected = _oracle(train, [val])
    assert expected  # the generator repeats problems: the carve trains on some validation problems
    assert set(find_overlap(train, {"val": val})) == expected
    with pytest.raises(ValueError, match=rf"{len(expected)} of 128 training rows are the same problem .*"
                                         r"train row \d+ \(id \d+\) = val row \d+ \(id \d+\).*on_overlap: drop"):
        _dm(_spec(physics, "32:"), _spec(physics, ":32")).setup("fit")
    dm = _dm(_spec(physics, "32:"), _spec(physics, ":32"), on_overlap="drop")
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    kept = [dm.datasets["train"][i].id for i in range(len(dm.datasets["train"]))]
    assert len(kept) == 128 - len(expected) and dm.overlap_dropped == len(expected)
    assert not set(kept) & {train[i].id for i in expected}
    assert f"{len(expected)} of 128 training rows" in caplog.text and "dropped from training" in caplog.text


def test_the_answer_form_does_not_hide_a_problem(physics):
    """An MCQ training row and an open-ended test row of the same item are the same problem."""
    dm = _dm(_spec(physics, ":48", answer_format="mcq"), _spec(physics, "100:", answer_format="mcq"),
             _spec(physics, ":16", answer_format="open"), on_overlap="drop")
    dm.setup("fit")
    train = read_phyx(physics, rows=":48")
    expected = _oracle(train, [read_phyx(physics, rows="100:"), read_phyx(physics, rows=":16")])
    assert {i for i in range(16)} <= expected and dm.overlap_dropped == len(expected)
    assert "test" in dm.datasets  # the test split was read for the check


def test_disjoint_splits_pass_untouched(physics):
    train, val = read_phyx(physics, rows="32:"), read_phyx(physics, rows=":32")
    same = _oracle(train, [val])
    clean = [i for i in range(len(train)) if i not in same]
    assert find_overlap(Subset(train, clean), {"val": val}) == {}


def _png(i: int, compress: int = 6) -> bytes:
    buf = io.BytesIO()
    im = Image.new("RGB", (24, 16), (i * 20 % 256, 40, 90))
    im.putpixel((i % 24, 0), (255, 255, 255))
    im.save(buf, format="PNG", compress_level=compress)
    return buf.getvalue()


def _items(n: int = 10) -> list[dict]:
    return [{"id": str(i), "question": f"What is the speed {i}?", "question_description": f"A cart {i} rolls.",
             "question_description_simplified": f"Cart {i} rolls as shown.",
             "options": ["A: 1 m/s", "B: 2 m/s", "C: 3 m/s", "D: 4 m/s"], "answer": "B", "image": _png(i),
             "image_caption": "", "category": "Mechanics", "subfield": "Kinematics", "reasoning_type": []}
            for i in range(n)]


@pytest.fixture()
def hub(tmp_path):
    """A local copy in the hub's folder layout: test = 10 items, test_mini = 4 of them drawn at random and
    shuffled (row 0 is not test row 0), renumbered as the mini split is."""
    items = _items()
    mini = random.Random(3).sample(items, 4)
    assert mini[0]["id"] != "0"
    mini = [{**it, "id": f"m{k}"} for k, it in enumerate(mini)]
    write_phyx(items, tmp_path / "data" / "test-00000-of-00001.parquet", "default")
    write_phyx(mini, tmp_path / "data" / "test_mini-00000-of-00001.parquet", "default")
    return tmp_path, {it["question"] for it in mini}


def _paper_data(config: str, path: str) -> dict:
    data = composed(config)["data"]  # with the file it extends (_base_)
    for split in ("train", "val", "test"):
        data[split]["path"] = path
    return data


@pytest.mark.parametrize("config", ["configs/granite_vision_phyx_mcq.yaml", "configs/granite_vision_phyx_oe.yaml"])
def test_paper_configs_train_on_test_without_test_mini(hub, config, caplog):
    root, mini_questions = hub
    data = _paper_data(config, str(root))
    assert data["on_overlap"] == "drop" and data["train"]["split"] == "test" and data["train"]["rows"] is None
    assert data["val"]["split"] == data["test"]["split"] == "test_mini"
    dm = VLMDataModule(**{k: DatasetSpec(**v) if k in ("train", "val", "test") else v for k, v in data.items()})
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    train = dm.datasets["train"]
    assert len(train) == 6 and dm.overlap_dropped == 4 and "4 of 10 training rows" in caplog.text
    assert not {train[i].question.split(" ", 3)[-1] for i in range(6)} & {q for q in mini_questions}


def test_the_old_index_carve_overlaps_test_mini(hub):
    """test[4:10] assumed test_mini == test[:4]; with a randomly drawn test_mini it trains on test problems."""
    root, _ = hub
    spec = lambda split, rows=None: DatasetSpec(path=str(root), reader="phyx", split=split, rows=rows)
    with pytest.raises(ValueError, match="training rows are the same problem"):
        _dm(spec("test", "4:10"), spec("test_mini")).setup("fit")


@pytest.mark.parametrize("layout", ["raw", "mc", "oe"])
def test_other_layouts_of_test_mini_match_by_their_stored_image(tmp_path, layout):
    items = _items()
    write_phyx(items, tmp_path / "test.parquet", "default")
    mini = write_phyx(items[5:8][::-1], tmp_path / "mini" / f"mini.{'jsonl' if layout == 'raw' else 'tsv'}", layout)
    found = find_overlap(read_phyx(str(tmp_path / "test.parquet")), {"val": read_phyx(str(mini))})
    assert sorted(found) == [5, 6, 7]


def test_a_re_encoded_image_still_matches(tmp_path):
    items = _items()
    write_phyx(items, tmp_path / "test.parquet", "default")
    copy = [{**it, "image": _png(int(it["id"]), compress=0)} for it in items[2:4]]  # same pixels, other bytes
    assert copy[0]["image"] != items[2]["image"]
    write_phyx(copy, tmp_path / "mini.parquet", "default")
    assert sorted(find_overlap(read_phyx(str(tmp_path / "test.parquet")),
                               {"val": read_phyx(str(tmp_path / "mini.parquet"))})) == [2, 3]


def test_same_text_with_another_image_is_another_problem(tmp_path):
    items = _items()
    write_phyx(items, tmp_path / "test.parquet", "default")
    other = [{**items[2], "image": _png(99)}]
    write_phyx(other, tmp_path / "mini.parquet", "default")
    assert find_overlap(read_phyx(str(tmp_path / "test.parquet")), {"val": read_phyx(str(tmp_path / "mini.parquet"))}) \
        == {}


def test_allow_keeps_a_deliberate_overlap_and_drop_never_empties_training(physics, caplog):
    with caplog.at_level(logging.WARNING):
        dm = _dm(_spec(physics, ":8"), _spec(physics, ":8"), on_overlap="allow")
        dm.setup("fit")
    assert len(dm.datasets["train"]) == 8 and dm.overlap_dropped == 0
    assert "8 of 8 training rows" in caplog.text and "kept for training (on_overlap: allow)" in caplog.text
    with pytest.raises(ValueError, match="nothing is left to train on"):
        _dm(_spec(physics, ":8"), _spec(physics, ":8"), on_overlap="drop").setup("fit")


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="on_overlap"):
        VLMDataModule(on_overlap="ignore")
