"""The rollout engine: the one interface through which a training step uses the policy, and a rollout's data.

A step needs three things from the policy model, and asks an engine for each:

1. :meth:`RolloutEngine.sample`: G completions per prompt (a :class:`Rollout`);
2. :meth:`RolloutEngine.logps`: per-token log-probs of a range of the rollout's rows, with or without grad,
   with the per-token entropy on request (the log-prob pass: old and reference log-probs; the update pass);
3. :meth:`RolloutEngine.measured_logps`: the same log-probs from one full-sequence forward that column providers
   (:mod:`lit_grpo.columns`, e.g. the attention reward's meter) watch, and what they measure from it.

Two engines implement it: :class:`~lit_grpo.rollout.plain.PlainEngine` (``transformers``' ``generate``, a
full forward per pass) and :class:`~lit_grpo.rollout.shared.SharedPrefixEngine` (each prompt prefilled once
for its group, image features reused across passes). :func:`lit_grpo.rollout.build_engine` chooses one, once,
from the config and the model family; the module never asks which.

The rollout's data lives here too: the sampling settings (:class:`SamplingConfig`), the :class:`Rollout` (G completions per prompt with their prompts), prompt encoding,
stop-token masks, and the full forward over every row's prompt + completion (:func:`completion_logps`, what every
engine's log-probs must equal).

Shapes: ``B`` prompts, ``G`` group size, ``N = B * G``, ``P`` prompt tokens (left-padded), ``T``
completion tokens, ``V`` vocabulary.
"""


import contextlib
import dataclasses
import functools
from typing import Annotated, Any

import torch
from torch import Tensor, nn
from transformers import GenerationConfig
from annotated_types import Ge, Gt, Le

from lit_grpo.families import RowLayout
from lit_grpo.grpo import selective_log_softmax
from lit_grpo.registry import did_you_mean
from lit_grpo.settings import Checked, Finite


# ----------------------------------------------------------------- a rollout


@dataclasses.dataclass
class SamplingConfig(Checked):
    """How completions are sampled."""

    num_generations: Annotated[int, Ge(2)] = 8
    """G: completions per prompt (the group)."""
    temperature: Annotated[float, Gt(0), Finite] = 1.0
    """Sampling temperature; log-probs use the same temperature."""
    top_p: Annotated[float, Gt(0), Le(1), Finite] = 1.0
    """Nucleus sampling mass (applied after top-k); the log-probs model it."""
    top_k: Annotated[int, Ge(0)] = 0
    """Top-k sampling (0 = off); the log-probs model it."""
    max_completion_length: Annotated[int, Ge(1)] = 512
    """Most tokens a completion may have."""


def refuse_sampling_option(name: str) -> str:
    """The one-line refusal of a ``sampling`` option that :class:`SamplingConfig` does not have: a generation
    option (``repetition_penalty``, ``min_p``, ...) changes the sampled distribution in a way the loss's
    log-probs do not model, so it is refused rather than silently trained off-policy."""
    names = [f.name for f in dataclasses.fields(SamplingConfig)]
    options = ", ".join(names)
    if name in GenerationConfig().to_dict():
        return (f"sampling.{name} is refused: the loss cannot model it (its log-probs are those of temperature, "
                f"top-k and top-p only, so sampling with {name} would train on a distribution other than the one "
                f"sampled); sampling options: {options}")
    return f"sampling.{name} is not an option{did_you_mean(name, names)}; sampling options: {options}"


@dataclasses.dataclass(eq=False)
class Rollout:
    """Completions of prompts: ``N`` rows, row ``n`` completing prompt ``prompt_index[n]``.

    ``prompts`` holds the processor's tensors of each prompt once (``input_ids``/``attention_mask``
    ``[B, P]``, image tensors as the processor made them); ``completion_ids`` ``[N, T]``; ``completion_mask``
    ``[N, T]`` bool, true up to and including the first stop token; ``truncated`` ``[N]`` bool, no stop token
    within ``T``. A sampled rollout has its G completions of a prompt contiguous. Built from per-row prompts
    (``Rollout(prompt_rows, ids, mask, truncated, texts)``), every row completes its own prompt.

    ``sampling_logps`` ``[N, T]`` float32: each sampled token's log-prob under the distribution it was drawn from,
    as the sampler computed it (0 at masked positions; None for greedy or hand-made rollouts); ``sampler_is_policy``:
    that distribution is the trained policy's at sampling time (its weights, :func:`lit_grpo.grpo.warp`), so the
    log-prob pass's log-probs are the sampler's and the sampler correction is exactly 1; False (another engine,
    stale weights) makes the update weigh each token by ``pi_old / mu`` from ``sampling_logps``
    (:func:`lit_grpo.objectives.sampler_correction`).
    """

    prompts: dict[str, Any]
    completion_ids: Tensor
    completion_mask: Tensor
    truncated: Tensor
    completions: list[str]
    layout: RowLayout = dataclasses.field(default_factory=RowLayout)
    """How ``prompts``' tensors are indexed by row and extended over the completion (model family)."""
    prompt_index: Tensor | None = None
    """``[N]`` long: the prompt each row completes (rows of one prompt share its prefix); ``None``: row ``n``
    completes prompt ``n``."""
    memo: dict[Any, Any] = dataclasses.field(default_factory=dict)
    """What an engine computed once for these prompts and reuses in its later passes (the shared engine: each
    prompt's language-model inputs); row subsets share it."""
    sampling_logps: Tensor | None = None
    sampler_is_policy: bool = True

    def __post_init__(self):
        if self.prompt_index is None:  # hand-made rollouts: one prompt row per completion row
            self.prompt_index = torch.arange(self.completion_ids.shape[0], device=self.completion_ids.device)

    @property
    def num_completions(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def num_prompts(self) -> int:
        return int(self.prompts["input_ids"].shape[0])

    @functools.cached_property
    def prompt(self) -> dict[str, Any]:
        """Every row's own prompt inputs (``N`` rows, images included)."""
        return self.layout.select(self.prompts, self.prompt_index, self.num_prompts)

    def rows(self, index: Tensor | slice) -> "Rollout":
        """The completions ``index`` selects (a micro-batch) with the same prompts (nothing copied)."""
        idx = torch.arange(self.num_completions, device=self.completion_ids.device)[index]  # a slice -> (n,) rows
        # prompts and memo are shared, not sliced: a micro-batch reuses the rollout's prefix cache and features
        return Rollout(self.prompts, self.completion_ids[idx], self.completion_mask[idx], self.truncated[idx],
                       [self.completions[i] for i in idx.tolist()], self.layout,
                       self.prompt_index[idx.to(self.prompt_index.device)], self.memo,
                       None if self.sampling_logps is None else self.sampling_logps[idx], self.sampler_is_policy)


class EncodedPrompts(dict):
    """The processor's tensors of ``B`` prompts (a dict, as the model takes them), with what made them: ``texts``
    (each prompt's chat-templated text, one placeholder per image) and ``images`` (each prompt's PIL images). A
    sampler that does its own image preprocessing (vLLM) starts from these."""

    def __init__(self, tensors: dict[str, Any], texts: list[str], images: list[list]):
        super().__init__(tensors)
        self.texts, self.images = texts, images

    def to(self, device) -> "EncodedPrompts":
        """The same prompts with every tensor on ``device``."""
        return EncodedPrompts({k: v.to(device) if isinstance(v, Tensor) else v for k, v in self.items()}, self.texts,
                            self.images)


def encode_prompts(processor, messages: list[list[dict]], images: list[list]) -> EncodedPrompts:
    """Apply the processor's chat template and tokenise B prompts with their images, left-padded, untruncated."""
    texts = [processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    tok = getattr(processor, "tokenizer", processor)
    # left padding: every prompt ends at the same column, so completion token i sits at P + i in every row
    tok.padding_side = "left"
    images = [list(i) for i in images] if images is not None else [[] for _ in texts]
    # never truncate: a cut prompt would lose image tokens and no longer match its pixel values
    enc = processor(images=images if any(images) else None, text=texts, padding=True, truncation=False,
                    return_tensors="pt")
    return EncodedPrompts(dict(enc), texts, images)


def repeat_rows(inputs: dict[str, Any], repeats: int, layout: RowLayout | None = None) -> dict[str, Any]:
    """Each prompt's row repeated ``repeats`` times, copies contiguous (``repeat_interleave``)."""
    b = inputs["input_ids"].shape[0]
    idx = torch.arange(b).repeat_interleave(repeats)  # (B * G,): 0,0,..,1,1,..: a group's rows stay contiguous
    return (layout or RowLayout()).select(inputs, idx, b)


def completion_mask(ids: Tensor, stop_ids: list[int]) -> tuple[Tensor, Tensor]:
    """Mask up to and including the first stop token, and whether each row has none (truncated).

    Shape: ids ``[N, T]`` -> mask ``[N, T]`` bool, truncated ``[N]`` bool.
    """
    is_stop = torch.isin(ids, torch.tensor(stop_ids, device=ids.device))  # (N, T)
    has_stop = is_stop.any(1)
    # argmax of a 0/1 float row is its first 1; a row without a stop keeps all T tokens (first = T)
    first = torch.where(has_stop, is_stop.float().argmax(1), torch.full_like(has_stop, ids.shape[1], dtype=torch.long))
    # the stop token itself is trained on (<=): the policy must learn to end the completion
    mask = torch.arange(ids.shape[1], device=ids.device)[None, :] <= first[:, None]
    return mask, ~has_stop


def completion_texts(tok, ids: Tensor, mask: Tensor, drop_ids) -> list[str]:
    """The text of each completion as the rewards and judges read it: its tokens within ``mask`` except padding and
    ``drop_ids`` (the stop tokens, image tokens), decoded with every other token kept, special ones included. A
    checkpoint that registers its tags as special tokens (``<think>``, ``<answer>``: many reasoning fine-tunes do)
    keeps them in the text; ``skip_special_tokens`` would give ``two redB`` for ``<think>two red</think><answer>B
    </answer>``. Shape: ids, mask ``[N, T]`` -> ``N`` strings."""
    drop = torch.tensor(sorted({int(tok.pad_token_id), *map(int, drop_ids)}), device=ids.device)
    # by id, not by skip_special_tokens: only these go; the special tokens a reward reads (<answer>) stay
    keep = mask & ~torch.isin(ids, drop)
    return [tok.decode(row[k].tolist(), skip_special_tokens=False) for row, k in zip(ids, keep)]


def build_rollout(prompts: dict[str, Any], index: Tensor | None, ids: Tensor, tok, stop_ids: list[int],
                  layout: RowLayout | None = None, memo: dict | None = None, image_ids=(),
                  sampling_logps: Tensor | None = None) -> Rollout:
    """The :class:`Rollout` of sampled completion ids ``[N, T]`` of ``prompts`` (row ``n`` completes prompt
    ``index[n]``): stop-token mask, padding after it, texts (:func:`completion_texts`, without the stop tokens and
    ``image_ids``); ``sampling_logps`` ``[N, T]`` (the sampler's log-probs of the ids), zeroed after the stop token."""
    if ids.shape[1] == 0:  # nothing generated (max length 0 left): one pad column, so every [N, T] op has a T
        ids = torch.full((ids.shape[0], 1), tok.pad_token_id, dtype=torch.long, device=ids.device)
        sampling_logps = None if sampling_logps is None else torch.zeros(ids.shape, device=ids.device)
    mask, truncated = completion_mask(ids, stop_ids)
    # ids after the stop are whatever the sampler left there: the pad id, for every engine alike
    ids = torch.where(mask, ids, torch.full_like(ids, tok.pad_token_id))
    texts = completion_texts(tok, ids, mask, [*stop_ids, *image_ids])
    if sampling_logps is not None:  # 0 past the stop: the padded ids were not what the sampler scored
        sampling_logps = torch.where(mask, sampling_logps.float(), torch.zeros_like(sampling_logps, dtype=torch.float))
    return Rollout(prompts, ids, mask, truncated, texts, layout or RowLayout(), index,
                   {} if memo is None else memo, sampling_logps)


def model_inputs(rollout: Rollout) -> dict[str, Tensor]:
    """Forward inputs over every row's prompt + completion (positions left to the model, exactly as in
    ``generate``); per-token extras are extended over the completion by the rollout's :class:`RowLayout`."""
    p = rollout.prompt
    # (N, P + T): no token attends to the prompt's left padding or to the completion's tail after its stop
    attention = torch.cat([p["attention_mask"], rollout.completion_mask.to(p["attention_mask"].dtype)], 1)
    # per-token extras (mm_token_type_ids) must cover the completion too, as the family lays them out
    inputs = rollout.layout.extend({k: v for k, v in p.items() if k not in ("input_ids", "attention_mask")},
                                   rollout.completion_mask)
    inputs["input_ids"] = torch.cat([p["input_ids"], rollout.completion_ids], 1)
    inputs["attention_mask"] = attention
    return inputs


def grad_mode(grad: bool) -> contextlib.AbstractContextManager:
    """The context of an engine's log-prob forward: only the update pass (``grad=True``) keeps the autograd graph; the
    log-prob and reference passes keep no activations. ``grad=True`` leaves the caller's mode as it is (never turns
    grad on inside a ``no_grad`` block)."""
    return contextlib.nullcontext() if grad else torch.no_grad()


def completion_logps(model: nn.Module, rollout: Rollout, temperature: float, suppress_ids: Tensor | None = None,
                     with_entropy: bool = False, *, top_k: int = 0, top_p: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs of the completion tokens under ``model`` (the sampled distribution), from one forward
    of the whole model over every row's prompt + completion.

    Log-probs come from the model's own forward logits (whatever scaling its class applies, exactly as
    in generation), processed by :func:`lit_grpo.grpo.warp` as the sampler processed them (``suppress_ids``
    removed, ``temperature``, ``top_k``, ``top_p``).
    Shape: -> logps ``[N, T]`` float32 (and entropy ``[N, T]`` with ``with_entropy``).
    """
    t = rollout.completion_ids.shape[1]
    # logits_to_keep: only the last T + 1 positions reach the head, never the prompt's [N, P, V] logits
    out = model(**model_inputs(rollout), use_cache=False, logits_to_keep=t + 1)
    logits = out.logits[:, -(t + 1):-1]  # (N, T, V): position i predicts completion token i
    return selective_log_softmax(logits, rollout.completion_ids, temperature, suppress_ids, with_entropy=with_entropy,
                                 top_k=top_k, top_p=top_p)



class RolloutEngine:
    """Samples rollouts and computes their log-probs. The contract every engine (HF, shared prefix, or a later
    vLLM / SGLang one) keeps:

    Shapes: ``B`` prompts, ``G`` completions per prompt, ``N = B * G`` rows, ``T`` completion tokens
    (``T <= sampling.max_completion_length``, at least 1), ``V`` vocabulary, ``I`` image tokens of a prompt.

    - ``sample(model, prompts, G)``: ``prompts`` are the processor's tensors of ``B`` prompts (left-padded
      ``input_ids``/``attention_mask`` ``[B, P]`` long, image tensors with ``I`` image tokens per prompt in
      ``input_ids``), on the model's device. Returns a ``Rollout`` with ``completion_ids`` ``[N, T]`` long
      (row ``n`` completes prompt ``n // G``: a prompt's G rows contiguous), ``completion_mask`` ``[N, T]`` bool
      (true up to and including the first stop token; ids after it are the pad id), ``truncated`` ``[N]`` bool
      (no stop token), ``completions`` (N decoded texts). Tokens are drawn from
      :func:`lit_grpo.grpo.warp` of the policy's logits (``suppress_ids`` removed, / temperature, top-k, top-p)
      and from nothing else (the checkpoint's ``generation_config`` is ignored); ``greedy``: the argmax of the
      suppressed logits. Sampling runs in eval mode, without grad, and leaves the model's mode as it was.
      A sampled (not greedy) rollout carries ``sampling_logps`` ``[N, T]`` float32: the log-prob of each sampled
      token under the distribution it was drawn from, as the sampler computed it (masked positions 0). An engine
      that draws from ``model`` with these settings (the built-in ones) leaves ``sampler_is_policy`` true: the
      log-prob pass then stands for the sampler, and the sampler correction is exactly 1. **An engine whose
      sampler is anything else** (a vLLM / SGLang server, a copy of the weights that lags the trained ones by
      some updates, another dtype or kernel whose log-probs differ from :meth:`logps`) sets it false and must
      return ``sampling_logps`` (NaN where it could not score a token: weight 1 there); the update then weighs
      each token (or sequence) by ``pi_old / mu`` clamped or masked to ``[sampler_correction_min,
      sampler_correction_max]`` (``grpo.sampler_correction*``), and the off-policy mask compares against it.
    - ``logps(model, rollout, rows, grad=, entropy=)``: ``[n, T]`` float32 log-probs of the completion tokens of
      rows ``rows`` (``n`` rows) under ``model`` (policy or reference), from the same :func:`lit_grpo.grpo.warp`
      the sampler used (:func:`lit_grpo.grpo.selective_log_softmax`); the entropy ``[n, T]`` float32 of the same
      distribution with ``entropy=True`` (without grad; ``entropy="grad"``: with it, for the entropy bonus), else
      None. Values at masked positions are finite and unused. With
      ``grad=True`` the log-probs carry the gradient to every trainable weight that produced them.
      Must equal :func:`completion_logps` (one full forward of prompt + completion) up to
      float rounding, whatever the row range, and, for the sampling policy, the log-probs of the distribution the
      tokens were sampled from (the first importance ratio is 1).
    - ``measured_logps(model, rollout, rows, providers, images)``: ``logps(..., grad=False)`` computed by one
      full-sequence forward under every provider's capture (:mod:`lit_grpo.columns`), and each provider's measurement
      of the rows (``images[k]``: row ``k``'s PIL images); no second forward.

    The lifecycle around the update (as verl's ``BaseRollout``), for a sampler that is not the trained model (a
    server, a copy of the weights); the built-in engines sample from the trained model itself, so for them each
    is a no-op. A training step calls, in order: ``sample``, the log-prob pass's ``logps``; ``release()`` (no
    sampling until ``resume``: a sampler may free its memory for the update); per optimizer update, the update
    pass's ``logps(grad=True)`` then, after the optimizer step, ``update_weights(model)`` (the sampler must
    sample the next rollout from these weights); ``resume()`` after the step's last update.
    """

    samples_the_policy = True
    """True when :meth:`sample` runs the model it is given (False for a sampler holding its own copy of the weights,
    which a sharded policy need not be gathered for)."""

    def __init__(self, processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int],
                 suppress_ids: list[int]):
        self.processor, self.layout, self.sampling = processor, layout, sampling
        self.stop_ids = list(stop_ids)
        # a tensor once, moved to the logits' device per call: the kernel's index_fill takes a tensor
        self.suppress_ids = torch.tensor(list(suppress_ids), dtype=torch.long)

    @property
    def tokenizer(self):
        return getattr(self.processor, "tokenizer", self.processor)

    def settings(self, temperature: float | None = None) -> SamplingConfig:
        """The sampling settings of one call (evaluation samples at a temperature of its own)."""
        return self.sampling if temperature is None else dataclasses.replace(self.sampling, temperature=temperature)

    def warped(self) -> dict:
        """The sampled distribution's settings, as :func:`lit_grpo.grpo.selective_log_softmax` takes them."""
        s = self.sampling  # the training settings: evaluation's own temperature never reaches the log-probs
        return dict(temperature=s.temperature, suppress_ids=self.suppress_ids, top_k=s.top_k, top_p=s.top_p)

    def sample(self, model: nn.Module, prompts: dict, group_size: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        raise NotImplementedError

    def logps(self, model: nn.Module, rollout: Rollout, rows: slice = slice(None), *, grad: bool = False,
              entropy: bool | str = False) -> tuple[Tensor, Tensor | None]:
        """The log-probs of rows ``rows`` (class docstring); an engine runs its forward under ``grad_mode(grad)``
        and calls the kernel itself, so that the update reaches it in few frames (tests/test_structure_step.py)."""
        raise NotImplementedError

    def release(self) -> None:
        """Sampling is over until :meth:`resume`; the sampler may free what only sampling needs."""

    def update_weights(self, model: nn.Module) -> None:
        """The optimizer has just updated ``model``: the next rollout is sampled from its new weights."""

    def resume(self) -> None:
        """The update is over: the next call may be :meth:`sample`."""

    @torch.no_grad()
    def measured_logps(self, model: nn.Module, rollout: Rollout, rows: slice, providers: dict,
                       images: list[list]) -> tuple[Tensor, dict]:
        """``[n, T]`` log-probs of rows ``rows`` from one full forward with every provider's hooks on it (removed
        on exit, errors included), and ``{column: measurement}`` of the rows, measured after the hooks are off."""
        sub = rollout.rows(rows)
        # a full forward whatever the engine: a provider's hooks read the whole prompt + completion sequence
        with contextlib.ExitStack() as stack:  # every hook removed on exit, errors included
            captures = {k: stack.enter_context(p.capture(model, sub)) for k, p in providers.items()}
            logps = completion_logps(model, sub, **self.warped())[0]
        return logps, {k: providers[k].score(cap, sub, images) for k, cap in captures.items()}
