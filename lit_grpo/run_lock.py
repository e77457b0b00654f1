"""One live run per folder: a second run started with the same checkpoint or log folder is refused before it
trains, naming the run that holds it, so two runs never delete, overwrite or claim each other's files.

The lock is ``filelock``'s (an exclusive ``flock``) on ``<folder>/.lit_grpo.lock``, into which the holder writes
its pid, host, start time and command (JSON). Inside the folder, because the lock must be the folder's, not a
path's: every path to it (a symlinked parent, ``..``, ``/proc/<pid>/fd/<n>``, a bind mount) reaches one inode.
``flock`` needs no liveness check of ours: the kernel drops it when its process ends, however it ends (kill -9
included), so a dead run's file blocks nobody. Where a filesystem has no ``flock`` (Lustre ``noflock``, some FUSE
mounts) filelock's soft lock is used: a marker whose process filelock checks on this host.

filelock opens the file with ``O_NOFOLLOW`` but takes any file there as its lock (a hard link to another file, a
FIFO) and our record would be written into it: the name is checked before (a readable message) and the opened file
again once locked (nothing swapped in between is written to).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import stat
import sys
import time
from pathlib import Path

from filelock import FileLock, Timeout

from lit_grpo.errors import UserError

log = logging.getLogger(__name__)

LOCK_NAME = ".lit_grpo.lock"


class FolderInUseError(UserError, RuntimeError):
    """Another live run holds a folder this run would write into (names the folder and that run)."""


class UnsafeLockError(UserError, RuntimeError):
    """The lock file's name holds what no run made (a symbolic link, a FIFO, a hard link): never written through."""


def lock_path(folder: str | os.PathLike) -> Path:
    """Where the lock of ``folder`` lives: ``<folder>/.lit_grpo.lock``, inside the folder, so that every path to the
    folder (symlinks, ``..``, bind mounts) finds the same lock file."""
    return Path(folder) / LOCK_NAME


def _refuse_unsafe(st: os.stat_result, path: Path, what: str, folder: Path) -> None:
    """Refuse a lock file ``st`` (its ``lstat`` or ``fstat``) that a run did not make: a symbolic link, anything but a
    regular file, a file with other names (hard links)."""
    fix = f"remove it (rm {path}) and start the run again"
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeLockError(f"{what} {folder}: its lock file {path} is a symbolic link, which a run never writes "
                              f"through (it would overwrite the file it points to): {fix}")
    problem = ("is not a regular file" if not stat.S_ISREG(st.st_mode)
               else f"has {st.st_nlink} names (hard links), so it is another file too" if st.st_nlink != 1 else "")
    if problem:
        raise UnsafeLockError(f"{what} {folder}: its lock file {path} {problem}; a run writes only into a lock file of "
                              f"its own: {fix}")


def _parse(data: bytes) -> dict:
    with contextlib.suppress(ValueError):
        record = json.loads(data.decode() or "{}")
        return record if isinstance(record, dict) else {}
    return {}  # not a record of ours (filelock's soft marker, a half-written one)


def _record(path: Path) -> dict:
    """The holder's record in the lock file ``path`` ({} when none), read without following a link or waiting on a
    FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        return _parse(os.read(fd, 1 << 16))
    except OSError:
        return {}
    finally:
        os.close(fd)


def describe(holder: dict) -> str:
    """``pid 123 on host h, started 2025-01-01 12:00:00: python -m lit_grpo fit ...`` (what is known)."""
    parts = [f"pid {holder.get('pid') or '?'} on host {holder.get('host', '?')}"]
    if holder.get("started") is not None:
        parts.append(f"started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder['started']))}")
    text = ", ".join(parts)
    return f"{text}: {holder['command']}" if holder.get("command") else text


class RunLock:
    """The locks a run holds (:meth:`acquire` one per folder, :meth:`release` them all).

    Args:
        command: the run's command line, recorded for a refused run's message.
    """

    def __init__(self, command: list[str] | None = None):
        self.command = " ".join(command if command is not None else sys.argv)
        self.held: dict[tuple[int, int], tuple[FileLock, Path, list[os.stat_result]]] = {}
        """``(st_dev, st_ino)`` of each folder held -> (its lock, the lock file's real path, the file we locked)."""
        self.created: list[tuple[Path, str]] = []
        """The folders this run made (``(folder, what)``), for :func:`lit_grpo.runs.remove_unused_folders`."""

    def acquire(self, folder: str | os.PathLike, what: str = "folder") -> None:
        """Lock ``folder`` for this run (created if missing); ``what`` names it in messages (``checkpoint folder``).

        Raises:
            FolderInUseError: another live run holds it.
            UnsafeLockError: its lock file's name holds a symbolic link or another file no run made.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        real = Path(os.path.realpath(folder)) / LOCK_NAME  # one name whatever path reached the folder
        st = os.stat(real.parent)
        if (st.st_dev, st.st_ino) in self.held:  # this run reached it by another path already
            return
        path = lock_path(folder)  # as the user named it, for messages
        with contextlib.suppress(FileNotFoundError):
            _refuse_unsafe(os.lstat(real), path, what, folder)
        before, locked = {}, []
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": self.command}

        def write_record(fd: int) -> None:  # filelock calls it with the locked file; a raise undoes the lock
            locked.append(os.fstat(fd))
            _refuse_unsafe(locked[0], path, what, folder)  # the file opened, whatever the name showed before
            before.update(_parse(os.pread(fd, 1 << 16, 0)))  # a dead run's record: it held the lock last
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)

        try:
            lock = self._take(FileLock(real, blocking=False, on_acquired=write_record), real, path, what, folder)
        except OSError as exc:
            if exc.errno != errno.ENOSYS:
                raise UnsafeLockError(f"{what} {folder}: its lock file {path} cannot be opened ({exc.strerror or exc})"
                                      f": remove it (rm {path}) and start the run again, if the run that made it is "
                                      "gone") from None
            # no flock here: the empty file that try made would read as a marker with no owner to filelock's soft lock
            with contextlib.suppress(OSError):
                if os.lstat(real).st_size == 0:
                    os.unlink(real)
            lock, locked = self._take(FileLock(real, blocking=False), real, path, what, folder), []
        if before.get("pid") is not None:
            log.warning("%s %s: took over the lock of a run that no longer runs (%s)", what, folder, describe(before))
        self.held[(st.st_dev, st.st_ino)] = (lock, real, locked)

    @staticmethod
    def _take(lock: FileLock, real: Path, path: Path, what: str, folder: Path) -> FileLock:
        """``lock`` acquired.

        Raises:
            FolderInUseError: another live run holds it (named by its record, or the soft lock's pid).
        """
        try:
            lock.acquire()
        except Timeout:
            holder = _record(real) or {"pid": getattr(lock, "pid", None)}  # pid: the soft lock's marker only
            raise FolderInUseError(
                f"{what} {folder} is in use by another run ({describe(holder)}); two runs writing there would "
                "delete and overwrite each other's files: give this run another name "
                "(--trainer.logger.init_args.name) or another ModelCheckpoint dirpath, or wait until that run "
                f"ends (remove {path} if it is gone)") from None
        return lock

    def release(self) -> None:
        """Remove the lock files this run holds and drop the locks (safe to call twice)."""
        for key, (lock, real, locked) in list(self.held.items()):
            # removed while still locked, and only if the name is still our file: a run that opened it meanwhile
            # finds it gone once it gets the lock, and filelock does not count that as holding it
            with contextlib.suppress(OSError):
                if locked and os.path.samestat(os.lstat(real), locked[0]):
                    os.unlink(real)
            with contextlib.suppress(OSError):
                lock.release()  # the soft lock removes its marker itself
            del self.held[key]
