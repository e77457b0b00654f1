"""Checkpoints written atomically where they live: a kill, a full disk or a failing disk never leaves a
checkpoint cut short or takes the previous one with it.

Lightning's own save goes through fsspec, which writes the whole file into ``$TMPDIR`` and then moves it; when the
checkpoint folder is on another filesystem (scratch, NFS: the usual cluster layout) the move is a copy that first
truncates the old file, so a kill during it leaves a cut ``last.ckpt`` and no earlier one, and a full ``$TMPDIR``
fails every save whatever room the checkpoint folder has. Here:

- :class:`AtomicCheckpointIO` (a Lightning ``CheckpointIO`` plugin; the CLI installs it on every run, and
  ``Trainer(plugins=[AtomicCheckpointIO()])`` uses it from Python) writes each checkpoint into a temporary file
  beside its final name (:func:`temporary_name`), flushes and fsyncs it, renames it into place (``os.replace``,
  atomic within a filesystem) and fsyncs the folder. ``$TMPDIR`` plays no part. A save that fails removes its
  temporary file and raises :class:`~lit_grpo.errors.CheckpointWriteError` naming the file, the folder, the
  reason and the room left there; the file of that name from an earlier save is untouched.
- :func:`atomic_folder`: the same for a checkpoint that is a folder (sharded checkpoints: one file per rank): the
  writer fills a temporary sibling folder, which then takes the final name in one exchange.
- :func:`temporary_files` / :func:`remove_leftovers`: what a killed save left behind (a temporary file or folder of
  a process of this host that no longer runs), removed when the next run starts.
- :func:`check_lightning_checkpoint`: a ``--ckpt_path`` file that is a whole ``torch.save`` archive but not a
  checkpoint a run wrote (a bare state dict) is refused naming what it holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lit_grpo.errors import CheckpointWriteError, InputError

log = logging.getLogger(__name__)

_HOST = socket.gethostname().replace("/", "_")


def temporary_name(path: str | os.PathLike) -> Path:
    """The temporary file (or folder) a save of ``path`` writes first: ``.<name>.<host>.<pid>.tmp`` beside it, so the
    rename stays within one filesystem and a leftover names the process that made it."""
    path = Path(path)
    return path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.tmp")


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def temporary_files(folder: str | os.PathLike) -> list[Path]:
    """The leftovers of interrupted saves in ``folder``: temporary files and folders (:func:`temporary_name`) made on
    this host by a process that no longer runs. Another host's are not judged (its processes cannot be seen)."""
    folder = Path(folder)
    pattern = re.compile(rf"^\..+\.{re.escape(_HOST)}\.(\d+)\.tmp$")
    found = []
    with contextlib.suppress(OSError):
        for entry in sorted(folder.iterdir()):
            m = pattern.match(entry.name)
            if m and not process_alive(int(m.group(1))):
                found.append(entry)
    return found


def _restore_moved_aside(found: list[Path]) -> list[Path]:
    """Put back a previous checkpoint that :func:`atomic_folder` moved aside (``.<name>.old.<host>.<pid>.tmp``, where
    the filesystem cannot exchange two names) when the save was killed before the new one took ``<name>``: the name
    is free, so the old checkpoint is the last whole one. Returns the entries left to remove."""
    pattern = re.compile(rf"^\.(.+)\.old\.{re.escape(_HOST)}\.\d+\.tmp$")
    left = []
    for entry in found:
        m = pattern.match(entry.name)
        if m and not entry.with_name(m.group(1)).exists():
            os.replace(entry, entry.with_name(m.group(1)))
            log.info("restored %s from %s, moved aside by a save that was interrupted", m.group(1), entry)
        else:
            left.append(entry)
    return left


def remove_leftovers(folder: str | os.PathLike) -> list[Path]:
    """Remove :func:`temporary_files` of ``folder`` (logged with the room they took), after putting back a previous
    checkpoint an interrupted save had moved aside (:func:`_restore_moved_aside`); returns the removed entries."""
    found = _restore_moved_aside(temporary_files(folder))
    for entry in found:
        size = _tree_size(entry)
        _remove_entry(entry)
        log.info("removed %s (%s), left by a save that was interrupted", entry, human_size(size))
    return found


def _remove_entry(path: Path) -> None:
    """Remove a file, a link (never what it points to) or a folder tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def human_size(n: int | float) -> str:
    """``1387503`` -> ``"1.4 MB"`` (decimal units)."""
    for unit in ("bytes", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError  # pragma: no cover


def free_space(folder: str | os.PathLike) -> int | None:
    """Bytes an unprivileged writer can still write in ``folder`` (``None`` when it cannot be asked)."""
    try:
        stat = os.statvfs(folder)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def _root_oserror(exc: BaseException) -> OSError | None:
    """The ``OSError`` under ``exc`` (torch's zip writer reports a failed write as a ``RuntimeError``)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def write_failed(path: str | os.PathLike, exc: BaseException, existed: bool) -> CheckpointWriteError:
    """The one-line error of a save of ``path`` that failed with ``exc``: the file, the reason, the room left in its
    folder, what to do, and whether an earlier file of that name is still there."""
    path = Path(path)
    root = _root_oserror(exc)
    reason = (root.strerror or str(root)) if root is not None else f"{type(exc).__name__}: {exc}"
    free = free_space(path.parent)
    room = f"; {human_size(free)} free in {path.parent}" if free is not None else f" in {path.parent}"
    kept = f"; the earlier {path.name} there is intact" if existed else ""
    code = root.errno if root is not None else None
    fix = ("make room there" if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else
           "make it writable" if code in (errno.EACCES, errno.EPERM, errno.EROFS) else "check that disk")
    message = " ".join(f"checkpoint {path} could not be written ({reason}{room}): {fix} or point the "
                       f"ModelCheckpoint's dirpath at another disk{kept}".split())
    error = CheckpointWriteError(message)
    error.errno = root.errno if root is not None else errno.EIO
    return error


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (some filesystems refuse to fsync a folder: then it is left as it is)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None]) -> None:
    """Call ``write(f)`` on a binary file opened at :func:`temporary_name`, then flush, fsync and rename it to ``path``.

    Raises:
        CheckpointWriteError: the write, flush, fsync or rename failed (the temporary file is removed; a file at
        ``path`` from before is untouched).
    """
    path = Path(path)
    part, existed = temporary_name(path), path.exists()
    try:
        with open(part, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            part.unlink()
        if isinstance(exc, Exception):
            raise write_failed(path, exc, existed) from None
        raise
    _fsync_folder(path.parent)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unavailable.

    Kept by hand (ctypes) because neither Python nor torch.distributed.checkpoint nor Lightning replaces a non-empty
    folder in one step: two renames leave the name empty between them, and a run killed there finds no checkpoint at
    ``last.ckpt`` (``tests/test_ranks_and_nodes.py`` kills a save exactly there)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """A checkpoint that is a folder, written atomically: yields an empty temporary sibling folder to fill; when the
    block ends without an error it takes the name ``path`` (exchanged with an existing folder in one step where the
    system can, else the old one is moved aside first), and the old folder is removed. On an error the temporary
    folder is removed and ``path`` is left as it was. In a multi-process save, one process (rank 0) holds the block and
    the others write into the folder it yields before it ends.

    Raises:
        CheckpointWriteError: creating or renaming the folder failed; the writer's own error as it is.
    """
    path = Path(path)
    part = temporary_name(path)
    shutil.rmtree(part, ignore_errors=True)
    try:
        part.mkdir(parents=True)
        yield part
        if os.path.lexists(path) and _exchange(part, path):  # one step: the name is never empty
            _remove_entry(part)  # now the old folder (or a single file that held the name)
        else:
            old = path.with_name(f".{path.name}.old.{_HOST}.{os.getpid()}.tmp")
            if os.path.lexists(path):  # a link at the name (save_last="link") is moved, never followed
                os.replace(path, old)
            os.replace(part, path)
            _remove_entry(old)
    except BaseException as exc:
        shutil.rmtree(part, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, CheckpointWriteError):
            raise write_failed(path, exc, path.exists()) from None
        raise
    _fsync_folder(path.parent)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` whose local saves are atomic where the file lives (:func:`atomic_write`);
    remote URLs (``s3://``...) are left to Lightning's fsspec path. Loading and removing are Lightning's."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        if "://" in str(path) and not str(path).startswith("file://"):
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"storage_options are not supported by {type(self).__name__}")
        path = Path(str(path).removeprefix("file://"))
        try:
            get_filesystem(str(path)).makedirs(str(path.parent), exist_ok=True)
        except OSError as exc:
            raise write_failed(path, exc, False) from None
        atomic_write(path, lambda f: torch.save(checkpoint, f))


def check_lightning_checkpoint(path: Path) -> None:
    """Refuse a whole ``torch.save`` file that is not a checkpoint a run wrote (a model's bare state dict, a
    ``pytorch_model.bin``): read without its tensors (``mmap``), it must hold ``state_dict`` and Lightning's version.

    Raises:
        InputError: naming the file and what it holds instead.
    """
    try:
        content = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as exc:  # unpickling fails in many ways
        raise InputError(f"checkpoint {path} cannot be loaded ({type(exc).__name__}: {exc}); use a checkpoint a run "
                         "wrote (last.ckpt, step=N.ckpt)") from None
    if isinstance(content, dict) and {"state_dict", "pytorch-lightning_version"} <= set(content):
        return
    what = (f"a dict of {len(content)} entries such as {sorted(map(str, content))[:2]}" if isinstance(content, dict)
            else f"a {type(content).__name__}")
    raise InputError(f"checkpoint {path} is not a checkpoint a run wrote: this torch.save file holds {what}, without "
                     "Lightning's state_dict and loop state; give --ckpt_path a last.ckpt or step=N.ckpt, or start "
                     "from saved weights with model.init_args.policy.name_or_path (a model folder)")


def with_atomic_io(plugins: Any) -> list:
    """``plugins`` (a list, one plugin or None) plus an :class:`AtomicCheckpointIO`, unless a ``CheckpointIO`` is
    already among them."""
    from lightning.fabric.plugins import CheckpointIO

    plugins = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    if any(isinstance(p, CheckpointIO) for p in plugins):
        return plugins
    return [*plugins, AtomicCheckpointIO()]
