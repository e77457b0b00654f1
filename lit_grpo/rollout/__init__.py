"""Rollouts: the engine interface a training step calls and a rollout's data (:mod:`.engine`), and the
registry of engines chosen by name (``perf.engine``): ``shared`` (:mod:`.shared`, the default) and ``plain``
(:mod:`.plain`); :func:`build_engine` builds the named one, once. An engine of one's own registers a factory::

    @ENGINES.register("my_engine")
    def _my_engine(processor, layout, sampling, stop_ids, suppress_ids, perf) -> RolloutEngine: ...

and a config names it (``perf: {engine: my_engine}``).

The engines are imported when first used (:func:`build_engine`, or ``from lit_grpo.rollout import PlainEngine``):
:mod:`lit_grpo.families` builds on :class:`~lit_grpo.rollout.engine.RowLayout`, and the shared engine on the
families."""

from __future__ import annotations

from typing import Any, Callable

from lit_grpo.registry import Registry
from lit_grpo.rollout.engine import (Rollout, RolloutEngine, RowLayout, SamplingConfig, build_rollout,
                                     completion_logps, completion_mask, encode_prompts, images_by_tokens,
                                     model_inputs, refuse_sampling_option, repeat_rows, select_rows)

__all__ = ["ENGINES", "PlainEngine", "Rollout", "RolloutEngine", "RowLayout", "SamplingConfig", "SharedPrefixEngine",
           "build_engine", "build_rollout", "completion_logps", "completion_mask", "encode_prompts",
           "images_by_tokens", "model_inputs", "refuse_sampling_option", "repeat_rows", "sample_completions",
           "select_rows"]
_LAZY = {"PlainEngine": "plain", "sample_completions": "plain", "SharedPrefixEngine": "shared"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"lit_grpo.rollout.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'lit_grpo.rollout' has no attribute {name!r}")


ENGINES: Registry[Callable[..., RolloutEngine]] = Registry("rollout engine", tasks=True)
"""Engine factories by name: ``fn(processor, layout, sampling, stop_ids, suppress_ids, perf) -> RolloutEngine``
(``perf``: the module's :class:`~lit_grpo.config.PerfConfig`)."""


@ENGINES.register("shared")
def _shared(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
            perf: Any) -> RolloutEngine:
    """The shared-prefix engine when the model's family is a supported one (``layout`` a
    :class:`~lit_grpo.families.Family`), with or without gradient checkpointing (then one checkpoint per decoder
    layer, :func:`lit_grpo.rollout.shared.checkpointed_logps`); else the plain engine."""
    from lit_grpo.families import Family
    from lit_grpo.rollout.shared import SharedPrefixEngine

    if isinstance(layout, Family):
        return SharedPrefixEngine(processor, layout, sampling, stop_ids, suppress_ids, perf.cache_image_features)
    return _plain(processor, layout, sampling, stop_ids, suppress_ids, perf)


@ENGINES.register("plain")
def _plain(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
           perf: Any) -> RolloutEngine:
    """The plain engine: ``transformers``' ``generate`` and a full forward per pass."""
    from lit_grpo.rollout.plain import PlainEngine

    return PlainEngine(processor, layout, sampling, stop_ids, suppress_ids)


def build_engine(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
                 perf: Any) -> RolloutEngine:
    """The engine ``perf.engine`` names (``perf``: a :class:`~lit_grpo.config.PerfConfig`)."""
    return ENGINES.get(perf.engine)(processor, layout, sampling, stop_ids, suppress_ids, perf)
