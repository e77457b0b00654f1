"""The collectives a step and an evaluation need; identity when torch.distributed is not initialised."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def world() -> tuple[int, int]:
    """``(rank, world_size)``; ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_gather_cat(x: Tensor) -> Tensor:
    """Concatenate ``x`` (same shape on every rank) along dim 0 in rank order."""
    _, size = world()
    if size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def all_reduce_sum(x: Tensor) -> Tensor:
    """Sum of ``x`` over ranks (a copy; ``x`` is untouched)."""
    _, size = world()
    if size == 1:
        return x.clone()
    y = x.clone()
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
