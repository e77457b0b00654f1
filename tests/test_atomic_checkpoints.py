"""Checkpoints survive real machines: the checkpoint folder on its own filesystem (a tmpfs the test mounts, as
scratch or NFS is on a cluster), a kill -9 in the middle of a save, a full checkpoint disk, a full ``$TMPDIR`` and
SIGTERM. Every file is written next to its final name and renamed into place once complete, so the previous
checkpoint survives whatever happens to the new one, and a save that fails is one line naming the folder."""

import builtins
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import lightning as L
import pytest
import torch

from lit_grpo.checkpoint_io import AtomicCheckpointIO, atomic_folder, remove_leftovers, temporary_files
from lit_grpo.cli import main
from lit_grpo.runs import check_checkpoint_file
from tiny_runs import fit_args

ROOT = Path(__file__).parents[1]


EVERY_STEP = {"save_top_k": 0, "save_last": True, "every_n_train_steps": 1}


def _args(tmp_path: Path, ckpt: Path, callbacks: list | None = None, save: dict | None = None) -> list[str]:
    """The tiny fit (3 steps, a checkpoint of about 1.4 MB) saving into ``ckpt`` as ``save`` says."""
    return fit_args(tmp_path, checkpoint={"dirpath": str(ckpt), **(save or EVERY_STEP)}, callbacks=callbacks)


def _step(path: Path) -> int:
    return torch.load(path, weights_only=False, map_location="cpu")["global_step"]


# ------------------------------------------------------------------------------ callbacks the runs load
class KillMidSave(L.Callback):
    """SIGKILLs this process halfway through writing the checkpoint saved after step ``step`` into ``folder``:
    the first file opened for writing in ``folder`` after that step is cut after half the bytes of the
    ``last.ckpt`` already there (or at once, when it is filled by a copy that bypasses ``write``)."""

    def __init__(self, folder: str, step: int):
        self.folder, self.step = Path(folder), step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            _kill_while_writing(self.folder, os.path.getsize(self.folder / "last.ckpt") // 2)


def _kill_while_writing(folder: Path, after: int) -> None:
    real_open = builtins.open

    class Cut:
        def __init__(self, f):
            self.f, self.written = f, 0

        def write(self, data):
            if self.written + len(data) >= after:
                self.f.write(bytes(data)[: max(0, after - self.written)])
                self.f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            self.written += len(data)
            return self.f.write(data)

        def fileno(self):
            if self.written == 0:  # shutil's copy (sendfile) writes through the descriptor: the file is truncated
                os.kill(os.getpid(), signal.SIGKILL)
            return self.f.fileno()

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

    def cutting_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, os.PathLike)) and Path(file).parent == folder and ("w" in mode or "+" in mode):
            return Cut(f)
        return f

    builtins.open = cutting_open


class FillDisk(L.Callback):
    """After step ``step`` (before its checkpoint is saved), fills the filesystem of ``folder`` with a file outside
    it until ``leave`` bytes (default: half the size of its ``last.ckpt``) are free."""

    def __init__(self, folder: str, step: int, leave: int | None = None):
        self.folder, self.step, self.leave = Path(folder), step, leave

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            leave = self.leave if self.leave is not None else os.path.getsize(self.folder / "last.ckpt") // 2
            stat = os.statvfs(self.folder)
            filler = stat.f_bavail * stat.f_frsize - leave
            with open(self.folder.parent / "filler", "wb") as f:
                f.write(b"\0" * max(0, filler))


class SignalAtStep(L.Callback):
    """Sends SIGTERM to this process at the start of training step ``step`` (1-based)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step + 1 == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def _callback(cls, **init_args) -> dict:
    return {"class_path": f"test_atomic_checkpoints.{cls.__name__}", "init_args": init_args}


# ------------------------------------------------------------------------------ the plugin alone
def test_a_checkpoint_is_written_beside_its_name_and_renamed_into_place(tmp_path, monkeypatch):
    """The file appears whole under its name, its bytes are what torch.save writes, and no other file is left; the
    temporary file lies in the same folder (never in $TMPDIR, here a folder that does not exist)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "no_such_tmpdir"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (seen.append((Path(src), Path(dst))), real_replace(src, dst)))
    state = {"w": torch.arange(6.0).reshape(2, 3), "step": 4}
    AtomicCheckpointIO().save_checkpoint(state, tmp_path / "ckpt" / "last.ckpt")
    (src, dst), = seen
    assert src.parent == dst.parent == tmp_path / "ckpt" and src.name.startswith(".last.ckpt.") and src != dst
    assert os.listdir(tmp_path / "ckpt") == ["last.ckpt"]
    loaded = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert loaded["step"] == 4 and loaded["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_a_failed_save_keeps_the_old_file_and_names_the_folder(disk):
    """On a 1 MiB disk an old 300 kB checkpoint is replaced by a 2 MB one: the save fails naming the file, the
    folder and the free space, the old file is untouched and no partial file is left."""
    folder = disk("disk", 1 << 20) / "ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"w": torch.zeros(75_000)}, folder / "last.ckpt")
    old = (folder / "last.ckpt").read_bytes()
    with pytest.raises(OSError) as failed:
        io.save_checkpoint({"w": torch.zeros(500_000)}, folder / "last.ckpt")
    message = str(failed.value)
    assert "\n" not in message and f"checkpoint {folder / 'last.ckpt'} could not be written" in message
    assert "No space left on device" in message and f"free in {folder}" in message
    assert (folder / "last.ckpt").read_bytes() == old and os.listdir(folder) == ["last.ckpt"]


def test_a_folder_checkpoint_replaces_the_old_folder_only_when_complete(tmp_path):
    """A sharded checkpoint (a folder of files) is written in a sibling folder and swapped in; a writer that fails
    leaves the old folder as it was."""
    target = tmp_path / "last.ckpt"
    with atomic_folder(target) as part:
        (part / "shard_0").write_text("old 0")
        (part / "shard_1").write_text("old 1")
    with pytest.raises(RuntimeError, match="rank 1 died"):
        with atomic_folder(target) as part:
            (part / "shard_0").write_text("new 0")
            raise RuntimeError("rank 1 died")
    assert sorted(p.name for p in target.iterdir()) == ["shard_0", "shard_1"]
    assert (target / "shard_0").read_text() == "old 0" and os.listdir(tmp_path) == ["last.ckpt"]
    with atomic_folder(target) as part:
        (part / "shard_0").write_text("new 0")
    assert [p.read_text() for p in target.iterdir()] == ["new 0"] and os.listdir(tmp_path) == ["last.ckpt"]


def test_leftovers_of_a_killed_save_are_found_by_their_owner(tmp_path):
    """A temporary file of a process that no longer runs is a leftover; one of a live process (this one) is not."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    mine = tmp_path / f".last.ckpt.{os.uname().nodename}.{os.getpid()}.tmp"
    theirs = tmp_path / f".last.ckpt.{os.uname().nodename}.{pid}.tmp"
    other_host = tmp_path / f".last.ckpt.elsewhere.{pid}.tmp"
    for p in (mine, theirs, other_host, tmp_path / "last.ckpt"):
        p.write_bytes(b"x")
    assert temporary_files(tmp_path) == [theirs]


def test_a_folder_moved_aside_by_a_killed_save_is_put_back_where_names_cannot_be_exchanged(tmp_path, monkeypatch):
    """Where the filesystem cannot exchange two names (NFS), a folder save moves the old checkpoint aside and then
    renames the new one in; a kill between the two leaves no checkpoint at the name. The next run's cleanup puts the
    old one back (the last whole checkpoint) and removes the unfinished one; with the name taken, the moved-aside
    copy is an ordinary leftover."""
    from lit_grpo import checkpoint_io
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout)
    host = checkpoint_io._HOST
    aside, unfinished = tmp_path / f".last.ckpt.old.{host}.{dead}.tmp", tmp_path / f".last.ckpt.{host}.{dead}.tmp"
    for folder, text in ((aside, "step 4"), (unfinished, "step 6, half")):
        folder.mkdir()
        (folder / "shard_0").write_text(text)
    assert sorted(p.name for p in remove_leftovers(tmp_path)) == [unfinished.name]
    assert os.listdir(tmp_path) == ["last.ckpt"] and (tmp_path / "last.ckpt" / "shard_0").read_text() == "step 4"
    aside.mkdir()
    assert remove_leftovers(tmp_path) == [aside] and os.listdir(tmp_path) == ["last.ckpt"]
    # the save itself on such a filesystem: the old folder is replaced, nothing left beside it
    monkeypatch.setattr(checkpoint_io, "_exchange", lambda a, b: False)
    with atomic_folder(tmp_path / "last.ckpt") as part:
        (part / "shard_0").write_text("step 8")
    assert os.listdir(tmp_path) == ["last.ckpt"] and (tmp_path / "last.ckpt" / "shard_0").read_text() == "step 8"


# ------------------------------------------------------------------------------ real runs
@pytest.mark.slow
def test_kill_9_while_last_ckpt_is_rewritten_leaves_the_previous_one_whole(tmp_path, disk):
    """Checkpoint folder on its own 64 MB tmpfs (``$TMPDIR`` elsewhere), save_top_k 0, save_last: the process is
    killed halfway through writing step 2's last.ckpt. Step 1's last.ckpt is intact and the run resumes from it;
    the resumed run removes the killed save's leftover."""
    ckpt = disk("disk", 64 << 20) / "ckpt"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    args = _args(tmp_path, ckpt, callbacks=[_callback(KillMidSave, folder=str(ckpt), step=2)])
    done = subprocess.run([sys.executable, "-m", "lit_grpo", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    last = ckpt / "last.ckpt"
    check_checkpoint_file(last)  # a whole zip archive
    assert _step(last) == 1
    assert [p.name for p in ckpt.iterdir() if p.name != "last.ckpt"] != []  # the killed save's part file
    cli = main([*_args(tmp_path, ckpt), "--ckpt_path", str(last)])
    assert cli.trainer.global_step == 3 and _step(last) == 3
    assert sorted(p.name for p in ckpt.iterdir()) == ["last.ckpt"]


def test_a_full_checkpoint_disk_stops_the_run_in_one_line_and_keeps_every_earlier_checkpoint(tmp_path, disk,
                                                                                              capsys):
    """The checkpoint disk fills up after step 1 (half a checkpoint left free): step 2's save fails; the run
    stops with one error line naming the file, the folder and its free space; step 1's files are intact and no
    partial step=2 file exists."""
    ckpt = disk("disk", 64 << 20) / "ckpt"
    save = {"save_top_k": -1, "save_last": True, "every_n_train_steps": 1, "filename": "{step}"}
    with pytest.raises(OSError) as failed:
        main(_args(tmp_path, ckpt, save=save, callbacks=[_callback(FillDisk, folder=str(ckpt), step=2)]))
    message = str(failed.value)
    assert "\n" not in message and "could not be written (No space left on device" in message
    assert f"free in {ckpt}" in message
    assert sorted(p.name for p in ckpt.iterdir()) == ["last.ckpt", "step=1.ckpt"]
    assert _step(ckpt / "last.ckpt") == _step(ckpt / "step=1.ckpt") == 1


def test_a_full_disk_at_sigterm_says_could_not_be_written_in_one_line_and_exits_143(tmp_path, disk, capsys):
    ckpt = disk("disk", 64 << 20) / "ckpt"
    save = {"save_top_k": 0, "save_last": True, "every_n_train_steps": 100}  # no save at step 1
    with pytest.raises(SystemExit) as stopped:
        main([*_args(tmp_path, ckpt, save=save, callbacks=[_callback(SignalAtStep, step=2),
                                                          _callback(FillDisk, folder=str(ckpt), step=2, leave=0)])])
    assert stopped.value.code == 143
    lines = [line for line in capsys.readouterr().err.splitlines() if "could not be written" in line]
    assert len(lines) == 1 and lines[0].startswith("Stopped by SIGTERM after step 2, but the checkpoint "
                                                   f"{ckpt / 'last.ckpt'} could not be written (No space left")
    assert f"free in {ckpt}" in lines[0] and "No checkpoint of this run exists" in lines[0]
    assert list(ckpt.iterdir()) == []


def test_a_full_tmpdir_plays_no_part(tmp_path, disk, monkeypatch):
    """``$TMPDIR`` on a full 1 MiB tmpfs, the checkpoint folder on another filesystem: every save succeeds and
    nothing is written to ``$TMPDIR``."""
    tmp = disk("tmpdir", 1 << 20)
    (tmp / "filler").write_bytes(b"\0" * ((1 << 20) - 4096))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    ckpt = disk("disk", 64 << 20) / "ckpt"
    cli = main(_args(tmp_path, ckpt, save={"save_top_k": -1, "save_last": True, "every_n_train_steps": 1,
                                           "filename": "{step}"}))
    assert cli.trainer.global_step == 3
    assert sorted(p.name for p in ckpt.iterdir()) == ["last.ckpt", "step=1.ckpt", "step=2.ckpt", "step=3.ckpt"]
    assert [_step(ckpt / f"step={s}.ckpt") for s in (1, 2, 3)] == [1, 2, 3]
    assert os.listdir(tmp) == ["filler"]
