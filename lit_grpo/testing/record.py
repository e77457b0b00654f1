"""A callback that records what every rank of a run did, for tests that compare runs launched in other processes.

:class:`RecordSteps` writes ``<folder>/rank<r>.json`` per rank at the end of fit (or of a ``validate`` run): every
training step's number, prompt ids, completions, ``train/`` figures and the all-gather collectives its rollout ran,
every validation's ``val/`` figures, and the rank's place (global, local and node rank, world size) and parameter
bytes (held, whole); rank 0 also writes the whole trainable weights (``<folder>/weights.pt``). A resumed run
records only the steps it ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
import torch.distributed as dist

from lit_grpo.fsdp import parameter_bytes, trainable_state


class RecordSteps(L.Callback):
    """See the module docstring. ``folder``: where to write (created)."""

    def __init__(self, folder: str):
        self.folder, self.steps, self.validations = Path(folder), [], []
        self.all_gathers = 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if dist.is_available() and dist.is_initialized() and not hasattr(dist.all_gather_single, "counted"):
            original = dist.all_gather_single

            def counted(*args, **kwargs):
                self.all_gathers += 1
                return original(*args, **kwargs)

            counted.counted = True
            dist.all_gather_single = counted
        rollout = pl_module.rollout

        def counted_rollout(*args, **kwargs):
            before = self.all_gathers
            out = rollout(*args, **kwargs)
            self.rollout_all_gathers = self.all_gathers - before
            return out

        pl_module.rollout = counted_rollout

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        logged = {k: float(v) for k, v in trainer.callback_metrics.items()
                  if k.startswith("train/") and k != "train/rollout/completions_per_second"}
        self.steps.append({"step": trainer.global_step, "ids": [s.id for s in batch.samples],
                           "completions": outputs["completions"], "logged": logged,
                           "rollout_all_gathers": getattr(self, "rollout_all_gathers", None)})

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.validations.append({"step": trainer.global_step, "logged": {
            k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}})
        if trainer.state.fn == TrainerFn.VALIDATING:
            self.write(trainer, pl_module)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write(trainer, pl_module)

    def write(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The files (every rank calls it: gathering sharded weights is a collective)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        weights = trainable_state(pl_module)
        held, whole = parameter_bytes(pl_module.policy)
        record = {"global_rank": trainer.global_rank, "local_rank": trainer.local_rank, "node_rank": trainer.node_rank,
                  "world_size": trainer.world_size, "parameter_bytes": [held, whole], "steps": self.steps,
                  "validations": self.validations}
        (self.folder / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
        if trainer.is_global_zero:
            torch.save(weights, self.folder / "weights.pt")
