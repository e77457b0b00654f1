"""A stopped run is the same run: resumes (mid-epoch, at an epoch boundary, past max_steps) give the prompts,
completions and weights of an uninterrupted run; stop signals write a checkpoint and say how to resume."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from lit_grpo.cli import main
from lit_grpo.rewards.registry import REWARDS, RewardError

ROOT = Path(__file__).parents[1]


class Record(L.Callback):
    """Per training step: the step number after it, the prompt ids and the completions."""

    steps: list = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        Record.steps.append((trainer.global_step, [s.id for s in batch.samples], outputs["completions"]))


class SignalAt(L.Callback):
    """Sends ``signum`` to this process at the start of training step ``step`` (1-based), or in the
    validation before training (``step=0``); ``times`` signals in a row."""

    def __init__(self, signum: int = int(signal.SIGTERM), step: int = 1, times: int = 1):
        self.signum, self.step, self.times = signum, step, times

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step + 1 == self.step:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)

    def on_validation_start(self, trainer, pl_module):
        if self.step == 0:
            os.kill(os.getpid(), self.signum)


class FailAt(L.Callback):
    """Makes the weight-0 reward ``fails_when_armed`` raise on every row from training step ``step`` on."""

    armed = False

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        FailAt.armed = trainer.global_step + 1 >= self.step


if "fails_when_armed" not in REWARDS:
    @REWARDS.register("fails_when_armed")
    def _fails_when_armed(completions, **_):
        if FailAt.armed:
            raise RuntimeError("the grader is gone")
        return [0.0] * len(completions)


class HangAt(L.Callback):
    """Makes the weight-0 reward ``hangs_when_armed`` hang (``how``: a long sleep or a busy loop) from training step
    ``step`` on."""

    armed = ""

    def __init__(self, step: int, how: str = "sleep"):
        self.step, self.how = step, how

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        HangAt.armed = self.how if trainer.global_step + 1 >= self.step else ""


if "hangs_when_armed" not in REWARDS:
    @REWARDS.register("hangs_when_armed")
    def _hangs_when_armed(completions, **_):
        if HangAt.armed == "sleep":
            time.sleep(1e6)
        while HangAt.armed == "busy":
            pass
        return [0.0] * len(completions)


def _config(folder: Path, every_n: int = 1, **extra) -> Path:
    """The demo on 8 puzzles (4 steps of 2 prompts an epoch, at most 2 epochs), no validation."""
    cfg = {
        "trainer": {"max_steps": 6, "max_epochs": 2, "val_check_interval": 100, "enable_progress_bar": False,
                    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(folder / "logs"), "name": "t",
                                             "default_hp_metric": False}},
                    "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": {"dirpath": str(folder / "ckpt"), "save_last": True,
                                                 "every_n_train_steps": every_n}},
                                  {"class_path": "test_resume.Record"}]},
        "model": {"init_args": {
            "policy": {"name_or_path": str(folder / "model"), "embedded": {"seed": 0}},
            "sampling": {"num_generations": 4, "max_completion_length": 12},
            "evaluation": {"before_fit": False},
            "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3, "weight_decay": 0.0}}}},
        "data": {"train": {"generate": {"path": str(folder / "train.parquet"), "kind": "puzzles", "num": 8}},
                 "val": {"generate": {"path": str(folder / "val.parquet"), "kind": "puzzles", "num": 2, "seed": 1}},
                 "batch_size": 2, "eval_batch_size": 2},
    }
    for key, value in extra.items():
        node = cfg
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path = folder / "overrides.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _fit(folder: Path, *args: str, **extra):
    """Runs ``fit`` on the demo config with :func:`_config`; returns (cli, recorded steps)."""
    Record.steps = []
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(_config(folder, **extra)), *args])
    return cli, list(Record.steps)


def _weights(cli) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in cli.model.policy.named_parameters() if p.requires_grad}


def _assert_same_run(steps, weights, reference):
    ref_steps, ref_weights = reference
    assert [s[0] for s in steps] == [s[0] for s in ref_steps]
    assert [s[1] for s in steps] == [s[1] for s in ref_steps]  # the same prompts at every step
    assert [s[2] for s in steps] == [s[2] for s in ref_steps]  # the same completions
    for name, value in ref_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=0, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """6 uninterrupted steps: 1.5 epochs of 4 steps."""
    cli, steps = _fit(tmp_path_factory.mktemp("reference"))
    assert cli.trainer.global_step == 6 and len(steps) == 6
    assert len({i for s in steps[:4] for i in s[1]}) == 8  # the first epoch sees every prompt once
    return steps, _weights(cli)


def test_stop_and_resume_mid_epoch_is_the_same_run(tmp_path, reference):
    """3 + 3 steps (the stop inside the first epoch) = 6 uninterrupted steps."""
    _, first = _fit(tmp_path, "--trainer.max_steps", "3")
    cli, second = _fit(tmp_path, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"))
    assert cli.trainer.global_step == 6
    _assert_same_run(first + second, _weights(cli), reference)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [4, 5], ids=["at_epoch_end", "inside_second_epoch"])
def test_stop_and_resume_elsewhere_is_the_same_run(tmp_path, reference, stop):
    _, first = _fit(tmp_path, "--trainer.max_steps", str(stop))
    cli, second = _fit(tmp_path, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"))
    _assert_same_run(first + second, _weights(cli), reference)


@pytest.mark.slow
def test_epochs_of_one_step_resume_as_the_same_run(tmp_path):
    """2 puzzles, 2 prompts a step: every step is an epoch's first and last. Resumed from step 2, the run trains
    steps 3 and 4 of epochs 2 and 3 on the uninterrupted run's prompts and weights; its checkpoint of step 2 was
    taken for an unfinished epoch (no batch of the epoch counted as completed yet at the save), so the resumed run
    replayed the finished epoch as an empty one, counted an epoch more and stopped at ``max_epochs`` a step short."""
    def one(folder: Path) -> dict:
        folder.mkdir()
        keep = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": str(folder / "ckpt"), "every_n_train_steps": 1, "save_top_k": -1}}
        return {"data.train.generate.num": 2, "trainer.max_steps": 4, "trainer.max_epochs": 4,
                "trainer.callbacks": [keep, {"class_path": "test_resume.Record"}]}

    ref_cli, ref = _fit(tmp_path / "ref", **one(tmp_path / "ref"))
    ref_names = sorted(p.name for p in (tmp_path / "ref" / "ckpt").glob("epoch=*"))
    assert ref_names == [f"epoch={s - 1}-step={s}.ckpt" for s in range(1, 5)] and len(ref) == 4
    cli, second = _fit(tmp_path / "resumed", "--ckpt_path", str(tmp_path / "ref" / "ckpt" / "epoch=1-step=2.ckpt"),
                       **one(tmp_path / "resumed"))
    assert sorted(p.name for p in (tmp_path / "resumed" / "ckpt").glob("epoch=*")) == ref_names[2:]
    assert [s[:3] for s in second] == [s[:3] for s in ref[2:]]
    for name, value in _weights(ref_cli).items():
        torch.testing.assert_close(_weights(cli)[name], value, rtol=0, atol=1e-6, msg=name)


EPOCH_END_SAVE = {"every_n_train_steps": 0, "every_n_epochs": 1, "save_on_train_epoch_end": True}


@pytest.mark.slow
def test_checkpoints_saved_at_epoch_ends_resume_in_a_chain_as_the_same_run(tmp_path):
    """Saved in ``on_train_epoch_end`` (every epoch, all kept), 3 epochs of 4 steps: resumed from the first epoch's
    save, and that run's second-epoch save resumed again, the chain writes the uninterrupted run's checkpoint names
    and ends with its weights. Lightning counts an epoch completed after that hook: the resumed run counted one epoch
    fewer (``epoch=0-step=8``), and the second resume stopped at ``max_epochs`` on step 9 of 12."""
    def run(name: str, *args: str):
        folder = tmp_path / name
        folder.mkdir()
        keep = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": str(folder / "ckpt"), "save_top_k": -1, **EPOCH_END_SAVE}}
        extra = {"trainer.max_steps": 100, "trainer.max_epochs": 3, "model.init_args.grpo": {"entropy_coef": 0.05},
                 "trainer.callbacks": [keep, {"class_path": "test_resume.Record"}]}
        cli, steps = _fit(folder, *args, **extra)
        return cli, steps, sorted(p.name for p in (folder / "ckpt").glob("epoch=*"))

    ref_cli, ref, names = run("ref")
    assert names == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"] and len(ref) == 12
    _, first, first_names = run("first", "--ckpt_path", str(tmp_path / "ref" / "ckpt" / names[0]))
    assert first_names == names[1:] and [s[:3] for s in first] == [s[:3] for s in ref[4:]]
    cli, second, second_names = run("second", "--ckpt_path", str(tmp_path / "first" / "ckpt" / names[1]))
    assert second_names == names[2:] and [s[:3] for s in second] == [s[:3] for s in ref[8:]]
    for name, value in _weights(ref_cli).items():
        torch.testing.assert_close(_weights(cli)[name], value, rtol=0, atol=1e-6, msg=name)


def test_a_run_max_epochs_stopped_says_so_and_its_command_trains_on(tmp_path, caplog):
    """max_epochs 1 of 4 steps before max_steps 10: the stop names max_epochs, and its command (a higher max_epochs)
    trains the next epoch; the same count again would stop at once."""
    import logging
    import shlex

    caplog.set_level(logging.INFO)
    extra = {"trainer.max_steps": 10, "trainer.max_epochs": 1}
    cli, first = _fit(tmp_path, **extra)
    assert cli.trainer.global_step == 4
    said = caplog.text.split("Stopped by trainer.max_epochs (1) at step 4 of max_steps 10: the figures above are at "
                             "that step. Continue the run (with a higher max_epochs) with:\n", 1)[1].splitlines()[0]
    args = shlex.split(said.strip())
    assert args[-4:] == ["--trainer.max_epochs", "2", "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")]
    cli, second = _fit(tmp_path, *args[args.index("--trainer.max_epochs"):], **extra)
    assert cli.trainer.global_step == 8 and [s[0] for s in second] == [5, 6, 7, 8]


@pytest.mark.parametrize("stop,max_epochs,until,saves", [
    (3, 1, 4, {"every_n_train_steps": 100}), (3, 2, 4, {"every_n_train_steps": 100}),
    pytest.param(4, 2, 6, {"every_n_train_steps": 100}, marks=pytest.mark.slow),
    pytest.param(5, 2, 6, EPOCH_END_SAVE, marks=pytest.mark.slow),
], ids=["mid_epoch_max_epochs_1", "mid_epoch", "at_epoch_end", "mid_epoch_saved_at_epoch_end"])
def test_a_higher_max_steps_continues_where_max_steps_stopped(tmp_path, reference, stop, max_epochs, until, saves,
                                                              caplog):
    """No checkpoint at the step: last.ckpt is the one written when training (or the epoch) ends, its epoch
    recorded as ended. The closing message says max_steps ended the run and gives the command with a higher one."""
    import logging

    caplog.set_level(logging.INFO)
    ref_steps, _ = reference
    callbacks = [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True, **saves}},
                 {"class_path": "test_resume.Record"}]
    epochs = ("--trainer.max_epochs", str(max_epochs))
    _, first = _fit(tmp_path, "--trainer.max_steps", str(stop), *epochs, **{"trainer.callbacks": callbacks})
    assert torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["global_step"] == stop
    said = caplog.text.split(f"Finished trainer.max_steps ({stop}). To train further, continue the run with a "
                             "higher max_steps:\n", 1)[1].splitlines()[0]
    assert said.endswith(f"--trainer.max_steps {2 * stop} --ckpt_path {tmp_path / 'ckpt' / 'last.ckpt'}")
    cli, second = _fit(tmp_path, "--trainer.max_steps", str(until), *epochs, "--ckpt_path",
                       str(tmp_path / "ckpt" / "last.ckpt"), **{"trainer.callbacks": callbacks})
    assert cli.trainer.global_step == until
    assert [s[1] for s in first + second] == [s[1] for s in ref_steps[:until]]
    assert cli.trainer.fit_loop.epoch_loop._batches_that_stepped == until  # the x-axis goes on from the stop


def test_a_run_that_max_time_stopped_mid_epoch_resumes_inside_that_epoch(tmp_path, reference):
    ref_steps, _ = reference
    last = tmp_path / "ckpt" / "last.ckpt"
    _, first = _fit(tmp_path, "--trainer.max_time", "00:00:00:01", "--trainer.max_epochs", "1", every_n=100)
    stopped = torch.load(last, weights_only=False)["global_step"]
    if stopped >= 4:
        pytest.skip("the whole epoch ran within max_time")
    cli, second = _fit(tmp_path, "--trainer.max_time", "00:01:00:00", "--trainer.max_steps", str(stopped + 1),
                       "--trainer.max_epochs", "1", "--ckpt_path", str(last), every_n=100)
    assert cli.trainer.global_step == stopped + 1
    assert [s[1] for s in first + second] == [s[1] for s in ref_steps[:stopped + 1]]


def test_sigterm_in_process_finishes_the_step_checkpoints_and_resumes_as_the_same_run(tmp_path, reference, capsys):
    """The signal arrives at the start of step 3: step 3 finishes, last.ckpt holds it, exit status 143."""
    kill = {"class_path": "test_resume.SignalAt", "init_args": {"signum": int(signal.SIGTERM), "step": 3}}
    with pytest.raises(SystemExit) as stopped:
        _fit(tmp_path, "--trainer.callbacks+", json.dumps(kill), every_n=100)
    assert stopped.value.code == 143
    last = tmp_path / "ckpt" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 3
    err = capsys.readouterr().err
    assert f"Stopped by SIGTERM after step 3 of max_steps 6; checkpoint written: {last}" in err
    command = shlex.split(err.split("Resume the run", 1)[1].splitlines()[1])
    assert command[:4] == ["python", "-m", "lit_grpo", "fit"] and command[-2:] == ["--ckpt_path", str(last)]
    first = list(Record.steps)
    Record.steps = []
    cli = main(command[3:])  # the printed command, as it stands
    _assert_same_run(first + Record.steps, _weights(cli), reference)


def test_save_last_link_links_the_step_checkpoint_and_a_stop_resumes_through_it(tmp_path, reference, capsys):
    """The configs' ``save_last: link``: ``last.ckpt`` is a symbolic link to the newest step checkpoint (one file a
    save, not two). SIGTERM at step 3: the stop writes ``last.ckpt`` itself (the loop state of a stop), the printed
    command resumes from it, 3 + 3 steps are the 6 uninterrupted ones, and the resumed run's saves make ``last.ckpt``
    a link to its newest checkpoint again."""
    ckpt, last = tmp_path / "ckpt", tmp_path / "ckpt" / "last.ckpt"
    callbacks = [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": {"dirpath": str(ckpt), "save_last": "link", "every_n_train_steps": 1}},
                 {"class_path": "test_resume.Record"},
                 {"class_path": "test_resume.SignalAt", "init_args": {"signum": int(signal.SIGTERM), "step": 3}}]
    with pytest.raises(SystemExit) as stopped:
        _fit(tmp_path, **{"trainer.callbacks": callbacks})
    assert stopped.value.code == 143
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch=0-step=3.ckpt", "last.ckpt"]
    assert torch.load(last, weights_only=False)["global_step"] == 3
    command = shlex.split(capsys.readouterr().err.split("Resume the run", 1)[1].splitlines()[1])
    assert command[-2:] == ["--ckpt_path", str(last)]
    first = list(Record.steps)
    Record.steps = []
    cli = main(command[3:])  # the printed command, as it stands
    _assert_same_run(first + Record.steps, _weights(cli), reference)
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch=1-step=6.ckpt", "last.ckpt"]
    assert os.readlink(last) == "epoch=1-step=6.ckpt"


def test_a_step_that_fails_saves_the_last_finished_step_and_resumes_as_the_same_run(tmp_path, reference):
    """A reward (weight 0: it changes nothing else) raises in step 4 and no checkpoint is due: last.ckpt holds step 3
    as a checkpoint written right after it would, and 3 + 3 steps are the 6 uninterrupted ones."""
    rewards = {"model.init_args.rewards": [{"name": "binary", "weight": 1.0}, {"name": "boxed_format", "weight": 0.5},
                                           {"name": "fails_when_armed", "weight": 0.0}]}
    fail = {"class_path": "test_resume.FailAt", "init_args": {"step": 4}}
    with pytest.raises(RewardError) as failed:
        _fit(tmp_path, "--trainer.callbacks+", json.dumps(fail), every_n=100, **rewards)
    last = tmp_path / "ckpt" / "last.ckpt"
    assert str(failed.value).startswith("reward 'fails_when_armed' raised on completion 0 of 8 (row id ")
    assert failed.value.__notes__[0].startswith(f"Step 3, the last finished step, is saved in {last}; resume ")
    assert torch.load(last, weights_only=False)["global_step"] == 3
    first = list(Record.steps)
    FailAt.armed = False
    cli, second = _fit(tmp_path, "--ckpt_path", str(last), every_n=100, **rewards)
    _assert_same_run(first + second, _weights(cli), reference)


def test_a_signal_before_training_exits_nonzero_and_says_nothing_is_lost(tmp_path, capsys):
    kill = {"class_path": "test_resume.SignalAt", "init_args": {"signum": int(signal.SIGTERM), "step": 0}}
    with pytest.raises(SystemExit) as stopped:
        _fit(tmp_path, "--trainer.callbacks+", json.dumps(kill), "--model.init_args.evaluation.before_fit",
             "true")
    assert stopped.value.code == 143
    assert "Stopped by SIGTERM during validate, before any training step finished: nothing to resume" \
        in capsys.readouterr().err
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())


def test_a_second_ctrl_c_abandons_the_step_and_exits_130_with_the_last_finished_step(tmp_path, capsys):
    kill = {"class_path": "test_resume.SignalAt", "init_args": {"signum": int(signal.SIGINT), "step": 2, "times": 2}}
    with pytest.raises(SystemExit) as stopped:
        _fit(tmp_path, "--trainer.callbacks+", json.dumps(kill))
    assert stopped.value.code == 130
    last = tmp_path / "ckpt" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 1
    err = capsys.readouterr().err
    assert "Stopped by SIGINT: the step after step 1 did not finish (within 30 s, or before a second signal) and " \
        "is abandoned" in err
    assert f"Step 1, the last finished step, is saved in {last}; Resume the run with:\n  python -m lit_grpo fit " in err


class InterruptAt(L.Callback):
    """Raises KeyboardInterrupt at the start of training step ``step`` (as a Ctrl+C met outside our handler would)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step + 1 == self.step:
            raise KeyboardInterrupt


def test_a_keyboard_interrupt_in_a_step_exits_130_not_lightnings_1(tmp_path, capsys):
    interrupt = {"class_path": "test_resume.InterruptAt", "init_args": {"step": 2}}
    with pytest.raises(SystemExit) as stopped:
        _fit(tmp_path, "--trainer.callbacks+", json.dumps(interrupt))
    assert stopped.value.code == 130
    assert f"Interrupted after step 1; nothing more is written. The newest checkpoint is {tmp_path / 'ckpt'}" \
        in capsys.readouterr().err


@pytest.mark.parametrize("signum,how", [(signal.SIGTERM, "sleep"), (signal.SIGTERM, "busy"), (signal.SIGINT, "sleep")],
                         ids=["SIGTERM-sleep", "SIGTERM-busy-loop", "SIGINT-sleep"])
def test_a_signal_stops_a_hung_reward_saves_the_last_finished_step_and_resumes_as_the_same_run(
        tmp_path, reference, capsys, monkeypatch, signum, how):
    """A reward hangs in step 3 (``time.sleep(1e6)``, or a busy loop) and the signal comes at its start: 1 s later
    the step is abandoned, last.ckpt holds step 2 (no checkpoint was due), the exit status is 128 + the signal, and
    the printed command, run as it stands, makes 2 + 4 steps the 6 uninterrupted ones."""
    monkeypatch.setenv("LIT_GRPO_STOP_GRACE_S", "1")
    rewards = {"model.init_args.rewards": [{"name": "binary", "weight": 1.0}, {"name": "boxed_format", "weight": 0.5},
                                           {"name": "hangs_when_armed", "weight": 0.0}]}
    hang = {"class_path": "test_resume.HangAt", "init_args": {"step": 3, "how": how}}
    kill = {"class_path": "test_resume.SignalAt", "init_args": {"signum": int(signum), "step": 3}}
    start = time.monotonic()
    with pytest.raises(SystemExit) as stopped:
        _fit(tmp_path, "--trainer.callbacks+", json.dumps(hang), "--trainer.callbacks+", json.dumps(kill),
             every_n=100, **rewards)
    assert stopped.value.code == 128 + signum
    assert time.monotonic() - start < 120
    last = tmp_path / "ckpt" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 2
    err = capsys.readouterr().err
    name = signal.Signals(signum).name
    assert f"Stopped by {name}: the step after step 2 did not finish (within 1 s, or before a second signal)" in err
    assert f"Step 2, the last finished step, is saved in {last}; Resume the run with:\n" in err
    command = shlex.split(err.split("Resume the run with:", 1)[1].splitlines()[1])
    assert command[:4] == ["python", "-m", "lit_grpo", "fit"] and command[-2:] == ["--ckpt_path", str(last)]
    first = list(Record.steps)
    HangAt.armed = ""
    Record.steps = []
    kept = command[3:]
    for i in reversed(range(len(kept))):  # the hang fixed: the test's two callbacks dropped, the rest as printed
        if "HangAt" in kept[i] or "SignalAt" in kept[i]:
            del kept[i - 1:i + 1]
    cli = main(kept)
    _assert_same_run(first + Record.steps, _weights(cli), reference)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_a_real_fit_checkpoints_says_how_to_resume_and_exits_nonzero(tmp_path, signum):
    """``python -m lit_grpo fit`` in its own process, signalled once its step-2 checkpoint exists."""
    over = _config(tmp_path, **{
        "trainer.max_steps": 1000, "trainer.max_epochs": 1,
        "trainer.callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                               "init_args": {"dirpath": str(tmp_path / "ckpt"), "filename": "{step}",
                                             "every_n_train_steps": 2, "save_top_k": -1}}],
        "data.train": {"generate": {"path": str(tmp_path / "train.parquet"), "kind": "puzzles", "num": 600}}})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml", "--config", str(over)]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3000):
            if (tmp_path / "ckpt" / "step=2.ckpt").exists() or proc.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"])
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err[-3000:]
    last = tmp_path / "ckpt" / "last.ckpt"
    step = torch.load(last, weights_only=False)["global_step"]
    assert 2 <= step < 300
    name = signal.Signals(signum).name
    assert f"Stopped by {name} after step {step} of max_steps 1000; checkpoint written: {last}" in err
    resume = shlex.split(err.split("Resume the run", 1)[1].splitlines()[1])
    assert resume == ["python", "-m", "lit_grpo", *command[3:], "--ckpt_path", str(last)]
    Record.steps = []
    cli = main([*resume[3:], "--trainer.max_steps", str(step + 1)])
    assert cli.trainer.global_step == step + 1
    optimizer_state = cli.trainer.optimizers[0].state_dict()["state"]
    assert all(s["step"] == step + 1 for s in optimizer_state.values())  # continued from the saved optimizer


class SignalInValidation(L.Callback):
    """Sends SIGTERM to this process at the first batch of the validation at training step ``step``."""

    def __init__(self, step: int):
        self.step = step

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if trainer.global_step == self.step and batch_idx == 0 and not trainer.sanity_checking:
            os.kill(os.getpid(), signal.SIGTERM)


def _final_row(folder: Path) -> dict:
    import csv

    (path,) = folder.glob("logs/t/*/eval_curves.csv")
    rows = list(csv.DictReader(open(path)))
    return {k: v for k, v in rows[-1].items()}


def test_a_stop_during_the_final_validation_resumes_into_that_validation_and_its_figures(tmp_path, capsys):
    """SIGTERM at the first of 2 batches of the validation after the last step (2 of max_steps 2): the printed
    command runs that validation whole, and its row of eval_curves.csv and closing summary equal the unbroken run's
    (the resumed run trained 0 steps and skipped the validation)."""
    summary = json.dumps({"class_path": "lit_grpo.callbacks.EvalSummary"})
    val = {"data.val": {"generate": {"path": str(tmp_path / "val.parquet"), "kind": "puzzles", "num": 4, "seed": 1}}}
    (tmp_path / "whole").mkdir()
    _fit(tmp_path / "whole", "--trainer.callbacks+", summary, "--trainer.max_steps", "2", every_n=100, **val)
    whole = _final_row(tmp_path / "whole")
    assert whole["step"] == "2"
    whole_out = capsys.readouterr().out
    kill = json.dumps({"class_path": "test_resume.SignalInValidation", "init_args": {"step": 2}})
    with pytest.raises(SystemExit) as stopped:
        _fit(tmp_path, "--trainer.callbacks+", summary, "--trainer.max_steps", "2", "--trainer.callbacks+", kill,
             every_n=100, **val)
    assert stopped.value.code == 143
    last = tmp_path / "ckpt" / "last.ckpt"
    err = capsys.readouterr().err
    assert f"Stopped by SIGTERM during the validation after the last step, after step 2 of max_steps 2; checkpoint " \
           f"written: {last}" in err
    assert not list(tmp_path.glob("logs/t/*/eval_curves.csv"))  # no validation had ended: no row yet
    command = shlex.split(err.split("Resume the run", 1)[1].splitlines()[1])
    kept = command[3:]
    del kept[kept.index(kill) - 1:kept.index(kill) + 1]  # the test's signal dropped, the rest as printed
    cli = main(kept)
    assert cli.trainer.global_step == 2
    assert _final_row(tmp_path) == whole
    out = capsys.readouterr().out
    closing = [line for line in whole_out.splitlines() if "step 2" in line or "±" in line]
    assert closing and all(line in out for line in closing)
