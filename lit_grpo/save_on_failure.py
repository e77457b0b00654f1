"""A step that fails never takes the finished steps with it: when training stops on an error (a reward that raises,
a judge that is down, a bug in a callback, out of memory) or a stop signal abandons a step that does not finish
(:class:`~lit_grpo.runs.StepAbandoned`), the last finished step is saved as ``last.ckpt``, as a
checkpoint written right after that step would be, so resuming from it is the same run.

How: after every training step :class:`SaveOnFailure` keeps what a checkpoint holds besides the weights and the
optimizer (the training loop's state, data loader position included, and the RNG states; a few kB), and counts the
optimizer's updates. On an error during a later step, as long as no update of the failed step has changed the weights
(an error in sampling, rewards or the log-prob pass), it writes the checkpoint from those and the current weights.
If an update had already run, nothing is written (the weights are those of no step) and the note names the newest
checkpoint. The note is added to the error (after its traceback, or on the CLI's one ``error:`` line).

Single-process runs only: in a multi-process run one rank's error would leave the others waiting in the save's
collectives.
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_grpo.compat import last_saved_checkpoint
from lit_grpo.errors import CheckpointWriteError
from lit_grpo.rng import collect_rng_states, set_rng_states
from lit_grpo.runs import StepAbandoned, StopAndResume, resume_command, written_checkpoints


class SaveOnFailure(L.Callback):
    """Saves the last finished training step when a later step fails (see the module docstring).

    Args:
        command: the run's command line, for the resume command in the note.
    """

    def __init__(self, command: list[str] | None = None):
        self.command = command
        self.note: str | None = None
        self._finished: tuple[int, int, dict, dict] | None = None  # step, updates, fit loop state, RNG states
        self._updates = 0
        self._hooks: list[Any] = []
        self._saving: dict | None = None

    def _count(self, *_: Any) -> None:
        self._updates += 1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finished, self.note = None, None
        self._hooks = [opt.register_step_post_hook(self._count) for opt in trainer.optimizers]

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._finished = (trainer.global_step, self._updates, copy.deepcopy(trainer.fit_loop.state_dict()),
                          collect_rng_states())

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._saving is not None:  # the loop as it was when the finished step ended
            checkpoint["loops"]["fit_loop"] = self._saving

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        abandoned = isinstance(exception, StepAbandoned)  # a stop signal gave up waiting for the step
        if (trainer.state.fn != TrainerFn.FITTING or trainer.world_size > 1 or not self._hooks  # training not begun
                or (not abandoned
                    and isinstance(exception, (SIGTERMException, KeyboardInterrupt, CheckpointWriteError)))):
            return
        try:
            resume_with = "Resume the run with:\n " if abandoned else "resume once this is fixed with:"
            self.note = self._save(trainer, resume_with)
        except Exception as exc:  # never hide the run's own error behind this one
            self.note = f"The last finished step could not be saved ({type(exc).__name__}: {exc})."
        if abandoned:  # a stop, not an error: no error line will carry the note
            print(f"{self.note}\n", file=sys.stderr, flush=True)
        elif hasattr(exception, "add_note"):
            exception.add_note(self.note)
        else:  # pragma: no cover - Python 3.10
            print(self.note, file=sys.stderr, flush=True)

    def _save(self, trainer: L.Trainer, resume_with: str = "resume once this is fixed with:") -> str:
        """Write the last finished step's checkpoint if the weights are still that step's; the note to show."""
        if self._finished is None:
            return "No training step had finished: nothing to save."
        step, updates, loop, rng = self._finished
        if updates != self._updates or step != trainer.global_step:
            newest = written_checkpoints(trainer)
            return (f"The failed step had already updated the weights, so nothing more is written; the newest "
                    f"checkpoint is {max(newest, key=os.path.getmtime)}." if newest else
                    "The failed step had already updated the weights, so nothing more is written; no checkpoint of "
                    "this run exists.")
        saved = next((path for path_step, path in map(last_saved_checkpoint, trainer.checkpoint_callbacks)
                      if path_step == step and os.path.isfile(path or "")), None)
        if saved is None:
            saved = StopAndResume.stop_path(trainer)
            now = collect_rng_states()
            self._saving = loop
            set_rng_states(rng)
            try:
                trainer.save_checkpoint(saved, weights_only=False)
            except CheckpointWriteError as exc:
                return f"Step {step}, the last finished step, could not be saved: {exc}."
            finally:
                self._saving = None
                set_rng_states(now)
        resume = resume_command(self.command, saved) if self.command else f"ckpt_path={saved!r}"
        return f"Step {step}, the last finished step, is saved in {saved}; {resume_with} {resume}"
