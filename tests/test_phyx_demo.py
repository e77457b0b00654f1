"""The PhyX demo configs end to end: ``fit`` then ``test`` writes the accuracy table; ``predict`` writes JSONL."""

import csv
import json
from pathlib import Path

import pytest
import yaml

from lit_grpo.cli import main
from lit_grpo.rewards.registry import REWARDS

if "test_even_id" not in REWARDS:
    @REWARDS.register("test_even_id")
    def _even_id(completions, id, **_):
        """1 for samples with an even id: a scorer whose table can be worked out by hand."""
        return [1.0 if int(i) % 2 == 0 else 0.0 for i in id]


def _overrides(tmp_path: Path, fmt: str) -> Path:
    spec = {"path": str(tmp_path / "physics" / "phyx.parquet"), "reader": "phyx", "split": "test",
            "generate": {"kind": "physics", "num": 18, "seed": 0}, "reader_args": {"answer_format": fmt}}
    cfg = {
        "trainer": {"max_steps": 2, "val_check_interval": 2, "limit_val_batches": 1,
                    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(tmp_path / "logs"), "name": "t",
                                             "default_hp_metric": False}},
                    "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True,
                                                 "every_n_train_steps": 1}},
                                  {"class_path": "lit_grpo.callbacks.AccuracyTable"},
                                  {"class_path": "lit_grpo.callbacks.PredictionsJSONL"}]},
        "model": {"init_args": {"policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}},
                                "sampling": {"num_generations": 4, "max_completion_length": 12}}},
        "data": {"train": {**spec, "rows": "6:"}, "val": {**spec, "rows": ":6"}, "test": {**spec, "rows": ":6"},
                 "batch_size": 2, "eval_batch_size": 3},
    }
    path = tmp_path / "over.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _scalars(run: Path) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run))
    acc.Reload()
    out = {tag: acc.Scalars(tag)[-1].value for tag in acc.Tags()["scalars"]}
    out.update({tag: 1.0 for tag in acc.Tags().get("tensors", [])})  # text summaries are stored as tensors
    return out


@pytest.mark.slow
def test_mcq_demo_fit_then_test_writes_the_table_and_predict_writes_jsonl(tmp_path):
    over = _overrides(tmp_path, "mcq")
    cli = main(["fit", "--config", "configs/demo_phyx_mcq.yaml", "--config", str(over)])
    assert cli.trainer.global_step == 2
    ckpt = str(tmp_path / "ckpt" / "last.ckpt")
    # ids 0..5 cycle through the problem types: calorimetry (Thermodynamics), circuit (Electromagnetism),
    # decay (Modern Physics), doppler (Wave/Acoustics), field lines (Electromagnetism), heat engine
    # (Thermodynamics). The scorer marks even ids correct: 0, 2, 4.
    cli = main(["test", "--config", "configs/demo_phyx_mcq.yaml", "--config", str(over), "--ckpt_path", ckpt,
                "--model.init_args.evaluation.scorer", "test_even_id"])
    run = Path(cli.trainer.logger.log_dir)
    rows = {(r["group"], r["name"]): r for r in csv.DictReader(open(run / "test_accuracy_greedy.csv"))}
    assert len(rows) == 13
    expected = {("overall", "all"): "0.500000", ("domain", "Thermodynamics"): "0.500000",
                ("domain", "Electromagnetism"): "0.500000", ("domain", "Modern Physics"): "1.000000",
                ("domain", "Wave/Acoustics"): "0.000000", ("domain", "Mechanics"): "", ("domain", "Optics"): ""}
    assert {k: rows[k]["accuracy"] for k in expected} == expected, rows
    assert rows[("overall", "all")]["n"] == "6"
    md = (run / "test_accuracy_greedy.md").read_text()
    assert "| 0.500 | – | 0.500 | 0.500 | 0.000 | – | 1.000 |" in md
    tb = _scalars(run)
    assert tb["test/greedy/accuracy/overall"] == pytest.approx(0.5)
    assert tb["test/greedy/accuracy/domain/Modern_Physics"] == pytest.approx(1.0)
    assert "test/greedy/accuracy_table/text_summary" in tb
    assert cli.trainer.callback_metrics["test/greedy/accuracy"] == pytest.approx(0.5)

    cli = main(["predict", "--config", "configs/demo_phyx_mcq.yaml", "--config", str(over), "--ckpt_path", ckpt])
    lines = [json.loads(x) for x in (Path(cli.trainer.logger.log_dir) / "predictions.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["0", "1", "2", "3", "4", "5"]
    assert lines[3]["domain"] == "Wave/Acoustics" and set(lines[0]["rewards"]) == {"format", "accuracy"}
    assert {"prompt", "completion", "extracted", "correct"} <= set(lines[0])
    assert "<answer>" in lines[0]["prompt"] and "Options:\nA: " in lines[0]["prompt"]


@pytest.mark.slow
def test_open_demo_tests_with_the_official_scorer(tmp_path):
    over = _overrides(tmp_path, "open")
    cli = main(["test", "--config", "configs/demo_phyx_oe.yaml", "--config", str(over)])
    run = Path(cli.trainer.logger.log_dir)
    rows = list(csv.DictReader(open(run / "test_accuracy_greedy.csv")))
    assert rows[0]["name"] == "all" and rows[0]["n"] == "6" and rows[0]["unscorable"] == "0"
    assert set(cli.trainer.callback_metrics) >= {"test/greedy/reward/phyx_official", "test/greedy/accuracy"}
