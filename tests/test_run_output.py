"""What a researcher sees of a run: TensorBoard's tags in the order its Time Series tab shows them, the Custom
Scalars layout (validation curves with their standard-error band), no constant ``epoch`` scalar, and plain
progress lines in a batch log (output redirected to a file, no terminal)."""

import csv
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lit_grpo import loggers, progress

ROOT = Path(__file__).parents[1]


# ----------------------------------------------------------------------------------------- TensorBoard's order
def _special(c: str) -> bool:
    return c == "/" or c.isdigit()


def tensorboard_compare(a: str, b: str) -> int:
    """TensorBoard's tag order (its frontend's natural sort, 2.x): digit runs compare as numbers, ``/`` and
    digits sort before every other character, other characters by code point."""
    i = j = 0
    while True:
        if i == len(a):
            return 0 if j == len(b) else -1
        if j == len(b):
            return 1
        if a[i].isdigit() and b[j].isdigit():
            i0, j0 = i, j
            while i < len(a) and a[i].isdigit():
                i += 1
            while j < len(b) and b[j].isdigit():
                j += 1
            if int(a[i0:i]) != int(b[j0:j]):
                return -1 if int(a[i0:i]) < int(b[j0:j]) else 1
            continue
        if _special(a[i]) != _special(b[j]):
            return -1 if _special(a[i]) else 1
        if not _special(a[i]) and a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i, j = i + 1, j + 1


def tensorboard_groups(tags: list[str]) -> list[tuple[str, list[str]]]:
    """The Time Series tab's card groups (text before the first ``/``) in display order, each with its cards."""
    groups: dict[str, list[str]] = {}
    for tag in sorted(tags, key=functools.cmp_to_key(tensorboard_compare)):
        groups.setdefault(tag.split("/", 1)[0], []).append(tag)
    return list(groups.items())


def test_tensorboard_order_hand_cases():
    order = ["epoch", "train/reward", "train/reward/binary", "train/reward/binary_std", "train/reward_std",
             "train/rollout/kl", "train/update/loss", "train_x/a", "val/greedy/reward", "val/greedy/reward2",
             "val/greedy/reward10", "valband/greedy/reward/lower"]
    assert sorted(reversed(order), key=functools.cmp_to_key(tensorboard_compare)) == order
    assert [g for g, _ in tensorboard_groups(order)] == ["epoch", "train", "train_x", "val", "valband"]


# ----------------------------------------------------------------------------------------- pure functions
@pytest.mark.parametrize("metrics,expected", [
    ({"val/greedy/reward": 0.5, "val/greedy/reward_se": 0.1, "epoch": 0},
     {"val/greedy/reward": 0.5, "valband/greedy/reward/lower": 0.4, "valband/greedy/reward/upper": 0.6}),
    ({"test/sampled/accuracy": 0.75, "test/sampled/accuracy_se": 0.25, "epoch": 2},
     {"test/sampled/accuracy": 0.75, "testband/sampled/accuracy/lower": 0.5, "testband/sampled/accuracy/upper": 1.0,
      "train/rollout/epoch": 2}),
    ({"val/greedy/reward/rubric/format": 1.0, "val/greedy/reward/rubric/format_se": 0.0},
     {"val/greedy/reward/rubric/format": 1.0, "valband/greedy/reward/rubric/format/lower": 1.0,
      "valband/greedy/reward/rubric/format/upper": 1.0}),
    # an _se without its mean, and a training key that ends in _se, are written as they are
    ({"val/greedy/reward_se": 0.1, "train/reward/x_se": 3.0}, {"val/greedy/reward_se": 0.1, "train/reward/x_se": 3.0}),
])
def test_tensorboard_scalars_write_standard_errors_as_bands_and_drop_a_constant_epoch(metrics, expected):
    assert loggers.tensorboard_scalars(metrics) == pytest.approx(expected)


def test_layout_puts_accuracy_and_rewards_first_and_leaves_out_judge_statistics():
    curves = ["val/greedy/completion_length", "val/sampled/reward/format", "val/greedy/reward",
              "val/greedy/reward/open_accuracy/judge/calls", "val/greedy/accuracy", "val/sampled/reward",
              "val/greedy/reward/format"]
    layout = loggers.custom_scalars_layout(curves)
    validation, train, diagnostics = layout["category"]
    charts = list(reversed(validation["chart"]))  # written last first: TensorBoard draws margin charts reversed
    assert [c["margin"]["series"][0]["value"] for c in charts] == [
        "val/greedy/accuracy", "val/greedy/reward", "val/sampled/reward", "val/greedy/reward/format",
        "val/sampled/reward/format", "val/greedy/completion_length"]
    assert charts[1]["margin"]["series"][0] == {"value": "val/greedy/reward", "lower": "valband/greedy/reward/lower",
                                                "upper": "valband/greedy/reward/upper"}
    assert validation["title"].startswith("validation") and "closed" not in validation
    assert train["title"].startswith("training reward") and diagnostics.get("closed") is True
    # the multiline regexes pick the intended tags (TensorBoard matches them with Python's re.match)
    tags = ["train/reward", "train/reward/binary", "train/reward/binary_std", "train/reward_std",
            "train/reward/rubric/format", "train/rollout/frac_reward_zero_std", "train/update/kl"]
    picked = [[t for t in tags if re.match(c["multiline"]["tag"][0], t)] for c in train["chart"]]
    assert picked == [["train/reward"], ["train/reward/binary"],
                      ["train/reward_std", "train/rollout/frac_reward_zero_std"]]


def test_progress_lines_hand_values():
    line = progress.step_line(40, 200, {"train/reward": 0.7341}, rate=1.25, elapsed=32.4)
    assert line == "step 40/200 (20%)  train/reward 0.734  1.25 steps/s  elapsed 0:00:32  ETA 0:02:08"  # 160 / 1.25
    assert progress.step_line(3, float("inf"), {}, rate=0.5, elapsed=6) == "step 3  0.50 steps/s  elapsed 0:00:06"
    metrics = {"val/sampled/reward": 0.5, "val/sampled/reward_se": 0.02, "val/greedy/accuracy": 1.0,
               "val/greedy/accuracy_se": 0.0, "val/greedy/completion_length": 12.0,
               "val/greedy/reward/open_accuracy/judge/calls": 3.0, "train/reward": 0.1}
    assert progress.validation_line(50, metrics, 75) == (
        "validation at step 50 (took 0:01:15): val/greedy/accuracy 1.000 +- 0.000  val/sampled/reward 0.500 +- 0.020")


def test_progress_bar_is_added_once():
    bar = progress.ProgressBar(every_n_steps=2)
    assert [type(c) for c in progress.with_progress_bar(None)] == [progress.ProgressBar]
    assert progress.with_progress_bar([bar]) == [bar]  # a configured bar is kept, not doubled
    assert progress.with_progress_bar(None, enabled=False) == []
    with pytest.raises(ValueError, match="every_n_steps must be at least 1"):
        progress.ProgressBar(every_n_steps=0)


# ----------------------------------------------------------------------------------------- a batch run
@pytest.fixture(scope="module")
def batch_run(tmp_path_factory):
    """``python -m lit_grpo fit`` of the demo config on the tiny embedded model, 6 steps, validation before
    training and every 3 steps, stdout and stderr redirected to a file (no terminal)."""
    tmp = tmp_path_factory.mktemp("batch_run")
    over = {
        "trainer": {"max_steps": 6, "val_check_interval": 3, "max_time": None,
                    "logger": {"init_args": {"save_dir": str(tmp / "logs"), "name": "t"}},
                    "callbacks": [{"class_path": "lit_grpo.callbacks.EvalSummary"},
                                  {"class_path": "lit_grpo.progress.ProgressBar", "init_args": {"every_n_steps": 2}}]},
        "model": {"init_args": {"policy": {"name_or_path": str(tmp / "model"), "embedded": {"seed": 0}},
                                "sampling": {"num_generations": 4, "max_completion_length": 8}}},
        "data": {"train": {"generate": {"path": str(tmp / "train.parquet"), "kind": "puzzles", "num": 16}},
                 "val": {"generate": {"path": str(tmp / "val.parquet"), "kind": "puzzles", "num": 4, "seed": 1}},
                 "batch_size": 2, "eval_batch_size": 4},
    }
    (tmp / "over.yaml").write_text(yaml.safe_dump(over))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with open(tmp / "log.txt", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml",
                               "--config", str(tmp / "over.yaml")], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=600)
    text = (tmp / "log.txt").read_text()
    assert proc.returncode == 0, text[-3000:]
    return tmp, text


STEP = re.compile(r"^step (\d+)/6 \((\d+)%\)  train/reward \d+\.\d{3}  \d+\.\d\d steps/s  elapsed (\d+:\d\d:\d\d)"
                  r"  ETA (\d+:\d\d:\d\d)$")
VALIDATION = re.compile(r"^validation at step (\d+) \(took \d+:\d\d:\d\d\): (.*)$")


@pytest.mark.slow
def test_batch_log_has_a_line_every_n_steps_and_one_per_validation(batch_run):
    _, text = batch_run
    lines = [line for line in text.splitlines() if STEP.match(line) or VALIDATION.match(line)]
    kinds = [("step", int(STEP.match(x).group(1))) if STEP.match(x) else ("val", int(VALIDATION.match(x).group(1)))
             for x in lines]
    assert kinds == [("val", 0), ("step", 2), ("val", 3), ("step", 4), ("step", 6), ("val", 6)]
    steps = [STEP.match(x) for x in lines if STEP.match(x)]
    assert [m.group(2) for m in steps] == ["33", "67", "100"] and steps[-1].group(4) == "0:00:00"
    for line in lines:
        if VALIDATION.match(line):
            assert re.search(r"val/greedy/reward \d\.\d{3} \+- \d\.\d{3}", line)
            assert "val/sampled/reward/binary" in line and "completion_length" not in line
    assert not re.search(r"Epoch \d+/\d+", text) and "v_num" not in text  # no bar frame, no logger version


@pytest.mark.slow
def test_tensorboard_holds_the_layout_the_bands_and_no_epoch(batch_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2

    tmp, _ = batch_run
    run = tmp / "logs" / "t" / "version_0"
    events = EventAccumulator(str(run), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "epoch" not in tags and not [t for t in tags if t.endswith("_se")]
    # TensorBoard opens the first two groups: the validation figure (an image, in its own group), then train
    groups = tensorboard_groups(tags + events.Tags()["images"])
    assert [g for g, _ in groups][:4] == ["eval_curves", "train", "val", "valband"]
    assert [e.step for e in events.Images("eval_curves/1_reward")] == [0, 3, 6]  # drawn after every validation
    train = groups[1][1]
    curves = [t for t in train if t == "train/reward" or t.startswith(("train/reward/", "train/reward_std"))]
    assert train[:len(curves)] == curves and train[0] == "train/reward"  # the reward curves lead the train group
    assert {"train/reward/binary", "train/reward/boxed_format", "train/update/loss", "train/update/kl",
            "train/rollout/frac_reward_zero_std"} <= set(train)
    assert all(t.startswith(("train/rollout/", "train/update/")) for t in train[len(curves):])
    # the layout: validation margin charts of every curve, each band = mean -+ the SE of eval_curves.csv
    layout = layout_pb2.Layout()
    layout.ParseFromString(events.Tensors("custom_scalars__config__")[-1].tensor_proto.string_val[0])
    charts = list(reversed(layout.category[0].chart))
    values = [c.margin.series[0].value for c in charts]
    assert values == ["val/greedy/reward", "val/sampled/reward", "val/greedy/reward/binary",
                      "val/sampled/reward/binary", "val/greedy/reward/boxed_format", "val/sampled/reward/boxed_format",
                      "val/greedy/completion_length", "val/sampled/completion_length"]
    rows = list(csv.DictReader(open(run / "eval_curves.csv")))
    assert [int(r["step"]) for r in rows] == [0, 3, 6]
    series = charts[2].margin.series[0]
    for name in (series.value, series.lower, series.upper):
        assert [e.step for e in events.Scalars(name)] == [e.step for e in events.Scalars(series.value)]
    for row, mean, lower, upper in zip(rows, *(events.Scalars(n) for n in (series.value, series.lower, series.upper))):
        se = float(row["val/greedy/reward/binary_se"])
        assert mean.value == pytest.approx(float(row["val/greedy/reward/binary"]), abs=1e-5)
        assert (lower.value, upper.value) == pytest.approx((mean.value - se, mean.value + se), abs=1e-5)


def test_the_closing_summary_says_what_it_compares():
    """Hand-written lines: two validations give first -> last with the change; one validation gives its figures
    alone (never "step 0 -> step 0 (change +0.000)"); training past the last validation is said."""
    from lit_grpo.callbacks import summary_lines

    first = {"step": 0, "val/reward": 0.5, "val/reward_se": 0.02}
    last = {"step": 50, "val/reward": 0.75, "val/reward_se": 0.01}
    assert summary_lines(first, last, ["val/reward"], 50) == [
        "\nValidation (mean +- SE over prompts), step 0 -> step 50:",
        "  val/reward                               0.500 +- 0.020  ->  0.750 +- 0.010  (change +0.250)"]
    assert summary_lines(first, first, ["val/reward"], 6) == [
        "\nValidation (mean +- SE over prompts) at step 0 only (training went on to step 6 with no validation "
        "after step 0):",
        "  val/reward                               0.500 +- 0.020"]
    assert summary_lines(first, last, ["val/reward"], 60)[0] == (
        "\nValidation (mean +- SE over prompts), step 0 -> step 50 (training went on to step 60 with no "
        "validation after step 50):")
