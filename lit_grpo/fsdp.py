"""The policy sharded with FSDP2 (torch's ``fully_shard``), for policies too large to copy on every GPU.

:func:`shard_policy` shards every transformer layer of the model (the language model's decoder layers and the vision
tower's encoder layers, as transformers checkpoints them: :func:`layer_classes`) as one FSDP unit each, and the rest
(embeddings, head, final norm, projector, vision embeddings) as the root unit: :class:`ShardedPolicy`, a wrapper that
runs a function of the policy inside its own ``forward``. The rollout engines call the language model, its
embeddings and its head directly (the shared prefix), not only the model's ``forward``; running every engine call
through the wrapper's ``forward`` (:class:`ShardedEngine`) is what makes FSDP2 all-gather the root's parameters
before it and reduce-scatter their gradients after the backward, as it does for a module's own forward.

A sampling step touches every layer once per token: left to itself FSDP2 would all-gather every layer again for each
token. :func:`gathered` all-gathers each unit once for the whole rollout and frees the gathered parameters after it
(the cost: one full copy of the parameters on every rank while sampling; ``benchmarks/memory.py`` gives the figure).

:class:`ShardingHooks` is the module's ``configure_model``: under :class:`lit_grpo.strategy.FSDP2Strategy` it shards the
policy and, for full fine-tuning with ``beta > 0``, the frozen reference copy (LoRA's reference is the policy with its
adapter off: nothing more to shard). Under any other strategy it does nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ClassVar, Iterator

import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor
from transformers.modeling_layers import GradientCheckpointingLayer

from lit_grpo.compat import is_view, tree_map
from lit_grpo.errors import UserError
from lit_grpo.rollout.engine import Rollout, RolloutEngine

def layer_classes(model: nn.Module) -> set[type[nn.Module]]:
    """The classes of ``model``'s transformer layers (those transformers checkpoints), e.g. Granite's decoder layer
    and SigLIP's encoder layer.

    Raises:
        ValueError: when ``model`` has none.
    """
    found = {type(m) for m in model.modules() if isinstance(m, GradientCheckpointingLayer)}
    if not found:
        raise ValueError(f"{type(model).__name__} has no transformers layers to shard")
    return found


class ShardedPolicy(nn.Module):
    """The FSDP root unit: holds the policy, and runs ``fn(policy, *args, **kwargs)`` as its ``forward``."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy

    def forward(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        out = fn(self.policy, *args, **kwargs)
        # a view FSDP2 hooks for the backward could lose its hook to an in-place op (FSDP2 warns): hand out copies
        return tree_map(lambda t: t.clone() if isinstance(t, Tensor) and is_view(t) else t, out)


def shard_policy(model: nn.Module, mesh) -> ShardedPolicy:
    """Shard ``model`` in place over the 1-D device ``mesh``: one FSDP unit per transformer layer (resharded after
    each forward), the rest in the root unit. Returns the root, through which every call must run."""
    classes = tuple(layer_classes(model))
    for module in model.modules():
        if isinstance(module, classes):
            fully_shard(module, mesh=mesh, reshard_after_forward=True)
    root = ShardedPolicy(model)
    fully_shard(root, mesh=mesh)
    return root


def units(root: nn.Module) -> list[FSDPModule]:
    """The FSDP units under ``root`` (itself included), in module order."""
    return [m for m in root.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(root: ShardedPolicy) -> Iterator[None]:
    """Every unit's parameters all-gathered once on entry and kept through every forward inside (one all-gather per
    unit for the block, not one per forward); resharded (freed) on exit."""
    every = units(root)
    layers = [u for u in every if u is not root]
    for unit in layers:
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        for unit in every:
            unit.unshard()
        yield
    finally:
        for unit in layers:
            unit.set_reshard_after_forward(True, recurse=False)
        for unit in every:
            unit.reshard()


def parameter_bytes(model: nn.Module) -> tuple[int, int]:
    """``(bytes this rank holds, bytes of the whole parameters)`` of ``model``'s parameters (a sharded parameter
    counts its local shard; the two are equal when nothing is sharded)."""
    local = total = 0
    for p in model.parameters():
        size = p.element_size()
        local += (p.to_local().numel() if isinstance(p, DTensor) else p.numel()) * size
        total += p.numel() * size
    return local, total


def is_sharded(model: nn.Module) -> bool:
    """True when some parameter of ``model`` is an FSDP2 shard."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def trainable_state(module: nn.Module) -> dict[str, Tensor]:
    """The trainable weights of ``module`` whole, on the CPU, by name: a collective under sharding (every rank calls
    it; rank 0 gets the weights, the others an empty dict), the weights themselves otherwise."""
    names = {n for n, p in module.named_parameters() if p.requires_grad}
    if not is_sharded(module):
        return {n: p.detach().cpu() for n, p in module.named_parameters() if n in names}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    whole = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {n: t for n, t in whole.items() if n in names} if dist.get_rank() == 0 else {}


class ShardedEngine(RolloutEngine):
    """A rollout engine whose every call on a sharded model runs inside that model's root unit (``roots``: id of the
    model as the module passes it -> its :class:`ShardedPolicy`); sampling inside :func:`gathered` when
    ``gather_rollout``. Calls on any other model go straight to ``inner``."""

    def __init__(self, inner: RolloutEngine, roots: dict[int, ShardedPolicy], gather_rollout: bool = True):
        super().__init__(inner.processor, inner.layout, inner.sampling, inner.stop_ids, inner.suppress_ids.tolist())
        self.inner, self.roots, self.gather_rollout = inner, roots, gather_rollout

    def _call(self, model: nn.Module, fn: Callable[[nn.Module], Any]) -> Any:
        root = self.roots.get(id(model))
        return fn(model) if root is None else root(fn)

    samples_the_policy = property(lambda self: self.inner.samples_the_policy)

    def sample(self, model: nn.Module, prompts: dict, group_size: int, **kwargs) -> Rollout:
        if not self.inner.samples_the_policy:  # its own weights: the policy only read whole for a push, outside any
            return self.inner.sample(model, prompts, group_size, **kwargs)  # forward (FSDP2 reshards to save them)
        root = self.roots.get(id(model))
        gather = gathered(root) if root is not None and self.gather_rollout else contextlib.nullcontext()
        with gather:
            return self._call(model, lambda m: self.inner.sample(m, prompts, group_size, **kwargs))

    def logps(self, model: nn.Module, rollout: Rollout, rows: slice = slice(None), *, grad: bool = False,
              entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        return self._call(model, lambda m: self.inner.logps(m, rollout, rows, grad=grad, entropy=entropy))

    def measured_logps(self, model: nn.Module, rollout: Rollout, rows: slice, providers: dict, images: list[list]):
        return self._call(model, lambda m: self.inner.measured_logps(m, rollout, rows, providers, images))

    def release(self) -> None:
        self.inner.release()

    def update_weights(self, model: nn.Module) -> None:
        """The inner engine's push; a sampler holding its own weights gathers each shard whole
        (:func:`lit_grpo.rollout.vllm.sampler_weights`), every rank at once."""
        self.inner.update_weights(model)

    def resume(self) -> None:
        self.inner.resume()


class ShardingHooks:
    """The policy module's ``configure_model``: shard the policy (and a frozen reference copy) over the data-parallel
    dimension of the strategy's device mesh, once; nothing without a mesh (one device, DDP)."""

    shardable: ClassVar[bool] = True
    """False for a module that calls the policy outside its rollout engine (it cannot run sharded)."""

    def configure_model(self) -> None:
        mesh = self.device_mesh
        if mesh is None or isinstance(self.passes.engine, ShardedEngine):
            return
        if not self.shardable:
            raise UserError(f"{type(self).__name__} does not run under a sharded strategy (FSDP2); train it on "
                            "one device or with DDP (--trainer.strategy ddp)")
        mesh = mesh["data_parallel"]
        roots = {id(self.policy): shard_policy(self.policy, mesh)}
        reference = getattr(self.passes, "reference", None)
        if reference is not None and reference.frozen is not None:
            roots[id(reference.frozen)] = shard_policy(reference.frozen, mesh)
        gather = getattr(self.trainer.strategy, "gather_rollout", True)
        self.passes.engine = ShardedEngine(self.passes.engine, roots, gather)
        local, total = parameter_bytes(self.policy)
        rank_zero_info(f"FSDP2: the policy's {len(units(roots[id(self.policy)]))} units sharded over {mesh.size()} "
                       f"ranks: rank 0 holds {local / 2 ** 20:.1f} of its {total / 2 ** 20:.1f} MiB of parameters; "
                       f"rollouts gather {'every unit once' if gather else 'each unit for every forward'}")
