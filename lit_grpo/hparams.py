"""Flatten hyper-parameters for loggers: nested dicts, dataclasses and lists become dotted scalar keys."""

from __future__ import annotations

import dataclasses
from typing import Any

from lightning.pytorch.utilities import rank_zero_only


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


@rank_zero_only
def log_flat_hparams(logger, flat: dict[str, Any], metric_keys: list[str]) -> None:
    """Write flattened hyper-parameters to ``hparams.yaml`` and, for TensorBoard, to the HPARAMS tab (rank 0 only:
    it alone has a log folder and a TensorBoard writer in a multi-process run).

    The HPARAMS tab lists ``metric_keys`` (scalars logged during the run) as columns; nothing is written
    to those scalars here (Lightning's own hook would log a placeholder ``hp_metric``).
    """
    logger.log_hyperparams(flat)
    log_dir = getattr(logger, "log_dir", None)
    if log_dir and hasattr(logger, "hparams"):  # Lightning writes hparams.yaml only once, maybe before this call
        import os

        from lightning.pytorch.core.saving import save_hparams_to_yaml

        os.makedirs(log_dir, exist_ok=True)
        save_hparams_to_yaml(os.path.join(log_dir, "hparams.yaml"), logger.hparams)
    from lit_grpo.compat import summary_file_writer

    file_writer = summary_file_writer(getattr(logger, "experiment", None))
    if file_writer is None:  # not TensorBoard: no HPARAMS tab
        return
    from torch.utils.tensorboard.summary import hparams

    clean = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flat.items()}
    for summary in hparams(clean, dict.fromkeys(metric_keys, 0.0)):
        file_writer.add_summary(summary)
