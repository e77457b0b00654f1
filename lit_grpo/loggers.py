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

The module logs ``<key>`` and ``<key>_se`` (what ``trainer.callback_metrics``, the closing summary and
``eval_curves.csv`` hold); :class:`TensorBoardLogger` writes the SE as that band, adds the Custom Scalars
layout (validation curves with their bands, training rewards, diagnostics), and leaves out Lightning's
``epoch`` scalar while it says nothing (during the first pass over the training data; from the second
on it is written as ``train/rollout/epoch``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

from lightning.pytorch.loggers import TensorBoardLogger as _LightningTensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from lit_grpo.checkpoint_io import free_space, human_size
from lit_grpo.errors import UserError

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


class LogWriteError(UserError, OSError):
    """The TensorBoard log could not be written (names the folder, the reason and the room left there)."""


class _Guarded:
    """A ``SummaryWriter`` whose write failures (a full disk: the writer's thread fails, the next call raises its
    error) become the logger's one :class:`LogWriteError`."""

    def __init__(self, writer: Any, logger: "TensorBoardLogger"):
        self.writer, self._logger = writer, logger

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.writer, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except OSError as exc:
                raise self._logger.write_failed(exc) from None

        return call


def _quiet_writer_thread(hook: Callable) -> Callable:
    """``threading.excepthook`` without the traceback of TensorBoard's writer thread on an ``OSError``: the logger
    reports it, in one line, when the main thread next writes."""

    def excepthook(args: Any) -> None:
        if not (isinstance(args.exc_value, OSError) and type(args.thread).__name__ == "_AsyncWriterThread"):
            hook(args)

    excepthook.quiet_writer = True
    return excepthook


class TensorBoardLogger(_LightningTensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` with the lit_grpo layout (see the module docstring): validation SEs
    written as bands, a Custom Scalars layout, and no ``epoch`` scalar while it is 0. Same arguments.

    A log that cannot be written (its disk full) stops the run with one :class:`LogWriteError` naming the folder,
    instead of the writer thread's traceback and Lightning's "you tried to log 0.0" after it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._curves: list[str] = []
        self._layout_written = False
        self._guarded: _Guarded | None = None
        self.error: LogWriteError | None = None
        if not getattr(threading.excepthook, "quiet_writer", False):
            threading.excepthook = _quiet_writer_thread(threading.excepthook)

    @property
    def experiment(self) -> Any:
        writer = _LightningTensorBoardLogger.experiment.fget(self)
        if self._guarded is None or self._guarded.writer is not writer:
            self._guarded = _Guarded(writer, self)
        return self._guarded

    def write_failed(self, exc: OSError) -> LogWriteError:
        """The run's :class:`LogWriteError` (the first failure's, named once)."""
        if self.error is None:
            free = free_space(self.log_dir)
            room = f"; {human_size(free)} free there" if free is not None else ""
            self.error = LogWriteError(f"TensorBoard log {self.log_dir} could not be written ({exc.strerror or exc}"
                                       f"{room}): make room there or point trainer.logger's save_dir at another disk")
        return self.error

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        scalars = tensorboard_scalars(metrics)
        new = [k[: -len(SE_SUFFIX)] for k in metrics if k.endswith(SE_SUFFIX) and k[: -len(SE_SUFFIX)] in metrics
               and k.split("/", 1)[0] in EVAL_STAGES and k[: -len(SE_SUFFIX)] not in self._curves]
        if scalars:
            try:
                super().log_metrics(scalars, step)
            except ValueError as exc:  # Lightning reports any failure of a write as a value it cannot log
                if isinstance(exc.__cause__, LogWriteError):
                    raise exc.__cause__ from None
                raise
        if new or (scalars and not self._layout_written):
            self._curves += new
            self.write_layout(step or 0)

    @rank_zero_only
    def write_layout(self, step: int) -> None:
        """(Re)write the Custom Scalars layout for the curves seen so far (TensorBoard shows the latest)."""
        try:
            self.experiment._get_file_writer().add_summary(layout_summary(custom_scalars_layout(self._curves)), step)
        except OSError as exc:
            raise self.write_failed(exc) from None
        self._layout_written = True

    @rank_zero_only
    def save(self) -> None:
        try:
            super().save()
        except OSError as exc:  # hparams.yaml
            raise self.write_failed(exc) from None

    @rank_zero_only
    def finalize(self, status: str) -> None:
        try:
            super().finalize(status)
        except OSError as exc:
            if status == "success":
                raise self.write_failed(exc) from None
            # a run that failed already says why; its log's own failure is not a second error


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

