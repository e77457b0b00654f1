"""The rollout engine: the one interface through which a training step uses the policy.

A step needs three things from the policy model, and asks an engine for each:

1. :meth:`RolloutEngine.sample`: G completions per prompt (a :class:`~lit_grpo.rollout.rows.Rollout`);
2. :meth:`RolloutEngine.logps`: per-token log-probs of a range of the rollout's rows, with or without grad,
   with the per-token entropy on request (scoring, reference and update passes);
3. :meth:`RolloutEngine.attention_logps`: the same log-probs from one full-sequence forward that the
   attention capture (:class:`lit_grpo.attention.AttentionScorer`) watches, and the ASM it reads from it.

Two engines implement it: :class:`~lit_grpo.rollout.plain.PlainEngine` (``transformers``' ``generate``, a
full forward per pass) and :class:`~lit_grpo.rollout.shared.SharedPrefixEngine` (each prompt prefilled once
for its group, image features reused across passes). :func:`lit_grpo.rollout.build_engine` chooses one, once,
from the config and the model family; the module never asks which.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from torch import Tensor, nn

from lit_grpo.layout import RowLayout
from lit_grpo.rollout.rows import Rollout, SamplingConfig, completion_logps


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
    - ``logps(model, rollout, rows, grad=, entropy=)``: ``[n, T]`` float32 log-probs of the completion tokens of
      rows ``rows`` (``n`` rows) under ``model`` (policy or reference), from the same :func:`lit_grpo.grpo.warp`
      the sampler used (:func:`lit_grpo.grpo.selective_log_softmax`); the entropy ``[n, T]`` float32 of the same
      distribution with ``entropy=True``, else None. Values at masked positions are finite and unused. With
      ``grad=True`` the log-probs carry the gradient to every trainable weight that produced them.
      Must equal :func:`lit_grpo.rollout.rows.completion_logps` (one full forward of prompt + completion) up to
      float rounding, whatever the row range, and, for the sampling policy, the log-probs of the distribution the
      tokens were sampled from (the first importance ratio is 1).
    - ``attention_logps(model, rollout, rows, scorer, images)``: ``logps(..., grad=False)`` computed by one
      full-sequence forward with the scorer's hooks on it, and the rows' :class:`~lit_grpo.attention.AttentionScores`
      (``images[k]``: row ``k``'s PIL images); no second forward.
    """

    def __init__(self, processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int],
                 suppress_ids: list[int]):
        self.processor, self.layout, self.sampling = processor, layout, sampling
        self.stop_ids = list(stop_ids)
        self.suppress_ids = torch.tensor(list(suppress_ids), dtype=torch.long)

    @property
    def tokenizer(self):
        return getattr(self.processor, "tokenizer", self.processor)

    def settings(self, temperature: float | None = None) -> SamplingConfig:
        """The sampling settings of one call (evaluation samples at a temperature of its own)."""
        return self.sampling if temperature is None else dataclasses.replace(self.sampling, temperature=temperature)

    def warped(self) -> dict:
        """The sampled distribution's settings, as :func:`lit_grpo.grpo.selective_log_softmax` takes them."""
        s = self.sampling
        return dict(temperature=s.temperature, suppress_ids=self.suppress_ids, top_k=s.top_k, top_p=s.top_p)

    def sample(self, model: nn.Module, prompts: dict, group_size: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        raise NotImplementedError

    def row_logps(self, model: nn.Module, rollout: Rollout, rows: slice,
                  entropy: bool) -> tuple[Tensor, Tensor | None]:
        """The engine's forward for :meth:`logps` (grad as the caller set it)."""
        raise NotImplementedError

    def logps(self, model: nn.Module, rollout: Rollout, rows: slice = slice(None), *, grad: bool = False,
              entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        with contextlib.nullcontext() if grad else torch.no_grad():
            return self.row_logps(model, rollout, rows, entropy)

    @torch.no_grad()
    def attention_logps(self, model: nn.Module, rollout: Rollout, rows: slice, scorer, images: list[list]):
        sub = rollout.rows(rows)
        with scorer.capture(model, sub) as cap:
            logps = completion_logps(model, sub, **self.warped())[0]
        return logps, (scorer.score(cap, sub, images) if cap is not None else None)
