"""Training-step statistics, and torchmetrics bookkeeping for evaluation: per-prompt values per logged key, reported as mean +- SE.

Completions of one prompt are not independent samples, so every key stores one value per prompt (the
mean over that prompt's completions) and the standard error is taken over prompts:
``SE = std(prompt means, unbiased) / sqrt(prompts)``.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn
from torchmetrics.aggregation import CatMetric

from lit_grpo.grpo import nan_group_stats
from lit_grpo.objectives import corrected


def train_metrics(per_reward: dict[str, Tensor], total: Tensor, advantages: Tensor, group_size: int,
                  lengths: Tensor, truncated: Tensor, signal: Tensor | None = None) -> dict[str, float]:
    """The ``train/`` statistics of one rollout: the learning curves ``train/reward`` (mean), each reward's mean
    and std and ``train/reward_std`` (mean within-group std), then the diagnostics under ``train/rollout/``
    (fraction of groups with zero std, fraction unscorable, advantage mean/std, completion length: mean, max,
    fraction truncated). Names sort the curves before the diagnostics in TensorBoard. Shapes:
    ``total``/``advantages``/each reward ``[N]`` (NaN = unscorable, groups of ``group_size`` contiguous),
    ``lengths`` ``[N]`` (tokens per completion), ``truncated`` ``[N]``. Pass every rank's completions (gathered
    in rank order) for figures over the whole step.

    ``train/reward_std`` and ``frac_reward_zero_std`` are of ``signal`` ``[N]``, what the advantages were computed
    from (default: ``total``; GDPO's sum of normalised terms under ``normalize_then_sum``,
    :func:`lit_grpo.grpo.decoupled_sum`), so a group counted as having no signal is one whose advantages are 0."""
    # float(): the statistics are taken in float32 whatever the signal's dtype
    group_std = nan_group_stats((total if signal is None else signal).float().reshape(-1, group_size))[1]
    lengths = lengths.float()
    log = {
        "train/reward": torch.nanmean(total).item(),
        "train/reward_std": group_std.mean().item(),
        "train/rollout/frac_reward_zero_std": (group_std == 0).float().mean().item(),
        "train/rollout/frac_unscorable": torch.isnan(total).float().mean().item(),
        "train/rollout/advantage/mean": advantages.mean().item(),
        # torch's unbiased std of one value is NaN
        "train/rollout/advantage/std": advantages.std().item() if advantages.numel() > 1 else 0.0,
        "train/rollout/completion_length/mean": lengths.mean().item(),
        "train/rollout/completion_length/max": lengths.max().item(),
        "train/rollout/completion_length/frac_truncated": truncated.float().mean().item(),
    }
    for label, values in per_reward.items():  # over all completions the term applied to (one "group")
        mean, std, count = nan_group_stats(values.float())
        log[f"train/reward/{label}"] = mean.item() if count else math.nan
        log[f"train/reward/{label}_std"] = std.item()
    return log


def advantage_shares(labels: list[str], parts: Tensor) -> dict[str, float]:
    """``train/advantage/<label>``: the mean over completions of ``|c_k|``, reward ``k``'s share of the advantage
    (GDPO's ``A = sum_k c_k``, :func:`lit_grpo.grpo.decoupled_advantages`), so a curve shows which term drives the
    update. Shape: ``parts`` ``[N, K]`` (every rank's completions), one label per column."""
    return {f"train/advantage/{label}": parts[:, k].abs().mean().item() for k, label in enumerate(labels)}


SAMPLER_WARN_SHARE = 0.2
"""A step whose sampler correction masks or clips more than this share of completions is warned about (once)."""


def sampler_metrics(old_logps: Tensor, sampling_logps: Tensor, ratio: Tensor | None, mask: Tensor,
                    gather: Callable[[Tensor], Tensor] = lambda x: x,
                    options: dict | None = None) -> dict[str, float]:
    """How far the sampler is from the policy the update starts from, over every rank's valid tokens (TRL's
    ``sampling/...`` figures): ``train/rollout/sampler/logp_gap_mean`` and ``_max`` (``|log pi_old - log mu|``;
    float rounding for the built-in engines, which sample from the policy), ``kl`` (``mean(log mu - log pi_old)``
    over the sampled tokens: the k1 estimate of KL(mu || pi_old) per token, nats) and, when a correction applies,
    ``ratio_mean``, ``ratio_min``, ``ratio_max`` of the weight ``pi_old / mu`` as the update applies it (per token,
    or per sequence at the sequence level) and ``corrected_completions`` / ``corrected_tokens``, the share of
    completions (with a token) and of valid tokens whose weight the correction masked or clipped
    (:func:`lit_grpo.objectives.corrected`, with ``options``, the correction's keyword arguments; at the sequence
    level a completion's every token). ``gather`` concatenates a ``[1, k]`` tensor over ranks. Shape: old /
    sampling / mask ``[N, T]``, ratio ``[N, T]`` or ``[N, 1]``."""
    m = mask.bool()
    diff = (sampling_logps.float().to(old_logps.device) - old_logps.float())[m]
    # NaN where the sampler could not score a token: weight 1 there, and no gap to report
    diff = diff[~torch.isnan(diff)]
    gap = diff.abs()
    # sums and counts, not means: ranks hold different token counts, so the means are formed after the gather
    values = [gap.sum(), gap.numel(), gap.max() if gap.numel() else 0.0, diff.sum()]
    if ratio is not None:
        r = ratio[m] if ratio.shape == m.shape else ratio.reshape(-1)  # sequence level: one weight per completion
        tokens, completions = corrected(old_logps.float(), sampling_logps.float().to(old_logps.device), mask,
                                        **(options or {}))
        # +-inf for a rank without tokens: the gathered min / max then ignore it
        values += [r.sum(), r.numel(), r.min() if r.numel() else math.inf, r.max() if r.numel() else -math.inf,
                   tokens.sum(), m.sum(), completions.sum(), m.any(-1).sum()]
    # float64: exact counts after the sum
    rows = gather(torch.tensor([[float(v) for v in values]], dtype=torch.float64, device=old_logps.device)).cpu()
    tokens = rows[:, 1].sum().clamp(min=1)
    out = {"train/rollout/sampler/logp_gap_mean": (rows[:, 0].sum() / tokens).item(),
           "train/rollout/sampler/logp_gap_max": rows[:, 2].max().item(),
           "train/rollout/sampler/kl": (rows[:, 3].sum() / tokens).item()}
    if ratio is not None:
        weights = rows[:, 5].sum().clamp(min=1)
        out.update({"train/rollout/sampler/ratio_mean": (rows[:, 4].sum() / weights).item(),
                    "train/rollout/sampler/ratio_min": rows[:, 6].min().item(),
                    "train/rollout/sampler/ratio_max": rows[:, 7].max().item(),
                    "train/rollout/sampler/corrected_tokens": (rows[:, 8].sum() / rows[:, 9].sum().clamp(min=1)).item(),
                    "train/rollout/sampler/corrected_completions":
                        (rows[:, 10].sum() / rows[:, 11].sum().clamp(min=1)).item()})
    return out


def prompt_means(values: Tensor, per_prompt: int) -> Tensor:
    """``[B * n]`` completion values -> ``[B]`` NaN-aware means (NaN when a prompt has no scorable value)."""
    mean, _, count = nan_group_stats(values.detach().float().reshape(-1, per_prompt))
    return torch.where(count > 0, mean, torch.full_like(mean, math.nan))


def mean_and_se(values: Tensor) -> tuple[float, float, int]:
    """Mean, standard error and count of the non-NaN entries (SE 0 with fewer than two)."""
    v = values[~torch.isnan(values)].double()
    n = v.numel()
    if n == 0:
        return math.nan, math.nan, 0
    se = (v.std(unbiased=True) / math.sqrt(n)).item() if n > 1 else 0.0
    return v.mean().item(), se, n


class PromptStats(nn.Module):
    """One ``CatMetric`` of per-prompt values per key (``val/sampled/reward/binary``), created on first use."""

    def __init__(self):
        super().__init__()
        self.metrics = nn.ModuleDict()
        self.keys: dict[str, str] = {}  # slot -> the key as given: '.' -> '_' cannot be undone from the slot

    def update(self, key: str, values: Tensor, per_prompt: int) -> None:
        # a module name may not contain '.' (nor, by convention here, '/'): the slot is the key made a name, and
        # compute() reports the key as given (a dotted reward path keeps its dots)
        slot = key.replace("/", "__").replace(".", "_")
        self.keys[slot] = key
        if slot not in self.metrics:
            # nan_strategy="disable": a prompt with no scorable value stays NaN, and mean_and_se leaves it out
            self.metrics[slot] = CatMetric(nan_strategy="disable").to(values.device)
        self.metrics[slot].update(prompt_means(values, per_prompt).to(self.metrics[slot].device))

    def compute(self, prefix: str) -> dict[str, tuple[float, float, int]]:
        """``key -> (mean, SE, prompts)`` for keys under ``prefix``; resets them."""
        out = {}
        for slot, metric in self.metrics.items():
            key = self.keys[slot]
            # a key with nothing since its last reset (a mode not run this time) reports nothing
            if key.startswith(prefix) and metric.update_count > 0:
                out[key] = mean_and_se(metric.compute().reshape(-1).cpu())
                metric.reset()
        return out
