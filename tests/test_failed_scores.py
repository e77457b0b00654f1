"""A failed score is never a number: ``None`` = the term does not apply (skipped), NaN or +-inf = failed (the
completion's total cannot be scored: advantage 0, counted in ``frac_unscorable``), through to a fit on the
tiny model."""

import logging
import math
from pathlib import Path

import pytest
import torch
import yaml

from lit_grpo.evaluation import correctness
from lit_grpo.grpo import group_advantages
from lit_grpo.metrics import train_metrics
from lit_grpo.rewards import REWARDS, RewardSpec, build_rewards, score_completions

NAN = math.nan


def _score(values_by_label, weights):
    fns = {k: (lambda v: lambda completions, **_: list(v))(v) for k, v in values_by_label.items()}
    n = len(next(iter(values_by_label.values())))
    metrics = {}
    per, total = score_completions(fns, weights, ["x"] * n, {}, metrics)
    return per, total, metrics


TOTALS = [  # ({label: values}, {label: weight}, expected total) -- worked out by hand
    ({"a": [1.0, None], "b": [0.5, 0.5]}, {"a": 2.0, "b": 1.0}, [2.5, 0.5]),  # None: skipped
    ({"a": [1.0, NAN], "b": [0.5, 0.5]}, {"a": 2.0, "b": 1.0}, [2.5, NAN]),  # NaN: failed, not 0
    ({"a": [math.inf, 0.0], "b": [0.5, 0.5]}, {"a": 1.0, "b": 1.0}, [NAN, 0.5]),  # +inf: failed
    ({"a": [-math.inf, 1.0], "b": [0.5, 0.5]}, {"a": 1.0, "b": 1.0}, [NAN, 1.5]),  # -inf: failed
    ({"a": [1e39, 1.0]}, {"a": 1.0}, [NAN, 1.0]),  # beyond float32: failed, never inf
    ({"a": [3e38, 1.0], "b": [3e38, 1.0]}, {"a": 1.0, "b": 1.0}, [NAN, 2.0]),  # the sum overflows
    ({"a": [None, None], "b": [None, 1.0]}, {"a": 1.0, "b": 1.0}, [NAN, 1.0]),  # nothing applies: NaN
    ({"a": [NAN, math.inf], "m": [1.0, 1.0]}, {"a": 0.0, "m": 1.0}, [1.0, 1.0]),  # weight 0: a metric only
    ({"a": [0.0, 0.0], "b": [None, None]}, {"a": 1.0, "b": 1.0}, [0.0, 0.0]),
    # a weight-0 metric that applies where no weighted term does leaves the row unscorable (not a judged 0)
    ({"acc": [1.0, 0.0, None, None], "fmt": [1.0] * 4}, {"acc": 1.0, "fmt": 0.0}, [1.0, 0.0, NAN, NAN]),
    ({"acc": [None, 1.0], "m": [NAN, 0.5], "n": [0.2, None]}, {"acc": 2.0, "m": 0.0, "n": 0.0}, [NAN, 2.0]),
]


def test_a_weight_0_metric_never_gives_an_unscorable_row_an_advantage():
    """Two scorable rows (1, 0) and two where only the weight-0 metric applies: the advantages are those of the
    scorable pair alone, (+-1/sqrt(2)), and 0 for the others (hand-computed, unbiased std of (1, 0))."""
    _, total, _ = _score({"acc": [1.0, 0.0, None, None], "fmt": [1.0] * 4}, {"acc": 1.0, "fmt": 0.0})
    adv = group_advantages(total, 4)
    torch.testing.assert_close(adv, torch.tensor([0.7071, -0.7071, 0.0, 0.0]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("values,weights,expected", TOTALS)
def test_total_skips_what_does_not_apply_and_fails_what_failed(values, weights, expected):
    per, total, _ = _score(values, weights)
    torch.testing.assert_close(total, torch.tensor(expected), equal_nan=True)
    for label, v in values.items():  # per-reward values: finite where the term applied and succeeded, else NaN
        want = [x if x is not None and math.isfinite(x) and abs(x) < 3.4e38 else NAN for x in v]
        torch.testing.assert_close(per[label], torch.tensor(want), equal_nan=True)


def test_non_finite_rewards_warn_naming_the_reward(caplog):
    with caplog.at_level(logging.WARNING, logger="lit_grpo.rewards.registry"):
        _, _, metrics = _score({"bad_scale": [math.inf, 1.0, 0.0, 0.0]}, {"bad_scale": 1.0})
    assert "'bad_scale'" in caplog.text and "infinite" in caplog.text
    assert metrics == {"bad_scale/frac_failed": 0.25}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lit_grpo.rewards.registry"):
        _score({"flaky_judge_x": [NAN, 1.0]}, {"flaky_judge_x": 1.0})
    assert "'flaky_judge_x'" in caplog.text and "failed" in caplog.text


class _Judge:
    """Scripted jury: per completion, 3 votes of ``correctness`` or ``None`` for a failed call."""

    endpoint = "scripted"

    def __init__(self, per_item):
        self.per_item = per_item

    def grade(self, items, task):
        return [[None if c is None else {"correctness": c}] * 3 for c in self.per_item[:len(items)]]

    def pop_metrics(self):
        return {}


@pytest.mark.parametrize("config", ["configs/demo_phyx_oe.yaml", "configs/granite_vision_phyx_oe.yaml"])
def test_oe_config_a_failed_judge_call_is_not_a_judged_zero(config):
    specs = [RewardSpec(**r) for r in yaml.safe_load(Path(config).read_text())["model"]["init_args"]["rewards"]]
    assert [s.name for s in specs] == ["format", "open_accuracy"]
    tagged = "<think>t</think><answer>7 N</answer><unit>N</unit><principle>p</principle>"
    cols = {"answer": ["7N"] * 4, "answer_format": ["open"] * 4, "question": ["q"] * 4}

    def run(verdicts):
        for s in specs:
            if s.name == "open_accuracy":
                s.kwargs = {**s.kwargs, "judge": _Judge(verdicts)}
        fns = build_rewards(specs)
        per, total = score_completions(fns, {s.label: s.weight for s in specs}, [tagged] * 4, cols)
        return per, total, group_advantages(total, 4)

    _, judged_zero, adv_zero = run([0, 0, 2, 2])
    per, failed, adv_failed = run([0, None, 2, 2])  # completion 1's jury failed: no quorum
    torch.testing.assert_close(judged_zero, torch.tensor([1.0, 1.0, 2.0, 2.0]))
    torch.testing.assert_close(failed, torch.tensor([1.0, NAN, 2.0, 2.0]), equal_nan=True)
    # group stats over the three valid totals: mean 5/3, std sqrt(1/3); the failed completion gets 0
    s = math.sqrt(1 / 3)
    torch.testing.assert_close(adv_failed, torch.tensor([-2 / 3, 0.0, 1 / 3, 1 / 3]) / (s + 1e-4))
    assert adv_zero[1] < 0 and adv_failed[1] == 0.0
    lengths, truncated = torch.full((4,), 3), torch.zeros(4, dtype=torch.bool)
    log = train_metrics(per, failed, adv_failed, 4, lengths, truncated)
    assert log["train/rollout/frac_unscorable"] == 0.25
    assert log["train/reward/open_accuracy"] == pytest.approx(2 / 3)  # mean over the 3 judged completions
    assert log["train/reward/format"] == 1.0


def test_the_evaluation_scorer_never_counts_a_non_finite_score():
    assert correctness([1.0, math.inf, -math.inf, NAN, None], pass_threshold=1.0)[0] == 1.0
    assert all(math.isnan(v) for v in correctness([math.inf, -math.inf, NAN, None], pass_threshold=1.0))
    assert all(math.isnan(v) for v in correctness([math.inf, -math.inf]))


def _inf_on_first(completions, **_):
    """A broken reward: +inf for the first completion of the batch, a spread of values elsewhere."""
    return [math.inf if i == 0 else float(i % 3) for i in range(len(completions))]


if "test_inf_on_first" not in REWARDS:
    REWARDS.register("test_inf_on_first")(_inf_on_first)


def test_an_infinite_reward_never_reaches_the_weights_or_a_checkpoint(tmp_path, tiny_model_dir, caplog):
    from lit_grpo.cli import main

    puzzles = {"generate": {"path": str(tmp_path / "puzzles.parquet"), "kind": "puzzles", "num": 8, "seed": 0}}
    cfg = {
        "trainer": {"accelerator": "cpu", "max_steps": 2, "limit_val_batches": 0, "max_time": None,
                    "default_root_dir": str(tmp_path), "logger": False, "callbacks": [{
                        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                        "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True,
                                      "every_n_train_steps": 1}}]},
        "model": {"init_args": {
            "policy": {"name_or_path": tiny_model_dir, "local_files_only": True},
            "rewards": [{"name": "test_inf_on_first"}, {"name": "binary"}],
            "sampling": {"num_generations": 4, "max_completion_length": 8},
            "evaluation": {"before_fit": False, "metrics": []},
            "lr_scheduler": None}},
        "data": {"train": puzzles, "val": None, "batch_size": 2},
    }
    path = tmp_path / "inf.yaml"
    path.write_text(yaml.safe_dump(cfg))
    before = {n: p.detach().clone() for n, p in _initial_policy(tiny_model_dir).named_parameters()}
    with caplog.at_level(logging.WARNING, logger="lit_grpo.rewards.registry"):
        cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(path)])
    assert cli.trainer.global_step == 2
    assert "'test_inf_on_first'" in caplog.text
    params = dict(cli.model.policy.named_parameters())
    assert all(torch.isfinite(p).all() for p in params.values())
    assert any(not torch.equal(params[n], before[n]) for n in before if n in params)  # it did train
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


def _initial_policy(path):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(path, local_files_only=True)


def test_group_statistics_come_from_one_nan_aware_function():
    """Hand values, G = 3: groups [1, 1, NaN] (std 0), [0, 1, NaN] (unbiased std 1/sqrt(2)), all NaN (std 0):
    train/reward_std is their mean and two of three groups have zero spread; the same function gives the
    advantages' statistics."""
    from lit_grpo.grpo import nan_group_stats

    nan = math.nan
    total = torch.tensor([1.0, 1.0, nan, 0.0, 1.0, nan, nan, nan, nan])
    mean, std, count = nan_group_stats(total.reshape(3, 3))
    assert torch.allclose(std, torch.tensor([0.0, 1 / math.sqrt(2), 0.0])) and count.tolist() == [2, 2, 0]
    assert mean[:2].tolist() == [1.0, 0.5] and std[0].item() == 0.0
    log = train_metrics({}, total, torch.zeros(9), 3, torch.ones(9), torch.zeros(9))
    assert math.isclose(log["train/reward_std"], 1 / (3 * math.sqrt(2)), rel_tol=1e-6)
    assert math.isclose(log["train/rollout/frac_reward_zero_std"], 2 / 3, rel_tol=1e-6)


@pytest.mark.parametrize("big", [10**400, -(10**400)], ids=["plus", "minus"])
def test_an_integer_beyond_float_range_is_a_failed_score(big):
    """A Python int too large for a float (``float(10**400)`` raises OverflowError) is beyond float32 like 1e39:
    a failed score, never an error or a number."""
    per, total, _ = _score({"a": [big, 1.0], "b": [0.5, 0.5]}, {"a": 1.0, "b": 1.0})
    torch.testing.assert_close(total, torch.tensor([NAN, 1.5]), equal_nan=True)
    torch.testing.assert_close(per["a"], torch.tensor([NAN, 1.0]), equal_nan=True)
