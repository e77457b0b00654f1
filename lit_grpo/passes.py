"""The policy side of a GRPO step (:class:`PolicyPasses`): the no-grad log-prob pass (old and reference log-probs,
the column providers' measurements) and the update pass (micro-batched forward + backward of the loss), over a
rollout of the policy through the rollout engine; :class:`LogprobPass` is what the first gives the step."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable

import torch
from torch import Tensor, nn

from lit_grpo import distributed as D
from lit_grpo.columns import ColumnProvider
from lit_grpo.config import GRPOConfig
from lit_grpo.grpo import GRPOLoss
from lit_grpo.objectives import entropy_threshold, high_entropy_mask, sampler_correction
from lit_grpo.policy import ReferencePolicy
from lit_grpo.rollout import Rollout, RolloutEngine

__all__ = ["LogprobPass", "PolicyPasses"]


@dataclasses.dataclass
class LogprobPass:
    """What the no-grad log-prob pass gives a step: log-probs ``[N, T]`` of the sampling policy
    (``num_iterations > 1``, ``steps_per_generation > 1`` or a sampler that is not the policy) and of the reference
    (``beta > 0``), the column providers' measurements (:mod:`lit_grpo.columns`; column -> measurement, e.g. ``asm``
    -> the attention scores) and, for a sampler that is not the policy, its log-probs
    ``[N, T]`` and the correction ``pi_old / mu`` (``[N, T]`` or ``[N, 1]``; None with ``sampler_correction`` off)."""

    old_logps: Tensor | None = None
    ref_logps: Tensor | None = None
    measured: dict = dataclasses.field(default_factory=dict)
    sampling_logps: Tensor | None = None
    sampler_ratio: Tensor | None = None

    def columns(self) -> dict[str, list]:
        """Extra reward columns (``asm``): every measurement's."""
        return {k: v for m in self.measured.values() for k, v in m.columns().items()}


class PolicyPasses:
    """The passes of one step over a rollout of ``policy`` (given per call: the strategy may wrap it), through
    ``engine``: the log-prob pass (policy, column providers, reference) and the update's forward + backward.
    ``max_completion_length``: the ``dr_grpo`` normaliser; ``providers``: column -> its provider
    (:func:`lit_grpo.columns.build_providers`)."""

    def __init__(self, engine: RolloutEngine, cfg: GRPOConfig, max_completion_length: int,
                 reference: ReferencePolicy | None = None, providers: dict[str, ColumnProvider] | None = None):
        self.engine, self.cfg, self.reference = engine, cfg, reference
        self.providers = dict(providers or {})
        # the loss variant (policy term, aggregation, options) is resolved here, once: the step only calls it
        self.loss = GRPOLoss(max_completion_length=max_completion_length, **cfg.loss_options())

    def micro_batches(self, n: int, rows: slice = slice(None)) -> list[slice]:
        """The micro-batches of rows ``rows`` of ``n``."""
        part = range(n)[rows]
        size = self.cfg.micro_batch_size or len(part)
        return [slice(i, min(i + size, part.stop)) for i in range(part.start, part.stop, size)]

    def update_rows(self, n: int) -> list[slice]:
        """The ``steps_per_generation`` parts of a rollout's ``n`` rows, one optimizer update each: equal when
        ``steps_per_generation`` divides ``n``, else as near equal as rows allow (sizes differ by at most one), so an
        epoch's partial last batch still trains.

        Raises:
            ValueError: ``n`` is smaller than ``steps_per_generation`` (an update would have no rows).
        """
        steps = self.cfg.steps_per_generation
        if n < steps:
            raise ValueError(f"grpo.steps_per_generation {steps} exceeds the {n} completions of a rollout on this rank "
                             "(B prompts x G): every update needs a row; choose at most that many")
        return [slice(i * n // steps, (i + 1) * n // steps) for i in range(steps)]

    def logprob_pass(self, policy: nn.Module, rollout: Rollout, images: list[list],
                     train: bool = True) -> LogprobPass:
        """The no-grad log-prob pass: one forward of the policy per micro-batch gives the sampling policy's
        log-probs (``num_iterations > 1``, ``steps_per_generation > 1``, or a rollout whose sampler is not the policy)
        and, with column providers, their measurements from the same forward (a full-sequence forward, whatever the
        engine: ``measured_logps``); then the reference pass (``beta > 0``), then an off-policy sampler's weights
        (:meth:`sampler_weights`). ``images[b]``: prompt ``b``'s images (its rows contiguous, as sampled).
        ``train=False`` (evaluation) skips log-probs."""
        out = LogprobPass()
        # with one on-policy update per rollout the first (only) update's ratio is exactly 1: old = logps.detach()
        # in the loss, and this forward is skipped; a later update or another sampler needs the rollout-time values
        want_old = train and (self.cfg.num_iterations > 1 or self.cfg.steps_per_generation > 1
                              or not rollout.sampler_is_policy)
        with torch.no_grad():  # a `with`, not the decorator: one frame less between the step and the kernel
            if want_old or self.providers:
                old, parts = [], {k: [] for k in self.providers}
                images = [i for i in images for _ in range(rollout.num_completions // len(images))]  # per row
                for s in self.micro_batches(rollout.num_completions):
                    if not self.providers:
                        old.append(self.engine.logps(policy, rollout, s)[0])  # (n, T)
                        continue
                    # the providers' hooks ride on this forward: the measured column costs no second forward
                    logps, measured = self.engine.measured_logps(policy, rollout, s, self.providers, images[s])
                    old.append(logps)
                    for k, m in measured.items():
                        parts[k].append(m)
                out.old_logps = torch.cat(old) if want_old else None  # (N, T)
                out.measured = {k: type(v[0]).cat(v) for k, v in parts.items() if v}
            if train and self.reference is not None:
                ref = []
                with self.reference.model_context(policy) as ref_model:
                    for s in self.micro_batches(rollout.num_completions):
                        ref.append(self.engine.logps(ref_model, rollout, s)[0])
                out.ref_logps = torch.cat(ref)  # (N, T)
            if want_old and not rollout.sampler_is_policy:
                out.sampling_logps, out.sampler_ratio = self.sampler_weights(out.old_logps, rollout)
        return out

    def sampler_weights(self, old_logps: Tensor, rollout: Rollout) -> tuple[Tensor, Tensor | None]:
        """The log-probs ``[N, T]`` of a sampler that is not the policy and the correction ``pi_old / mu`` it needs
        (:func:`lit_grpo.objectives.sampler_correction`; None with ``sampler_correction`` off).

        Raises:
            ValueError: the rollout has no ``sampling_logps``, or ``vespo`` meets a sequence-level correction.
        """
        if rollout.sampling_logps is None:
            raise ValueError("the rollout's sampler is not the policy but the rollout has no sampling_logps: an engine "
                             "that samples from anything else must return the log-probs it sampled with")
        sampling = rollout.sampling_logps.to(old_logps.device)
        if not self.cfg.sampler_correction:
            return sampling, None
        if self.cfg.loss_type == "vespo" and self.cfg.sampler_correction_mode.startswith("sequence"):
            raise ValueError("loss_type vespo folds the sampler weight into its sequence ratio token by token: set "
                             "grpo.sampler_correction_mode to token_truncate or token_mask")
        return sampling, sampler_correction(old_logps, sampling, rollout.completion_mask, **self.cfg.sampler_options())

    def entropy_mask(self, entropy: Tensor, mask: Tensor) -> Tensor | None:
        """The tokens of a micro-batch in the top ``top_entropy_quantile`` of entropy over every rank's valid tokens
        of its micro-batch at the same index (as TRL); None when the quantile is 1. Shape: ``[n, T]`` -> ``[n, T]``."""
        if self.cfg.top_entropy_quantile >= 1:
            return None
        values = entropy[mask].float()  # (M,) this rank's valid tokens
        if D.world()[1] > 1:  # pad to the longest rank's count with a sentinel no entropy takes, gather, drop it
            longest = int(D.all_gather_cat(torch.tensor([values.numel()], device=values.device)).max())
            padded = torch.cat([values, values.new_full((longest - values.numel(),), -1e9)])
            values = D.all_gather_cat(padded)
            values = values[values != -1e9]
        return high_entropy_mask(entropy, mask, entropy_threshold(values, self.cfg.top_entropy_quantile))

    def accumulate_gradients(self, policy: nn.Module, rollout: Rollout, advantages: Tensor, old_logps: Tensor | None,
                             ref_logps: Tensor | None, backward: Callable[[Tensor], None] = Tensor.backward,
                             no_sync: Callable[[bool], contextlib.AbstractContextManager] | None = None, *,
                             rows: slice = slice(None), sampler: LogprobPass | None = None,
                             entropy_coef: float = 0.0) -> dict[str, float]:
        """Backward over every micro-batch of one update, on the rollout's rows ``rows`` (one of
        :meth:`update_rows`); the loss normalisers cover the whole update (all its micro-batches and every rank's:
        the sequences of ``rows``; the tokens of the rollout / ``steps_per_generation``, as TRL), so the gradient does
        not depend on ``micro_batch_size`` or the number of ranks (except the per-micro-batch means: ``bnpo``, the
        entropy bonus, ``top_entropy_quantile``'s threshold). ``sampler``: the log-prob pass, for an off-policy
        sampler's correction; ``entropy_coef``: the entropy bonus this update applies. ``no_sync(last)``: the context
        that holds DDP's gradient sync back on all but the last micro-batch. With ``use_adaptive_entropy`` the stats
        hold ``entropy_acted``, the update's mean entropy over the tokens the bonus acts on (every rank)."""
        mask = rollout.completion_mask  # (N, T) bool: tokens up to and including the stop token
        if self.cfg.mask_truncated_completions:  # a completion cut at max_completion_length has no reward to trust
            mask = mask & ~rollout.truncated[:, None]
        _, world = D.world()
        # the normalisers span the whole update on every rank, so no micro-batch or rank count changes the gradient;
        # tokens: the rollout's / steps_per_generation (TRL's), sequences: this update's rows
        num_items = D.all_reduce_sum(mask.sum().float()).item() / self.cfg.steps_per_generation
        num_seq = D.all_reduce_sum(torch.tensor(float(mask[rows].shape[0]), device=mask.device)).item()
        chunks = self.micro_batches(rollout.num_completions, rows)
        tokens = max(mask[rows].sum().item(), 1)  # this rank's tokens of the update: weights of the token-mean stats
        stats = dict.fromkeys(("loss", "kl", "clip_ratio_low", "clip_ratio_high", "clip_ratio", "entropy"), 0.0)
        acted = torch.zeros(2, dtype=torch.float64, device=mask.device)  # entropy sum, tokens the bonus acts on
        for k, s in enumerate(chunks):
            # DDP syncs gradients on every backward unless held back: only the last micro-batch's backward syncs
            with no_sync(k == len(chunks) - 1) if no_sync is not None else contextlib.nullcontext():
                # the entropy needs a graph only when the bonus is in the loss; else it is a logged figure
                logps, entropy = self.engine.logps(policy, rollout, s, grad=True,
                                                   entropy="grad" if entropy_coef else True)  # (n, T) each
                top = self.entropy_mask(entropy.detach(), mask[s])  # (n, T) or None; a mask carries no gradient
                # without stored old log-probs this is the rollout's first update of an on-policy sampler: the old
                # policy is this one, so the ratio is exactly 1 and its gradient that of logps (detach, not a copy)
                loss, st = self.loss(
                    logps, old_logps[s] if old_logps is not None else logps.detach(), advantages[s], mask[s],
                    ref_logps=_rows(ref_logps, s), num_items=num_items, num_sequences=num_seq,
                    num_micro_batches=len(chunks) * world, entropy=entropy, entropy_mask=top,
                    entropy_coef=entropy_coef, sampler_ratio=_rows(sampler and sampler.sampler_ratio, s),
                    sampling_logps=_rows(sampler and sampler.sampling_logps, s))
                backward(loss * world)  # undo DDP's average over ranks: the normalisers already span them
            share, acts_on = mask[s].sum().item() / tokens, mask[s] if top is None else mask[s] & top
            acted += torch.stack([(entropy.detach() * acts_on).sum(), acts_on.sum()]).double()
            stats["loss"] += loss.item() * world
            stats["entropy"] += (entropy.detach() * mask[s]).sum().item() / tokens
            for key, value in st.items():  # token means of the micro-batch, weighted by its share of the tokens
                stats[key] = stats.get(key, 0.0) + value.item() * share
        # over all ranks: each rank's loss is its share of the update's loss times W, the rest are token means
        loss = D.weighted_mean({"loss": stats.pop("loss")}, 1.0)
        out = {**loss, **D.weighted_mean(stats, float(mask[rows].sum()))}
        if self.cfg.use_adaptive_entropy:  # the controller reads every rank's entropy over the tokens it acts on
            acted = D.all_reduce_sum(acted)
            out["entropy_acted"] = (acted[0] / acted[1].clamp(min=1.0)).item()
        return out

def _rows(x: Tensor | None, rows: slice) -> Tensor | None:
    return None if x is None else x[rows]
