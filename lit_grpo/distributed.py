"""The collectives a step and an evaluation need; identity when torch.distributed is not initialised. And a rank's
life: :func:`end_with_launcher` (it never outlives the process that launched it), :func:`end_process_groups` (its
process groups end before the interpreter does)."""

from __future__ import annotations

import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from lit_grpo.checkpoint_io import process_alive


def world() -> tuple[int, int]:
    """``(rank, world_size)``; ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_gather_cat(x: Tensor) -> Tensor:
    """Concatenate ``x`` (same shape on every rank) along dim 0 in rank order."""
    _, size = world()
    if size == 1:  # one process (tests, notebooks): no process group
        return x
    # all_gather needs one shape on every rank: a caller with unequal counts pads first (PolicyPasses.entropy_mask)
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def all_reduce_sum(x: Tensor) -> Tensor:
    """Sum of ``x`` over ranks (a copy; ``x`` is untouched)."""
    _, size = world()
    if size == 1:
        return x.clone()
    y = x.clone()  # a copy on one process too: callers may change the result freely
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    return y


def gather_objects(items: list) -> list:
    """Every rank's list concatenated in rank order (picklable items); the list itself outside a process group."""
    _, size = world()
    if size == 1:
        return list(items)
    parts: list = [None] * size
    dist.all_gather_object(parts, list(items))
    return [x for part in parts for x in part]
# pickled: items of any type and size, at the cost of a round trip through pickle


def weighted_mean(values: dict[str, float], weight: float) -> dict[str, float]:
    """Each value's mean over ranks weighted by this rank's ``weight`` (e.g. its token count; 1.0 for a plain
    mean); 0 where every weight is 0. The values themselves outside a process group."""
    _, size = world()
    if size == 1 or not values:
        return dict(values)
    # float64: token counts and weighted sums stay exact beyond float32's 2**24
    sums = all_reduce_sum(torch.tensor([*(v * weight for v in values.values()), weight], dtype=torch.float64,
                                       device=_device()))
    total = sums[-1].item()
    return {k: (sums[i].item() / total if total > 0 else 0.0) for i, k in enumerate(values)}


# NCCL reduces only CUDA tensors; gloo takes CPU ones
def _device() -> torch.device:
    """Where this rank's collectives run: its GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def clip_grad_norm(root: nn.Module | None, parameters: list[nn.Parameter], max_norm: float) -> Tensor:
    """Clip gradients to a total 2-norm of ``max_norm`` and return the norm before clipping (a plain tensor).

    ``root``: the strategy's wrapped model; a wrapper that clips its own gradient shards (a ``clip_grad_norm_``
    method: torch's first FSDP) is asked to. Otherwise torch's function over ``parameters`` is exact: over whole
    gradients (one device, DDP) and over FSDP2's sharded ones alike (DTensors: each shard's norm is reduced over
    every rank before the clip coefficient is taken, so every rank clips by the same total norm).
    """
    if root is not None and callable(getattr(root, "clip_grad_norm_", None)):
        return root.clip_grad_norm_(max_norm)
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


LAUNCHER_PID = "LIT_GRPO_LAUNCHER_PID"
"""Set by a CLI process that is no launched rank to its own pid: the ranks Lightning's launcher starts from it inherit
it, and one whose parent is not that process at its start (it was reparented: its launcher failed before it got
going) stops at once."""


def end_with_launcher(poll_s: float = 0.5) -> bool:
    """In a rank that a launcher started (``LOCAL_RANK`` set: Lightning's launcher starts ranks 1.. as children of rank
    0, torchrun starts every rank), end the process with status 1 and one line as soon as its launcher has ended;
    in any other process, record its pid for the ranks it may launch (:data:`LAUNCHER_PID`).

    Lightning's launcher ends the others when a child rank fails, but a rank 0 that fails (a busy ``MASTER_PORT``, an
    error before training) or is killed leaves its children waiting for it in the process group's rendezvous or a
    collective, for the group's timeout (30 min) or for ever. A daemon thread checks the parent's pid every
    ``poll_s`` s. Returns whether it watches.
    """
    if not os.environ.get("LOCAL_RANK"):
        os.environ[LAUNCHER_PID] = str(os.getpid())
        return False
    parent, launcher = os.getppid(), int(os.environ.get(LAUNCHER_PID) or 0)
    if launcher and parent != launcher and not process_alive(launcher):  # the CLI process that started this rank ended
        parent = launcher                                       # before the rank got going (it was re-parented)
    elif parent <= 1:
        return False
    # else the parent that started it: that CLI process, or a launcher of another kind (torchrun's agent, even when
    # started from a process that had LAUNCHER_PID set: a test, an experiment runner)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        print(f"error: rank {os.environ.get('RANK', os.environ['LOCAL_RANK'])} (pid {os.getpid()}) stops: the process "
              f"that launched it (pid {parent}) has ended; its output says why", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, name="end_with_launcher", daemon=True).start()
    return True


def end_process_groups() -> None:
    """Destroy this process's process groups, if any: the command line registers it to run at exit
    (:func:`lit_grpo.cli.main`). Lightning does so only for NCCL; a gloo group (CPU runs, and the signal watch's
    group of :mod:`lit_grpo.runs` on any device) left to the interpreter's end aborted a finished rank now and then
    (SIGABRT, "terminate called without an active exception", after its last checkpoint was written)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
