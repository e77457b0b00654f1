"""The runner's sweep axis: the runs a sweep expands to (names, training arguments, tags), and its tables worked out
by hand on made-up per-problem results (no training)."""

import json
import math
from pathlib import Path

import pytest

from lit_grpo.tasks.phyx.experiments import Condition, Format, PhyxExperiment, Setting, Sweep
from lit_grpo.tasks.phyx.experiments.sweep import sweep_sections

ROOT = Path(__file__).resolve().parents[1]
AGG = "--model.init_args.grpo.multi_objective_aggregation=normalize_then_sum"


@pytest.fixture(autouse=True)
def _in_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the runner reads the configs by their relative paths


def _exp(seeds=(0, 1), settings=None):
    return PhyxExperiment(
        formats=[Format("mcq", "MCQ", "configs/demo_phyx_mcq.yaml")],
        conditions=[Condition("GRPO (Fmt + Acc)", "fmt_acc"),
                    Condition("GRPO (Fmt + Acc + ASM)", "asm", {"mcq": ["configs/demo_phyx_mcq_asm.yaml"]})],
        seeds=list(seeds), fit_args=["--data.batch_size=4"],
        sweeps=[Sweep("asm", settings or [Setting(), Setting("normalize_then_sum", 0.3),
                                          Setting("normalize_then_sum", 1.0)])])


def test_a_sweep_expands_to_one_run_per_setting_and_reference_per_seed():
    runs = {r.name: r for r in _exp().runs()}
    assert list(runs) == ["sft_mcq", "mcq_fmt_acc_s0", "mcq_asm_s0", "mcq_fmt_acc_norm_s0", "mcq_asm_norm_w0.3_s0",
                          "mcq_asm_norm_w1_s0", "mcq_fmt_acc_s1", "mcq_asm_s1", "mcq_fmt_acc_norm_s1",
                          "mcq_asm_norm_w0.3_s1", "mcq_asm_norm_w1_s1"]  # the conditions' own runs are not doubled
    assert runs["mcq_asm_s0"].fit_args == ["--data.batch_size=4"]  # today's setting: the config as it is (weight 100)
    assert runs["mcq_asm_s0"].tags == {"sweep": "Attention reward sweep", "role": "setting",
                                       "aggregation": "sum_then_normalize", "weight": 100.0}
    assert runs["mcq_fmt_acc_norm_s1"].fit_args == ["--data.batch_size=4", AGG]
    assert runs["mcq_fmt_acc_norm_s1"].tags["role"] == "reference" and runs["mcq_fmt_acc_norm_s1"].seed == 1
    w = runs["mcq_asm_norm_w0.3_s0"]
    assert w.configs == ["configs/demo_phyx_mcq.yaml", "configs/demo_phyx_mcq_asm.yaml"]
    assert w.fit_args[:2] == ["--data.batch_size=4", AGG]
    assert json.loads(w.fit_args[2].split("=", 1)[1]) == [{"name": "format", "weight": 1.0},
                                                          {"name": "accuracy", "weight": 1.0},
                                                          {"name": "attention", "weight": 0.3}]
    assert w.label == "GRPO (Fmt + Acc + ASM), normalize_then_sum, attention × 0.3"


@pytest.mark.parametrize("make,message", [
    (lambda: Sweep("asm", [Setting("mean_of_sums", 1.0)]), "aggregation must be one of"),
    (lambda: Sweep("asm", [Setting("normalize_then_sum", -1.0)]), "finite and >= 0"),
    (lambda: Sweep("asm", [Setting("normalize_then_sum", math.nan)]), "finite and >= 0"),
    (lambda: Sweep("rubric", [Setting()]), "unknown condition 'rubric'"),
    (lambda: Sweep("fmt_acc", [Setting("normalize_then_sum", 1.0)], reference="asm"), "no reward 'attention'"),
])
def test_bad_sweeps_are_refused_with_what_is_wrong(make, message):
    exp = _exp()
    with pytest.raises(ValueError, match=message):
        exp.sweeps = [make()]
        exp.runs()


def _p(*values):
    return {str(i): ("Optics", v) for i, v in enumerate(values)}


# Three problems. SFT: accuracy 0.5, 0.5, 0; ASM 0.10, 0.20, 0.30. The normalize_then_sum reference (both seeds):
# accuracy 0.5, 1, 0 and 0.5, 0.5, 0.5; ASM as SFT. Weight 1: accuracy 1, 0.5, 0 and 1, 1, 0.5 -> pooled 1, 0.75,
# 0.25 (mean 0.667, SE 0.220); ASM 0.2, 0.3, 0.4 and 0.2, 0.4, 0.4 -> 0.2, 0.35, 0.4. Weight 0.3: seed 0 only,
# accuracy 0.5, 0.5, 0, ASM as SFT.
DATA = {
    "sft_mcq": {"correct": _p(0.5, 0.5, 0.0), "asm": _p(0.1, 0.2, 0.3), "format": _p(1.0, 1.0, 1.0)},
    "mcq_fmt_acc_norm_s0": {"correct": _p(0.5, 1.0, 0.0), "asm": _p(0.1, 0.2, 0.3), "format": _p(1.0, 1.0, 1.0)},
    "mcq_fmt_acc_norm_s1": {"correct": _p(0.5, 0.5, 0.5), "asm": _p(0.1, 0.2, 0.3), "format": _p(1.0, 1.0, 1.0)},
    "mcq_asm_norm_w1_s0": {"correct": _p(1.0, 0.5, 0.0), "asm": _p(0.2, 0.3, 0.4), "format": _p(1.0, 1.0, 0.5)},
    "mcq_asm_norm_w1_s1": {"correct": _p(1.0, 1.0, 0.5), "asm": _p(0.2, 0.4, 0.4), "format": _p(1.0, 1.0, 1.0)},
    "mcq_asm_norm_w0.3_s0": {"correct": _p(0.5, 0.5, 0.0), "asm": _p(0.1, 0.2, 0.3), "format": _p(1.0, 1.0, 1.0)},
}


def test_sweep_table_by_hand():
    exp = _exp()
    lines = sweep_sections(exp, exp.runs(), DATA, lambda r: "120/120", lambda r: "Scored by `accuracy`.")
    text = "\n".join(lines)
    assert lines[0] == "## Attention reward sweep" and "### Attention reward sweep: MCQ" in lines
    assert "Scored by `accuracy`." in lines
    assert "| SFT | | | | 0.333 ± 0.167 | | | 0.2000 ± 0.0577 | | | | |" in lines
    row = next(x for x in lines if x.startswith("| GRPO (Fmt + Acc + ASM), normalize_then_sum, attention × 1 |"))
    # vs SFT: differences 0.5, 0.25, 0.25 -> +0.333, SE 0.083 (4.0 SE); vs the reference pooled 0.5, 0.75, 0.25:
    # 0.5, 0, 0 -> +0.167 ± 0.167 (1.0 SE); ASM vs SFT: 0.1, 0.15, 0.1 -> +0.1167 ± 0.0167 (7.0 SE), the same vs the
    # reference; per seed 0.500 and 0.833, spread 0.333. Seed level (one figure per seed, SE = |a - b| / 2 for two):
    # accuracy 0.500, 0.833 -> SE 0.167; vs SFT (0.333) +0.167, +0.500 -> +0.333 ± 0.167 (+2.0 SE); vs each seed's
    # reference (0.5, 0.5) +0.000, +0.333 -> +0.167 ± 0.167 (+1.0 SE); ASM 0.300, 0.333 -> SE 0.0167; ASM vs SFT
    # (0.2) +0.100, +0.133 -> +0.1167 ± 0.0167 (+7.0 SE), the same vs the reference. ASM up, accuracy kept vs both.
    assert row == ("| GRPO (Fmt + Acc + ASM), normalize_then_sum, attention × 1 | normalize_then_sum | 1 | 2 | "
                   "0.667 ± 0.220; seeds ± 0.167 (2) | +0.333 ± 0.083 (+4.0 SE); seeds ± 0.167 (+2.0 SE, 2) | "
                   "+0.167 ± 0.167 (+1.0 SE); seeds ± 0.167 (+1.0 SE, 2) | 0.3167 ± 0.0601; seeds ± 0.0167 (2) | "
                   "+0.1167 ± 0.0167 (+7.0 SE); seeds ± 0.0167 (+7.0 SE, 2) | "
                   "+0.1167 ± 0.0167 (+7.0 SE); seeds ± 0.0167 (+7.0 SE, 2) | 0.500, 0.833 (0.333) | yes / yes / yes |")
    row = next(x for x in lines if x.startswith("| GRPO (Fmt + Acc + ASM), normalize_then_sum, attention × 0.3 |"))
    # one seed: compared with the reference of that seed (0.5, 1, 0): 0, -0.5, 0 -> -0.167 ± 0.167; ASM unchanged;
    # no seed-level SE, so no verdict
    assert row == ("| GRPO (Fmt + Acc + ASM), normalize_then_sum, attention × 0.3 | normalize_then_sum | 0.3 | 1 | "
                   "0.333 ± 0.167; 1 seed | +0.000 ± 0.000 (+0.0 SE); 1 seed | -0.167 ± 0.167 (-1.0 SE); 1 seed | "
                   "0.2000 ± 0.0577; 1 seed | +0.0000 ± 0.0000 (+0.0 SE); 1 seed | +0.0000 ± 0.0000 (+0.0 SE); 1 seed | "
                   "0.333 | – (1 seed) |")
    ref = next(x for x in lines if x.startswith("| GRPO (Fmt + Acc), normalize_then_sum |"))
    assert ref.split(" | ")[3:5] == ["2", "0.500 ± 0.144; seeds ± 0.000 (2)"]  # pooled 0.5, 0.75, 0.25; 0.5 each seed
    assert "| GRPO (Fmt + Acc + ASM) | sum_then_normalize | 100 | 0 | not run yet |" in text
    assert ("| `mcq_asm_norm_w1_s1` | 1 | 120/120 | 0.833 ± 0.167 | +0.500 ± 0.000 (+inf SE) | +0.333 ± 0.167 "
            "(+2.0 SE) | 0.3333 ± 0.0667 | +0.1333 ± 0.0333 (+4.0 SE) | +0.1333 ± 0.0333 (+4.0 SE) | 1.000 ± 0.000 |"
            in lines)
    assert "| `mcq_asm_norm_w0.3_s1` | 1 | | not run yet |" in text


def test_the_verdict_takes_the_seed_as_the_unit():
    """Two seeds whose ASM moves +0.375 and -0.125 on every problem: pooled over seeds every problem rises by
    exactly +0.125 (SE over problems 0: "+inf SE"), but with the seed as the unit the rise is +0.125 ± 0.25 (SE =
    |0.375 + 0.125| / 2; +0.5 SE): not up. (Values exact in binary, so the zero SE is exactly 0.)"""
    same = {"correct": _p(0.5, 0.5, 0.0), "format": _p(1.0, 1.0, 1.0)}
    data = {"sft_mcq": {**same, "asm": _p(0.125, 0.25, 0.375)},
            "mcq_fmt_acc_norm_s0": {**same, "asm": _p(0.125, 0.25, 0.375)},
            "mcq_fmt_acc_norm_s1": {**same, "asm": _p(0.125, 0.25, 0.375)},
            "mcq_asm_norm_w1_s0": {**same, "asm": _p(0.5, 0.625, 0.75)},
            "mcq_asm_norm_w1_s1": {**same, "asm": _p(0.0, 0.125, 0.25)}}
    exp = _exp(settings=[Setting("normalize_then_sum", 1.0)])
    lines = sweep_sections(exp, exp.runs(), data, lambda r: "", lambda r: "")
    row = next(x for x in lines if x.startswith("| GRPO (Fmt + Acc + ASM), normalize_then_sum, attention × 1 |"))
    cells = row.strip("| ").split(" | ")
    assert cells[8] == "+0.1250 ± 0.0000 (+inf SE); seeds ± 0.2500 (+0.5 SE, 2)"
    assert cells[11] == "no / yes / yes"  # accuracy unchanged on every problem and seed: kept


def test_the_runs_folder_shows_steps_and_load(tmp_path):
    """A fit cut short by max_time is flagged in the steps column and named under the runs table."""
    from lit_grpo.tasks.phyx.experiments.summary import _runs_section, _steps

    exp = _exp(seeds=(0,))
    exp.output = str(tmp_path)
    runs = {r.name: r for r in exp.runs()}
    for name, step in (("mcq_asm_norm_w1_s0", 120), ("mcq_fmt_acc_norm_s0", 87)):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "group_spread.json").write_text(json.dumps({"global_step": step}))
    assert _steps(exp, runs["mcq_asm_norm_w1_s0"]) == "120/120"
    assert _steps(exp, runs["mcq_fmt_acc_norm_s0"]) == "87/120 (stopped early)"
    assert _steps(exp, runs["sft_mcq"]) == ""
    statuses = [{"name": n, "fit": {"wall_s": 60.0}, "eval": {"wall_s": 30.0}} for n in runs]
    text = "\n".join(_runs_section(exp, list(runs.values()), statuses, None, 600.0, [], [2.0, 4.0, 6.0]))
    assert "mean 4.0, min 2.0, max 6.0" in text
    assert "Stopped before their last step (1; `max_time` or an error): mcq_fmt_acc_norm_s0;" in text
    assert "| mcq_fmt_acc_norm_s0 | 87/120 (stopped early) | 1.0 | 0.5 | ok |" in text


def test_raw_results_read_back_give_the_same_tables(tmp_path):
    """results.csv holds every per-problem figure: the tables recomputed from it are the tables (a cell checked by
    hand: the SFT row's 0.333 ± 0.167)."""
    from lit_grpo.tasks.phyx.experiments.report import read_results, results_csv

    path = tmp_path / "results.csv"
    path.write_text(results_csv(DATA))
    assert path.read_text().splitlines()[:2] == ["run,problem,domain,correct,asm,format", "sft_mcq,0,Optics,0.5,0.1,1"]
    exp = _exp()
    table = sweep_sections(exp, exp.runs(), DATA, lambda r: "", lambda r: "")
    again = sweep_sections(exp, exp.runs(), read_results(path), lambda r: "", lambda r: "")
    assert again == table
    assert "| SFT | | | | 0.333 ± 0.167 | | | 0.2000 ± 0.0577 | | | | |" in again


def test_within_se_is_the_paired_change_against_its_own_se():
    """Tolerance mode of the reproduction scripts. Per-problem differences 0.5, 0, 0, -0.25: mean 0.0625, sample SD
    0.3146, SE 0.1573: within 2 SE. Differences 0.5, 0.5, 0.25, 0.5: mean 0.4375, SE 0.0625: 7 SE, not within."""
    from lit_grpo.tasks.phyx.experiments.report import within_se

    then = {str(i): ("Optics", 0.5) for i in range(4)}
    ok, (mean, se, n) = within_se({"0": ("Optics", 1.0), "1": ("Optics", 0.5), "2": ("Optics", 0.5),
                                   "3": ("Optics", 0.25)}, then)
    assert ok and n == 4 and mean == pytest.approx(0.0625) and se == pytest.approx(0.15729, abs=1e-5)
    ok, (mean, se, _) = within_se({"0": ("Optics", 1.0), "1": ("Optics", 1.0), "2": ("Optics", 0.75),
                                   "3": ("Optics", 1.0)}, then)
    assert not ok and mean == pytest.approx(0.4375) and se == pytest.approx(0.0625)
    assert within_se(then, then) == (True, (0.0, 0.0, 4))  # the same figures: agree (SE 0, change exactly 0)
    assert within_se({}, then)[0] is False  # nothing scored in common: no agreement claimed
