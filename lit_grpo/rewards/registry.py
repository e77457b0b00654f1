"""Reward registry, reward specs from the config, and the weighted sum that makes the total reward.

A reward is a callable ``(completions: list[str], **columns) -> list[float]`` where every column is a
list aligned with ``completions`` (``answer``, ``answer_format``, ``options``, ``principle``,
``unit``, ``domain``, ``id``, ``meta``, ``images`` and any extras of the scoring pass). NaN means
"cannot score" (missing gold, failed judge) and is never replaced by 0.

A composite reward may return a :class:`RewardOutput` (a list of its per-completion totals) that also
carries ``components`` (per-completion values logged next to the total, not added to it) and
``metrics`` (scalars of the call, e.g. judge latency).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from typing import Any, Callable

import torch

from lit_grpo.registry import Registry

RewardFn = Callable[..., list[float]]
REWARDS: Registry[Callable[..., Any]] = Registry("reward")
"""Reward functions and reward classes by name."""


@dataclasses.dataclass
class RewardSpec:
    """One term of the total reward: ``weight * reward(name, **kwargs)``."""

    name: str
    """Registered reward name (``binary``, ``format``, ``accuracy``, ...)."""
    weight: float = 1.0
    """Weight in the total reward."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Options of the reward (see its docstring)."""
    alias: str | None = None
    """Name under which it is logged (defaults to ``name``); lets one reward appear twice."""

    @property
    def label(self) -> str:
        return self.alias or self.name


class RewardOutput(list):
    """A reward's per-completion values (a plain ``list`` of floats to any caller) plus extras for logging.

    ``components``: name -> per-completion values (e.g. a rubric's ``principle``, ``unit``), reported
    as ``<label>/<name>``; ``metrics``: name -> scalar for this call (e.g. ``judge/latency_s``),
    reported as ``<label>/<name>``. Neither enters the weighted total.
    """

    def __init__(self, values, components: dict[str, list[float]] | None = None,
                 metrics: dict[str, float] | None = None):
        super().__init__(values)
        self.components = dict(components or {})
        self.metrics = dict(metrics or {})


def _column(label: str, values, n: int) -> torch.Tensor:
    if len(values) != n:
        raise ValueError(f"reward {label!r} returned {len(values)} values for {n} completions")
    return torch.tensor([math.nan if v is None else float(v) for v in values], dtype=torch.float32)


def build_reward(spec: RewardSpec) -> RewardFn:
    """Instantiate a registered reward class, or bind ``kwargs`` to a registered function."""
    entry = REWARDS.get(spec.name)
    if inspect.isclass(entry):
        return entry(**spec.kwargs)
    return functools.partial(entry, **spec.kwargs)


def build_rewards(specs: list[RewardSpec]) -> dict[str, RewardFn]:
    """Label -> callable for every spec; duplicate labels raise (use ``alias``)."""
    out: dict[str, RewardFn] = {}
    for spec in specs:
        if spec.label in out:
            raise ValueError(f"reward {spec.label!r} appears twice; give one an alias")
        out[spec.label] = build_reward(spec)
    return out


def required_columns(specs: list[RewardSpec]) -> set[str]:
    """Columns of the scoring pass the rewards read (a registered reward lists them in ``columns``)."""
    return {c for spec in specs for c in getattr(REWARDS.get(spec.name), "columns", ())}


def score_completions(
    fns: dict[str, RewardFn], weights: dict[str, float], completions: list[str], columns: dict[str, list],
    metrics: dict[str, float] | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Run every reward and form the weighted total.

    Shape: ``N`` completions -> per-reward ``[N]`` float32 tensors and a total ``[N]``.
    The total is the weighted sum over the rewards that could score the row (NaN terms are skipped,
    as TRL does); a row no reward could score is NaN (its advantage becomes 0). The components of a
    :class:`RewardOutput` are added to the returned dict as ``"<label>/<component>"`` (after the
    terms; never in the total), and its metrics go into ``metrics`` (when given) as ``"<label>/<name>"``.
    Raises:
        ValueError: a reward returned the wrong number of values (names the reward).
    """
    per: dict[str, torch.Tensor] = {}
    extra: dict[str, torch.Tensor] = {}
    for label, fn in fns.items():
        values = fn(completions, **columns)
        per[label] = _column(label, values, len(completions))
        for name, comp in getattr(values, "components", {}).items():
            extra[f"{label}/{name}"] = _column(f"{label}/{name}", comp, len(completions))
        if metrics is not None:
            metrics.update({f"{label}/{k}": float(v) for k, v in getattr(values, "metrics", {}).items()})
    stacked = torch.stack([weights[k] * v for k, v in per.items()])  # (R, N)
    total = torch.nansum(stacked, 0)
    total[torch.isnan(stacked).all(0)] = math.nan
    per.update(extra)
    return per, total
