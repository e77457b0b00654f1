"""A resumed run is one run in what it writes: the same TensorBoard folder and curves (no step twice), the closing
summary from step 0, every validation in ``eval_curves.md``; a shortened run validates at its last step."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from lit_grpo.cli import main

ROOT = Path(__file__).resolve().parents[1]


def config(folder: Path, **trainer) -> Path:
    """The demo on a few embedded puzzles: 2 prompts x 2 completions a step, validation of 2 puzzles (greedy)."""
    gen = {"kind": "puzzles", "rules": ["red_count"], "fixed_option_order": True, "panel_size": 16}
    cfg = {"trainer": {"max_steps": 4, "val_check_interval": 2, "limit_val_batches": 1, "enable_progress_bar": False,
                       "logger": {"init_args": {"save_dir": str(folder / "logs"), "name": "run"}},
                       "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                      "init_args": {"dirpath": str(folder / "ckpt"), "save_last": True, "save_top_k": -1, "enable_version_counter": False,
                                                    "every_n_train_steps": 2}},
                                     {"class_path": "lit_grpo.callbacks.EvalSummary"}], **trainer},
           "model": {"init_args": {"policy": {"name_or_path": str(ROOT / "checkpoints" / "demo")},
                                   "evaluation": {"before_fit": True, "num_samples": 0},
                                   "sampling": {"num_generations": 2, "max_completion_length": 4}}},
           "data": {"train": {"generate": {"path": str(folder / "train.parquet"), "num": 32, **gen}},
                    "val": {"generate": {"path": str(folder / "val.parquet"), "num": 2, "seed": 1, **gen}},
                    "batch_size": 2, "eval_batch_size": 2}}
    path = folder / f"small_{len(list(folder.glob('small_*')))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def fit(folder: Path, *args: str, **trainer):
    return main(["fit", "--config", "configs/demo.yaml", "--config", str(config(folder, **trainer)), *args])


def scalar_steps(run: Path, tag: str) -> list[int]:
    """The steps TensorBoard shows for ``tag`` in the run folder ``run`` (after its purges)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def table_steps(run: Path) -> list[int]:
    rows = (run / "eval_curves.md").read_text().splitlines()[2:]
    return [int(r.split("|")[1]) for r in rows]


def test_a_resumed_fit_continues_its_folder_curves_and_tables(tmp_path, capsys, caplog):
    """4 steps (validation at 0, 2, 4), resumed to 6 from the step-2 checkpoint, then to 8 from last.ckpt: one
    ``version_0`` whose TensorBoard curves hold every step once (what the first process logged after step 2 is
    purged and redone), the closing summary and ``eval_curves.md`` from step 0; a resume under another run name
    starts a folder of its own."""
    fit(tmp_path)
    fit(tmp_path, "--ckpt_path", str(tmp_path / "ckpt" / "epoch=0-step=2.ckpt"), "--trainer.max_steps", "6")
    capsys.readouterr()
    caplog.set_level(logging.INFO)
    fit(tmp_path, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"), "--trainer.max_steps", "8")
    out = capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "logs" / "run").iterdir()) == ["version_0"]
    run = tmp_path / "logs" / "run" / "version_0"
    assert scalar_steps(run, "train/reward") == [1, 2, 3, 4, 5, 6, 7, 8]
    assert scalar_steps(run, "val/greedy/reward") == [0, 2, 4, 6, 8]
    assert table_steps(run) == [0, 2, 4, 6, 8]
    assert "Validation (mean +- SE over prompts), step 0 -> step 8" in out
    assert f"  tensorboard --logdir {tmp_path / 'logs' / 'run'}     (TensorBoard; this run: {run})" in caplog.text
    assert {p.name for p in run.glob("config*.yaml")} == {
        "config.yaml", "config_resumed_at_step_2.yaml", "config_resumed_at_step_6.yaml"}
    # what made each start of the run, beside its config, and in every checkpoint
    assert {p.name for p in run.glob("environment*.json")} == {
        "environment.json", "environment_resumed_at_step_2.json", "environment_resumed_at_step_6.json"}
    recorded = json.loads((run / "environment_resumed_at_step_6.json").read_text())
    assert recorded["torch"]["version"] == torch.__version__ and recorded["packages"]["lightning"] == L.__version__
    assert torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["environment"] == recorded
    fit(tmp_path, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"), "--trainer.max_steps", "9",
        "--trainer.logger.init_args.name", "other")
    assert sorted(p.name for p in (tmp_path / "logs" / "other").iterdir()) == ["version_0"]
    # the validation at 8 ran after last.ckpt was written, into the other folder: the new one has it not
    assert table_steps(tmp_path / "logs" / "other" / "version_0") == [0, 2, 4, 6, 9]


@pytest.mark.parametrize("max_steps,interval,puzzles,validated", [
    (3, 120, 32, [0, 3]),  # a shortened run of a config that validates every 120 steps
    (4, 2, 32, [0, 2, 4]),  # the last step is a validation step: validated once, not twice
    (3, 2, 32, [0, 2, 3]),
    (20, 120, 8, [0, 4]),  # max_epochs 1 (the demo's) ends the run at the end of its 4-step epoch
])
def test_a_run_validates_at_its_last_step(max_steps, interval, puzzles, validated, tmp_path, capsys):
    fit(tmp_path, "--trainer.max_steps", str(max_steps), "--trainer.val_check_interval", str(interval),
        "--data.train.generate.num", str(puzzles))
    out = capsys.readouterr().out
    run = tmp_path / "logs" / "run" / "version_0"
    assert scalar_steps(run, "val/greedy/reward") == validated
    assert table_steps(run) == validated
    assert f"Validation (mean +- SE over prompts), step 0 -> step {validated[-1]}:" in out


def test_generating_data_says_what_it_makes_with_progress(tmp_path, caplog, monkeypatch):
    import logging

    from lit_grpo.data.datamodule import ensure_generated
    from lit_grpo.progress import CountProgress

    lines = []
    progress = CountProgress("making 4", 4, "seed: 0", every_s=0.0, write=lines.append)
    for i in range(1, 5):
        progress(i)
    progress.done()
    assert lines[0] == "making 4 (seed: 0)"
    assert [line.split(", elapsed")[0] for line in lines[1:4]] == [
        "making 4: 1 done (25%)", "making 4: 2 done (50%)", "making 4: 3 done (75%)"]
    assert lines[1].endswith("left") and lines[4].startswith("making 4: done in 0:00:0")

    caplog.set_level(logging.INFO)
    path = tmp_path / "p.parquet"
    ensure_generated({"path": str(path), "kind": "puzzles", "num": 3, "seed": 2, "rules": ["red_count"]})
    said = [r.getMessage() for r in caplog.records if r.name == "lit_grpo.data.datamodule"]
    assert said[0] == f"generating 3 rows (puzzles generator) into {path} (rules: ['red_count'], seed: 2)"
    assert said[-1].startswith(f"generating 3 rows (puzzles generator) into {path}: done in ")
