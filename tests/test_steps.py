"""One step counter: a training step is one rollout, whatever ``num_iterations`` is, for max_steps, the
TensorBoard x-axis, log_every_n_steps, val_check_interval, every_n_train_steps, checkpoint names, the lr
scheduler and eval_curves; each figure sits at the step it belongs to."""

import csv
from pathlib import Path

import pytest
import torch
import yaml

from lit_grpo.cli import main

LR = 3e-4


def _events(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


@pytest.mark.parametrize("num_iterations,log_every,steps_per_generation",
                         [(1, 1, 1), (2, 1, 1), (3, 2, 1), (2, 1, 2)])
def test_every_axis_and_trigger_counts_rollouts(tmp_path, num_iterations, log_every, steps_per_generation):
    """3 rollouts of ``num_iterations * steps_per_generation`` updates each; LinearLR from 3e-4 to 0 over 3 steps;
    validation before training and every 3 steps; a checkpoint every 3 steps; completion samples every 2 steps.
    The run with ``steps_per_generation`` 2 also uses GDPO's ``normalize_then_sum``: each reward's share of the
    advantage is logged at every step."""
    cfg = {
        "trainer": {"max_steps": 3, "max_epochs": 5, "val_check_interval": 3, "log_every_n_steps": log_every,
                    "enable_progress_bar": False,
                    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(tmp_path / "logs"), "name": "t",
                                             "default_hp_metric": False}},
                    "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": {"dirpath": str(tmp_path / "ckpt"), "filename": "{step}",
                                                 "every_n_train_steps": 3, "save_top_k": -1,
                                                 "save_last": False}},
                                  {"class_path": "lit_grpo.callbacks.CompletionSamples",
                                   "init_args": {"every_n_steps": 2}},
                                  {"class_path": "lit_grpo.callbacks.EvalSummary"}]},
        "model": {"init_args": {
            "policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}},
            "sampling": {"num_generations": 2, "max_completion_length": 8},
            "grpo": {"num_iterations": num_iterations, "steps_per_generation": steps_per_generation,
                     "multi_objective_aggregation": "normalize_then_sum" if steps_per_generation > 1
                     else "sum_then_normalize"},
            "evaluation": {"before_fit": True, "num_samples": 0},
            "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": LR, "weight_decay": 0.0}},
            "lr_scheduler": {"class_path": "torch.optim.lr_scheduler.LinearLR",
                             "init_args": {"start_factor": 1.0, "end_factor": 0.0, "total_iters": 3}}}},
        "data": {"train": {"generate": {"path": str(tmp_path / "train.parquet"), "kind": "puzzles", "num": 4}},
                 "val": {"generate": {"path": str(tmp_path / "val.parquet"), "kind": "puzzles", "num": 2, "seed": 1}},
                 "batch_size": 2, "eval_batch_size": 2},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(tmp_path / "c.yaml")])
    trainer = cli.trainer
    assert trainer.global_step == 3 and trainer.fit_loop.total_batch_idx + 1 == 3  # max_steps: 3 rollouts
    optimizer = trainer.optimizers[0]
    updates = 3 * num_iterations * steps_per_generation  # every inner update steps the optimizer
    assert all(s["step"] == updates for s in optimizer.state_dict()["state"].values())
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # the scheduler stepped 3 times
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step=3.ckpt"]  # every_n_train_steps=3
    assert torch.load(tmp_path / "ckpt" / "step=3.ckpt", weights_only=False)["global_step"] == 3

    run = tmp_path / "logs" / "t" / "version_0"
    events = _events(run)
    # log_every_n_steps counts steps too; the last step is logged as well (the run stops there to validate)
    logged = [s for s in (1, 2, 3) if s % log_every == 0 or s == 3]
    lrs = events.Scalars("train/update/lr")
    assert [e.step for e in lrs] == logged
    # the lr each step's updates used: 3e-4, 2e-4, 1e-4 for steps 1, 2, 3
    assert [e.value for e in lrs] == pytest.approx([LR * (1 - (s - 1) / 3) for s in logged], rel=1e-6)
    assert [e.step for e in events.Scalars("train/reward")] == logged
    shares = [t for t in events.Tags()["scalars"] if t.startswith("train/advantage/")]
    assert sorted(shares) == (["train/advantage/binary", "train/advantage/boxed_format"]
                              if steps_per_generation > 1 else [])
    for tag in shares:
        assert [e.step for e in events.Scalars(tag)] == logged
    # before training, after step 3; sorted: the step-0 validation's file (the writer is closed after it) may sort
    # after the next one, named by the same second and the process's writer count (".10" before ".9")
    assert sorted(e.step for e in events.Scalars("val/greedy/reward")) == [0, 3]
    assert [e.step for e in events.Tensors("train/completions/text_summary")] == [2]
    with open(run / "eval_curves.csv") as f:
        assert [int(float(r["step"])) for r in csv.DictReader(f)] == [0, 3]
