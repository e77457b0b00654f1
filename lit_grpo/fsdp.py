"""Lightning's FSDP with the model's layers as the wrap unit, for policies too large to copy on every GPU.

:class:`LayerFSDPStrategy` is Lightning's :class:`~lightning.pytorch.strategies.FSDPStrategy` whose default
``auto_wrap_policy`` wraps every layer that transformers checkpoints (its ``GradientCheckpointingLayer``
subclasses: the language model's decoder layers and the vision tower's encoder layers), found on the model
itself, so one config serves every family. Everything else is Lightning's: ``sharding_strategy``,
``state_dict_type: sharded`` (each rank writes its shard into a checkpoint folder, and ``--ckpt_path`` on that
folder resumes), the ``bf16-mixed`` precision plugin.
"""

from __future__ import annotations

from lightning.pytorch.strategies import FSDPStrategy
from torch import nn
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from transformers.modeling_layers import GradientCheckpointingLayer


def layer_classes(model: nn.Module) -> set[type[nn.Module]]:
    """The classes of ``model``'s transformer layers (those transformers checkpoints), e.g. Granite's decoder layer
    and SigLIP's encoder layer.

    Raises:
        ValueError: when ``model`` has none (give ``auto_wrap_policy`` yourself).
    """
    found = {type(m) for m in model.modules() if isinstance(m, GradientCheckpointingLayer)}
    if not found:
        raise ValueError(f"{type(model).__name__} has no transformers layers to wrap; set the strategy's "
                         "auto_wrap_policy")
    return found


class LayerFSDPStrategy(FSDPStrategy):
    """:class:`FSDPStrategy` with ``auto_wrap_policy`` defaulting to the model's transformer layers
    (:func:`layer_classes`); every other argument is ``FSDPStrategy``'s."""

    strategy_name = "fsdp_layers"

    def _setup_model(self, model: nn.Module) -> nn.Module:
        if self.kwargs.get("auto_wrap_policy") is None:
            self.kwargs["auto_wrap_policy"] = ModuleWrapPolicy(layer_classes(model))
        return super()._setup_model(model)
