"""torchmetrics bookkeeping for evaluation: per-prompt values per logged key, reported as mean +- SE.

Completions of one prompt are not independent samples, so every key stores one value per prompt (the
mean over that prompt's completions) and the standard error is taken over prompts:
``SE = std(prompt means, unbiased) / sqrt(prompts)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torchmetrics.aggregation import CatMetric


def prompt_means(values: Tensor, per_prompt: int) -> Tensor:
    """``[B * n]`` completion values -> ``[B]`` NaN-aware means (NaN when a prompt has no scorable value)."""
    v = values.detach().float().reshape(-1, per_prompt)
    valid = ~torch.isnan(v)
    sums = torch.where(valid, v, torch.zeros_like(v)).sum(1)
    counts = valid.sum(1)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, math.nan))


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

    def update(self, key: str, values: Tensor, per_prompt: int) -> None:
        slot = key.replace("/", "__").replace(".", "_")
        if slot not in self.metrics:
            self.metrics[slot] = CatMetric(nan_strategy="disable").to(values.device)
        self.metrics[slot].update(prompt_means(values, per_prompt).to(self.metrics[slot].device))

    def compute(self, prefix: str) -> dict[str, tuple[float, float, int]]:
        """``key -> (mean, SE, prompts)`` for keys under ``prefix``; resets them."""
        out = {}
        for slot, metric in self.metrics.items():
            key = slot.replace("__", "/")
            if key.startswith(prefix) and metric.update_count > 0:
                out[key] = mean_and_se(metric.compute().reshape(-1).cpu())
                metric.reset()
        return out
