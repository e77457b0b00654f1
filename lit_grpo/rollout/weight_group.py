"""Weights from the trainer to a generation server: a two-process group of its own (rank 0 the trainer, rank 1 the
server), apart from any group the training uses, as TRL's vLLM client does. gloo on a CPU, NCCL where the tensors
live on a GPU. The trainer sends the names, dtypes and shapes first (over HTTP, :mod:`lit_grpo.serve`), then each
tensor by broadcast from rank 0, in that order.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
from torch import Tensor


class WeightGroup:
    """A two-process group (rank 0 the trainer, rank 1 the server) over the server's store on ``host:port``, under a
    key ``prefix`` of its own, so that one server store serves one trainer after another. ``store``: the server
    passes its store (kept for its lifetime); the trainer connects a client to ``host:port``. Construction blocks
    until both have joined (``timeout`` seconds at most)."""

    def __init__(self, host: str, port: int, rank: int, timeout: float, prefix: str, device: str = "cpu",
                 store: dist.Store | None = None):
        delta = datetime.timedelta(seconds=timeout)
        self.store = store if store is not None else dist.TCPStore(host, port, None, False, delta)
        keyed = dist.PrefixStore(prefix, self.store)
        if device.startswith("cuda"):
            self.group = dist.ProcessGroupNCCL(keyed, rank, 2)
        else:
            self.group = dist.ProcessGroupGloo(keyed, rank, 2, delta)
        self.rank, self.device = rank, device


    def broadcast(self, tensor: Tensor) -> Tensor:
        """``tensor`` from rank 0 (rank 1 passes an empty tensor of the same shape and dtype and gets it filled)."""
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.group.broadcast([tensor], opts).wait()
        return tensor

    def send(self, weights: list[tuple[str, Tensor]]) -> None:
        """Rank 0: every tensor of ``weights``, in order (contiguous copies on the group's device)."""
        for _, tensor in weights:
            self.broadcast(tensor.detach().to(self.device).contiguous())

    def receive(self, meta: list[tuple[str, str, list[int]]]) -> list[tuple[str, Tensor]]:
        """Rank 1: the tensors ``meta`` (name, dtype name, shape) announces, in order."""
        out = []
        for name, dtype, shape in meta:
            out.append((name, self.broadcast(torch.empty(shape, dtype=getattr(torch, dtype), device=self.device))))
        return out


def describe(weights: list[tuple[str, Tensor]]) -> list[tuple[str, str, list[int]]]:
    """What :meth:`WeightGroup.receive` needs to know first: each weight's name, dtype name and shape."""
    return [(name, str(t.dtype).removeprefix("torch."), list(t.shape)) for name, t in weights]


def server_store(port: int, timeout: float) -> dist.Store:
    """The server's store on ``port`` (every interface), for every trainer's group in turn."""
    return dist.TCPStore("0.0.0.0", port, None, True, datetime.timedelta(seconds=timeout), wait_for_workers=False)
