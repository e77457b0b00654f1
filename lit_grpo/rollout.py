"""Rollouts: encode prompts, sample G completions per prompt, stop-token masks, and completion log-probs.

The sampling contract: completions are drawn from :func:`lit_grpo.grpo.warp` of the policy's logits
(suppressed image tokens removed, divided by the temperature, then top-k, then top-p) and from nothing else,
whatever the checkpoint's ``generation_config`` carries (repetition penalty, ``min_p``, bad words, forced
tokens, a minimum length...: none of them is applied); the log-probs the loss uses are those of the same
function (:func:`lit_grpo.grpo.selective_log_softmax`).

Shapes: ``B`` prompts, ``G`` group size, ``N = B * G``, ``P`` prompt tokens (left-padded), ``T``
completion tokens, ``V`` vocabulary.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

import torch
from torch import Tensor, nn
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from lit_grpo.grpo import selective_log_softmax, warp


@dataclasses.dataclass
class SamplingConfig:
    """How completions are sampled."""

    num_generations: int = 8
    """G: completions per prompt (the group)."""
    temperature: float = 1.0
    """Sampling temperature; log-probs use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass (applied after top-k); the log-probs model it."""
    top_k: int = 0
    """Top-k sampling (0 = off); the log-probs model it."""
    max_completion_length: int = 512
    """Most tokens a completion may have."""


def refuse_sampling_option(name: str) -> str:
    """The one-line refusal of a ``sampling`` option that :class:`SamplingConfig` does not have: a generation
    option (``repetition_penalty``, ``min_p``, ...) changes the sampled distribution in a way the loss's
    log-probs do not model, so it is refused rather than silently trained off-policy."""
    options = ", ".join(f.name for f in dataclasses.fields(SamplingConfig))
    if name in GenerationConfig().to_dict():
        return (f"sampling.{name} is refused: the loss cannot model it (its log-probs are those of temperature, "
                f"top-k and top-p only, so sampling with {name} would train on a distribution other than the one "
                f"sampled); sampling options: {options}")
    return f"sampling.{name} is not an option; sampling options: {options}"


@dataclasses.dataclass
class Rollout:
    """G completions for each of B prompts, with the prompt inputs repeated to ``N`` rows.

    ``prompt`` holds the processor's tensors (``input_ids``/``attention_mask`` ``[N, P]``, image
    tensors with ``N`` rows); ``completion_ids`` ``[N, T]``; ``completion_mask`` ``[N, T]`` bool, true up
    to and including the first stop token; ``truncated`` ``[N]`` bool, no stop token within ``T``.
    """

    prompt: dict[str, Tensor]
    completion_ids: Tensor
    completion_mask: Tensor
    truncated: Tensor
    completions: list[str]
    layout: "RowLayout" = dataclasses.field(default_factory=lambda: RowLayout())
    """How ``prompt``'s tensors are indexed by row and extended over the completion (model family)."""
    shared: Any = None
    """The unique prompts of the rows and their reusable inputs (``lit_grpo.prefix.PromptCache``) when the
    prompt prefix is shared; row subsets (:meth:`rows`) drop it."""

    @property
    def num_completions(self) -> int:
        return self.completion_ids.shape[0]

    def rows(self, index: Tensor | slice) -> "Rollout":
        """The completions ``index`` selects (a micro-batch), prompt tensors included."""
        idx = torch.arange(self.num_completions)[index]
        return Rollout(
            prompt=self.layout.select(self.prompt, idx, self.num_completions),
            completion_ids=self.completion_ids[idx],
            completion_mask=self.completion_mask[idx],
            truncated=self.truncated[idx],
            completions=[self.completions[i] for i in idx.tolist()],
            layout=self.layout,
        )


class RowLayout:
    """How a processor's tensors map to prompt rows; the default for models whose tensors are all per row.

    Default: every tensor whose first dim is the number of rows is per row (batch dim first), the rest
    pass through, and nothing but ``input_ids``/``attention_mask`` covers the completion. Families whose
    tensors differ (Qwen-VL's flattened ``pixel_values``, its ``mm_token_type_ids``) override
    :meth:`select` and :meth:`extend` (see :mod:`lit_grpo.families`).
    """

    def __init__(self, model_type: str | None = None):
        self.model_type = model_type

    def select(self, inputs: dict[str, Any], idx: Tensor, num_rows: int) -> dict[str, Any]:
        """Rows ``idx`` of ``inputs`` (``num_rows`` rows)."""
        return select_rows(inputs, idx, num_rows)

    def check_images(self, images_per_prompt: dict[str, int]) -> None:
        """Refuse prompts whose images this layout cannot give to the right rows: per-row indexing gives every row
        its own images only when every prompt has exactly one (or none has any). ``images_per_prompt``: sample
        id -> number of images. Families that split per-image tensors by row take any number.

        Raises:
            ValueError: naming the sample, its image count and the model type.
        """
        counts = set(images_per_prompt.values())
        if counts <= {1} or counts <= {0}:
            return
        sample, n = next((k, v) for k, v in images_per_prompt.items() if v != 1)
        raise ValueError(f"sample {sample!r} has {n} image(s) in a batch of prompts with one: model type "
                         f"{self.model_type!r} is outside the supported families, whose images can be split by row "
                         "only with exactly one image per prompt; use one image per prompt or a supported family")

    def extend(self, inputs: dict[str, Any], completion_mask: Tensor) -> dict[str, Any]:
        """Forward inputs other than ids/mask, extended over a completion with mask ``[N, T]``."""
        return inputs


def encode_prompts(processor, messages: list[list[dict]], images: list[list]) -> dict[str, Tensor]:
    """Apply the processor's chat template and tokenise B prompts with their images, left-padded, untruncated."""
    texts = [processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    tok = getattr(processor, "tokenizer", processor)
    tok.padding_side = "left"
    enc = processor(images=images, text=texts, padding=True, truncation=False, return_tensors="pt")
    return dict(enc)


def select_rows(inputs: dict[str, Any], idx: Tensor, num_rows: int) -> dict[str, Any]:
    """Rows ``idx`` of every per-row tensor (first dim == ``num_rows``); other entries pass through."""
    return {k: (v[idx.to(v.device)] if isinstance(v, Tensor) and v.dim() and v.shape[0] == num_rows else v)
            for k, v in inputs.items()}


def images_by_tokens(tokens_per_row: list[int], tokens_per_image: list[int]) -> list[int]:
    """Images per row, when the images (in row order) fill the rows' image tokens one after another.

    Raises:
        ValueError: the counts do not line up (names the row).
    """
    out, k = [], 0
    for row, want in enumerate(tokens_per_row):
        start, got = k, 0
        while got < want and k < len(tokens_per_image):
            got, k = got + tokens_per_image[k], k + 1
        if got != want:
            raise ValueError(f"row {row}: {want} image tokens, but its images (from image {start} on) make {got}")
        out.append(k - start)
    if k != len(tokens_per_image):
        raise ValueError(f"{len(tokens_per_image)} images for {k} images' worth of image tokens")
    return out


def repeat_rows(inputs: dict[str, Any], repeats: int, layout: RowLayout | None = None) -> dict[str, Any]:
    """Each prompt's row repeated ``repeats`` times, copies contiguous (``repeat_interleave``)."""
    b = inputs["input_ids"].shape[0]
    idx = torch.arange(b).repeat_interleave(repeats)
    return (layout or RowLayout()).select(inputs, idx, b)


def completion_mask(ids: Tensor, stop_ids: list[int]) -> tuple[Tensor, Tensor]:
    """Mask up to and including the first stop token, and whether each row has none (truncated).

    Shape: ids ``[N, T]`` -> mask ``[N, T]`` bool, truncated ``[N]`` bool.
    """
    is_stop = torch.isin(ids, torch.tensor(stop_ids, device=ids.device))  # (N, T)
    has_stop = is_stop.any(1)
    first = torch.where(has_stop, is_stop.float().argmax(1), torch.full_like(has_stop, ids.shape[1], dtype=torch.long))
    mask = torch.arange(ids.shape[1], device=ids.device)[None, :] <= first[:, None]
    return mask, ~has_stop


class WarpLogits(LogitsProcessor):
    """``generate``'s only logits processing: :func:`lit_grpo.grpo.warp` (the function the log-probs use)."""

    def __init__(self, temperature: float, top_k: int, top_p: float, suppress_ids: Tensor | None):
        self.temperature, self.top_k, self.top_p, self.suppress_ids = temperature, top_k, top_p, suppress_ids

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        return warp(scores, self.temperature, self.top_k, self.top_p, self.suppress_ids)


@contextlib.contextmanager
def plain_generation_config(model: nn.Module) -> Iterator[None]:
    """Hide the checkpoint's ``generation_config`` from ``generate`` (which fills every setting a call leaves
    unset from it: repetition penalty, ``min_p``, bad words, forced tokens...) behind a default one."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    saved = inner.generation_config
    inner.generation_config = GenerationConfig()
    try:
        yield
    finally:
        inner.generation_config = saved


@torch.no_grad()
def sample_completions(model: nn.Module, processor, prompt: dict[str, Tensor], cfg: SamplingConfig,
                       stop_ids: list[int], suppress_ids: list[int], greedy: bool = False,
                       layout: RowLayout | None = None) -> Rollout:
    """Sample one completion per row of ``prompt`` (already repeated G times) and build the :class:`Rollout`.

    ``generate`` applies :class:`WarpLogits` and nothing else (the checkpoint's ``generation_config`` is hidden);
    greedy takes the argmax of the suppressed logits.
    """
    tok = getattr(processor, "tokenizer", processor)
    suppress = torch.tensor(list(suppress_ids), dtype=torch.long) if len(suppress_ids) else None
    processor_ = WarpLogits(1.0, 0, 1.0, suppress) if greedy else WarpLogits(cfg.temperature, cfg.top_k, cfg.top_p,
                                                                                suppress)
    config = GenerationConfig(max_new_tokens=cfg.max_completion_length, eos_token_id=list(stop_ids),
                              pad_token_id=tok.pad_token_id, use_cache=True, do_sample=not greedy,
                              **({} if greedy else dict(temperature=1.0, top_k=0, top_p=1.0)))
    was_training = model.training
    model.eval()
    try:
        with plain_generation_config(model):
            out = model.generate(**prompt, generation_config=config,
                                 logits_processor=LogitsProcessorList([processor_]))
    finally:
        model.train(was_training)
    return build_rollout(prompt, out[:, prompt["input_ids"].shape[1]:], tok, stop_ids, layout)


def build_rollout(prompt: dict[str, Tensor], ids: Tensor, tok, stop_ids: list[int], layout: RowLayout | None = None,
                  shared: Any = None) -> Rollout:
    """The :class:`Rollout` of sampled completion ids ``[N, T]``: stop-token mask, padding after it, texts."""
    if ids.shape[1] == 0:  # nothing generated: keep one pad column so shapes stay valid
        ids = torch.full((ids.shape[0], 1), tok.pad_token_id, dtype=torch.long, device=ids.device)
    mask, truncated = completion_mask(ids, stop_ids)
    ids = torch.where(mask, ids, torch.full_like(ids, tok.pad_token_id))
    texts = tok.batch_decode(ids.masked_fill(~mask, tok.pad_token_id), skip_special_tokens=True)
    return Rollout(prompt=prompt, completion_ids=ids, completion_mask=mask, truncated=truncated, completions=texts,
                   layout=layout or RowLayout(), shared=shared)


def model_inputs(rollout: Rollout) -> dict[str, Tensor]:
    """Forward inputs over prompt + completion (positions left to the model, exactly as in ``generate``);
    per-token extras are extended over the completion by the rollout's :class:`RowLayout`."""
    p = rollout.prompt
    attention = torch.cat([p["attention_mask"], rollout.completion_mask.to(p["attention_mask"].dtype)], 1)
    inputs = rollout.layout.extend({k: v for k, v in p.items() if k not in ("input_ids", "attention_mask")},
                                   rollout.completion_mask)
    inputs["input_ids"] = torch.cat([p["input_ids"], rollout.completion_ids], 1)
    inputs["attention_mask"] = attention
    return inputs


def completion_logps(model: nn.Module, rollout: Rollout, temperature: float, suppress_ids: Tensor | None = None,
                     with_entropy: bool = False, *, top_k: int = 0, top_p: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs of the completion tokens under ``model`` (the sampled distribution).

    Log-probs come from the model's own forward logits (whatever scaling its class applies, exactly as
    in generation), processed by :func:`lit_grpo.grpo.warp` as the sampler processed them (``suppress_ids``
    removed, ``temperature``, ``top_k``, ``top_p``).
    Shape: -> logps ``[N, T]`` float32 (and entropy ``[N, T]`` with ``with_entropy``).
    """
    t = rollout.completion_ids.shape[1]
    out = model(**model_inputs(rollout), use_cache=False, logits_to_keep=t + 1)
    logits = out.logits[:, -(t + 1):-1]  # (N, T, V): position i predicts completion token i
    return selective_log_softmax(logits, rollout.completion_ids, temperature, suppress_ids, with_entropy=with_entropy,
                                 top_k=top_k, top_p=top_p)
