"""A launched rank ends with the process that launched it (lit_grpo.distributed.end_with_launcher), and only then:
a rank whose parent is another launcher (torchrun's agent) started from a process that set LIT_GRPO_LAUNCHER_PID
(a test, an experiment runner) keeps running while that parent lives."""

import os
import subprocess
import sys
import time
from pathlib import Path

from lit_grpo.distributed import LAUNCHER_PID

ROOT = Path(__file__).parents[1]

RANK = ("from lit_grpo.distributed import end_with_launcher; import time; print(end_with_launcher(0.05), flush=True); "
        "time.sleep(1.5); print('still running', flush=True)")


def _rank(launcher: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOCAL_RANK": "0", LAUNCHER_PID: str(launcher)}
    return subprocess.run([sys.executable, "-c", RANK], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_a_rank_of_another_launcher_keeps_running_while_its_parent_lives():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # alive, not the rank's parent
    try:
        done = _rank(other.pid)
    finally:
        other.kill()
        other.wait()
    assert (done.returncode, done.stdout, done.stderr) == (0, "True\nstill running\n", "")


def test_a_rank_whose_launcher_has_ended_stops_at_once_in_one_line():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    start = time.monotonic()
    done = _rank(gone.pid)
    assert done.returncode == 1 and "still running" not in done.stdout and time.monotonic() - start < 1.5 + 10
    assert done.stderr.splitlines() == [f"error: rank 0 (pid {done.stderr.split('(pid ')[1].split(')')[0]}) stops: the "
                                        f"process that launched it (pid {gone.pid}) has ended; its output says why"]


EXITS = """
import atexit, sys, tempfile
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
watch = dist.new_group(backend="gloo")  # as lit_grpo.runs' signal watch makes beside the default group
atexit.register(lambda: print("left at exit:", dist.is_initialized(), flush=True))  # runs after the CLI's own
sys.argv = ["lit_grpo", "--help"]
from lit_grpo.cli import main
main()
"""


def test_the_command_line_destroys_its_process_groups_before_the_interpreter_ends():
    """Lightning destroys only an NCCL group at exit; a gloo group left to the interpreter's end aborted a finished
    rank now and then (SIGABRT, 'terminate called without an active exception'). The command line's main registers
    lit_grpo.distributed.end_process_groups: after it ran, no group is left."""
    done = subprocess.run([sys.executable, "-c", EXITS], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "left at exit: False"
