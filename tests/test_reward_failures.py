"""A reward written outside the package that fails is named with the completion it failed on, in one line, and a
step that fails never takes the finished steps with it (the last finished step is saved)."""

import math
import sys

import lightning as L
import pytest
import torch

from lit_grpo.cli import main
from lit_grpo.rewards.registry import REWARDS, RewardError, RewardOutput, register_reward, score_completions
from tiny_runs import fit_args

COMPLETIONS = ["a", "bb", "ccc", "dddd"]
COLUMNS = {"id": ["p0", "p0", "p1", "p1"], "answer": ["A", "A", "B", "B"]}

if "says_correct" not in REWARDS:  # registered from outside the package, as a user's module does
    @register_reward("says_correct")
    def says_correct(completions, **_):
        return ["correct" if len(c) > 2 else 1.0 for c in completions]

    @register_reward("fails_on_p1_at_step_2", columns=("id",))
    def fails_on_p1_at_step_2(completions, id, **_):
        """Raises on the prompt ``p1``... of the second training step (counted by :data:`CALLS`)."""
        if len(completions) > 1:
            CALLS.append(len(completions))
        if len(CALLS) == 2 and any(i == FAIL_ID[0] for i in id):
            raise KeyError(f"no grader for row {FAIL_ID[0]}")
        return [0.0] * len(completions)

CALLS: list[int] = []
FAIL_ID: list[str] = [""]


def _score(fn):
    return score_completions({"mine": fn}, {"mine": 1.0}, COMPLETIONS, COLUMNS)


@pytest.mark.parametrize("fn,expected", [
    (lambda completions, **_: ["correct"] * len(completions),
     "reward 'mine' returned 'correct' (a str) for completion 0 of 4 (row id p0): a reward returns one value per "
     "completion: a number, None (does not apply) or NaN (failed)"),
    (lambda completions, **_: [1.0, 0.0, "0.5", 1.0],
     "reward 'mine' returned '0.5' (a str) for completion 2 of 4 (row id p1): a reward returns"),
    (lambda completions, **_: [1.0, [1.0], 0.0, 0.0],
     "reward 'mine' returned [1.0] (a list) for completion 1 of 4 (row id p0)"),
    (lambda completions, **_: None, "reward 'mine' returned NoneType None, not a list: a reward returns"),
    (lambda completions, **_: 1.0, "reward 'mine' returned float 1.0, not a list"),
    (lambda completions, **_: {"a": 1.0}, "reward 'mine' returned dict {'a': 1.0}, not a list"),
    (lambda completions, **_: [1.0, 0.0], "reward 'mine' returned 2 values for 4 completions"),
    (lambda completions, id, **_: [1 / (i != "p1") for i in id],
     "reward 'mine' raised on completion 2 of 4 (row id p1): ZeroDivisionError: division by zero"),
    (lambda completions, **_: [float(len(completions) < 4)] * len(completions) if len(completions) < 4 else
     [][0], "reward 'mine' raised on the 4 completions together (each alone it scores): IndexError: list index "
            "out of range"),
], ids=["str", "str_number", "list_value", "none", "scalar", "dict", "too_few", "raises_on_a_row", "raises_on_all"])
def test_a_failing_reward_function_is_named_with_the_completion_in_one_line(fn, expected):
    with pytest.raises(RewardError) as failed:
        _score(fn)
    assert str(failed.value).startswith(expected) and "\n" not in str(failed.value)


def test_numbers_of_every_kind_and_none_are_accepted():
    """bool, int, numpy and 0-d tensor values are numbers; None does not apply; NaN is a failed score."""
    import numpy as np

    per, total = _score(lambda completions, **_: [True, np.float64(0.25), torch.tensor(2), None])
    assert per["mine"][:3].tolist() == [1.0, 0.25, 2.0] and math.isnan(per["mine"][3])
    assert total[:3].tolist() == [1.0, 0.25, 2.0] and math.isnan(total[3])


def test_a_reward_object_that_raises_keeps_its_error_with_a_note_naming_it():
    """A reward object (a judge) is not called again completion by completion: its own error goes on."""

    class Judge:
        def __call__(self, completions, **_):
            raise ConnectionError("judge http://judge:8000/v1 is down")

    with pytest.raises(ConnectionError, match="is down") as failed:
        _score(Judge())
    assert failed.value.__notes__ == ["(in reward 'mine')"]


def test_components_and_the_total_are_unchanged_for_good_rewards():
    out = RewardOutput([1.0, 0.0, 0.5, None], components={"part": [1, 0, 1, 0]})
    per, total = _score(lambda completions, **_: out)
    assert per["mine/part"].tolist() == [1.0, 0.0, 1.0, 0.0] and total[:3].tolist() == [1.0, 0.0, 0.5]


def _config(tmp_path, reward: str, every_n: int = 100) -> list[str]:
    """The tiny fit with ``reward`` at weight 0 next to ``binary``; a checkpoint every ``every_n`` steps."""
    return fit_args(tmp_path, checkpoint={"dirpath": str(tmp_path / "ckpt"), "save_last": True,
                                          "every_n_train_steps": every_n},
                    **{"model.init_args.rewards": [{"name": "binary"}, {"name": reward, "weight": 0.0}]})


def test_a_user_reward_returning_a_word_is_one_error_line_and_nothing_is_lost(tmp_path, monkeypatch, capsys):
    """On the command line: one ``error:`` line naming the reward and the completion; nothing had finished."""
    monkeypatch.setattr(sys, "argv", ["my_run.py", *_config(tmp_path, "says_correct")])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert len(errors) == 1 and errors[0].startswith("error: reward 'says_correct' returned 'correct' (a str) for "
                                                     "completion ")
    assert errors[0].endswith("NaN (failed). No training step had finished: nothing to save.")


def test_a_reward_that_raises_at_step_2_saves_step_1_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    """No checkpoint is due before step 100; the reward raises on one row at step 2: last.ckpt holds step 1, the one
    error line names the reward, the completion and the saved file, and the run resumes from it to step 3."""
    CALLS.clear()
    monkeypatch.setattr(sys, "argv", ["my_run.py", *_config(tmp_path, "fails_on_p1_at_step_2")])
    import lit_grpo.data.datamodule as dm

    real_collate = dm.VLMDataModule.collate

    def collate(self, samples):  # the second training batch's second prompt is the row that fails
        batch = real_collate(self, samples)
        if len(CALLS) == 1:
            FAIL_ID[0] = batch.samples[1].id
        return batch

    monkeypatch.setattr(dm.VLMDataModule, "collate", collate)
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 1
    last = tmp_path / "ckpt" / "last.ckpt"
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1
    assert errors[0].startswith(f"error: reward 'fails_on_p1_at_step_2' raised on completion 2 of 4 (row id "
                                f"{FAIL_ID[0]}): KeyError: 'no grader for row {FAIL_ID[0]}'. Step 1, the last finished "
                                f"step, is saved in {last}; resume once this is fixed with: python my_run.py fit")
    assert torch.load(last, weights_only=False)["global_step"] == 1
    CALLS.clear()
    monkeypatch.setattr(dm.VLMDataModule, "collate", real_collate)
    FAIL_ID[0] = "none"
    cli = main([*_config(tmp_path, "fails_on_p1_at_step_2"), "--ckpt_path", str(last)])
    assert cli.trainer.global_step == 3


class RaiseAt(L.Callback):
    """Raises at training step ``step`` (1-based): before it (``start``) or after its update (``end``)."""

    def __init__(self, step: int, where: str):
        self.step, self.where = step, where

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.where == "start" and trainer.global_step + 1 == self.step:
            raise RuntimeError("broken before the step")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.where == "end" and trainer.global_step == self.step:
            raise RuntimeError("broken after the update")


@pytest.mark.parametrize("where,every_n,note", [
    ("start", 1, "Step 1, the last finished step, is saved in {last}; resume once this is fixed with: "),
    ("end", 100, "The failed step had already updated the weights, so nothing more is written; no checkpoint of "
                 "this run exists."),
    ("end", 1, "The failed step had already updated the weights, so nothing more is written; the newest checkpoint "
               "is {last}."),
], ids=["before_the_step_saved_already", "after_the_update_nothing_saved", "after_the_update_step_1_saved"])
def test_what_a_failure_in_step_2_keeps(tmp_path, where, every_n, note):
    last = tmp_path / "ckpt" / "last.ckpt"
    args = _config(tmp_path, "boxed_format", every_n=every_n)
    with pytest.raises(RuntimeError, match="broken") as failed:
        main([*args, "--trainer.callbacks+", f"{{class_path: test_reward_failures.RaiseAt, init_args: {{step: 2, "
                                             f"where: {where}}}}}"])
    assert failed.value.__notes__[0].startswith(note.format(last=last))
    assert (torch.load(last, weights_only=False)["global_step"] if last.exists() else None) == (
        None if every_n == 100 else 1)
