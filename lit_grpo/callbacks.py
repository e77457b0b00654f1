"""Callbacks that observe training and evaluation: completion samples as TensorBoard text, HF-format export, the validation at a run's last step, the validation curves
and prediction JSONL files (the test accuracy table: :class:`lit_grpo.tasks.table.AccuracyTable`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from lit_grpo import distributed as D
from lit_grpo import environment
from lit_grpo.evaluation import prompt_text
from lit_grpo.loggers import log_images, log_table, log_text, masked_text


def _code(text: str) -> str:
    """Render ``text`` verbatim in TensorBoard's Markdown: every line indented as a code block."""
    # indented, not fenced: a completion holding ``` cannot end the block early
    return "\n".join("    " + line for line in str(text).splitlines() or [""])


class CompletionSamples(L.Callback):
    """At every ``every_n_steps``-th training step, log a few prompts with the images the policy saw, its
    completions, their rewards and advantages.

    TensorBoard: the text ``train/completions`` (each prompt, its gold answer and its completions) and the image
    ``train/rollout/image/<p>`` (after the reward curves): prompt ``p``'s images side by side, scaled so the longer
    side is ``image_side`` px (nearest neighbour upward, so a small puzzle's lines stay sharp). W&B: the table
    ``train/completions`` (step, prompt, image, gold, completion, total, each reward, advantage).
    """

    def __init__(self, every_n_steps: int = 10, num_prompts: int = 1, num_completions: int = 4, image_side: int = 384):
        self.every_n_steps, self.num_prompts, self.num_completions = every_n_steps, num_prompts, num_completions
        self.image_side = image_side

    @rank_zero_only
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # the summary the training step returns; another module's outputs, or a step off the period, log nothing
        if not isinstance(outputs, dict) or "completions" not in outputs or trainer.global_step % self.every_n_steps:
            return
        step, g = trainer.global_step, outputs["group_size"]
        blocks, images, rows = [], {}, []
        columns = ["step", "prompt", "image", "gold", "completion", "total", *outputs["rewards"], "advantage"]
        for p in range(min(self.num_prompts, len(outputs["prompts"]))):
            # the batch's own images, so the logged picture is exactly what the policy saw for prompt p
            pictures = (getattr(batch.samples[p], "images", None) or []) if hasattr(batch, "samples") else []
            image = side_by_side(pictures, self.image_side) if pictures else None
            if image is not None:
                images[f"train/rollout/image/{p}"] = image
            seen = f"; the image it saw: `train/rollout/image/{p}` (Images)" if image is not None else ""
            blocks.append(f"**prompt {p}** (gold `{outputs['answers'][p]}`{seen})\n\n"
                          f"{_code(prompt_text(outputs['prompts'][p]))}")
            # a prompt's G completions are contiguous rows: prompt p's are p * G .. p * G + G - 1
            for j in range(p * g, p * g + min(self.num_completions, g)):
                rewards = ", ".join(f"{k}={v[j]:.3f}" for k, v in outputs["rewards"].items())
                blocks.append(f"completion {j - p * g}: total={outputs['total'][j]:.3f} ({rewards}), "
                              f"advantage={outputs['advantages'][j]:+.3f}\n\n{_code(outputs['completions'][j])}")
                rows.append([step, prompt_text(outputs["prompts"][p]), image, str(outputs["answers"][p]),
                             outputs["completions"][j], float(outputs["total"][j]),
                             *(float(v[j]) for v in outputs["rewards"].values()), float(outputs["advantages"][j])])
        # the text and the picture go to TensorBoard, the table to W&B: each backend gets the form it shows best
        log_text(trainer, "train/completions", "\n\n".join(blocks), step, to_wandb=False)
        log_images(trainer, images, step, to_wandb=False)
        log_table(trainer, "train/completions", columns, rows, step, to_tensorboard=False)


def side_by_side(images: list, side: int) -> np.ndarray:
    """PIL images in a row (white gaps), scaled so the row's longer side is ``side`` px: nearest neighbour when
    enlarging (drawn figures stay sharp), bicubic when shrinking. Returns HWC uint8."""
    from PIL import Image

    rgb = [im.convert("RGB") for im in images]
    gap = 4  # white gaps so adjacent puzzle panels stay apart
    width, height = sum(im.width for im in rgb) + gap * (len(rgb) - 1), max(im.height for im in rgb)
    row = Image.new("RGB", (width, height), "white")
    x = 0
    for im in rgb:
        row.paste(im, (x, 0))
        x += im.width + gap
    scale = side / max(width, height)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    # nearest when enlarging keeps a drawn figure's lines hard; bicubic when shrinking avoids aliasing
    return np.asarray(row.resize(size, Image.NEAREST if scale >= 1 else Image.BICUBIC))


class FinalValidation(L.Callback):
    """A run validates at its last step: when the step that reaches ``max_steps``, or ends the last epoch, is not a
    ``val_check_interval`` step, the trainer is asked to stop after it, which Lightning follows with a validation
    (as it does for early stopping and ``max_time``). A 20-step run of a config that validates every 120 steps
    thus ends with figures at step 0 and step 20. The CLI adds it to every run; a run without validation (no
    validation data, ``limit_val_batches: 0``) is unchanged."""

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # 0 < max_steps: Lightning's -1 means no step limit
        last_step = 0 < trainer.max_steps <= trainer.global_step
        last_epoch = (trainer.max_epochs is not None and trainer.max_epochs > 0
                      and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
                      and trainer.current_epoch + 1 >= trainer.max_epochs)
        if last_step or last_epoch:
            # should_stop after this batch makes Lightning run its end-of-fit validation, as for early stopping
            trainer.should_stop = True


class ExportPretrained(L.Callback):
    """At the end of fit, write the policy in Hugging Face format (``save_pretrained``) with its processor.

    With LoRA the adapter is written (``merge: true`` merges it into a full model instead); the folder
    then loads by path as ``model.policy.name_or_path`` (or ``lora.adapter_path``). A sharded policy (FSDP2) is
    gathered whole and written by rank 0 from an unsharded copy (:mod:`lit_grpo.export`), with the generation config
    of the run's sampler (stop ids, suppressed image tokens, sampling settings). A merge that would not be the trained
    policy (a bfloat16 / float16 LoRA run) is refused at setup, before the first step.
    """

    def __init__(self, dirpath: str = "checkpoints/export", merge: bool = False):
        self.dirpath, self.merge = dirpath, merge

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse, before the first step, a merge that would not be the trained policy
        (:func:`lit_grpo.export.check_merge`) and a ``dirpath`` that is the folder the run started from
        (:func:`lit_grpo.export.check_not_source`)."""
        from lit_grpo.export import check_merge, check_not_source, policy_config

        # only fit exports; a module without policy hparams (a test double) has nothing to check
        if stage == "fit" and "policy" in pl_module.hparams:
            cfg = policy_config(pl_module.hparams["policy"])
            check_merge(cfg, self.merge)
            check_not_source(Path(self.dirpath), cfg)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from lit_grpo.export import generation_config, policy_config, readable, save_pretrained, unsharded_policy
        from lit_grpo.fsdp import is_sharded, trainable_state

        model, processor = pl_module.policy, pl_module.processor
        cfg = policy_config(pl_module.hparams["policy"])
        # gathering is a collective: every rank calls it, rank 0 alone writes the folder
        if is_sharded(model):
            weights = trainable_state(pl_module)  # every rank takes part; rank 0 gets the weights
            if trainer.is_global_zero:
                model, processor = unsharded_policy(cfg, weights)
        if trainer.is_global_zero:
            save_pretrained(model, processor, self.dirpath, self.merge)
            generation_config(model, processor, cfg, pl_module.hparams.get("sampling")).save_pretrained(self.dirpath)
            # the environment beside the weights: which versions trained them, readable without the run folder
            environment.write(self.dirpath)  # what trained these weights
            readable(self.dirpath)


class EvalSummary(L.Callback):
    """Collect every validation's ``val/<mode>/...`` means +- SE; draw, save and print the curves.

    After every validation: a figure of each curve so far (``eval_curves/<rank>_<name>``, the first cards of
    TensorBoard's Time Series tab, and W&B images: :func:`lit_grpo.curves.curve_images`), the table of the reward and accuracy
    curves (``val/eval_curves``: TensorBoard text, a W&B table) and the files ``eval_curves.csv`` / ``.md`` in the
    run folder. At the end of fit it prints the first and last evaluation of each reward and accuracy with their
    standard errors (SE over prompts).
    A resumed run holds the whole run: the rows are kept in every checkpoint, and the rows of a continued run
    folder's ``eval_curves.csv`` up to the checkpoint's step are read back (a validation that ran after the
    checkpoint was written, at the same step).
    """

    def __init__(self, keys: list[str] | None = None):
        self.keys = keys
        self.rows: list[dict[str, float]] = []

    def state_dict(self) -> dict[str, Any]:
        return {"rows": list(self.rows)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.rows = list(state_dict.get("rows", []))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logdir = getattr(trainer.logger, "log_dir", None)
        # a continued run folder: validations after the checkpoint was written are in the CSV but not in the checkpoint
        if trainer.ckpt_path and logdir and (Path(logdir) / "eval_curves.csv").is_file():
            have = {r["step"] for r in self.rows}
            earlier = [r for r in read_curves(Path(logdir) / "eval_curves.csv")
                       # only rows up to the checkpoint's step: a later row belongs to the training that is being redone
                       if r["step"] <= trainer.global_step and r["step"] not in have]
            self.rows = sorted(self.rows + earlier, key=lambda r: r["step"])

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # the sanity check's figures are of a couple of batches, not a validation: kept out of the curves
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        # a validation repeated at the same step (a resume) replaces the earlier row instead of doubling it
        self.rows = [r for r in self.rows if r["step"] != trainer.global_step] + [{"step": trainer.global_step,
                                                                                   **metrics}]
        self._save(trainer)
        self._log(trainer)

    @rank_zero_only
    def _log(self, trainer: L.Trainer) -> None:
        """The curves so far as figures (:func:`lit_grpo.curves.curve_images`: TensorBoard's first cards,
        ``eval_curves/...``; unaffected by its smoothing) and as a table (``val/eval_curves``: TensorBoard text, W&B)."""
        from lit_grpo.curves import curve_images

        keys = self._keys()
        log_images(trainer, curve_images(self.rows), trainer.global_step)
        cols = ["step"] + [c for k in keys for c in (k, k + "_se")]
        log_table(trainer, "val/eval_curves", cols, [[r.get(c, math.nan) for c in cols] for r in self.rows],
                  trainer.global_step, markdown=self._markdown(keys))

    def _keys(self) -> list[str]:
        """The curves the summary and the files show: rewards and accuracy (not completion length or judge
        statistics), or those matching ``keys``."""
        found = sorted({k for r in self.rows for k in r if k != "step" and not k.endswith("_se")})
        # judge statistics are figures of the judge, not curves of the policy
        curves = [k for k in found if ("/reward" in k or k.endswith("/accuracy")) and "/judge/" not in k]
        return [k for k in curves if self.keys is None or any(p in k for p in self.keys)]

    @rank_zero_only
    def _save(self, trainer: L.Trainer) -> None:
        logdir = getattr(trainer.logger, "log_dir", None)
        if logdir and self.rows:
            self._write(Path(logdir), self._keys())

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.rows:
            return
        print("\n".join(summary_lines(self.rows[0], self.rows[-1], self._keys(), trainer.global_step)))
        self._save(trainer)

    def _markdown(self, keys: list[str]) -> str:
        md = ["| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for r in self.rows:
            cells = [f"{r.get(k, float('nan')):.3f} ± {r.get(k + '_se', float('nan')):.3f}" for k in keys]
            md.append(f"| {r['step']} | " + " | ".join(cells) + " |")
        return "\n".join(md) + "\n"

    def _write(self, folder: Path, keys: list[str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        cols = ["step"] + [c for k in keys for c in (k, k + "_se")]
        # rewritten whole each time: a replaced row or rows read back on resume land in it as they are now
        with open(folder / "eval_curves.csv", "w") as f:
            f.write(",".join(cols) + "\n")
            for r in self.rows:
                f.write(",".join(f"{r.get(c, float('nan')):.6g}" for c in cols) + "\n")
        (folder / "eval_curves.md").write_text(self._markdown(keys))


def read_curves(path: Path) -> list[dict[str, float]]:
    """The rows of an ``eval_curves.csv`` (``step`` as an int, the rest as floats; empty cells left out)."""
    import csv

    with open(path, newline="") as f:
        # a cell left empty is a figure that validation did not have
        return [{k: int(float(v)) if k == "step" else float(v) for k, v in row.items() if v not in ("", None)}
                for row in csv.DictReader(f)]


def _run_dir(trainer: L.Trainer) -> Path:
    """The logger's run folder (``logs/<name>/version_N``), else the trainer's root folder."""
    logdir = trainer.logger.log_dir if trainer.logger is not None and trainer.logger.log_dir else None
    return Path(logdir or trainer.default_root_dir)


def _jsonable(value: Any) -> Any:
    """NaN -> None, recursively (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


class PredictionsJSONL(BasePredictionWriter):
    """During ``predict``: one JSON line per completion in ``<run folder>/<filename>`` (``path`` overrides).

    Fields: ``id``, ``mode``, ``prompt``, ``completion``, ``extracted`` (the answer the configured scorer
    reads), ``answer``, ``answer_format``, the table's group fields (PhyX: ``domain``, ``reasoning_type``),
    ``rewards`` (each reward),
    ``total``, ``correct`` (NaN written as ``null``). With several ranks each writes ``<stem>.rank<r>.jsonl``. API keys
    are masked (:func:`lit_grpo.loggers.masked_text`).
    """

    def __init__(self, filename: str = "predictions.jsonl", path: str | None = None):
        # batch interval: each batch's records are written as they come, so a killed predict keeps what it had
        super().__init__(write_interval="batch")
        self.filename, self.path = filename, path
        self.file: Path | None = None

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        path = Path(self.path) if self.path else _run_dir(trainer) / self.filename
        rank, world = D.world()
        if world > 1:
            # one file per rank: ranks appending to one file would interleave half-lines
            path = path.with_name(f"{path.stem}.rank{rank}{path.suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        # truncated at the start: a rerun does not append to the previous run's predictions
        path.write_text("", encoding="utf-8")
        self.file = path

    def write_on_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, prediction: Any,
                           batch_indices: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        with open(self.file, "a", encoding="utf-8") as f:
            for record in prediction or []:
                f.write(masked_text(json.dumps(_jsonable(record), ensure_ascii=False)) + "\n")  # API keys masked

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rank_zero_info(f"predictions written to {self.file}")


def summary_lines(first: dict[str, float], last: dict[str, float], keys: list[str], step: int) -> list[str]:
    """The closing summary: each figure at the first and the last validation (mean +- SE) and the change; a run
    validated once gets its figures without a change, and a run that trained past its last validation says so."""
    def cell(row, k):
        return f"{row.get(k, float('nan')):.3f} +- {row.get(k + '_se', float('nan')):.3f}"

    def change(k):
        return last.get(k, float("nan")) - first.get(k, float("nan"))

    later = (f" (training went on to step {step} with no validation after step {last['step']})"
             if step > last["step"] else "")
    if first["step"] == last["step"]:
        return [f"\nValidation (mean +- SE over prompts) at step {first['step']} only{later}:",
                *(f"  {k:<40} {cell(first, k)}" for k in keys)]
    return [f"\nValidation (mean +- SE over prompts), step {first['step']} -> step {last['step']}{later}:",
            *(f"  {k:<40} {cell(first, k)}  ->  {cell(last, k)}  (change {change(k):+.3f})" for k in keys)]
