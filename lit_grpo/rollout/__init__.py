"""Rollouts: the engine interface a training step calls and a rollout's data (:mod:`.engine`), and the
registry of engines chosen by name (``perf.engine``): ``shared`` (:mod:`.shared`, the default) and ``plain``
(:mod:`.plain`); :func:`build_engine` builds the named one, once. An engine of one's own registers a factory::

    @ENGINES.register("my_engine")
    def _my_engine(processor, layout, sampling, stop_ids, suppress_ids, perf) -> RolloutEngine: ...

and a config names it (``perf: {engine: my_engine}``).

Every engine builds on the family layer (:mod:`lit_grpo.families`: how a processor's tensors map to prompt rows,
:class:`~lit_grpo.families.RowLayout`), which imports nothing from here."""

from __future__ import annotations

from typing import Any, Callable

from lit_grpo.families import Family, RowLayout, images_by_tokens, select_rows
from lit_grpo.registry import Registry
from lit_grpo.rollout.engine import (Rollout, RolloutEngine, SamplingConfig, build_rollout, completion_logps,
                                     completion_mask, encode_prompts, model_inputs, refuse_sampling_option,
                                     repeat_rows)
from lit_grpo.rollout.plain import PlainEngine, sample_completions
from lit_grpo.rollout.shared import SharedPrefixEngine

__all__ = ["ENGINES", "PlainEngine", "Rollout", "RolloutEngine", "RowLayout", "SamplingConfig", "SharedPrefixEngine",
           "build_engine", "build_rollout", "completion_logps", "completion_mask", "encode_prompts",
           "images_by_tokens", "model_inputs", "refuse_sampling_option", "repeat_rows", "sample_completions",
           "select_rows"]


ENGINES: Registry[Callable[..., RolloutEngine]] = Registry("rollout engine", tasks=True)
"""Engine factories by name: ``fn(processor, layout, sampling, stop_ids, suppress_ids, perf) -> RolloutEngine``
(``perf``: the module's :class:`~lit_grpo.config.PerfConfig`)."""


@ENGINES.register("shared")
def _shared(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
            perf: Any) -> RolloutEngine:
    """The shared-prefix engine when the model's family is a supported one (``layout`` a
    :class:`~lit_grpo.families.Family`), with or without gradient checkpointing (then one checkpoint per decoder
    layer, :func:`lit_grpo.rollout.shared.checkpointed_logps`); else the plain engine."""
    if isinstance(layout, Family):
        return SharedPrefixEngine(processor, layout, sampling, stop_ids, suppress_ids, perf.cache_image_features)
    return _plain(processor, layout, sampling, stop_ids, suppress_ids, perf)


@ENGINES.register("plain")
def _plain(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
           perf: Any) -> RolloutEngine:
    """The plain engine: ``transformers``' ``generate`` and a full forward per pass."""
    return PlainEngine(processor, layout, sampling, stop_ids, suppress_ids)


def build_engine(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
                 perf: Any) -> RolloutEngine:
    """The engine ``perf.engine`` names (``perf``: a :class:`~lit_grpo.config.PerfConfig`)."""
    return ENGINES.get(perf.engine)(processor, layout, sampling, stop_ids, suppress_ids, perf)
