"""TensorBoard laid out for reading a GRPO run: the learning curves first, validation with its standard-error
band, diagnostics after them.

Tag scheme (TensorBoard's Time Series tab groups cards by the text before the first ``/``, sorts groups
and cards by name and opens only the first two groups):

- ``train/reward``, ``train/reward/<name>``, ``train/reward_std``: the training curves (first group);
  ``train/rollout/...`` (advantages, completion lengths, zero-std groups, throughput, attention overlays)
  and ``train/update/...`` (loss, KL, clipping, entropy, gradient norm, learning rate) sort after them.
- ``val/<mode>/...``: validation means over prompts (second group).
- ``val_band/<mode>/.../lower`` and ``/upper``: mean -+ its standard error over prompts, the band the
  Custom Scalars tab draws around each validation curve (a third, closed group).

A run keeps one folder across stops and resumes: :class:`RunFolder` (added by the CLI) records the folder in
every checkpoint, and a ``fit`` resumed from one with the same logger settings logs into it again
(:func:`continue_run_folder`), dropping from view what the earlier process logged after the checkpoint's step.

The module logs ``<key>`` and ``<key>_se`` (what ``trainer.callback_metrics``, the closing summary and
``eval_curves.csv`` hold); :class:`TensorBoardLogger` writes the SE as that band, adds the Custom Scalars
layout (validation curves with their bands, training rewards, diagnostics), and leaves out Lightning's
``epoch`` scalar while it says nothing (during the first pass over the training data; from the second
on it is written as ``train/rollout/epoch``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger as _LightningTensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

EVAL_STAGES = ("val", "test")
SE_SUFFIX = "_se"
EPOCH_TAG = "train/rollout/epoch"


def band_tags(key: str) -> tuple[str, str]:
    """``val/greedy/reward`` -> ``("val_band/greedy/reward/lower", "val_band/greedy/reward/upper")``."""
    stage, rest = key.split("/", 1)
    return f"{stage}_band/{rest}/lower", f"{stage}_band/{rest}/upper"


def tensorboard_scalars(metrics: Mapping[str, float]) -> dict[str, float]:
    """The scalars to write for one ``log_metrics`` call: each ``<stage>/<key>_se`` whose ``<stage>/<key>`` is in
    ``metrics`` (stage ``val`` or ``test``) becomes the band ``<stage>_band/<key>/lower`` = mean - SE and
    ``/upper`` = mean + SE; Lightning's ``epoch`` is dropped while 0 and written as ``train/rollout/epoch`` after."""
    out = {}
    for key, value in metrics.items():
        mean_key = key[: -len(SE_SUFFIX)]
        if key.endswith(SE_SUFFIX) and key.split("/", 1)[0] in EVAL_STAGES and mean_key in metrics:
            lower, upper = band_tags(mean_key)
            out[lower], out[upper] = metrics[mean_key] - value, metrics[mean_key] + value
        elif key == "epoch":
            if value > 0:
                out[EPOCH_TAG] = value
        else:
            out[key] = value
    return out


def curve_order(key: str) -> tuple:
    """Sort key of validation curves: accuracy, the total reward, each reward, completion length, the rest."""
    rest = key.split("/", 2)[-1]  # drop "<stage>/<mode>/"
    rank = 0 if rest == "accuracy" else 1 if rest == "reward" else 2 if rest.startswith("reward/") else \
        3 if rest == "completion_length" else 4
    return rank, rest, key


def is_curve(key: str) -> bool:
    """A validation key worth a chart: not a judge's call statistic."""
    return "/judge/" not in key


def _multiline(title: str, regex: str) -> dict[str, Any]:
    return {"title": title, "multiline": {"tag": [regex]}}


TRAIN_CHARTS = [
    _multiline("train/reward (total, weighted sum)", r"^train/reward$"),
    _multiline("train/reward/<name> (each reward, before weighting)", r"^train/reward/[^/]+(?<!_std)$"),
    _multiline("signal: within-group reward std, fraction of groups with zero std",
               r"^train/(reward_std|rollout/frac_reward_zero_std)$"),
]
DIAGNOSTIC_CHARTS = [
    _multiline("update: loss and KL", r"^train/update/(loss|kl)$"),
    _multiline("update: clipped fraction of tokens", r"^train/update/clip_ratio"),
    _multiline("update: entropy (nats per token)", r"^train/update/entropy$"),
    _multiline("update: gradient norm before clipping", r"^train/update/grad_norm$"),
    _multiline("rollout: completion length (tokens)", r"^train/rollout/completion_length/(mean|max)$"),
    _multiline("rollout: fractions truncated and unscorable",
               r"^train/rollout/(completion_length/frac_truncated|frac_unscorable)$"),
    _multiline("update: learning rate", r"^train/update/lr$"),
]


def custom_scalars_layout(curves: list[str]) -> dict[str, Any]:
    """The Custom Scalars layout (as the ``layout_pb2.Layout`` JSON form): validation ``curves`` (mean keys with
    an SE, e.g. ``val/greedy/reward``) as margin charts, one per key and mode, each with its SE band; then the
    training rewards; then the diagnostics (closed)."""
    charts = []
    for key in sorted(filter(is_curve, curves), key=curve_order):
        lower, upper = band_tags(key)
        charts.append({"title": f"{key} (mean +- SE over prompts)",
                       "margin": {"series": [{"value": key, "lower": lower, "upper": upper}]}})
    charts.reverse()  # TensorBoard's Custom Scalars tab draws a category's margin charts last first (2.21, seen)
    categories = []
    if charts:
        stage = curves[0].split("/", 1)[0]
        categories.append({"title": f"{'validation' if stage == 'val' else stage}: mean +- SE over prompts",
                           "chart": charts})
    categories.append({"title": "training reward (mean over the step's completions)", "chart": TRAIN_CHARTS})
    categories.append({"title": "training diagnostics", "chart": DIAGNOSTIC_CHARTS, "closed": True})
    return {"category": categories}


class TensorBoardLogger(_LightningTensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` with the lit_grpo layout (see the module docstring): validation SEs
    written as bands, a Custom Scalars layout, and no ``epoch`` scalar while it is 0. Same arguments."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._curves: list[str] = []
        self._layout_written = False

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        scalars = tensorboard_scalars(metrics)
        new = [k[: -len(SE_SUFFIX)] for k in metrics if k.endswith(SE_SUFFIX) and k[: -len(SE_SUFFIX)] in metrics
               and k.split("/", 1)[0] in EVAL_STAGES and k[: -len(SE_SUFFIX)] not in self._curves]
        if scalars:
            super().log_metrics(scalars, step)
        if new or (scalars and not self._layout_written):
            self._curves += new
            self.write_layout(step or 0)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Close the writer; a run that failed before logging anything (refused while setting up: data, overlap,
        checkpoint) leaves no run folder behind (:func:`remove_if_unused`)."""
        super().finalize(status)
        if status == "failed":
            remove_if_unused(Path(self.log_dir))

    @rank_zero_only
    def write_layout(self, step: int) -> None:
        """(Re)write the Custom Scalars layout for the curves seen so far (TensorBoard shows the latest)."""
        self.experiment._get_file_writer().add_summary(layout_summary(custom_scalars_layout(self._curves)), step)
        self._layout_written = True


def layout_summary(layout: dict[str, Any]):
    """A layout (the JSON form of the custom-scalars plugin's ``Layout`` proto) as the summary the plugin reads
    (what ``SummaryWriter.add_custom_scalars`` writes, with closed categories and several series per margin
    chart allowed)."""
    from google.protobuf import json_format
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    proto = json_format.ParseDict(layout, layout_pb2.Layout())
    tensor = TensorProto(dtype="DT_STRING", string_val=[proto.SerializeToString()], tensor_shape=TensorShapeProto())
    return Summary(value=[Summary.Value(tag=metadata.CONFIG_SUMMARY_TAG, tensor=tensor,
                                        metadata=metadata.create_summary_metadata())])



START_FILES = ("config.yaml", "hparams.yaml")
"""What a run writes into its folder before its first figure (the saved config, the hyper-parameters)."""


def remove_if_unused(folder: Path) -> bool:
    """Delete ``folder`` when it holds only what a run writes at its start: the saved configs and hyper-parameters
    and event files without a logged value (scalars, text, images, histograms; the hyper-parameter plugin's
    summaries do not count). Returns whether it was deleted."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    if not folder.is_dir():
        return False
    for path in folder.rglob("*"):
        if path.is_dir():
            continue
        if path.name.startswith("events.out.tfevents."):
            for event in EventFileLoader(str(path)).Load():
                if any(not v.tag.startswith("_hparams_/") and v.tag != "hp_metric" for v in event.summary.value):
                    return False
        elif not path.name.endswith(START_FILES):
            return False
    shutil.rmtree(folder)
    for parent in (folder.parent, folder.parent.parent):  # logs/<name>, logs: only when nothing else is there
        if parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
    return True


RUN_FOLDER_KEY = "lit_grpo_run_folder"
"""The checkpoint entry :class:`RunFolder` writes: ``{"root_dir", "version", "log_dir", "curves"}``."""


class RunFolder(L.Callback):
    """Records the logger's run folder (and the validation curves its Custom Scalars layout shows) in every
    checkpoint, under :data:`RUN_FOLDER_KEY`, so that a ``fit`` resumed from it continues that folder
    (:func:`continue_run_folder`). The CLI adds it to every run."""

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        logger = trainer.logger
        if isinstance(logger, _LightningTensorBoardLogger):
            checkpoint[RUN_FOLDER_KEY] = {"root_dir": logger.root_dir, "version": logger.version,
                                          "log_dir": logger.log_dir, "curves": list(getattr(logger, "_curves", []))}


def checkpoint_entry(path: str | os.PathLike, key: str) -> Any:
    """``checkpoint[key]`` of the checkpoint file at ``path``, read without loading its tensors (memory-mapped);
    None when there is no such file, key, or readable checkpoint (a sharded folder, another format)."""
    import torch

    if not os.path.isfile(path):
        return None
    try:
        return torch.load(path, map_location="cpu", mmap=True, weights_only=False).get(key)
    except Exception:  # not a zip checkpoint: the run's own checks say what is wrong with it
        return None


def continue_run_folder(trainer: L.Trainer, ckpt_path: str | os.PathLike | None) -> str | None:
    """Point the trainer's TensorBoard logger at the run folder the checkpoint at ``ckpt_path`` logged to; returns
    that folder, or None when the run starts a folder of its own.

    It continues when the checkpoint names a folder that still exists under the logger's own ``save_dir/name``
    and the logger's ``version`` is not set. The writer then purges the events the earlier process wrote after
    the checkpoint's step (TensorBoard's ``purge_step``: a run resumed from an earlier checkpoint redraws from
    there), the layout keeps the validation curves, and the config is saved as ``config_resumed_at_step_<s>.yaml``
    beside the first start's ``config.yaml``.
    """
    from lightning.pytorch.cli import SaveConfigCallback

    logger = trainer.logger
    record = checkpoint_entry(ckpt_path, RUN_FOLDER_KEY) if ckpt_path else None
    if (not record or not isinstance(logger, _LightningTensorBoardLogger) or logger._version is not None
            or os.path.normpath(logger.root_dir) != os.path.normpath(record["root_dir"])
            or not os.path.isdir(record["log_dir"])):
        return None
    step = int(checkpoint_entry(ckpt_path, "global_step") or 0)
    logger._version = record["version"]
    logger._kwargs["purge_step"] = step + 1
    if isinstance(logger, TensorBoardLogger):
        logger._curves = list(record.get("curves", []))
    for callback in trainer.callbacks:
        if isinstance(callback, SaveConfigCallback):
            callback.config_filename = f"config_resumed_at_step_{step}.yaml"
    return record["log_dir"]
