"""The policy side of a GRPO step (:class:`PolicyPasses`): the no-grad log-prob pass (old and reference log-probs,
the attention capture) and the update pass (micro-batched forward + backward of the loss), over a rollout of the
policy through the rollout engine; :class:`LogprobPass` is what the first gives the step."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable

import torch
from torch import Tensor, nn

from lit_grpo import distributed as D
from lit_grpo.attention import AttentionMeter, AttentionScores
from lit_grpo.config import GRPOConfig
from lit_grpo.grpo import grpo_loss
from lit_grpo.policy import ReferencePolicy
from lit_grpo.rollout import Rollout, RolloutEngine

__all__ = ["LogprobPass", "PolicyPasses"]


@dataclasses.dataclass
class LogprobPass:
    """What the no-grad log-prob pass gives a step: log-probs ``[N, T]`` of the sampling policy
    (``num_iterations > 1``) and of the reference (``beta > 0``), and the attention scores (when captured)."""

    old_logps: Tensor | None = None
    ref_logps: Tensor | None = None
    attention: AttentionScores | None = None

    def columns(self) -> dict[str, list]:
        """Extra reward columns (``asm``)."""
        return {} if self.attention is None else {"asm": self.attention.asm.tolist()}


class PolicyPasses:
    """The passes of one step over a rollout of ``policy`` (given per call: the strategy may wrap it), through
    ``engine``: the log-prob pass (policy, attention capture, reference) and the update's forward + backward.
    ``max_completion_length``: the ``dr_grpo`` normaliser."""

    def __init__(self, engine: RolloutEngine, cfg: GRPOConfig, max_completion_length: int,
                 reference: ReferencePolicy | None = None, attention_meter: AttentionMeter | None = None):
        self.engine, self.cfg, self.reference = engine, cfg, reference
        self.max_completion_length, self.attention_meter = max_completion_length, attention_meter

    def micro_batches(self, n: int) -> list[slice]:
        size = self.cfg.micro_batch_size or n
        return [slice(i, min(i + size, n)) for i in range(0, n, size)]

    @torch.no_grad()
    def logprob_pass(self, policy: nn.Module, rollout: Rollout, images: list[list], train: bool = True) -> LogprobPass:
        """The no-grad log-prob pass: one forward of the policy per micro-batch gives the sampling policy's
        log-probs (``num_iterations > 1``) and, with the attention capture on, the ASM from the same forward
        (a full-sequence forward, whatever the engine); then the reference pass (``beta > 0``). ``images[n]``:
        row ``n``'s images. ``train=False`` (evaluation) skips log-probs."""
        out = LogprobPass()
        want_old = train and self.cfg.num_iterations > 1
        if want_old or self.attention_meter is not None:
            old, attention = [], []
            for s in self.micro_batches(rollout.num_completions):
                if self.attention_meter is None:
                    old.append(self.engine.logps(policy, rollout, s)[0])
                    continue
                logps, scores = self.engine.attention_logps(policy, rollout, s, self.attention_meter, images[s])
                old.append(logps)
                attention += [scores] if scores is not None else []
            out.old_logps = torch.cat(old) if want_old else None
            out.attention = AttentionScores.cat(attention) if attention else None
        if train and self.reference is not None:
            with self.reference.model_context(policy) as ref_model:
                out.ref_logps = torch.cat([self.engine.logps(ref_model, rollout, s)[0]
                                           for s in self.micro_batches(rollout.num_completions)])
        return out

    def accumulate_gradients(self, policy: nn.Module, rollout: Rollout, advantages: Tensor, old_logps: Tensor | None,
                             ref_logps: Tensor | None, backward: Callable[[Tensor], None] = Tensor.backward,
                             no_sync: Callable[[bool], contextlib.AbstractContextManager] | None = None
                             ) -> dict[str, float]:
        """Backward over every micro-batch; the loss normalisers cover the whole step (all micro-batches
        and ranks), so the gradient does not depend on ``micro_batch_size`` or the number of ranks.
        ``no_sync(last)``: the context that holds DDP's gradient sync back on all but the last micro-batch."""
        mask = rollout.completion_mask
        if self.cfg.mask_truncated_completions:
            mask = mask & ~rollout.truncated[:, None]
        _, world = D.world()
        num_items = D.all_reduce_sum(mask.sum().float()).item()
        num_seq = D.all_reduce_sum(torch.tensor(float(mask.shape[0]), device=mask.device)).item()
        chunks = self.micro_batches(rollout.num_completions)
        # grpo/dr_grpo/dapo: step-wide normalisers, times W to undo DDP's gradient averaging;
        # bnpo: a token mean per micro-batch, averaged over micro-batches (and over ranks by DDP).
        factor = world if self.cfg.loss_type != "bnpo" else 1.0 / len(chunks)
        tokens = max(mask.sum().item(), 1)
        stats = dict.fromkeys(("loss", "kl", "clip_ratio_low", "clip_ratio_high", "clip_ratio", "entropy"), 0.0)
        for k, s in enumerate(chunks):
            with no_sync(k == len(chunks) - 1) if no_sync is not None else contextlib.nullcontext():
                logps, entropy = self.engine.logps(policy, rollout, s, grad=True, entropy=True)
                loss, st = grpo_loss(
                    logps, old_logps[s] if old_logps is not None else logps.detach(), advantages[s], mask[s],
                    ref_logps=ref_logps[s] if ref_logps is not None else None, beta=self.cfg.beta,
                    epsilon_low=self.cfg.epsilon_low, epsilon_high=self.cfg.epsilon_high,
                    loss_type=self.cfg.loss_type, max_completion_length=self.max_completion_length,
                    num_items=num_items, num_sequences=num_seq)
                backward(loss * factor)
            share = mask[s].sum().item() / tokens
            stats["loss"] += loss.item() * factor
            stats["entropy"] += (entropy * mask[s]).sum().item() / tokens
            for key in ("kl", "clip_ratio_low", "clip_ratio_high", "clip_ratio"):
                stats[key] += st[key].item() * share
        # over all ranks: each rank's loss is its share of the step's loss times W, the rest are token means
        loss = D.weighted_mean({"loss": stats.pop("loss")}, 1.0)
        return {**loss, **D.weighted_mean(stats, float(mask.sum()))}
