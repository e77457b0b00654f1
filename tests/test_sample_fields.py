"""A sample's task fields reach the rewards as columns of their names (as TRL passes every dataset column to a reward):
a reader and a reward registered from this file alone add a gold field that a run trains on, with no core edit; a
field some rows lack is None there; a field named like one of the record's own columns is refused."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from lit_grpo import GRPOModule
from lit_grpo.cli import main
from lit_grpo.data.datamodule import READERS, PromptBatch
from lit_grpo.data.sample import RECORD_COLUMNS, Sample
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec, build_rewards, required_columns
from lit_grpo.rewards.registry import INFO, REWARDS, register_reward
from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx
from tiny_runs import fit_args

LEVELS = {0: 0.25, 1: 0.5}
"""The toy reader's gold field ``toy_level`` by row index; rows from 2 on have none."""


def read_toy_levels(path, split="train", rows=None, on_bad_row="raise"):
    """VisualSphinx rows, each given the gold field ``toy_level`` (rows 0 and 1 only) and ``toy_colour`` (every
    row: ``red`` on even rows)."""
    ds = read_visualsphinx(path, split=split, rows=rows, on_bad_row=on_bad_row)

    class Levels(torch.utils.data.Dataset):
        def __len__(self):
            return len(ds)

        def __getitem__(self, i):
            s = ds[i]
            extra = {"toy_colour": "red" if i % 2 == 0 else "blue",
                     **({"toy_level": LEVELS[i]} if i in LEVELS else {})}
            return dataclasses.replace(s, fields={**s.fields, **extra})

    return Levels()


def toy_level_reward(completions, toy_level, **_):
    """The gold level itself; None (does not apply) where the row has no level."""
    return [None if v is None else float(v) for v in toy_level]


def toy_is_red(completions, toy_colour, bonus: float = 1.0, **_):
    """Named by its dotted path: ``bonus`` where the gold colour is red, else 0."""
    return [bonus * float(c == "red") for c in toy_colour]


@pytest.fixture(autouse=True)
def toy_registrations():
    """The toy reader and reward are registered for each test and taken out after it (with the dotted-path reward
    that naming it registers), so the registered names that other tests' error messages list stay the package's."""
    READERS.register("toy_levels")(read_toy_levels)
    register_reward("toy_level_reward", columns=("toy_level",))(toy_level_reward)
    yield
    READERS._entries.pop("toy_levels")
    for name in ["toy_level_reward", *(k for k in REWARDS._entries if k.startswith(f"{__name__}."))]:
        REWARDS._entries.pop(name), INFO.pop(name, None)


def _sample(i: int, **fields) -> Sample:
    return Sample(id=f"s{i}", images=[], question="q", options={"A": "1"}, answer="A", fields=fields)


def test_task_fields_are_columns_by_name_and_may_not_hide_the_records_own():
    s = _sample(0, unit="N", domain="Optics")
    assert s.columns() == {"id": "s0", "images": [], "question": "q", "options": {"A": "1"}, "answer": "A",
                           "answer_format": "mcq", "meta": {}, "unit": "N", "domain": "Optics"}
    assert set(RECORD_COLUMNS) == {f.name for f in dataclasses.fields(Sample)} - {"fields"}
    for name in ("answer", "meta", "images"):
        with pytest.raises(ValueError, match=rf"sample 's1': task field\(s\) \['{name}'\] are named like the record"):
            _sample(1, **{name: "x"})


def test_a_reward_reading_a_field_counts_it_as_read_and_a_dotted_path_reward_gets_it():
    assert required_columns([RewardSpec("toy_level_reward"), RewardSpec("binary")]) == {"toy_level"}
    fn = build_rewards([RewardSpec(f"{__name__}.toy_is_red", kwargs={"bonus": 2.0})])["toy_is_red"]
    assert required_columns([RewardSpec(f"{__name__}.toy_is_red")]) == {"toy_colour"}
    assert fn(["a", "b", "c"], toy_colour=["red", "blue", "red"]) == [2.0, 0.0, 2.0]


def test_the_step_columns_repeat_each_field_per_completion_and_fill_what_a_row_lacks(tiny_model_dir):
    """Rows with and without ``toy_level``, G = 2: the field repeats per completion, a row lacking it gets None,
    and a field a reward reads that no row has is a column of None."""
    module = GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir),
                        rewards=[RewardSpec("toy_level_reward"), RewardSpec("binary"),
                                 RewardSpec(f"{__name__}.toy_is_red")])
    assert module.read_columns == {"toy_level", "toy_colour"} and module.pass_columns == []
    batch = PromptBatch([_sample(0, toy_level=0.25, unit="N"), _sample(1)], [[], []])
    rollout = SimpleNamespace(truncated=torch.tensor([False, True, False, False]),
                              completion_mask=torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0]]).bool())
    cols = module.columns(batch, rollout, 2)
    assert cols["toy_level"] == [0.25, 0.25, None, None] and cols["unit"] == ["N", "N", None, None]
    assert cols["toy_colour"] == [None] * 4 and cols["id"] == ["s0", "s0", "s1", "s1"]
    assert cols["completion_length"] == [2, 3, 1, 0] and cols["truncated"] == [False, True, False, False]


def test_a_run_trains_on_a_gold_field_that_a_reader_from_outside_the_core_adds(tmp_path):
    """One step of 2 prompts x 2 completions over rows 0 and 1 (levels 0.25 and 0.5, in either order): the level
    reward's mean is (0.25 + 0.5) / 2, and the dotted-path reward's is the share of red rows (row 0 of the two)."""
    args = fit_args(tmp_path, **{"trainer.max_steps": 1, "data.train.reader": "toy_levels",
                                 "data.train.rows": ":2", "model.init_args.rewards": [
                                     {"name": "toy_level_reward"}, {"name": f"{__name__}.toy_is_red"}]})
    cli = main(args)
    logged = cli.trainer.logged_metrics
    assert cli.trainer.global_step == 1
    assert float(logged["train/reward/toy_level_reward"]) == pytest.approx(0.375)
    assert float(logged["train/reward/toy_is_red"]) == pytest.approx(0.5)
