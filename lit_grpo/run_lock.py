"""One live run per folder: a second run started with the same checkpoint or log folder is refused before it
trains, naming the run that holds it, so two runs never delete, overwrite or claim each other's files.

A run holds an exclusive ``flock`` on a lock file INSIDE each folder it writes (``<folder>/.lit_grpo.lock``), holding
who it is (pid, host, start time, command). Inside, because the lock must be the folder's, not a path's: every path
to one folder (a symlinked parent, ``..`` segments, a relative path, ``/proc/<pid>/fd/<n>``, a bind mount, an NFS
mount on another host) reaches the same directory and so the same lock file inode, and ``flock`` on one inode
conflicts however it was reached. A lock beside the folder, named after the path, was a different file for each of
those paths. The folder is opened once and the lock file is opened, checked and removed relative to that open
folder, so a path changed while the run holds it cannot point the run at another file.

The lock file is opened with ``O_NOFOLLOW``: a symbolic link planted at its name is refused in one line, never
followed (it would make the run truncate and write the link's target), and so is anything that is not a regular
file of one link (a FIFO, a hard link to another file). The kernel drops the lock when the process ends, however it
ends (kill -9 included), so a lock file left by a dead run is taken over without guessing; a run that ends normally
removes its lock files. On a filesystem without ``flock`` the file's pid is checked instead (a holder on this host
that still runs keeps the folder; another host's is trusted).

Not ``filelock``'s ``FileLock`` (it opens with ``O_NOFOLLOW`` too): the holder's record lives in the locked file
itself, read before locking and written after, and ``filelock`` gives no public descriptor of the locked file to
read or write it through.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import sys
import time
from pathlib import Path

from lit_grpo.errors import UserError

log = logging.getLogger(__name__)


class FolderInUseError(UserError, RuntimeError):
    """Another live run holds a folder this run would write into (names the folder and that run)."""


LOCK_NAME = ".lit_grpo.lock"


class UnsafeLockError(UserError, RuntimeError):
    """The lock file's name holds what no run made (a symbolic link, a FIFO, a hard link): never written through."""


def lock_path(folder: str | os.PathLike) -> Path:
    """Where the lock of ``folder`` lives: ``<folder>/.lit_grpo.lock``, inside the folder, so that every path to the
    folder (symlinks, ``..``, bind mounts) finds the same lock file."""
    return Path(folder) / LOCK_NAME


def open_lock_file(dir_fd: int, path: Path, what: str, folder: Path) -> int | None:
    """Open (or create) the lock file ``LOCK_NAME`` in the open folder ``dir_fd`` for reading and writing, never
    through a symbolic link; ``path`` and ``folder`` name it in messages. None when it went between two looks.

    Raises:
        UnsafeLockError: the name is a symbolic link, not a regular file, or a file with other names (hard links),
            or it cannot be opened.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO there must not hang us
    fix = f"remove it (rm {path}) and start the run again"
    try:
        try:
            return os.open(LOCK_NAME, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dir_fd)
        except FileExistsError:
            fd = os.open(LOCK_NAME, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeLockError(f"{what} {folder}: its lock file {path} is a symbolic link, which a run never "
                                  f"writes through (it would overwrite the file it points to): {fix}") from None
        raise UnsafeLockError(f"{what} {folder}: its lock file {path} cannot be opened ({exc.strerror}): {fix}, "
                              "if the run that made it is gone") from None
    st = os.fstat(fd)
    problem = ("is not a regular file" if not stat.S_ISREG(st.st_mode)
               else f"has {st.st_nlink} names (hard links), so it is another file too" if st.st_nlink != 1 else "")
    if problem:
        os.close(fd)
        raise UnsafeLockError(f"{what} {folder}: its lock file {path} {problem}; a run writes only into a lock file of "
                              f"its own: {fix}")
    return fd


def _holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 1 << 16, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}


def describe(holder: dict) -> str:
    """``pid 123 on host h, started 2025-01-01 12:00:00: python -m lit_grpo fit ...`` (what is known)."""
    parts = [f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"]
    if holder.get("started") is not None:
        parts.append(f"started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder['started']))}")
    text = ", ".join(parts)
    return f"{text}: {holder['command']}" if holder.get("command") else text


def _alive_here(holder: dict) -> bool:
    if holder.get("host") != socket.gethostname():
        return bool(holder)  # another host's run cannot be seen: trusted
    with contextlib.suppress(ProcessLookupError, TypeError, ValueError):
        os.kill(int(holder["pid"]), 0)
        return int(holder["pid"]) != os.getpid()
    return False


class RunLock:
    """The locks a run holds (:meth:`acquire` one per folder, :meth:`release` them all).

    Args:
        command: the run's command line, recorded for a refused run's message.
    """

    def __init__(self, command: list[str] | None = None):
        self.command = " ".join(command if command is not None else sys.argv)
        self.held: dict[tuple[int, int], tuple[int, int]] = {}
        """``(st_dev, st_ino)`` of each folder held -> (the open folder, the open lock file)."""
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
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        key = (os.fstat(dir_fd).st_dev, os.fstat(dir_fd).st_ino)  # the folder itself, by whatever path
        if key in self.held:
            os.close(dir_fd)
            return
        try:
            fd, held_before = self._take(dir_fd, folder, what)
        except BaseException:
            os.close(dir_fd)
            raise
        if held_before:
            log.warning("%s %s: took over the lock of a run that no longer runs (%s)", what, folder,
                        describe(held_before))
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": self.command}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        self.held[key] = (dir_fd, fd)

    def _take(self, dir_fd: int, folder: Path, what: str) -> tuple[int, dict]:
        """The open, locked lock file in the open folder ``dir_fd``, and the record of a dead run it held."""
        path = lock_path(folder)
        for _ in range(20):  # the file may be removed by the run that held it between our open and our lock
            fd = open_lock_file(dir_fd, path, what, folder)
            if fd is None:
                continue
            try:
                held_before = self._lock(fd, path, folder, what)
            except BaseException:
                os.close(fd)
                raise
            if _same_file(dir_fd, fd):
                return fd, held_before
            os.close(fd)
        # never seen: a folder whose lock file keeps changing
        raise FolderInUseError(f"{what} {folder}: its lock file {path} keeps changing; is another run starting?")

    def _lock(self, fd: int, path: Path, folder: Path, what: str) -> dict:
        """Lock the open lock file; returns the record of a dead run it held (empty when none).

        Raises:
            FolderInUseError: a live run holds it.
        """
        holder = _holder(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) or _alive_here(holder):
                raise FolderInUseError(
                    f"{what} {folder} is in use by another run ({describe(holder)}); two runs writing there would "
                    "delete and overwrite each other's files: give this run another name "
                    "(--trainer.logger.init_args.name) or another ModelCheckpoint dirpath, or wait until that run "
                    f"ends (remove {path} if it is gone)") from None
            # a filesystem without flock and no live holder: the record is the lock
        return holder if holder.get("pid") is not None else {}

    def release(self) -> None:
        """Remove the lock files this run holds and drop the locks (safe to call twice)."""
        for key, (dir_fd, fd) in list(self.held.items()):
            with contextlib.suppress(OSError):
                if _same_file(dir_fd, fd):
                    os.unlink(LOCK_NAME, dir_fd=dir_fd)
            for opened in (fd, dir_fd):
                with contextlib.suppress(OSError):
                    os.close(opened)
            del self.held[key]


def _same_file(dir_fd: int, fd: int) -> bool:
    """Whether the name ``LOCK_NAME`` in the open folder ``dir_fd`` is still the open file ``fd`` (not followed)."""
    try:
        return os.stat(LOCK_NAME, dir_fd=dir_fd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False
