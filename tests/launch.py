"""Launching test runs over several processes on loopback only, bounded in time: free ports on 127.0.0.1, torchrun
commands, and :func:`run_together`, which kills every process a launch started when one fails or time runs out."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, port: int, *args: str, nnodes: int = 1, node_rank: int = 0) -> list[str]:
    """The command that launches ``args`` (a script, or ``-m module``) on ``nproc`` processes of node ``node_rank``
    of ``nnodes``, rendezvous on 127.0.0.1:``port``."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--node_rank={node_rank}",
            f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1", f"--master_port={port}", *args]


def run_together(commands: list[list[str]], timeout: float, env: dict[str, str] | None = None) -> list[str]:
    """Run ``commands`` at once from the repository root, each with ``MASTER_ADDR=127.0.0.1`` and a free
    ``MASTER_PORT`` of its own (Lightning's launcher reads them), one torch thread per process. When one fails or
    ``timeout`` seconds pass, every process they started is killed (each runs in a session of its own). Returns
    each command's output (stdout and stderr).

    Raises:
        AssertionError: naming the failed or late command, with the end of its output.
    """
    # PYTHONFAULTHANDLER: a process that dies of a signal (SIGABRT, SIGSEGV) prints where each thread was
    base = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "PYTHONFAULTHANDLER": "1", **(env or {})}
    with tempfile.TemporaryDirectory() as logs:
        outs = [open(Path(logs, f"{i}.log"), "w+") for i in range(len(commands))]
        procs = [subprocess.Popen(c, cwd=ROOT, env={**base, "MASTER_PORT": str(free_port())}, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True) for c, out in zip(commands, outs)]
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                states = [p.poll() for p in procs]
                if all(state == 0 for state in states) or any(state not in (None, 0) for state in states):
                    break
                time.sleep(0.2)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        texts = []
        for out in outs:
            out.seek(0)
            texts.append(out.read())
            out.close()
    killed = -signal.SIGKILL
    failed = [i for i, p in enumerate(procs) if p.returncode not in (0, killed)]
    for i in failed + [i for i, p in enumerate(procs) if p.returncode == killed]:
        why = "" if i in failed else " (killed: another process failed, or time ran out)"
        raise AssertionError(f"{' '.join(commands[i])} -> exit status {procs[i].returncode}{why}\n{texts[i][-4000:]}")
    return texts
