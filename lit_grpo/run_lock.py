"""One live run per folder: a second run started with the same checkpoint or log folder is refused before it
trains, naming the run that holds it, so two runs never delete, overwrite or claim each other's files.

A run holds an exclusive ``flock`` on a lock file beside each folder it writes (``<parent>/.<folder>.lock``; inside
the folder when its parent cannot be written), holding who it is (pid, host, start time, command). The kernel drops
the lock when the process ends, however it ends (kill -9 included), so a lock file left by a dead run is taken over
without guessing; a run that ends normally removes its lock files. On a filesystem without ``flock`` the file's
pid is checked instead (a holder on this host that still runs keeps the folder; another host's is trusted).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

from lit_grpo.errors import UserError

log = logging.getLogger(__name__)


class FolderInUseError(UserError, RuntimeError):
    """Another live run holds a folder this run would write into (names the folder and that run)."""


def lock_path(folder: str | os.PathLike) -> Path:
    """Where the lock of ``folder`` lives: ``<parent>/.<name>.lock``, or ``<folder>/.lit_grpo.lock`` when the parent
    cannot be written. Symlinks are resolved first, so every path to one folder finds the same lock."""
    folder = Path(folder).resolve()
    return folder.parent / f".{folder.name}.lock" if os.access(folder.parent, os.W_OK) else folder / ".lit_grpo.lock"


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
        self.held: dict[Path, int] = {}
        self.created: list[tuple[Path, str]] = []
        """The folders this run made (``(folder, what)``), for :func:`lit_grpo.runs.remove_unused_folders`."""

    def acquire(self, folder: str | os.PathLike, what: str = "folder") -> None:
        """Lock ``folder`` for this run (created if missing); ``what`` names it in messages (``checkpoint folder``).

        Raises:
            FolderInUseError: another live run holds it.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = lock_path(folder)
        if path in self.held:
            return
        for _ in range(20):  # the file may be removed by the run that held it between our open and our lock
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                held_before = self._lock(fd, path, folder, what)
            except BaseException:
                os.close(fd)
                raise
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            os.close(fd)
        else:  # pragma: no cover - a folder whose lock file keeps changing
            raise FolderInUseError(f"{what} {folder}: its lock file {path} keeps changing; is another run starting?")
        if held_before:
            log.warning("%s %s: took over the lock of a run that no longer runs (%s)", what, folder,
                        describe(held_before))
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": self.command}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        self.held[path] = fd

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
        for path, fd in list(self.held.items()):
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    os.unlink(path)
            with contextlib.suppress(OSError):
                os.close(fd)
            del self.held[path]
