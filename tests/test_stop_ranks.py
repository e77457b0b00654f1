"""A stop signal to one rank of a multi-rank run stops the whole run together: every rank finishes the step, the
checkpoint is written, the resume command is printed once and every process exits 128 + the signal."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from launch import free_port
from tiny_runs import fit_args

ROOT = Path(__file__).parents[1]

# runs a command as a subreaper (the ranks Lightning starts become its children when their parent ends) and prints
# every process it reaped, pid: exit status, as JSON
REAPER = """
import ctypes, json, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
subprocess.Popen(sys.argv[1:])
codes = {}
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    codes[pid] = os.waitstatus_to_exitcode(status)
print(json.dumps(codes))
"""


class SignalRankAt(L.Callback):
    """Each rank writes ``rank pid`` to ``ranks``; global rank ``rank`` sends ``signum`` to itself, and to no other
    process, at the start of training step ``step``."""

    def __init__(self, ranks: str, rank: int = 1, step: int = 2, signum: int = int(signal.SIGTERM)):
        self.ranks, self.rank, self.step, self.signum = ranks, rank, step, signum

    def on_train_start(self, trainer, pl_module):
        with open(self.ranks, "a") as f:
            f.write(f"{trainer.global_rank} {os.getpid()}\n")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_rank == self.rank and trainer.global_step + 1 == self.step:
            os.kill(os.getpid(), self.signum)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
@pytest.mark.parametrize("hangs", [False, True], ids=["step-finishes", "reward-hangs-on-both-ranks"])
def test_sigterm_to_rank_1_alone_stops_both_ranks_with_a_checkpoint_and_143(tmp_path, hangs):
    """Rank 1 alone gets SIGTERM at the start of step 2 of 100 (DDP over 2 CPU processes); before the fix both
    processes hung in a collective at 0% CPU. When the step finishes: both ranks finish step 2, last.ckpt holds step 2
    and the resume command is printed once. When a reward hangs in step 2 on both ranks (2 s wait): rank 0, which got
    no signal, abandons its step too, and last.ckpt holds step 1 (saved after it). Either way both processes exit
    143, within 80 s of the launch."""
    ranks = tmp_path / "ranks.txt"
    signal_at = {"class_path": "test_stop_ranks.SignalRankAt", "init_args": {"ranks": str(ranks)}}
    hang = [{"class_path": "test_resume.HangAt", "init_args": {"step": 2}}] if hangs else []
    # the reward by its dotted path: the name it registers is known only once test_resume is imported, and the
    # parser checks reward names before it imports the callbacks' classes
    rewards = {"model.init_args.rewards": [{"name": "binary", "weight": 1.0},
                                           {"name": "test_resume._hangs_when_armed", "alias": "hangs_when_armed",
                                            "weight": 0.0}]} if hangs else {}
    args = fit_args(tmp_path, callbacks=[signal_at, *hang], **{
        "trainer.max_steps": 100, "trainer.devices": 2, "trainer.strategy": "ddp",
        "data.train.generate.num": 400}, **rewards)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "OMP_NUM_THREADS": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "LIT_GRPO_STOP_GRACE_S": "2" if hangs else "30",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", REAPER, sys.executable, "-m", "lit_grpo", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    took = time.monotonic() - start
    pids = dict(line.split() for line in ranks.read_text().splitlines())
    codes = json.loads(out.strip().splitlines()[-1])
    assert {rank: codes.get(pid) for rank, pid in pids.items()} == {"0": 143, "1": 143}, err[-3000:]
    assert took < 80  # about 23 s alone, 46 s beside another test on 2 cores
    last = tmp_path / "ckpt" / "last.ckpt"
    step = 1 if hangs else 2
    assert torch.load(last, weights_only=False, map_location="cpu")["global_step"] == step
    if hangs:
        assert "Stopped by SIGTERM: the step after step 1 did not finish (within 2 s" in err
        assert err.count(f"The newest checkpoint is {last}.") == 1
        return
    assert err.count("Resume the run") == 1
    assert f"Stopped by SIGTERM after step 2 of max_steps 100; checkpoint written: {last}" in err
    resume = shlex.split(err.split("Resume the run", 1)[1].splitlines()[1])
    assert resume == ["python", "-m", "lit_grpo", *args, "--ckpt_path", str(last)]
