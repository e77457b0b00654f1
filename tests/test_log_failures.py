"""A log that cannot be written is one line naming its folder: the TensorBoard disk filling up mid-run (no writer
thread traceback, no "you tried to log 0.0"; the last finished step is saved), and a log folder that cannot be
written at all (refused before the first step)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_grpo.cli import main
from lit_grpo.errors import UnwritableFolderError
from lit_grpo.loggers import LogWriteError
from tiny_runs import fit_args

ROOT = Path(__file__).parents[1]


def _config(tmp_path: Path, logs: Path, callbacks: list | None = None) -> list[str]:
    """The tiny fit (4 steps) logging into ``logs``, with no checkpoint due before step 100."""
    return fit_args(tmp_path, logs=logs, callbacks=callbacks, checkpoint={
        "dirpath": str(tmp_path / "ckpt"), "save_last": True, "every_n_train_steps": 100}, **{"trainer.max_steps": 4})


def test_a_full_log_disk_is_one_line_naming_the_log_folder_and_the_finished_step_is_saved(tmp_path, disk):
    """The log disk (its own 1 MiB tmpfs) fills up after step 2: a later write fails (step 2's, 3's or 4's: the
    writer's thread writes behind, and tmpfs allocates whole pages, so the event file's last page takes up to 4 KiB
    more after the disk is full: as many steps as fit in what that page had left); one line naming the log folder,
    no traceback of the writer thread on stderr, and the last finished step saved as last.ckpt (none was due) and
    named in the line."""
    logs = disk("disk", 1 << 20) / "logs"
    fill = {"class_path": "test_atomic_checkpoints.FillDisk", "init_args": {"folder": str(logs), "step": 2, "leave": 0}}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "lit_grpo", *_config(tmp_path, logs, [fill])], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "rror" in line]
    last = tmp_path / "ckpt" / "last.ckpt"
    step = torch.load(last, weights_only=False)["global_step"]
    assert len(errors) == 1 and step in (2, 3, 4) and errors[0].startswith(
        f"error: TensorBoard log {logs / 't' / 'version_0'} could not be written (No space left on device; 0 bytes "
        f"free there): make room there or point trainer.logger's save_dir at another disk. Step {step}, the last "
        f"finished step, is saved in {last}; resume")


def test_the_log_error_is_raised_from_python_as_itself(tmp_path, disk):
    logs = disk("disk", 1 << 20) / "logs"
    fill = {"class_path": "test_atomic_checkpoints.FillDisk", "init_args": {"folder": str(logs), "step": 1, "leave": 0}}
    with pytest.raises(LogWriteError, match=f"^TensorBoard log {logs / 't' / 'version_0'} could not be written") as e:
        main(_config(tmp_path, logs, [fill]))
    step = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["global_step"]
    assert step in (1, 2) and e.value.__notes__[0].startswith(f"Step {step}, the last finished step, is saved in ")


def test_a_log_folder_that_cannot_be_written_is_refused_before_the_first_step(tmp_path, disk):
    """A log folder on a full disk can still take an empty file; a read-only one cannot."""
    logs = tmp_path / "logs"
    logs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(logs)], check=False)
    try:
        if not os.path.ismount(logs):
            pytest.skip("cannot mount a read-only tmpfs")
        with pytest.raises(UnwritableFolderError, match=f"^log folder {logs / 't' / 'version_0'} cannot be written "
                                                        r"\(Read-only file system\): make it writable or point "
                                                        "trainer.logger's save_dir elsewhere"):
            main(_config(tmp_path, logs))
    finally:
        subprocess.run(["umount", "-l", str(logs)], check=False)
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())
