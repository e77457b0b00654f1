"""TensorBoard (and Weights & Biases) laid out for reading a GRPO run: the learning curves first, validation with
its standard-error band, diagnostics after them; the text, images and tables the callbacks write, for any of them.

Tag scheme (TensorBoard's Time Series tab groups cards by the text before the first ``/``, sorts groups
and cards by name and opens only the first two groups):

- ``eval_curves``: the validation curves so far as one image, each point with its standard error, scaled to the
  data (:mod:`lit_grpo.curves`; :class:`lit_grpo.callbacks.EvalSummary` writes it): the first card, whose reading
  does not depend on TensorBoard's smoothing or outlier cropping.
- ``train/reward``, ``train/reward/<name>``, ``train/reward_std``: the training curves (second group);
  ``train/rollout/...`` (advantages, completion lengths, zero-std groups, throughput, the prompt images and
  attention overlays) and ``train/update/...`` (loss, KL, clipping, entropy, gradient norm, learning rate) sort
  after them.
- ``val/<mode>/...``: validation means over prompts (third group, closed).
- ``valband/<mode>/.../lower`` and ``/upper``: mean -+ its standard error over prompts, the band the
  Custom Scalars tab draws around each validation curve (last, closed, in the Time Series and Scalars tabs).

:class:`WandbLogger` is Lightning's with the same scalars (``configs/wandb.yaml``, the ``wandb`` extra), and a
local run folder for the files the callbacks write. The callbacks write through :func:`log_text`,
:func:`log_images`, :func:`log_histogram` and :func:`log_table`, which reach every configured logger that can show
them (TensorBoard's Text / Images / Histograms tabs, W&B media and tables; a CSV logger gets the scalars only).

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
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

import lightning as L
import numpy as np
from lightning.pytorch.loggers import TensorBoardLogger as _LightningTensorBoardLogger
from lightning.pytorch.loggers import WandbLogger as _LightningWandbLogger
from lightning.pytorch.utilities import rank_zero_only

from lit_grpo.checkpoint_io import free_space, human_size
from lit_grpo.compat import (continue_tensorboard_version, is_tensorboard_writer_thread, resume_wandb_run,
                             started_wandb_run, summary_file_writer, tensorboard_version_unset, wandb_display_name,
                             wandb_logger_offline)
from lit_grpo.errors import UserError

EVAL_STAGES = ("val", "test")
SE_SUFFIX = "_se"
EPOCH_TAG = "train/rollout/epoch"


def band_tags(key: str) -> tuple[str, str]:
    """``val/greedy/reward`` -> ``("valband/greedy/reward/lower", "valband/greedy/reward/upper")``: a group whose
    name continues the stage's with a letter, so that both of TensorBoard's tag sorts (the Time Series tab's and
    the Scalars tab's, which puts ``val_band`` before ``val``) show it after the stage's curves, closed."""
    stage, rest = key.split("/", 1)
    return f"{stage}band/{rest}/lower", f"{stage}band/{rest}/upper"


def masked_names(metrics: Mapping[str, float]) -> dict[str, float]:
    """``metrics`` with every API key in a name masked (:func:`lit_grpo.api_keys.redact`): a reward or metric named
    after text that holds a key never writes it into a log, a curve or a table."""
    from lit_grpo.api_keys import redact

    return {redact(k): v for k, v in metrics.items()}


def masked_text(value: Any) -> Any:
    """``value`` with every API key masked when it is text (:func:`lit_grpo.api_keys.redact`, keys' values only: a
    completion's prose is not taken for a credential); anything else as it is. What the callbacks log (completions,
    tables, captions) goes through it."""
    from lit_grpo.api_keys import redact

    return redact(value, shapes=False) if isinstance(value, str) else value


def mask_under_console_capture() -> None:
    """Put the console mask (:func:`lit_grpo.api_keys.mask_console`) above W&B's console capture.

    W&B's console capture is left at its default (wandb 0.31: ``console="auto"``, which is ``"wrap"``), because
    every setting keeps the mask once this has run: the ``wrap`` modes (``wrap_raw``, ``wrap_emu``) hand their
    callbacks the text given to the ``write`` of ``sys.stdout`` / ``sys.stderr``, which
    ``wandb.sdk.lib.console_capture`` patches once, when it is first imported; ``"redirect"`` reads the file descriptors, below Python's streams, so
    what it captures was masked already; ``"off"`` captures nothing. Imported after the mask, W&B's patch sits above
    it and would capture the text unmasked (into ``output.log`` and the ``.wandb`` file); so once it is imported, a
    mask goes on top of it when the top is not one already (the mask below then sees masked text: masking twice
    changes nothing)."""
    import wandb.sdk.lib.console_capture  # noqa: F401  (patches the streams' write when first imported)

    from lit_grpo.api_keys import mask_console

    mask_console()


def tensorboard_scalars(metrics: Mapping[str, float]) -> dict[str, float]:
    """The scalars to write for one ``log_metrics`` call: each ``<stage>/<key>_se`` whose ``<stage>/<key>`` is in
    ``metrics`` (stage ``val`` or ``test``) becomes the band ``<stage>band/<key>/lower`` = mean - SE and
    ``/upper`` = mean + SE; Lightning's ``epoch`` is dropped while 0 and written as ``train/rollout/epoch`` after."""
    out = {}
    for key, value in metrics.items():
        mean_key = key[: -len(SE_SUFFIX)]
        # the band needs the mean of the same call: an SE logged without its mean has nothing to sit around
        if key.endswith(SE_SUFFIX) and key.split("/", 1)[0] in EVAL_STAGES and mean_key in metrics:
            lower, upper = band_tags(mean_key)
            out[lower], out[upper] = metrics[mean_key] - value, metrics[mean_key] + value
        elif key == "epoch":
            # epoch 0 says nothing during the first pass over the data;
            # from the second pass on it is a figure worth a card
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
    # the lookbehind keeps each reward's _std companion out of the rewards chart
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
        # plain attributes pass through; only calls can write, so only calls are guarded
        attr = getattr(self.writer, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except OSError as exc:
                # from None: the writer's own traceback adds nothing to the one-line reason
                raise self._logger.write_failed(exc) from None

        return call


def _quiet_writer_thread(hook: Callable) -> Callable:
    """``threading.excepthook`` without the traceback of TensorBoard's writer thread on an ``OSError``: the logger
    reports it, in one line, when the main thread next writes."""

    def excepthook(args: Any) -> None:
        if not (isinstance(args.exc_value, OSError) and is_tensorboard_writer_thread(args.thread)):
            hook(args)

    # a marker, so a second logger in the process does not wrap the hook twice
    excepthook.quiet_writer = True
    return excepthook


class TensorBoardLogger(_LightningTensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` with the lit_grpo layout (see the module docstring): validation SEs
    written as bands, a Custom Scalars layout, and no ``epoch`` scalar while it is 0. Same arguments.

    A log that cannot be written (its disk full) stops the run with one :class:`LogWriteError` naming the folder,
    instead of the writer thread's traceback and Lightning's "you tried to log 0.0" after it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.curves: list[str] = []  # the validation curves in the layout (RunFolder keeps them for a resume)
        self._layout_written = False
        self._guarded: _Guarded | None = None
        self.error: LogWriteError | None = None
        # process-wide: the writer thread's traceback would otherwise print before the logger's one-line error
        if not getattr(threading.excepthook, "quiet_writer", False):
            threading.excepthook = _quiet_writer_thread(threading.excepthook)

    @property
    def experiment(self) -> Any:
        # Lightning's property makes the writer lazily; it is wrapped whenever the writer object changes (a new version)
        writer = _LightningTensorBoardLogger.experiment.fget(self)
        if self._guarded is None or self._guarded.writer is not writer:
            self._guarded = _Guarded(writer, self)
        return self._guarded

    def write_failed(self, exc: OSError) -> LogWriteError:
        """The run's :class:`LogWriteError` (the first failure's, named once)."""
        # the first failure names the disk state as it was then; later calls raise the same error, not new ones
        if self.error is None:
            free = free_space(self.log_dir)
            room = f"; {human_size(free)} free there" if free is not None else ""
            self.error = LogWriteError(f"TensorBoard log {self.log_dir} could not be written ({exc.strerror or exc}"
                                       f"{room}): make room there or point trainer.logger's save_dir at another disk")
        return self.error

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        # keys are masked before any other use: a curve's name must never carry a credential into the event file
        metrics = masked_names(metrics)
        scalars = tensorboard_scalars(metrics)
        # the curves seen for the first time: the layout is rewritten only when one appears
        new = [k[: -len(SE_SUFFIX)] for k in metrics if k.endswith(SE_SUFFIX) and k[: -len(SE_SUFFIX)] in metrics
               and k.split("/", 1)[0] in EVAL_STAGES and k[: -len(SE_SUFFIX)] not in self.curves]
        if scalars:
            try:
                super().log_metrics(scalars, step)
            # Lightning wraps a failed write in a ValueError ("you tried to log ..."); the real cause is unwrapped here
            except ValueError as exc:  # Lightning reports any failure of a write as a value it cannot log
                if isinstance(exc.__cause__, LogWriteError):
                    raise exc.__cause__ from None
                raise
        # also written once at the first scalars: the training charts are in the layout from the start
        if new or (scalars and not self._layout_written):
            self.curves += new
            self.write_layout(step or 0)

    @rank_zero_only
    def write_layout(self, step: int) -> None:
        """(Re)write the Custom Scalars layout for the curves seen so far (TensorBoard shows the latest)."""
        try:
            # add_custom_scalars cannot write closed categories or several series per margin chart
            summary_file_writer(self.experiment).add_summary(layout_summary(custom_scalars_layout(self.curves)), step)
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
        """Close the writer (a full disk named in one line); a run that failed before logging anything (refused while
        setting up: data, overlap, checkpoint) leaves no run folder behind (:func:`remove_if_unused`)."""
        try:
            super().finalize(status)
        except OSError as exc:
            # a failed run says why already; a write error on closing would only hide that reason
            if status == "success":
                raise self.write_failed(exc) from None
            # a run that failed already says why; its log's own failure is not a second error
        if status == "failed":
            remove_if_unused(Path(self.log_dir))


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
    # the plugin reads one serialised Layout proto as a scalar string tensor under its config tag
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
                # the hparams plugin's summaries are written at start too: a folder holding only them has no run in it
                if any(not v.tag.startswith("_hparams_/") and v.tag != "hp_metric" for v in event.summary.value):
                    return False
        elif not path.name.endswith(START_FILES):
            return False
    shutil.rmtree(folder)
    # only empty parents: a folder with another run or another file is never touched
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
            # enough to reopen the same version and rebuild its layout on resume
            checkpoint[RUN_FOLDER_KEY] = {"root_dir": logger.root_dir, "version": logger.version,
                                          "log_dir": logger.log_dir, "curves": list(getattr(logger, "curves", []))}
        elif isinstance(logger, _LightningWandbLogger):
            checkpoint[RUN_FOLDER_KEY] = {"wandb_project": logger.name, "wandb_id": logger.version}


def checkpoint_entry(path: str | os.PathLike, key: str) -> Any:
    """``checkpoint[key]`` of the checkpoint file at ``path``, read without loading its tensors (memory-mapped);
    None when there is no such file, key, or readable checkpoint (a sharded folder, another format)."""
    import torch

    if not os.path.isfile(path):
        return None
    try:
        # memory-mapped and to CPU: only one small entry is read, never the tensors into memory
        return torch.load(path, map_location="cpu", mmap=True, weights_only=False).get(key)
    # weights_only=False: a Lightning checkpoint's hparams may hold objects the safe loader refuses
    except Exception:  # not a zip checkpoint: the run's own checks say what is wrong with it
        return None


def continue_run_folder(trainer: L.Trainer, ckpt_path: str | os.PathLike | None) -> str | None:
    """Point the trainer's TensorBoard logger at the run folder the checkpoint at ``ckpt_path`` logged to (a W&B
    logger at the W&B run, same project); returns that folder, or None when the run starts a folder of its own.

    It continues when the checkpoint names a folder that still exists under the logger's own ``save_dir/name``
    and the logger's ``version`` is not set (W&B: the same project, no ``id`` set). TensorBoard's writer then
    purges the events the earlier process wrote after the checkpoint's step (``purge_step``: a run resumed from
    an earlier checkpoint redraws from there) and the layout keeps the validation curves; the config is saved as
    ``config_resumed_at_step_<s>.yaml`` beside the first start's ``config.yaml``.
    """
    from lightning.pytorch.cli import SaveConfigCallback

    logger = trainer.logger
    record = checkpoint_entry(ckpt_path, RUN_FOLDER_KEY) if ckpt_path else None
    if not record:
        return None
    step = int(checkpoint_entry(ckpt_path, "global_step") or 0)
    if isinstance(logger, _LightningWandbLogger):
        # a set id or another project: the user asked for another run, which is respected
        if logger.version is not None or record.get("wandb_project") != logger.name or not record.get("wandb_id"):
            return None
        resume_wandb_run(logger, record["wandb_id"])  # W&B resumes that run ("resume": "allow")
    # the same save_dir/name only: a checkpoint copied to another logger setup starts a new folder
    elif isinstance(logger, _LightningTensorBoardLogger) and tensorboard_version_unset(logger) \
            and "root_dir" in record and os.path.normpath(logger.root_dir) == os.path.normpath(record["root_dir"]) \
            and os.path.isdir(record["log_dir"]):
        # purge_step = step + 1: what the earlier process logged after the checkpoint is hidden, as training redoes it
        continue_tensorboard_version(logger, record["version"], purge_step=step + 1)
        if isinstance(logger, TensorBoardLogger):
            logger.curves = list(record.get("curves", []))
    else:
        return None
    for callback in trainer.callbacks:
        if isinstance(callback, SaveConfigCallback):
            # the first start's config.yaml is kept; this resume's config sits beside it
            callback.config_filename = f"config_resumed_at_step_{step}.yaml"
    return getattr(logger, "log_dir", None) or logger.save_dir


class WandbLogger(_LightningWandbLogger):
    """Lightning's ``WandbLogger`` with lit_grpo's scalars (validation SEs as ``valband/.../lower`` and ``/upper``,
    no ``epoch`` while it is 0: :func:`tensorboard_scalars`) and a local run folder, ``log_dir`` =
    ``<save_dir>/<name>/<run id>``, for the files the callbacks write (``eval_curves``, test tables, predictions)
    and the saved config. Same arguments; ``name`` is the run's display name (the configs' run name carries over
    when ``configs/wandb.yaml`` replaces their TensorBoard logger)."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        scalars = tensorboard_scalars(masked_names(metrics))
        if scalars:
            super().log_metrics(scalars, step)

    @property
    def log_dir(self) -> str:
        # a local folder per run for the callbacks' files: W&B keeps only what is uploaded
        return os.path.join(self.save_dir or ".", wandb_display_name(self) or self.name or "wandb", str(self.version))


def _tensorboards(trainer: L.Trainer, on: bool = True) -> list:
    return [lg.experiment for lg in trainer.loggers if isinstance(lg, _LightningTensorBoardLogger)] if on else []


def _wandbs(trainer: L.Trainer, on: bool = True) -> list:
    return [lg for lg in trainer.loggers if isinstance(lg, _LightningWandbLogger)] if on else []


@rank_zero_only
def log_text(trainer: L.Trainer, tag: str, markdown: str, step: int, to_tensorboard: bool = True,
             to_wandb: bool = True) -> None:
    """``markdown`` as TensorBoard text, and as a one-cell W&B table (W&B shows text in tables); ``to_tensorboard`` /
    ``to_wandb`` False: not to that logger (a caller that gives it the same content in another form). API keys are
    masked (:func:`masked_text`), here and in every ``log_*`` below."""
    tag, markdown = masked_text(tag), masked_text(markdown)
    for writer in _tensorboards(trainer, to_tensorboard):
        writer.add_text(tag, markdown, step)
    for logger in _wandbs(trainer, to_wandb):
        logger.log_text(tag, columns=["text"], data=[[markdown]], step=step)


def as_uint8(image: np.ndarray) -> np.ndarray:
    """An HWC float image in [0, 1] (or uint8) as HWC uint8."""
    image = np.asarray(image)
    # clipped before the cast: a value just over 1 would wrap around in uint8
    return image if image.dtype == np.uint8 else (np.clip(image, 0, 1) * 255).round().astype(np.uint8)


@rank_zero_only
def log_images(trainer: L.Trainer, images: dict[str, np.ndarray], step: int, captions: dict[str, str] | None = None,
               to_tensorboard: bool = True, to_wandb: bool = True) -> None:
    """Each ``tag -> HWC image`` (float in [0, 1] or uint8) as a TensorBoard image and a W&B image (``captions``:
    ``tag -> text`` shown under it on W&B)."""
    images = {masked_text(tag): image for tag, image in images.items()}
    captions = {masked_text(tag): masked_text(text) for tag, text in (captions or {}).items()}
    for writer in _tensorboards(trainer, to_tensorboard):
        for tag, image in images.items():
            writer.add_image(tag, as_uint8(image), step, dataformats="HWC")  # uint8 HWC: no rescaling
    for logger in _wandbs(trainer, to_wandb):
        for tag, image in images.items():
            logger.log_image(tag, [as_uint8(image)], step=step, caption=[captions.get(tag, tag)])


@rank_zero_only
def log_histogram(trainer: L.Trainer, tag: str, values: Any, step: int) -> None:
    """``values`` (a 1-D tensor or array) as a TensorBoard histogram and a W&B histogram."""
    tag = masked_text(tag)
    for writer in _tensorboards(trainer):
        writer.add_histogram(tag, values, step)
    for logger in _wandbs(trainer):
        import wandb

        logger.log_metrics({tag: wandb.Histogram(np.asarray(values, dtype=np.float64))}, step)


@rank_zero_only
def log_table(trainer: L.Trainer, tag: str, columns: list[str], rows: list[list[Any]], step: int,
              markdown: str | None = None, to_tensorboard: bool = True, to_wandb: bool = True) -> None:
    """A table: on TensorBoard as Markdown text (``markdown``, else a pipe table of ``rows``), on W&B as a table
    (image cells given as HWC arrays become W&B images)."""
    tag, columns, markdown = masked_text(tag), [masked_text(c) for c in columns], masked_text(markdown)
    rows = [[masked_text(c) for c in row] for row in rows]
    text = markdown if markdown is not None else markdown_table(columns, rows)
    for writer in _tensorboards(trainer, to_tensorboard):
        writer.add_text(tag, text, step)
    for logger in _wandbs(trainer, to_wandb):
        import wandb

        cells = [[wandb.Image(as_uint8(c)) if isinstance(c, np.ndarray) else c for c in row] for row in rows]
        logger.log_table(tag, columns=columns, data=cells, step=step)


def markdown_table(columns: list[str], rows: list[list[Any]]) -> str:
    """A Markdown pipe table (array cells written as ``(image)``)."""
    def cell(value: Any) -> str:
        # pipes and newlines escaped: a completion holding either would break the table's rows
        return "(image)" if isinstance(value, np.ndarray) else str(value).replace("|", "\\|").replace("\n", " ")

    return "\n".join(["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
                      *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)]) + "\n"


def logger_lines(trainer: L.Trainer) -> list[str]:
    """Where each configured logger wrote, for the closing message: the TensorBoard command (and this run's
    folder), a CSV file, the W&B run's page (or, offline, the command that uploads it), or another logger's folder."""
    from lightning.pytorch.loggers import CSVLogger

    lines = []
    for logger in trainer.loggers:
        if isinstance(logger, _LightningTensorBoardLogger):
            # the parent of the run folder: TensorBoard then lists this run beside the others under the same name
            lines.append(f"  tensorboard --logdir {os.path.dirname(logger.log_dir.rstrip('/'))}"
                         f"     (TensorBoard; this run: {logger.log_dir})")
        elif isinstance(logger, CSVLogger):
            lines.append(f"  metrics (CSV):         {os.path.join(logger.log_dir, 'metrics.csv')}")
        elif isinstance(logger, _LightningWandbLogger):
            lines.append(f"  Weights & Biases:      {wandb_location(logger)}")
        else:
            lines.append(f"  {type(logger).__name__}: {getattr(logger, 'log_dir', None) or logger.save_dir}")
    return lines or ["  no logger configured: the console output above is all there is"]


def wandb_location(logger: _LightningWandbLogger) -> str:
    """The W&B run's page, or for an offline run its folder and the ``wandb sync`` command that uploads it."""
    run = started_wandb_run(logger)
    if run is None:
        return "no run was started"
    offline = getattr(getattr(run, "settings", None), "mode", None) == "offline" or wandb_logger_offline(logger)
    if offline:
        folder = os.path.dirname(run.dir.rstrip("/"))
        return f"offline run {run.id} in {folder} (upload: wandb sync {folder})"
    return f"{run.url} (run {run.id})"
