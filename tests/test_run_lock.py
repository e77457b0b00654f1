"""Two runs with one name never destroy each other's files: a second run started on a checkpoint or log folder that
a live run holds is refused before it trains, naming that run; a lock left by a killed run is taken over."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch

from lit_grpo.cli import main
from lit_grpo.run_lock import FolderInUseError, RunLock, lock_path
from tiny_runs import fit_args

ROOT = Path(__file__).parents[1]
HOLD = ("import fcntl, json, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, json.dumps({'pid': os.getpid(), 'host': 'node7', 'started': 43200,\n"
        "                         'command': 'python -m lit_grpo fit --config a.yaml'}).encode())\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n")
"""A process holding the lock of a folder, as a run on host node7 would."""


@pytest.fixture
def holder():
    """``holder(folder)``: another process holds ``folder``'s lock (until the test ends)."""
    procs = []

    def hold(folder: Path) -> subprocess.Popen:
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock_path(folder))], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_folder_held_by_a_live_process_is_refused_naming_it(tmp_path, holder):
    proc = holder(tmp_path / "ckpt")
    with pytest.raises(FolderInUseError) as refused:
        RunLock(["python", "-m", "lit_grpo", "fit"]).acquire(tmp_path / "ckpt", "checkpoint folder")
    message = str(refused.value)
    assert message.startswith(f"checkpoint folder {tmp_path / 'ckpt'} is in use by another run (pid {proc.pid} on "
                              "host node7, started 1970-01-01")
    assert ": python -m lit_grpo fit --config a.yaml)" in message and "\n" not in message


def test_the_lock_is_beside_the_folder_holds_the_run_and_goes_when_released(tmp_path):
    lock = RunLock(["python", "-m", "lit_grpo", "fit", "--config", "x.yaml"])
    lock.acquire(tmp_path / "ckpt")
    record = json.loads((tmp_path / ".ckpt.lock").read_text())
    assert (record["pid"], record["host"], record["command"]) == (os.getpid(), socket.gethostname(),
                                                                  "python -m lit_grpo fit --config x.yaml")
    assert list((tmp_path / "ckpt").iterdir()) == []  # nothing inside the folder
    with pytest.raises(FolderInUseError):  # a second lock in this same process is another run too
        RunLock().acquire(tmp_path / "ckpt")
    lock.release()
    lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    RunLock().acquire(tmp_path / "ckpt")  # free again


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path, holder, caplog):
    proc = holder(tmp_path / "ckpt")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (tmp_path / ".ckpt.lock").exists()  # left behind, but nobody holds it
    lock = RunLock(["me"])
    lock.acquire(tmp_path / "ckpt", "checkpoint folder")
    assert f"took over the lock of a run that no longer runs (pid {proc.pid} on host node7" in caplog.text
    assert json.loads((tmp_path / ".ckpt.lock").read_text())["command"] == "me"
    lock.release()


class Pause(L.Callback):
    """Sleeps after every training step (leaves the CPU to the other run)."""

    def on_train_batch_end(self, *args, **kwargs):
        time.sleep(0.5)


def _args(tmp_path: Path) -> list[str]:
    """The tiny fit, long enough to be running when a second one starts (400 steps), keeping the last two step
    checkpoints and last.ckpt."""
    return fit_args(tmp_path, checkpoint={"dirpath": str(tmp_path / "ckpt"), "filename": "{step}",
                                          "every_n_train_steps": 1, "save_top_k": 2, "monitor": "step", "mode": "max",
                                          "save_last": True},
                    **{"trainer.max_steps": 400, "trainer.max_epochs": 1, "data.train.generate.num": 400})


def test_a_second_run_on_a_held_checkpoint_folder_is_refused_before_any_log_or_checkpoint(tmp_path, holder):
    """In this process, while another process holds the checkpoint folder: the CLI refuses the run before it writes
    anything (no log folder, no checkpoint)."""
    holder(tmp_path / "ckpt")
    with pytest.raises(FolderInUseError, match=f"checkpoint folder {tmp_path / 'ckpt'} is in use by another run"):
        main([*_args(tmp_path), "--trainer.max_steps", "1"])
    assert list((tmp_path / "ckpt").iterdir()) == [] and not list((tmp_path / "logs").rglob("*.tfevents.*"))


@pytest.mark.slow
def test_two_real_runs_with_one_name_the_second_is_refused_and_the_first_keeps_its_files(tmp_path):
    """Run A trains (save_top_k 2 by step, save_last); run B, the same command, starts while A runs: B exits 1 with
    one error line naming A's pid, A's folder holds exactly A's files, and A, stopped by SIGTERM, resumes."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    command = [sys.executable, "-m", "lit_grpo", *_args(tmp_path), "--trainer.callbacks+", "test_run_lock.Pause"]
    a = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while not (tmp_path / "ckpt" / "step=2.ckpt").exists():
            assert a.poll() is None, a.stderr.read()[-3000:]
            time.sleep(0.2)
        b = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert a.poll() is None  # A was running all along
        a.send_signal(signal.SIGTERM)
        _, a_err = a.communicate(timeout=300)
    finally:
        a.kill()
    assert b.returncode == 1
    errors = [line for line in b.stderr.splitlines() if line.startswith("error:")]
    assert errors == [line for line in b.stderr.splitlines() if "error" in line.lower()] and len(errors) == 1
    assert errors[0].startswith(f"error: checkpoint folder {tmp_path / 'ckpt'} is in use by another run (pid {a.pid} "
                                f"on host {socket.gethostname()}, started ")
    assert a.returncode == 143, a_err[-3000:]
    step = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["global_step"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["last.ckpt", f"step={step - 1}.ckpt",
                                                                     f"step={step}.ckpt"]
    assert [p.name for p in (tmp_path / "logs" / "t").iterdir()] == ["version_0"]  # B made no log folder
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".lock")) == []  # A removed its locks


def test_a_folder_reached_through_a_symlink_is_the_same_folder(tmp_path, holder):
    holder(tmp_path / "ckpt")
    (tmp_path / "alias").symlink_to(tmp_path / "ckpt", target_is_directory=True)
    assert lock_path(tmp_path / "alias") == lock_path(tmp_path / "ckpt")
    with pytest.raises(FolderInUseError):
        RunLock(["python", "-m", "lit_grpo", "fit"]).acquire(tmp_path / "alias", "checkpoint folder")
