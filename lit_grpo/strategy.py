"""FSDP2 as a Lightning strategy, and its sharded checkpoints: written atomically, resumed as the same run.

:class:`FSDP2Strategy` is Lightning's :class:`~lightning.pytorch.strategies.ModelParallelStrategy` (FSDP2 through
the module's ``configure_model``: :class:`lit_grpo.fsdp.ShardingHooks`) with every rank of every node in one
data-parallel dimension (no tensor parallelism), on GPUs (NCCL) or CPU processes (gloo).

A sharded checkpoint is a folder (the checkpoint's own name, e.g. ``last.ckpt/``):

- ``.metadata`` and one ``__<rank>_0.distcp`` per rank: torch's distributed checkpoint of the trainable weights (the
  policy module keeps only those, see :meth:`lit_grpo.module.PolicyModule.on_save_checkpoint`) and the optimizer
  states, each rank writing its own shards;
- ``meta.pt``: the rest (loops and loader positions, every rank's random states, callbacks, hyper-parameters) and
  the number of ranks that wrote it.

It is written into a hidden sibling folder (``.last.ckpt.<host>.<pid>.tmp/``,
:func:`lit_grpo.checkpoint_io.atomic_folder`) and exchanged with the folder at the name in one step by rank 0 once
every rank has written its shards, so the folder at the checkpoint's name is always a whole checkpoint: a run killed
while saving leaves the previous one (the next run removes the killed save's folder). Resuming (``--ckpt_path`` on the folder) needs the same number of ranks (each rank
continues its own data shard and random stream) and the same model and trainable set; either difference, or a
single-file checkpoint, is refused in one line before anything loads. Evaluation (``validate`` / ``test`` / ``predict``) reads the weights with any
number of ranks, and :mod:`lit_grpo.export` writes a ``save_pretrained`` folder from it in one process.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed.checkpoint as dcp
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn

from lit_grpo.checkpoint_io import atomic_folder, atomic_write
from lit_grpo.errors import InputError
from lit_grpo.runs import SHARDED_META, check_sharded_checkpoint, check_trainable_weights

META = SHARDED_META


class FSDP2Strategy(ModelParallelStrategy):
    """FSDP2 over every rank (``trainer.devices`` x ``trainer.num_nodes``), sharded checkpoints.

    Args:
        gather_rollout: all-gather the policy once per rollout and keep it whole while sampling (one all-gather
            per FSDP unit per rollout, at the cost of a full copy of the parameters on every rank while sampling);
            ``false``: FSDP2's default, every unit gathered again for every generated token (for a policy whose
            whole parameters do not fit one device next to the sampling cache).
        process_group_backend: ``nccl`` on GPUs, ``gloo`` on CPU processes (the default follows the device).
        timeout: how long a collective waits for the other ranks.
    """

    strategy_name = "fsdp2"

    def __init__(self, gather_rollout: bool = True, process_group_backend: str | None = None,
                 timeout: timedelta | None = default_pg_timeout):
        super().__init__(data_parallel_size="auto", tensor_parallel_size=1, save_distributed_checkpoint=True,
                         process_group_backend=process_group_backend, timeout=timeout)
        self.gather_rollout = gather_rollout

    def setup_environment(self) -> None:
        self._data_parallel_size = self.num_nodes * self.num_processes  # every rank shards (FSDP only)
        super().setup_environment()

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} does not take storage_options")
        save_sharded(checkpoint, Path(self.broadcast(str(filepath))), self.world_size, self.global_rank,
                     self.barrier, self.broadcast)

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict[str, Any]:
        path = Path(self.broadcast(str(checkpoint_path)))
        if not path.is_dir():
            raise InputError(f"checkpoint {path} is a single file, written without sharding: {type(self).__name__} "
                             "reads sharded checkpoint folders; resume it without configs/fsdp.yaml, or export it "
                             f"(python -m lit_grpo.export {path} OUT) and start from the export "
                             "(model.init_args.policy.name_or_path OUT)")
        module = self.lightning_module
        fitting = module.trainer.state.fn == TrainerFn.FITTING
        return load_sharded(path, module, self.optimizers, self.world_size if fitting else None, weights_only)


def save_sharded(checkpoint: dict[str, Any], path: Path, world_size: int, rank: int,
                 barrier: Callable[[], None], broadcast: Callable[[Any], Any] = lambda x: x) -> None:
    """Write ``checkpoint`` as the sharded folder ``path`` (see the module docstring); every rank calls it with its
    own shards in ``checkpoint["state_dict"]`` and ``checkpoint["optimizer_states"]``. Rank 0 makes the temporary
    folder (:func:`lit_grpo.checkpoint_io.atomic_folder`) and ``broadcast`` (rank 0's value to every rank) names it
    to the others; once every rank has written its shards it takes the name in one exchange, so the name always
    holds a whole checkpoint."""
    state = {"state_dict": checkpoint.pop("state_dict")}
    state.update({f"optimizer_{i}": s for i, s in enumerate(checkpoint.pop("optimizer_states", []))})
    with atomic_folder(path) if rank == 0 else contextlib.nullcontext() as made:
        partial = Path(broadcast(str(made) if rank == 0 else None))
        dcp.save(state, checkpoint_id=partial)
        if rank == 0:
            meta = {**checkpoint, "sharded": {"world_size": world_size}}
            atomic_write(partial / META, lambda f: torch.save(meta, f))
    barrier()


def check_compatible(path: Path, meta: dict[str, Any], module: nn.Module, world_size: int | None) -> None:
    """Refuse to load the sharded checkpoint ``path`` (its ``meta.pt`` content ``meta``) into ``module`` when it was
    written by another number of ranks than ``world_size`` (None: any number) or holds other trainable weights
    (names or shapes) than ``module`` trains.

    Raises:
        InputError: one line naming the checkpoint and the difference.
    """
    written = meta.get("sharded", {}).get("world_size")
    if world_size is not None and written != world_size:
        raise InputError(f"checkpoint {path} was written by {written} ranks and this run has {world_size}: a sharded "
                         "checkpoint resumes with as many ranks (each continues its own data shard and random "
                         f"stream); set trainer.devices x trainer.num_nodes to {written}, or export it "
                         f"(python -m lit_grpo.export {path} OUT) and start a new run from the export")
    saved = {k.removeprefix("state_dict."): v.size for k, v in dcp.FileSystemReader(path).read_metadata()
             .state_dict_metadata.items() if k.startswith("state_dict.")}
    trainable = {n: p.shape for n, p in module.named_parameters() if p.requires_grad}
    try:
        check_trainable_weights(saved, set(trainable))
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    for name, shape in trainable.items():
        if tuple(saved[name]) != tuple(shape):
            raise InputError(f"checkpoint {path} holds {name} of shape {tuple(saved[name])}, this run's is "
                             f"{tuple(shape)}: it was written with another model; configure this run as the one "
                             "that wrote it")


def load_sharded(path: Path, module: nn.Module, optimizers: list, world_size: int | None,
                 weights_only: bool | None = None) -> dict[str, Any]:
    """Load the sharded checkpoint ``path`` into the sharded ``module`` and its ``optimizers`` (after
    :func:`check_compatible`); returns the rest of the checkpoint for Lightning to restore (loops, callbacks,
    schedulers, random states), its ``state_dict`` holding the loaded weights."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict, set_model_state_dict,
                                                         set_optimizer_state_dict)

    check_sharded_checkpoint(path)
    meta = torch.load(path / META, weights_only=weights_only)
    check_compatible(path, meta, module, world_size)
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    weights = {k: v for k, v in get_model_state_dict(module).items() if k in trainable}
    dcp.load({"state_dict": weights}, checkpoint_id=path)
    set_model_state_dict(module, weights, options=StateDictOptions(strict=False))
    for i, optimizer in enumerate(optimizers):
        state = {f"optimizer_{i}": get_optimizer_state_dict(module, optimizer)}
        dcp.load(state, checkpoint_id=path)
        set_optimizer_state_dict(module, optimizer, optim_state_dict=state[f"optimizer_{i}"])
    meta["state_dict"] = weights
    return meta
