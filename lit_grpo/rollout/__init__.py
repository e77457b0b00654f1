"""Rollouts: the engine interface a training step calls and a rollout's data (:mod:`.engine`), and its
two engines, plain (:mod:`.plain`) and shared prefix (:mod:`.shared`); :func:`build_engine` picks one, once.

The engines are imported when first used (:func:`build_engine`, or ``from lit_grpo.rollout import PlainEngine``):
:mod:`lit_grpo.families` builds on :class:`~lit_grpo.rollout.engine.RowLayout`, and the shared engine on the
families."""

from __future__ import annotations

from lit_grpo.rollout.engine import (Rollout, RolloutEngine, RowLayout, SamplingConfig, build_rollout,
                                     completion_logps, completion_mask, encode_prompts, images_by_tokens,
                                     model_inputs, refuse_sampling_option, repeat_rows, select_rows)

__all__ = ["PlainEngine", "Rollout", "RolloutEngine", "RowLayout", "SamplingConfig", "SharedPrefixEngine",
           "build_engine", "build_rollout", "completion_logps", "completion_mask", "encode_prompts",
           "images_by_tokens", "model_inputs", "refuse_sampling_option", "repeat_rows", "sample_completions",
           "select_rows"]
_LAZY = {"PlainEngine": "plain", "sample_completions": "plain", "SharedPrefixEngine": "shared"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"lit_grpo.rollout.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'lit_grpo.rollout' has no attribute {name!r}")


def build_engine(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
                 share_prefix: bool = True, cache_image_features: bool = True) -> RolloutEngine:
    """The shared-prefix engine when ``share_prefix`` is on and the model's family is a supported one (``layout`` a
    :class:`~lit_grpo.families.Family`), with or without gradient checkpointing (then one checkpoint per decoder
    layer, :func:`lit_grpo.rollout.shared.checkpointed_logps`); else the plain engine."""
    from lit_grpo.families import Family
    from lit_grpo.rollout.plain import PlainEngine
    from lit_grpo.rollout.shared import SharedPrefixEngine

    if share_prefix and isinstance(layout, Family):
        return SharedPrefixEngine(processor, layout, sampling, stop_ids, suppress_ids, cache_image_features)
    return PlainEngine(processor, layout, sampling, stop_ids, suppress_ids)
