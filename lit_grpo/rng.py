"""RNG states as plain tensors and tuples, so checkpoints load with ``torch.load(weights_only=True)``, and one
random stream per rank.

Every rank of a multi-process run samples from its own stream, ``seed + rank`` (TRL's device-specific
seeding): ranks seeded alike would draw the same uniforms for different prompts. Model building (LoRA
initialisation, the reference copy) happens before, under the common seed, so it is identical on every rank.
A checkpoint keeps every rank's state and each rank resumes its own.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn

from lit_grpo import distributed as D


def collect_rng_states() -> dict[str, Any]:
    """Python, NumPy, torch CPU and CUDA generator states (NumPy's key array stored as a tensor)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`collect_rng_states` saved."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def run_seed() -> int:
    """The run's seed, the same on every rank: Lightning's global seed (``PL_GLOBAL_SEED``), else torch's initial seed."""
    return int(os.environ.get("PL_GLOBAL_SEED", torch.initial_seed()))


def seed_rank_stream(seed: int | None = None) -> int:
    """Seed Python, NumPy and torch (every device) with ``seed + rank`` in a multi-process run; a single process
    keeps its stream. ``seed`` None: Lightning's global seed (``PL_GLOBAL_SEED``), else torch's initial seed.
    Returns the seed this rank now draws from."""
    rank, world = D.world()
    if seed is None:
        seed = run_seed()
    if world == 1:
        return seed
    value = (seed + rank) % 2 ** 32
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)
    return value


def gather_rank_rng_states() -> list[dict[str, Any]]:
    """Every rank's :func:`collect_rng_states`, in rank order (a collective: every rank calls it, as every rank
    builds the checkpoint that rank 0 writes)."""
    return D.gather_objects([collect_rng_states()])


def restore_rank_rng_states(saved: list[dict[str, Any]] | dict[str, Any]) -> None:
    """This rank's own states from :func:`gather_rank_rng_states`' list (a single dict, from an older checkpoint,
    is restored as it is). A rank the checkpoint has no state for (more ranks than when it was written) starts
    its stream from the seed and its rank, with a warning."""
    if isinstance(saved, dict):
        set_rng_states(saved)
        return
    rank, _ = D.world()
    if rank < len(saved):
        set_rng_states(saved[rank])
        return
    rank_zero_warn(f"the checkpoint holds random states for {len(saved)} ranks; ranks from {len(saved)} on start "
                   "their streams from the seed and their rank")
    seed_rank_stream()
