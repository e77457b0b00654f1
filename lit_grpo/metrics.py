"""torchmetrics bookkeeping: a mean per logged key and stage, created on first use."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric


class StageMeans(nn.Module):
    """``MeanMetric`` objects keyed by log name (``val/greedy/reward/binary``), created lazily.

    NaN values ("cannot score") are ignored, so a mean is over the rows that could be scored.
    """

    def __init__(self):
        super().__init__()
        self.metrics = nn.ModuleDict()

    def update(self, key: str, values: Tensor, device: torch.device | None = None) -> MeanMetric:
        slot = key.replace("/", "__").replace(".", "_")
        if slot not in self.metrics:
            self.metrics[slot] = MeanMetric(nan_strategy="ignore").to(device or values.device)
        metric = self.metrics[slot]
        values = values.detach().float().reshape(-1)
        if (~torch.isnan(values)).any():
            metric.update(values.to(metric.device))
        return metric

    def items(self) -> list[tuple[str, MeanMetric]]:
        return [(k.replace("__", "/"), m) for k, m in self.metrics.items()]
