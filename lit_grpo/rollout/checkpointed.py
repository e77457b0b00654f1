"""The shared prompt prefix under gradient checkpointing: one checkpoint per decoder layer holds the prefix and
its G suffixes.

Under gradient checkpointing transformers drops the KV cache of every layer it checkpoints (replaying a layer in
the backward pass would append to the cache a second time), which is what the shared prefix runs on. So the
update pass with grad runs the language model here layer by layer instead: each decoder layer is one
:func:`torch.utils.checkpoint.checkpoint` region that takes the prompt rows' hidden states ``[B, P, H]`` and
the completion rows' ``[n, T, H]``, runs the layer on the prompts with a KV cache of that layer alone, indexes
the cache out to the completion rows and runs the layer on the completions. The backward pass replays the
region, prefix and suffixes together, so what is kept per layer is its two inputs (less than the plain path's
``[n, P + T, H]``) and the prompt is still computed once per prompt, its image features once per rollout
(:class:`lit_grpo.rollout.shared.PromptCache`).

Everything the layers receive besides the hidden states (attention masks per layer type, rotary
embeddings, Qwen's M-RoPE positions, Granite's embedding multiplier applied to the inputs) is what the language
model's own ``forward`` hands them: it is recorded by running that forward once for the prompts and once for
the completions with every decoder layer replaced by a recorder that returns its input (no layer compute; the
completions' run sees a cache of the prompt's length holding no data, so its masks and positions continue the
prompt as in :func:`lit_grpo.rollout.shared.shared_prefix_logps`). The final norm and the output head then run as in
the model.

Shapes: ``B`` prompts, ``n`` completion rows, ``P`` prompt tokens, ``T`` completion tokens, ``H`` hidden size.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

from lit_grpo.families import Family, unwrap
from lit_grpo.grpo import selective_log_softmax


def checkpointing(model: nn.Module, family: Family) -> bool:
    """True when a forward of ``model`` now would checkpoint its decoder layers (gradient checkpointing on,
    training mode, grad enabled): the case transformers runs without a KV cache."""
    lm = family.language_model(model)
    return (torch.is_grad_enabled() and lm.training
            and any(getattr(m, "gradient_checkpointing", False) for m in lm.layers.modules()))


class _Recorded(list):
    """Per decoder layer: ``(hidden_states, kwargs)`` it was called with."""


@contextlib.contextmanager
def _recording(layers: nn.ModuleList) -> Iterator[_Recorded]:
    """Replace each layer's ``forward`` by a recorder returning its input (module hooks still run) for the
    duration; always restored."""
    seen = _Recorded()

    def recorder(hidden_states, *args, **kwargs):
        if args:
            raise TypeError(f"decoder layer called with {len(args)} extra positional arguments; expected keywords")
        seen.append((hidden_states, kwargs))
        return hidden_states

    for layer in layers:
        layer.forward = recorder
    try:
        yield seen
    finally:
        for layer in layers:
            del layer.forward


def layer_inputs(lm: nn.Module, cache: Any = None, **inputs) -> _Recorded:
    """What the language model ``lm``'s forward on ``inputs`` hands each decoder layer (no layer runs)."""
    with _recording(lm.layers) as seen:
        lm(**inputs, cache=cache, use_cache=cache is not None)
    if len(seen) != len(lm.layers):
        raise RuntimeError(f"{type(lm).__name__} called {len(seen)} of its {len(lm.layers)} decoder layers")
    return seen


def _length_only_cache(lm: nn.Module, length: int, like: Tensor) -> DynamicCache:
    """A cache whose every layer reports ``length`` cached tokens and holds no data (``[1, 1, length, 1]`` zeros):
    enough for the language model to size the completions' masks and positions."""
    cache = DynamicCache(config=lm.config)
    z = like.new_zeros(1, 1, length, 1)
    for i in range(len(lm.layers)):
        cache.update(z, z, i)
    return cache


@contextlib.contextmanager
def _hf_checkpointing_off(layer: nn.Module) -> Iterator[None]:
    """transformers' own per-layer checkpointing (which drops the cache) off inside our region."""
    flagged = [m for m in layer.modules() if getattr(m, "gradient_checkpointing", False)]
    for m in flagged:
        m.gradient_checkpointing = False
    try:
        yield
    finally:
        for m in flagged:
            m.gradient_checkpointing = True


def _cache_key(kwargs: dict[str, Any]) -> str:
    return "past_key_values" if "past_key_values" in kwargs and "cache" not in kwargs else "cache"


def _prefix_and_suffix(layer: nn.Module, config, inverse: Tensor, kw_prompt: dict, kw_completion: dict,
                       h_prompt: Tensor, h_completion: Tensor) -> tuple[Tensor, Tensor]:
    """One decoder layer on the prompts ``[B, P, H]`` (its cache indexed out to the completion rows by ``inverse``
    ``[n]``) then on the completions ``[n, T, H]``; the unit that the backward pass replays."""
    cache = DynamicCache(config=config)
    with _hf_checkpointing_off(layer):
        out_prompt = layer(h_prompt, **{**kw_prompt, _cache_key(kw_prompt): cache, "use_cache": True})
        cache.batch_select_indices(inverse)  # (B -> n rows) differentiable indexing of this layer's keys/values
        out_completion = layer(h_completion, **{**kw_completion, _cache_key(kw_completion): cache,
                                                "use_cache": True})
    return out_prompt, out_completion


def checkpointed_hidden(model: nn.Module, prompts, rows: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor) -> Tensor:
    """Hidden states ``[n, T, H]`` before each completion token of rows ``rows`` (the last prompt state, then the
    completion's own states but the last), one checkpoint per decoder layer (see the module docstring).

    ``prompts`` is the rollout's :class:`lit_grpo.rollout.shared.PromptCache` (its ``index``, ``family`` and
    ``lm_inputs``). Equal to the cache path of :func:`lit_grpo.rollout.shared.shared_prefix_logps`.
    """
    index = prompts.index.to(rows.device)[rows]
    unique, inverse = torch.unique(index, return_inverse=True)
    inputs = prompts.lm_inputs(model, unique)
    lm = prompts.family.language_model(model)
    prompt_layers = layer_inputs(lm, inputs_embeds=inputs.embeds, attention_mask=inputs.attention_mask,
                                 position_ids=inputs.position_ids)
    pos = inputs.position_ids
    t, p = completion_ids.shape[1], inputs.embeds.shape[1]
    if pos is not None:  # continue every axis after the last prompt position, as text tokens do
        pos = pos[..., inverse, -1:] + 1 + torch.arange(t, device=pos.device)
    mask = torch.cat([inputs.attention_mask[inverse], completion_mask.to(inputs.attention_mask.dtype)], 1)
    completion_layers = layer_inputs(lm, _length_only_cache(lm, p, inputs.embeds),
                                     inputs_embeds=lm.get_input_embeddings()(completion_ids), attention_mask=mask,
                                     position_ids=pos)
    h_prompt, h_completion = prompt_layers[0][0], completion_layers[0][0]
    for layer, (_, kw_p), (_, kw_c) in zip(lm.layers, prompt_layers, completion_layers):
        h_prompt, h_completion = checkpoint(_prefix_and_suffix, layer, lm.config, inverse, kw_p, kw_c,
                                            h_prompt, h_completion, use_reentrant=False)
    norm = getattr(lm, "norm", None)
    if norm is None:
        raise AttributeError(f"{type(lm).__name__} has no final norm `norm`; the checkpointed shared prefix "
                             "needs it (turn perf.share_prefix off for this model)")
    last = norm(h_prompt[:, -1:])[inverse]  # (n, 1, H): the state that predicts the first completion token
    return torch.cat([last, norm(h_completion[:, :-1])], 1)


def checkpointed_logps(model: nn.Module, prompts, rows: Tensor, completion_ids: Tensor, completion_mask: Tensor,
                       temperature: float, suppress_ids: Tensor | None = None, with_entropy: bool = False, *,
                       top_k: int = 0, top_p: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """:func:`lit_grpo.rollout.shared.shared_prefix_logps` with one checkpoint per decoder layer. Shape: completion
    ids/mask ``[n, T]`` -> ``[n, T]`` float32 (and the entropy with ``with_entropy``)."""
    hidden = checkpointed_hidden(model, prompts, rows, completion_ids, completion_mask)
    logits = unwrap(model).get_output_embeddings()(hidden)
    return selective_log_softmax(logits, completion_ids, temperature, suppress_ids, with_entropy=with_entropy,
                                 top_k=top_k, top_p=top_p)
