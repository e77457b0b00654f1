"""Within-group spread of each reward term over training: does a term carry GRPO signal on this data?

GRPO learns from differences between the completions of one prompt; a reward term that gives every
completion of a group the same value adds nothing to the advantages. :func:`group_spread` measures
one rollout; :class:`GroupSpread` averages it over training for every reward and component (the
rubric's ``principle`` and ``unit``, the ASM, ...) and writes the result as JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only

from lit_grpo.grpo import nan_group_stats


def group_spread(values: list[float], group_size: int) -> tuple[float, float]:
    """``(mean within-group std, fraction of groups with a spread)`` of ``values`` ``[B * G]`` (groups of
    ``group_size`` contiguous completions). NaN values ("cannot score") are left out; a group with fewer
    than two scorable values counts as std 0. The std is the unbiased one, as ``train/reward_std``.
    Returns ``(nan, nan)`` when no group has a scorable value.

    >>> group_spread([1, 1, 0, 0, 1, 1, 1, 1], 4)
    (0.28867513459481287, 0.5)
    """
    if group_size < 1 or len(values) % group_size:
        raise ValueError(f"{len(values)} values do not split into groups of {group_size}")
    _, std, count = nan_group_stats(torch.tensor(values, dtype=torch.float64).reshape(-1, group_size))
    std = std[count > 0]  # groups with a scorable value
    if not std.numel():
        return math.nan, math.nan
    return std.mean().item(), (std > 0).double().mean().item()


class GroupSpread(L.Callback):
    """Each training step: every reward's (and component's) mean within-group std and the fraction of groups
    with a spread, logged as ``train/group_std/<name>`` and averaged over the run; at the end of fit the
    averages go to ``path`` as JSON ``{"global_step", "terms": {name: summary}}`` (:meth:`summary`). ``total``
    is the weighted total reward."""

    def __init__(self, path: str | None = None, window: int = 10):
        self.path, self.window = path, window
        self.sums: dict[str, list[float]] = {}
        self.means: dict[str, list[float]] = {}

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.sums, self.means = {}, {}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not isinstance(outputs, dict) or "rewards" not in outputs:
            return
        g = outputs["group_size"]
        logged = {}
        for name, values in {**outputs["rewards"], "total": outputs["total"]}.items():
            std, frac = group_spread(values, g)
            if math.isnan(std):
                continue
            acc = self.sums.setdefault(name, [0.0, 0.0, 0])
            acc[0], acc[1], acc[2] = acc[0] + std, acc[1] + frac, acc[2] + 1
            ok = [v for v in values if not math.isnan(v)]
            self.means.setdefault(name, []).append(sum(ok) / len(ok))
            logged[f"train/group_std/{name}"] = std
        if logged:
            pl_module.log_dict(logged, on_step=True, batch_size=len(outputs["total"]))

    def summary(self) -> dict[str, dict[str, float]]:
        """``name -> {"mean_group_std", "frac_groups_with_spread", "steps", "first", "last"}``: the spread averaged
        over the steps seen, and the term's mean over the first and the last ``window`` steps (the training curve
        in two numbers)."""
        out = {}
        for k, (s, f, n) in sorted(self.sums.items()):
            m = self.means[k]
            out[k] = {"mean_group_std": s / n, "frac_groups_with_spread": f / n, "steps": n,
                      "first": sum(m[:self.window]) / len(m[:self.window]),
                      "last": sum(m[-self.window:]) / len(m[-self.window:])}
        return out

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.path:
            out = Path(self.path)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"global_step": trainer.global_step, "terms": self.summary()}, indent=1))
