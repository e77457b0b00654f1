"""Progress on a terminal and in batch logs: Lightning's own progress bar (Rich, or TQDM where rich is not
installed), extended.

- The bar's total is ``max_steps`` when it is set (Lightning's counts the epoch's batches unless
  ``max_epochs == -1``, so a 200-step demo on 20,000 prompts read ``200/2500`` with an ETA for a
  finished run).
- Without a terminal (output redirected to a file, a batch job) the bar is off and plain lines are printed
  instead: one every ``every_n_steps`` steps or ``every_n_seconds`` seconds (step, the bar's metrics such
  as ``train/reward``, steps per second, elapsed time and the ETA to ``max_steps``), one per validation
  (its curves, mean +- SE), and one at the end of training.
- Lightning's ``v_num`` (the logger's version) is left out of the bar.
- :class:`CountProgress`: plain lines for a long count outside training (the data a ``generate`` block writes):
  what is made, then how far every few seconds with the time left, then the time it took.

:class:`ProgressBar` is the CLI's default (see :func:`with_progress_bar`); give it in ``trainer.callbacks``
to set its arguments.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from datetime import timedelta
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar as _LightningProgressBar
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

from lit_grpo.compat import rich_available


log = logging.getLogger(__name__)


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds))) if math.isfinite(seconds) else "?"


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def total_steps(trainer: L.Trainer) -> float:
    """Steps the run will make: ``max_steps`` when set, else Lightning's estimate (may be ``inf``)."""
    if trainer.max_steps is not None and trainer.max_steps > 0:
        return trainer.max_steps
    try:
        return float(trainer.estimated_stepping_batches)
    except Exception:  # no dataloader length (iterable datasets)
        return math.inf


def step_line(step: int, total: float, metrics: dict[str, Any], rate: float, elapsed: float) -> str:
    """``step 40/200 (20%)  train/reward 0.734  1.21 steps/s  elapsed 0:00:33  ETA 0:02:12``."""
    head = f"step {step}/{total:.0f} ({100 * step / total:.0f}%)" if math.isfinite(total) else f"step {step}"
    parts = [head, *(f"{k} {_number(v)}" for k, v in metrics.items())]
    parts.append(f"{rate:.2f} steps/s" if rate > 0 else "- steps/s")
    parts.append(f"elapsed {_clock(elapsed)}")
    if math.isfinite(total):
        parts.append(f"ETA {_clock((total - step) / rate) if rate > 0 else '?'}")
    return "  ".join(parts)


def validation_line(step: int, metrics: dict[str, Any], seconds: float) -> str:
    """One line per validation: each curve (``val/<mode>/reward``, ``.../reward/<name>``, ``.../accuracy``;
    not judge statistics) as ``mean +- SE``, sorted by name."""
    keys = sorted(k for k in metrics if k.startswith("val/") and not k.endswith("_se") and "/judge/" not in k
                  and k.split("/", 2)[-1].split("/")[0] in ("reward", "accuracy"))
    values = []
    for k in keys:
        se = metrics.get(f"{k}_se")
        values.append(f"{k} {float(metrics[k]):.3f}" + (f" +- {float(se):.3f}" if se is not None else ""))
    return f"validation at step {step} (took {_clock(seconds)}): " + ("  ".join(values) or "no reward curves logged")


class CountProgress:
    """Progress of making ``total`` items, as log lines: ``what`` (and ``details``) at the start, then at most
    every ``every_s`` seconds ``what: 5,200 done (26%), elapsed 0:00:10, about 0:00:29 left``, and the time it
    took from :meth:`done`. Call it with the number of items made so far."""

    def __init__(self, what: str, total: int, details: str = "", every_s: float = 5.0, write=log.info):
        self.what, self.total, self.every_s, self.write = what, total, every_s, write
        self.start = self.last = time.monotonic()
        self.write(f"{what}" + (f" ({details})" if details else ""))

    def __call__(self, count: int) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s or count >= self.total:
            return
        self.last, elapsed = now, now - self.start
        left = elapsed * (self.total - count) / count if count else math.inf
        self.write(f"{self.what}: {count:,} done ({100 * count / self.total:.0f}%), elapsed {_clock(elapsed)}, "
                   f"about {_clock(left)} left")

    def done(self) -> None:
        self.write(f"{self.what}: done in {_clock(time.monotonic() - self.start)}")


class _PlainLines:
    """Mixin over a Lightning progress bar: the total at ``max_steps``, and plain lines without a terminal."""

    def _setup_lines(self, every_n_steps: int | None, every_n_seconds: float, interactive: bool | None) -> None:
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps must be at least 1 (or None: about 20 lines a run), got {every_n_steps}")
        self.every_n_steps, self.every_n_seconds, self.interactive = every_n_steps, every_n_seconds, interactive
        self.plain = False
        self._t0 = self._last_time = self._val_t0 = 0.0
        self._last_step = self._step0 = 0

    def _terminal(self) -> bool:  # pragma: no cover - depends on how the process was started
        return sys.stderr.isatty()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self.plain = not (self.interactive if self.interactive is not None else self._terminal())
        if self.plain:
            self.disable()  # the bar would only print its last frame, at the end

    @property
    def total_train_batches(self) -> int | float:
        """This epoch's batches, up to ``max_steps`` (also when ``max_epochs`` is set)."""
        total = self.trainer.num_training_batches
        if self.trainer.max_steps is not None and self.trainer.max_steps > 0:
            done = self.trainer.fit_loop.epoch_loop.batch_progress.current.ready  # > 0 when resumed mid-epoch
            total = min(total, done + self.trainer.max_steps - self.trainer.global_step)
        return total

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics

    def _steps_per_line(self, trainer: L.Trainer) -> int:
        if self.every_n_steps is not None:
            return self.every_n_steps
        total = total_steps(trainer)
        return max(1, round(total / 20)) if math.isfinite(total) else 10

    def _write(self, line: str) -> None:
        print(line, flush=True)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._t0 = self._last_time = time.monotonic()
        self._step0 = self._last_step = trainer.global_step

    def _step_line(self, trainer: L.Trainer, pl_module: L.LightningModule) -> str:
        now, step = time.monotonic(), trainer.global_step
        rate = (step - self._step0) / (now - self._t0) if now > self._t0 else 0.0
        metrics = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if isinstance(v, (int, float))}
        self._last_time, self._last_step = now, step
        return step_line(step, total_steps(trainer), metrics, rate, now - self._t0)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if not (self.plain and trainer.is_global_zero):
            return
        due = trainer.global_step - self._last_step >= self._steps_per_line(trainer)
        if due or time.monotonic() - self._last_time >= self.every_n_seconds:
            self._write(self._step_line(trainer, pl_module))

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_start(trainer, pl_module)
        self._val_t0 = time.monotonic()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.plain and trainer.is_global_zero and not trainer.sanity_checking:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            self._write(validation_line(trainer.global_step, metrics, time.monotonic() - self._val_t0))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if self.plain and trainer.is_global_zero and trainer.global_step != self._last_step:
            self._write(self._step_line(trainer, pl_module))


class RichProgress(_PlainLines, RichProgressBar):
    """Lightning's ``RichProgressBar``, extended (see the module docstring).

    Args:
        every_n_steps: without a terminal, a line every this many steps (None: about 20 lines a run).
        every_n_seconds: without a terminal, a line at least this often.
        interactive: draw the bar (True) or print lines (False); None: the bar on a terminal only.
    """

    def __init__(self, every_n_steps: int | None = None, every_n_seconds: float = 60.0,
                 interactive: bool | None = None, refresh_rate: int = 1, leave: bool = False):
        super().__init__(refresh_rate=refresh_rate, leave=leave)
        self._setup_lines(every_n_steps, every_n_seconds, interactive)

    def _terminal(self) -> bool:  # pragma: no cover - depends on how the process was started
        from rich.console import Console

        console = Console()
        return console.is_terminal or console.is_jupyter


class TQDMProgress(_PlainLines, TQDMProgressBar):
    """Lightning's ``TQDMProgressBar``, extended (see the module docstring); arguments as :class:`RichProgress`."""

    def __init__(self, every_n_steps: int | None = None, every_n_seconds: float = 60.0,
                 interactive: bool | None = None, refresh_rate: int = 1, leave: bool = False):
        super().__init__(refresh_rate=refresh_rate, leave=leave)
        self._setup_lines(every_n_steps, every_n_seconds, interactive)


ProgressBar = RichProgress if rich_available() else TQDMProgress
"""The bar Lightning itself would pick (Rich when installed), extended."""


def with_progress_bar(callbacks: Any, enabled: bool | None = True) -> list:
    """``callbacks`` (a list, one callback or None) plus a :data:`ProgressBar`, unless the progress bar is off
    (``enable_progress_bar: false``) or one is already configured."""
    callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    if enabled is False or any(isinstance(c, _LightningProgressBar) for c in callbacks):
        return callbacks
    return [*callbacks, ProgressBar()]
