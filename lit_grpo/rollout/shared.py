"""Each prompt computed once per group: image features once per rollout, the prompt prefix once per pass.

GRPO repeats every prompt (mostly image tokens on a VLM) G times and runs several passes over prompt +
completion (sampling, old log-probs, reference, update). Two optimisations, each exact up to float rounding:

- **Image features once per rollout** (``perf.cache_image_features``): what the model hands its language
  model for a prompt (``inputs_embeds`` with the image features scattered at the image tokens, and the position
  ids the model computes itself, e.g. Qwen's M-RoPE) is captured once per prompt by a pre-hook on the
  language model, and reused in every pass, when nothing outside the language model and its head trains
  (vision tower, projector, LLaVA-NeXT's ``image_newline``: the LoRA default). Text positions are embedded
  afresh in every pass (their embedding may train); otherwise the features are recomputed (with grad).
- **Shared prefix** (``perf.engine: shared``): the language model runs once on each prompt (its ``B`` unique
  rows, left padding kept) with a KV cache; the cache's keys and values are indexed out to the ``N``
  completion rows (tensor indexing: differentiable, so the update's gradients flow through the shared keys and values
  into e.g. LoRA on the prompt tokens); the completion tokens then run on ``N`` rows with the attention mask
  over prompt + completion and positions continuing the prompt's (Qwen: the last prompt position + 1 on all
  three M-RoPE axes, as the model's own rope index gives text tokens). The completion's first token is
  predicted by the prompt's last hidden state. Sampling: prefill once per prompt, expand the cache G times,
  decode with :func:`lit_grpo.grpo.warp` (suppressed tokens, temperature, top-k, top-p: the function the log-probs use).

The attention reward's capture needs one full-sequence forward (its hooks read the final layer's queries
and keys over prompt + completion), so the log-prob pass that carries the capture takes the plain path
(images of every row encoded); the reference and update passes still share the prefix.

Shapes: ``B`` prompts (unique rows), ``N`` completion rows, ``P`` prompt tokens, ``T`` completion tokens,
``H`` hidden size, ``V`` vocabulary.

Under gradient checkpointing transformers drops every checkpointed layer's KV cache, which the shared prefix runs
on, so the update pass with grad runs the language model layer by layer (:func:`checkpointed_hidden`): each decoder
layer is one :func:`torch.utils.checkpoint.checkpoint` region that takes the prompt rows' hidden states
``[B, P, H]`` and the completion rows' ``[n, T, H]``, runs the layer on the prompts with a KV cache of that layer
alone, indexes the cache out to the completion rows and runs the layer on the completions; backward replays the
region, so what is kept per layer is its two inputs (less than the plain path's ``[n, P + T, H]``) and the prompt
is still computed once per prompt. What the layers receive besides the hidden states (masks per layer type,
rotary embeddings, M-RoPE positions, Granite's embedding multiplier) is recorded from the language model's own
``forward`` run once for the prompts and once for the completions with every decoder layer replaced by a
recorder (no layer compute; the completions' run sees an empty cache of the prompt's length).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from typing import Any, Iterator

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

from lit_grpo.families import Family, unwrap
from lit_grpo.grpo import selective_log_softmax, warp
from lit_grpo.rollout.engine import Rollout, RolloutEngine, build_rollout, grad_mode


def with_cache(lm: nn.Module, cache: Any) -> dict[str, Any]:
    """``{keyword: cache}`` under the name ``lm``'s forward takes its KV cache by: ``cache`` in newer ``transformers``
    5 releases, ``past_key_values`` in the earlier ones (5.19, which vLLM's CPU build pins). A name the forward does
    not know would be taken by its ``**kwargs`` and the cache silently dropped: every completion would then run
    without its prompt."""
    return {_cache_keyword(type(lm)): cache}


@functools.lru_cache(maxsize=None)
def _cache_keyword(cls: type) -> str:
    """The KV-cache keyword of ``cls.forward`` (read once per class: :func:`with_cache` runs every decoding step)."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


@dataclasses.dataclass
class PromptInputs:
    """What a model hands its language model for prompt rows: ``embeds`` ``[B, P, H]``, ``position_ids``
    (None: the language model counts positions itself; Qwen: ``[3, B, P]``), ``attention_mask`` ``[B, P]``."""

    embeds: Tensor
    position_ids: Tensor | None
    attention_mask: Tensor

    def rows(self, idx: Tensor) -> "PromptInputs":
        pos = None if self.position_ids is None else self.position_ids[..., idx, :]
        return PromptInputs(self.embeds[idx], pos, self.attention_mask[idx])


class _Captured(Exception):
    """Stops the outer forward once the language model's inputs are known."""


def capture_lm_inputs(model: nn.Module, family: Family, prompt: dict[str, Any]) -> PromptInputs:
    """Run ``model`` on ``prompt`` up to its language model and return what it hands it (no LM compute)."""
    lm = family.language_model(model)
    seen: dict[str, Any] = {}

    def hook(module, args, kwargs):
        seen.update(kwargs)
        raise _Captured

    handle = lm.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        model(**prompt, use_cache=False)
    except _Captured:
        pass
    finally:
        handle.remove()
    if "inputs_embeds" not in seen:
        raise RuntimeError(f"{type(unwrap(model)).__name__} did not call its language model with inputs_embeds")
    return PromptInputs(seen["inputs_embeds"], seen.get("position_ids"), prompt["attention_mask"])


def frozen_outside_lm(model: nn.Module, family: Family) -> bool:
    """True when no parameter outside the language model and the LM head trains (vision tower, projector...)."""
    inside = {id(p) for p in family.language_model(model).parameters()}
    inside |= {id(p) for p in unwrap(model).get_output_embeddings().parameters()}
    return not any(p.requires_grad for p in model.parameters() if id(p) not in inside)


class PromptCache:
    """One rollout's unique prompts (``prompt`` holds ``B`` rows) and, per model, their captured language-model
    inputs when they can be reused (image features frozen); ``index`` ``[N]`` maps completion rows to prompts."""

    def __init__(self, prompt: dict[str, Any], index: Tensor, family: Family, cache_features: bool = True):
        self.prompt, self.index, self.family = prompt, index, family
        self.cache_features = cache_features
        self.num_prompts = int(prompt["input_ids"].shape[0])
        self._inputs: dict[int, tuple[PromptInputs, Tensor]] = {}

    def lm_inputs(self, model: nn.Module, prompts: Tensor) -> PromptInputs:
        """Language-model inputs of ``prompts`` (indices into the ``B`` prompts) under ``model``."""
        family = self.family
        reuse = self.cache_features and frozen_outside_lm(model, family)
        if not reuse:
            rows = family.select(self.prompt, prompts, self.num_prompts)
            return capture_lm_inputs(model, family, rows)
        key, embed = id(unwrap(model)), family.language_model(model).get_input_embeddings()
        if key not in self._inputs:
            with torch.no_grad():
                inputs = capture_lm_inputs(model, family, self.prompt)
                # image positions: where the model put something other than the token's embedding; found once,
                # here, since the text embedding may train before the next pass (num_iterations > 1)
                self._inputs[key] = (inputs, (inputs.embeds != embed(self.prompt["input_ids"])).any(-1, keepdim=True))
        cached, is_feature = self._inputs[key]
        cached, is_feature = cached.rows(prompts), is_feature[prompts]
        text = embed(self.prompt["input_ids"][prompts])  # (B, P, H), with grad when it trains
        return dataclasses.replace(cached, embeds=torch.where(is_feature, cached.embeds, text))


def _next_positions(position_ids: Tensor | None, steps: int, start: int = 1) -> Tensor | None:
    """Positions of ``steps`` text tokens after the prompt: ``last + start + arange`` on every axis (None: the
    language model counts them itself from its cache)."""
    if position_ids is None:
        return None
    return position_ids[..., -1:] + start + torch.arange(steps, device=position_ids.device)


def prefill(model: nn.Module, prompts: PromptCache, rows: Tensor) -> tuple[Tensor, Any, Tensor, Tensor | None]:
    """Run the language model once on the prompts of completion rows ``rows`` and index its cache out to them.

    Returns the last prompt hidden state per row ``[n, H]``, the row-indexed cache, the rows' prompt
    attention mask ``[n, P]`` and their prompt positions (or None).
    """
    index = prompts.index.to(rows.device)[rows]
    unique, inverse = torch.unique(index, return_inverse=True)
    inputs = prompts.lm_inputs(model, unique)
    lm = prompts.family.language_model(model)
    cache = DynamicCache(config=lm.config)
    out = lm(inputs_embeds=inputs.embeds, attention_mask=inputs.attention_mask, position_ids=inputs.position_ids,
             use_cache=True, **with_cache(lm, cache))
    cache.batch_select_indices(inverse)  # (B -> n rows) differentiable indexing of every layer's keys/values
    pos = None if inputs.position_ids is None else inputs.position_ids[..., inverse, :]
    return out.last_hidden_state[inverse, -1], cache, inputs.attention_mask[inverse], pos


def shared_prefix_logps(model: nn.Module, prompts: PromptCache, rows: Tensor,
                        completion_ids: Tensor, completion_mask: Tensor, temperature: float,
                        suppress_ids: Tensor | None = None, with_entropy: bool = False, *, top_k: int = 0,
                        top_p: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs of completion rows ``rows`` (indices into the rollout) with the prompt run once.

    Equal to :func:`lit_grpo.rollout.engine.completion_logps` on the same rows. Shape: completion_ids/mask ``[n, T]``
    -> ``[n, T]`` float32 (and the entropy with ``with_entropy``).
    """
    if checkpointing(model, prompts.family):  # no KV cache under checkpointing: one checkpoint per decoder layer
        hidden = checkpointed_hidden(model, prompts, rows, completion_ids, completion_mask)
    else:
        lm, t = prompts.family.language_model(model), completion_ids.shape[1]
        # no grad here: transformers 5.19 still drops the cache in a checkpointing layer in training mode (later
        # releases only with grad on), so its flags are off for these two calls
        with _hf_checkpointing_off(lm.layers):
            last, cache, prompt_mask, pos = prefill(model, prompts, rows)
            mask = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], 1)  # (n, P + T)
            out = lm(inputs_embeds=lm.get_input_embeddings()(completion_ids), attention_mask=mask,
                     position_ids=_next_positions(pos, t), use_cache=True, **with_cache(lm, cache))
        hidden = torch.cat([last[:, None], out.last_hidden_state[:, :-1]], 1)  # (n, T, H): state before each token
    # one head and one kernel call for both paths: the update reaches the kernel in as few frames either way
    logits = unwrap(model).get_output_embeddings()(hidden)  # (n, T, V)
    return selective_log_softmax(logits, completion_ids, temperature, suppress_ids, with_entropy=with_entropy,
                                 top_k=top_k, top_p=top_p)


@torch.no_grad()
def sample_shared(model: nn.Module, prompts: PromptCache, cfg, stop_ids: list[int], pad_id: int,
                  suppress_ids: Tensor | None, greedy: bool = False) -> tuple[Tensor, Tensor]:
    """Sample ``cfg.max_completion_length`` tokens for every completion row with each prompt prefilled once.

    Rows stop at their first stop token and are padded with ``pad_id`` after it; decoding ends when every
    row has stopped. Shape: -> ids ``[N, T']`` long, ``T' <= max_completion_length``, and the sampler's log-prob
    of each drawn token ``[N, T']`` float32 (under the warped distribution it was drawn from).
    """
    rows = torch.arange(prompts.index.shape[0], device=prompts.index.device)
    last, cache, mask, pos = prefill(model, prompts, rows)
    lm, head = prompts.family.language_model(model), unwrap(model).get_output_embeddings()
    stop = torch.tensor(stop_ids, device=last.device)
    done = torch.zeros(last.shape[0], dtype=torch.bool, device=last.device)
    tokens, logps = [], []
    for step in range(cfg.max_completion_length):
        logits = warp(head(last), 1.0 if greedy else cfg.temperature, 0 if greedy else cfg.top_k,
                      1.0 if greedy else cfg.top_p, suppress_ids)
        token = logits.argmax(-1) if greedy else torch.multinomial(logits.softmax(-1), 1)[:, 0]
        logps.append(logits.log_softmax(-1).gather(1, token[:, None])[:, 0])
        token = torch.where(done, torch.full_like(token, pad_id), token)
        tokens.append(token)
        done |= torch.isin(token, stop)
        if bool(done.all()) or step == cfg.max_completion_length - 1:
            break
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
        out = lm(inputs_embeds=lm.get_input_embeddings()(token[:, None]), attention_mask=mask,
                 position_ids=_next_positions(pos, 1, start=step + 1), use_cache=True, **with_cache(lm, cache))
        last = out.last_hidden_state[:, -1]
    return torch.stack(tokens, 1), torch.stack(logps, 1)


class SharedPrefixEngine(RolloutEngine):
    """Each prompt prefilled once for its G completions, in sampling and in every log-prob pass; image features
    captured once per rollout and reused while nothing outside the language model trains (``cache_features``).
    The rollout keeps its :class:`PromptCache` in ``rollout.memo`` for the later passes."""

    def __init__(self, processor, family: Family, sampling, stop_ids: list[int], suppress_ids: list[int],
                 cache_features: bool = True):
        super().__init__(processor, family, sampling, stop_ids, suppress_ids)
        self.family, self.cache_features = family, cache_features

    def prompt_cache(self, rollout: Rollout) -> PromptCache:
        """The rollout's :class:`PromptCache` (made once, shared by its row subsets)."""
        key = ("prompt_cache", self.cache_features)
        if key not in rollout.memo:
            rollout.memo[key] = PromptCache(rollout.prompts, rollout.prompt_index, self.family, self.cache_features)
        return rollout.memo[key]

    def sample(self, model: nn.Module, prompts: dict, group_size: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        b = prompts["input_ids"].shape[0]
        index = torch.arange(b, device=prompts["input_ids"].device).repeat_interleave(group_size)
        cache = PromptCache(prompts, index, self.family, self.cache_features)
        was_training = model.training
        model.eval()
        try:
            ids, logps = sample_shared(model, cache, self.settings(temperature), self.stop_ids,
                                       self.tokenizer.pad_token_id, self.suppress_ids, greedy)
        finally:
            model.train(was_training)
        return build_rollout(prompts, index, ids, self.tokenizer, self.stop_ids, self.family,
                             {("prompt_cache", self.cache_features): cache}, image_ids=self.suppress_ids.tolist(),
                             sampling_logps=None if greedy else logps)

    def logps(self, model: nn.Module, rollout: Rollout, rows: slice = slice(None), *, grad: bool = False,
              entropy: bool | str = False) -> tuple[Tensor, Tensor | None]:
        idx = torch.arange(rollout.num_completions, device=rollout.completion_ids.device)[rows]
        with grad_mode(grad):
            return shared_prefix_logps(model, self.prompt_cache(rollout), idx, rollout.completion_ids[idx],
                                       rollout.completion_mask[idx], with_entropy=entropy, **self.warped())


# ----------------------------------------------------------------- the shared prefix under gradient checkpointing


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
        lm(**inputs, use_cache=cache is not None, **with_cache(lm, cache))
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

    ``prompts`` is the rollout's :class:`PromptCache` (its ``index``, ``family`` and
    ``lm_inputs``). Equal to the cache path of :func:`shared_prefix_logps`.
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
                             "needs it (set perf.engine: plain for this model)")
    last = norm(h_prompt[:, -1:])[inverse]  # (n, 1, H): the state that predicts the first completion token
    return torch.cat([last, norm(h_completion[:, :-1])], 1)
