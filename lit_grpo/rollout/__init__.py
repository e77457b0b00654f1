"""Rollouts: the engine interface a training step calls and a rollout's data (:mod:`.engine`), and its
two engines, plain (:mod:`.plain`) and shared prefix (:mod:`.shared`); :func:`build_engine` picks one, once."""

from __future__ import annotations

from lit_grpo.families import Family
from lit_grpo.layout import RowLayout
from lit_grpo.rollout.engine import (Rollout, RolloutEngine, SamplingConfig, build_rollout, completion_logps,
                                     completion_mask, encode_prompts, model_inputs, refuse_sampling_option,
                                     repeat_rows)
from lit_grpo.rollout.plain import PlainEngine, sample_completions
from lit_grpo.rollout.shared import SharedPrefixEngine

__all__ = ["PlainEngine", "Rollout", "RolloutEngine", "SamplingConfig", "SharedPrefixEngine", "build_engine",
           "build_rollout", "completion_logps", "completion_mask", "encode_prompts", "model_inputs",
           "refuse_sampling_option", "repeat_rows", "sample_completions"]


def build_engine(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
                 share_prefix: bool = True, cache_image_features: bool = True) -> RolloutEngine:
    """The shared-prefix engine when ``share_prefix`` is on and the model's family is a supported one (``layout`` a
    :class:`~lit_grpo.families.Family`), with or without gradient checkpointing (then one checkpoint per decoder
    layer, :mod:`lit_grpo.rollout.checkpointed`); else the plain engine."""
    if share_prefix and isinstance(layout, Family):
        return SharedPrefixEngine(processor, layout, sampling, stop_ids, suppress_ids, cache_image_features)
    return PlainEngine(processor, layout, sampling, stop_ids, suppress_ids)
