"""The plain engine: ``transformers``' ``generate`` over the G copies of every prompt, a full forward of prompt +
completion for every log-prob pass (any model ``generate`` supports)."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import Tensor, nn
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from lit_grpo.families import RowLayout
from lit_grpo.grpo import warp
from lit_grpo.rollout.engine import (Rollout, RolloutEngine, SamplingConfig, build_rollout, completion_logps,
                                     grad_mode, repeat_rows)


class WarpLogits(LogitsProcessor):
    """``generate``'s only logits processing: :func:`lit_grpo.grpo.warp` (the function the log-probs use).

    With ``record``, it also keeps the sampler's log-prob of every sampled token: each call sees the token the
    previous step drew (``input_ids[:, -1]``) and reads it from that step's log-softmax; :meth:`sampled_logps`
    reads the last one from the finished ids."""

    def __init__(self, temperature: float, top_k: int, top_p: float, suppress_ids: Tensor | None,
                 record: bool = False):
        self.temperature, self.top_k, self.top_p, self.suppress_ids = temperature, top_k, top_p, suppress_ids
        # previous: the last call's distribution, held until the next call shows which token was drawn from it
        self.record, self.previous, self.logps = record, None, []

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        # the very function the log-probs use: the sampler's distribution equals the loss's, so the first ratio is 1
        warped = warp(scores, self.temperature, self.top_k, self.top_p, self.suppress_ids)  # (N, V)
        if self.record:
            # generate calls the processor before each draw: the token drawn from the previous distribution is now last
            self._read(input_ids[:, -1])
            self.previous = warped.log_softmax(-1)
        return warped

    def _read(self, token: Tensor) -> None:
        if self.previous is not None:
            self.logps.append(self.previous.gather(1, token[:, None])[:, 0])

    def sampled_logps(self, completion_ids: Tensor) -> Tensor:
        """``[N, T]``: the log-prob of each of ``completion_ids`` under the step that drew it."""
        # the last drawn token meets no further processor call: it is read from the finished ids
        self._read(completion_ids[:, -1])
        self.previous = None
        if not self.logps:
            # nothing drawn: no distribution was recorded
            return torch.zeros(completion_ids.shape, device=completion_ids.device)
        return torch.stack(self.logps, 1)


@contextlib.contextmanager
def plain_generation_config(model: nn.Module) -> Iterator[None]:
    """Hide the checkpoint's ``generation_config`` from ``generate`` (which fills every setting a call leaves
    unset from it: repetition penalty, ``min_p``, bad words, forced tokens...) behind a default one."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    saved = inner.generation_config
    # generate fills every unset setting from the checkpoint's config (repetition penalty, min_p...): tokens would be
    # drawn from another distribution than warp's, and the importance ratio would start away from 1
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
    # greedy: temperature 1 and no top-k / top-p, so only the suppression acts and the argmax is the policy's
    processor_ = WarpLogits(1.0, 0, 1.0, suppress) if greedy else WarpLogits(cfg.temperature, cfg.top_k, cfg.top_p,
                                                                                suppress, record=True)
    # a list of stop ids: generate ends a row at any of them and pads the rest of it
    config = GenerationConfig(max_new_tokens=cfg.max_completion_length, eos_token_id=list(stop_ids),
                              pad_token_id=tok.pad_token_id, use_cache=True, do_sample=not greedy,
                              # generate's own warpers are neutral (temperature 1, top_k
                              # 0, top_p 1): WarpLogits applies them, exactly once
                              **({} if greedy else dict(temperature=1.0, top_k=0, top_p=1.0)))
    was_training = model.training
    # eval mode: in train mode under gradient checkpointing transformers turns the KV cache off, and every new
    # token would recompute the whole prefix
    model.eval()
    try:
        with plain_generation_config(model):
            out = model.generate(**prompt, generation_config=config,
                                 logits_processor=LogitsProcessorList([processor_]))
    finally:
        model.train(was_training)
    # prompts are left-padded, so every row's completion starts at the same column P
    ids = out[:, prompt["input_ids"].shape[1]:]
    # greedy has no sampled distribution to record
    sampled = None if greedy or ids.shape[1] == 0 else processor_.sampled_logps(ids)
    return build_rollout(prompt, None, ids, tok, stop_ids, layout, image_ids=suppress_ids, sampling_logps=sampled)


class PlainEngine(RolloutEngine):
    """``generate`` on every prompt repeated G times; log-probs from a full forward of each row."""

    def sample(self, model: nn.Module, prompts: dict, group_size: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        # the G copies of a prompt are contiguous rows, as the contract requires (row n completes prompt n // G)
        rows = repeat_rows(prompts, group_size, self.layout)
        return sample_completions(model, self.processor, rows, self.settings(temperature), self.stop_ids,
                                  self.suppress_ids.tolist(), greedy=greedy, layout=self.layout)

    def logps(self, model: nn.Module, rollout: Rollout, rows: slice = slice(None), *, grad: bool = False,
              entropy: bool | str = False) -> tuple[Tensor, Tensor | None]:
        # one full forward of prompt + completion per row: any model generate supports, at the cost of G prompt copies
        with grad_mode(grad):
            return completion_logps(model, rollout.rows(rows), with_entropy=entropy, **self.warped())
