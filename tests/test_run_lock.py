"""Two runs with one name never destroy each other's files: a second run started on a checkpoint or log folder that
a live run holds is refused before it trains, naming that run; a lock left by a killed run is taken over."""

import errno
import json
import os
import re
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
from lit_grpo.run_lock import FolderInUseError, RunLock, UnsafeLockError, lock_path
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


def test_the_lock_is_inside_the_folder_holds_the_run_and_goes_when_released(tmp_path):
    lock = RunLock(["python", "-m", "lit_grpo", "fit", "--config", "x.yaml"])
    lock.acquire(tmp_path / "ckpt")
    record = json.loads((tmp_path / "ckpt" / ".lit_grpo.lock").read_text())
    assert (record["pid"], record["host"], record["command"]) == (os.getpid(), socket.gethostname(),
                                                                  "python -m lit_grpo fit --config x.yaml")
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == [".lit_grpo.lock"]  # nothing else inside the folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # and nothing beside it
    with pytest.raises(FolderInUseError):  # a second lock in this same process is another run too
        RunLock().acquire(tmp_path / "ckpt")
    lock.release()
    lock.release()
    assert list((tmp_path / "ckpt").iterdir()) == []
    RunLock().acquire(tmp_path / "ckpt")  # free again


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path, holder, caplog):
    proc = holder(tmp_path / "ckpt")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (tmp_path / "ckpt" / ".lit_grpo.lock").exists()  # left behind, but nobody holds it
    lock = RunLock(["me"])
    lock.acquire(tmp_path / "ckpt", "checkpoint folder")
    assert f"took over the lock of a run that no longer runs (pid {proc.pid} on host node7" in caplog.text
    assert json.loads((tmp_path / "ckpt" / ".lit_grpo.lock").read_text())["command"] == "me"
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
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == [".lit_grpo.lock"]  # the holder's, nothing of ours
    assert not list((tmp_path / "logs").rglob("*.tfevents.*"))


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
    assert not list(tmp_path.rglob("*.lock"))  # A removed its locks


def _aliases(tmp_path: Path) -> dict[str, Path]:
    """Other paths to ``tmp_path/runs/ckpt``: through a symlinked parent, with ``..`` segments, relative to the
    current folder, through an open descriptor (``/proc/self/fd``), and a symlink to the folder itself."""
    (tmp_path / "runs" / "ckpt").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "linked_parent").symlink_to(tmp_path / "runs", target_is_directory=True)
    (tmp_path / "alias").symlink_to(tmp_path / "runs" / "ckpt", target_is_directory=True)
    fd = os.open(tmp_path / "runs", os.O_RDONLY | os.O_DIRECTORY)  # closed with the test process
    return {"symlinked parent": tmp_path / "linked_parent" / "ckpt",
            "dot-dot": tmp_path / "other" / ".." / "linked_parent" / ".." / "runs" / "ckpt",
            "relative": Path(os.path.relpath(tmp_path / "runs" / "ckpt")),
            "proc fd": Path(f"/proc/self/fd/{fd}/ckpt"),
            "symlinked folder": tmp_path / "alias"}


@pytest.mark.parametrize("alias", ["symlinked parent", "dot-dot", "relative", "proc fd", "symlinked folder"])
def test_the_same_folder_by_another_path_is_refused(tmp_path, holder, alias):
    """The lock is the folder's, not the path's: another process holds it through the plain path, and every other
    path to the folder (a bind mount is one more: same directory inode) is refused, naming that process."""
    path = _aliases(tmp_path)[alias]
    proc = holder(tmp_path / "runs" / "ckpt")
    with pytest.raises(FolderInUseError, match=f"^checkpoint folder {re.escape(str(path))} is in use by another run "
                                               f"\\(pid {proc.pid} on host node7"):
        RunLock(["python", "-m", "lit_grpo", "fit"]).acquire(path, "checkpoint folder")


BIND = ("import sys\nfrom lit_grpo.run_lock import RunLock\n"
        "try:\n    RunLock(['me']).acquire(sys.argv[1], 'checkpoint folder')\nexcept Exception as exc:\n"
        "    print(exc)\nelse:\n    print('acquired')\n")
"""Lock the folder given, printing the refusal or ``acquired``."""


def test_a_bind_mount_of_the_folder_is_refused(tmp_path, holder):
    """The folder mounted at a second place (``mount --bind`` in a private mount namespace, ``unshare -rm``, which
    needs no root where user namespaces are allowed): a run there is refused, naming the holder."""
    proc = holder(tmp_path / "ckpt")
    (tmp_path / "mnt").mkdir()
    script = f'mount --bind "$1" "$2" && exec "{sys.executable}" -c "$3" "$2"'
    run = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(tmp_path / "ckpt"), str(tmp_path / "mnt"),
                          BIND], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if run.returncode != 0 and not run.stdout:
        pytest.skip(f"no bind mount here: {run.stderr.strip()[-200:]}")
    assert run.stdout.startswith(f"checkpoint folder {tmp_path / 'mnt'} is in use by another run (pid {proc.pid} on "
                                 "host node7"), run.stdout + run.stderr


def test_one_run_locking_one_folder_by_two_paths_holds_it_once(tmp_path):
    """A run whose checkpoint folder is also reached by another of its paths holds one lock, and frees the folder."""
    paths = _aliases(tmp_path)
    lock = RunLock(["me"])
    lock.acquire(paths["symlinked parent"], "checkpoint folder")
    lock.acquire(paths["dot-dot"], "log folder")
    assert len(lock.held) == 1
    lock.release()
    assert list((tmp_path / "runs" / "ckpt").iterdir()) == []


@pytest.mark.parametrize("planted", ["symlink", "dangling symlink", "hard link", "fifo"])
def test_a_link_or_special_file_at_the_lock_name_is_refused_and_never_written(tmp_path, planted):
    """Someone plants a link at the lock's name aiming at another file: the run refuses in one line naming the lock
    file, and the target keeps its bytes and its link (nothing written, truncated or removed)."""
    folder, target = tmp_path / "ckpt", tmp_path / "victim.txt"
    folder.mkdir()
    target.write_bytes(b"someone else's file\n")
    name = folder / ".lit_grpo.lock"
    if planted == "symlink":
        name.symlink_to(target)
    elif planted == "dangling symlink":
        name.symlink_to(tmp_path / "made_by_the_run")
    elif planted == "hard link":
        os.link(target, name)
    else:
        os.mkfifo(name)
    with pytest.raises(UnsafeLockError) as refused:
        RunLock(["me"]).acquire(folder, "checkpoint folder")
    message = str(refused.value)
    assert message.startswith(f"checkpoint folder {folder}: its lock file {name} ") and "\n" not in message
    assert {"symlink": "is a symbolic link", "dangling symlink": "is a symbolic link",
            "hard link": "has 2 names (hard links)", "fifo": "is not a regular file"}[planted] in message
    assert f"remove it (rm {name})" in message
    assert target.read_bytes() == b"someone else's file\n"
    assert os.path.lexists(name) and not (tmp_path / "made_by_the_run").exists()
    assert os.path.islink(name) == planted.endswith("symlink")


def test_the_cli_refuses_a_symlinked_lock_in_one_error_line(tmp_path):
    """The same through ``python -m lit_grpo fit``: exit 1, one ``error:`` line naming the lock file, the target
    unchanged, no log folder made."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    (tmp_path / "ckpt").mkdir()
    target = tmp_path / "victim.txt"
    target.write_bytes(b"keep me")
    (tmp_path / "ckpt" / ".lit_grpo.lock").symlink_to(target)
    run = subprocess.run([sys.executable, "-m", "lit_grpo", *_args(tmp_path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if "error" in line.lower()]
    assert errors == [f"error: checkpoint folder {tmp_path / 'ckpt'}: its lock file {tmp_path / 'ckpt' / '.lit_grpo.lock'}"
                      " is a symbolic link, which a run never writes through (it would overwrite the file it points "
                      f"to): remove it (rm {tmp_path / 'ckpt' / '.lit_grpo.lock'}) and start the run again"]
    assert target.read_bytes() == b"keep me" and not (tmp_path / "logs").exists()


@pytest.mark.filterwarnings("ignore:flock not supported on this filesystem")
def test_a_filesystem_without_flock_falls_back_to_filelocks_soft_lock(tmp_path, monkeypatch):
    """Where ``flock`` fails with ENOSYS (Lustre mounted noflock, some FUSE mounts), filelock's soft lock (a marker
    naming its pid) holds the folder: a second run is refused naming that pid, and the folder is empty once released.
    ENOSYS is simulated in filelock's one flock call (its module layout differs between releases: skipped where
    that call is not found)."""
    unix = pytest.importorskip("filelock._native._unix")
    if not hasattr(unix, "lock_fd_nonblocking"):
        pytest.skip("this filelock release has no lock_fd_nonblocking")

    def no_flock(fd):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(unix, "lock_fd_nonblocking", no_flock)
    lock = RunLock(["a"])
    lock.acquire(tmp_path / "ckpt", "checkpoint folder")
    with pytest.raises(FolderInUseError, match=f"^checkpoint folder {re.escape(str(tmp_path / 'ckpt'))} is in use by "
                                               f"another run \\(pid {os.getpid()} on host"):
        RunLock(["b"]).acquire(tmp_path / "ckpt", "checkpoint folder")
    lock.release()
    assert list((tmp_path / "ckpt").iterdir()) == []
