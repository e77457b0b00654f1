"""Flatten hyper-parameters for loggers: nested dicts, dataclasses and lists become dotted scalar keys."""

from __future__ import annotations

import dataclasses
from typing import Any


def flatten_hparams(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"rewards": [RewardSpec("binary", 1.0)]}`` -> ``{"rewards.0.name": "binary", "rewards.0.weight": 1.0, ...}``.

    Scalars (str, int, float, bool, None) are kept; anything else becomes its ``repr``. Loggers only
    flatten dicts, so a list of reward specs would otherwise end up as one string.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict) or hasattr(value, "items"):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten_hparams(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, (list, tuple)):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten_hparams(v, f"{prefix}.{i}"))
        return out or {prefix: "[]"}
    if value is None or isinstance(value, (str, int, float, bool)):
        return {prefix: value}
    return {prefix: getattr(value, "__name__", None) or repr(value)}
