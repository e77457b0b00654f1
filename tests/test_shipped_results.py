"""The shipped raw results (``results/``) give the docs' tables: a few cells recomputed from the raw records with
plain arithmetic (csv and the standard library, not the report's code) and read in the shipped text."""

import csv
import importlib.util
import math
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _readme_demo_row(step: int) -> list[str]:
    """README's demo table row of ``step``: its three cells as printed (read by benchmarks/reproduce_demo.py's own
    reader of that table)."""
    spec = importlib.util.spec_from_file_location("reproduce_demo", ROOT / "benchmarks" / "reproduce_demo.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return [text for text, _, _ in script.readme_table((ROOT / "README.md").read_text())[step].values()]


def test_readme_demo_cells_are_the_shipped_run_s_evaluation_curve():
    """README's step-200 sampled accuracy and step-100 greedy accuracy are the shipped run's figures, rounded to
    3 digits as README prints them (columns: sampled accuracy, greedy accuracy, sampled format)."""
    with open(ROOT / "results" / "demo" / "eval_curves.csv", newline="") as fh:
        curve = {int(r["step"]): r for r in csv.DictReader(fh)}

    def printed(step: int, key: str) -> str:
        return f"{float(curve[step][key]):.3f} ± {float(curve[step][key + '_se']):.3f}"

    assert _readme_demo_row(200)[0] == printed(200, "val/sampled/reward/binary") == "0.813 ± 0.018"
    assert _readme_demo_row(100)[1] == printed(100, "val/greedy/reward/binary") == "0.828 ± 0.024"
    # the greedy SE over 256 puzzles is the binomial one, worked out by hand: p = 212/256 at step 100,
    # sqrt(p (1 - p) / 255) = 0.0236 (the sample SD, n - 1)
    p = 212 / 256
    assert math.isclose(float(curve[100]["val/greedy/reward/binary"]), p, abs_tol=1e-5)
    assert math.isclose(float(curve[100]["val/greedy/reward/binary_se"]), math.sqrt(p * (1 - p) / 255), abs_tol=1e-6)


def _sweep_results() -> dict[str, dict[str, dict[str, float]]]:
    """``run -> column -> problem -> value`` of the shipped sweep records (per-problem means over 4 completions)."""
    return {run: {column: {p: v for p, (_, v) in values.items()} for column, values in columns.items()}
            for run, columns in _results("attention_sweep").items()}


def _mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample SD / sqrt(n))."""
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _docs_row(title: str, label: str) -> list[str]:
    """The cells of the row ``label`` in docs/attention_sweep.md's table under the bold ``title``."""
    text = (ROOT / "docs" / "attention_sweep.md").read_text()
    table = text[text.index(f"**{title}**"):]
    row = next(line for line in table.splitlines() if line.startswith(f"| {label} |"))
    return [c.strip() for c in row.strip("|").split("|")]


def test_attention_sweep_cells_recomputed_from_the_shipped_records():
    """Two cells of the open-ended verdict row (normalize_then_sum, ASM x 1, five seeds), by hand from results.csv:
    the accuracy pooled over seeds (per problem the mean over the seeds, then mean and SE over problems; the seed
    SE: each seed's accuracy as one value) and the held-out ASM's change vs SFT at the seed level (each seed's mean
    paired change over the problems it shares with SFT, then mean and SE over the five)."""
    data = _sweep_results()
    runs = [f"oe_asm_norm_w1_s{s}" for s in range(5)]
    problems = sorted(set.intersection(*(set(data[r]["correct"]) for r in runs)))
    assert len(problems) == 256
    pooled = [sum(data[r]["correct"][p] for r in runs) / 5 for p in problems]
    mean, se = _mean_se(pooled)
    _, seed_se = _mean_se([sum(data[r]["correct"].values()) / len(data[r]["correct"]) for r in runs])
    accuracy = f"{mean:.3f} ± {se:.3f}; seeds ± {seed_se:.3f} (5)"

    sft = data["sft_oe"]["asm"]
    changes = [sum(data[r]["asm"][p] - sft[p] for p in data[r]["asm"] if p in sft)
               / len([p for p in data[r]["asm"] if p in sft]) for r in runs]
    change, change_se = _mean_se(changes)
    asm_change = f"seeds ± {change_se:.4f} ({change / change_se:+.1f} SE, 5)"

    row = _docs_row("Open-ended", "GRPO (Fmt + Acc + ASM), normalize_then_sum, attention × 1")
    assert row[3] == "5" and row[4] == accuracy, (row[4], accuracy)
    assert row[8].endswith(asm_change) and row[8].startswith(f"{change:+.4f} ± "), (row[8], change, asm_change)


REFS = ROOT / "checkpoints" / "attention_sweep_refs"


def test_every_reference_the_sweep_page_compares_against_is_shipped():
    """Each "vs GRPO (Fmt + Acc)" column compares a setting with the reference of its aggregation and seed: every
    such reference run in the shipped records (``<fmt>_fmt_acc[_norm]_s<seed>``, not the lr-0 control) has its
    policy in checkpoints/attention_sweep_refs, with the seed and aggregation its name says, trained on format and
    accuracy only from the shipped warm start."""
    import yaml

    refs = {run for run in _sweep_results() if "_fmt_acc_" in run and "_lr0_" not in run}
    assert len(refs) == 12  # open-ended 2 aggregations x 5 seeds, multiple choice 2 x seed 0
    assert refs == {p.name for p in REFS.iterdir() if p.is_dir()}
    for run in refs:
        config = yaml.safe_load((REFS / run / "fit_config.yaml").read_text())
        grpo = config["model"]["init_args"]["grpo"]
        assert config["seed_everything"] == int(run.rsplit("_s", 1)[1]), run
        assert grpo["multi_objective_aggregation"] == ("normalize_then_sum" if "_norm_" in run else
                                                       "sum_then_normalize"), run
        rewards = [r["name"] for r in config["model"]["init_args"]["rewards"]]
        assert rewards == ["format", "open_accuracy" if run.startswith("oe_") else "accuracy"], run
        assert config["model"]["init_args"]["policy"]["name_or_path"] == "checkpoints/demo_phyx", run
        assert config["trainer"]["max_steps"] == 100, run


def test_shipped_references_are_the_bits_their_readme_names():
    """The SHA-256 of each reference's weights is the one its README table prints (hashlib here, by hand there)."""
    import hashlib
    import re

    table = dict(re.findall(r"^\| `(\w+)` \|.*\| `([0-9a-f]{64})` \|$", (REFS / "README.md").read_text(), re.M))
    assert set(table) == {p.name for p in REFS.iterdir() if p.is_dir()}
    for run, sha in table.items():
        assert hashlib.sha256((REFS / run / "model.safetensors").read_bytes()).hexdigest() == sha, run


def test_reevaluation_outcomes_against_recorded_rows():
    """benchmarks/reevaluate_sweep_policy.py's three outcomes on made-up per-problem figures: the same values as the
    CSV writes them (6 significant digits) are identical; a change well inside the SE is within tolerance; a
    change of many SE (every problem's accuracy +0.25, SE 0) is DIFFERENT."""
    spec = importlib.util.spec_from_file_location("reevaluate", ROOT / "benchmarks" / "reevaluate_sweep_policy.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    recorded = {"correct": {str(i): ("", v) for i, v in enumerate([0.25, 0.5, 0.75, 1.0])},
                "asm": {str(i): ("", v) for i, v in enumerate([0.123457, 0.2, 0.3, 0.4])},
                "format": {str(i): ("", 1.0) for i in range(4)}}
    same = {**recorded, "asm": {**recorded["asm"], "0": ("", 0.1234567)}}  # "%.6g" of it is 0.123457
    assert script.compare(same, recorded)[0] == "identical"
    # accuracy moved on two problems by +-0.25: paired change mean 0, SE 0.144 -> within
    near = {**recorded, "correct": {**recorded["correct"], "0": ("", 0.5), "1": ("", 0.25)}}
    outcome, lines = script.compare(near, recorded)
    assert outcome == "within tolerance" and "within 2.39 SE" in lines[0]
    far = {**recorded, "correct": {k: ("", v + 0.25) for k, (_, v) in recorded["correct"].items()}}
    assert script.compare(far, recorded)[0] == "DIFFERENT"


def test_reevaluation_knows_which_run_a_shipped_folder_is():
    """A shipped reference names its run in fit.json (the runner's overlay configs/<run>.fit.yaml), so a wrong
    --run is refused before any evaluation; folders without that record (the SFT warm start) name none."""
    spec = importlib.util.spec_from_file_location("reevaluate", ROOT / "benchmarks" / "reevaluate_sweep_policy.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert {p.name: script.trained_as(p) for p in REFS.iterdir() if p.is_dir()} == {
        p.name: p.name for p in REFS.iterdir() if p.is_dir()}
    assert script.trained_as(ROOT / "checkpoints" / "demo_phyx") is None


def _results(folder: str) -> dict[str, dict[str, dict[str, tuple[str, float]]]]:
    """``run -> column -> problem -> (domain, value)`` of a shipped results.csv (per-problem means over 4 completions)."""
    out: dict = {}
    with open(ROOT / "results" / folder / "results.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            for column in ("correct", "asm"):
                if r[column] != "":
                    out.setdefault(r["run"], {}).setdefault(column, {})[r["problem"]] = (r["domain"], float(r[column]))
    return out


def _paper_row(heading: str, label: str, nth: int = 0) -> list[str]:
    """The cells of the ``nth`` row ``label`` after ``heading`` in docs/paper_table.md."""
    text = (ROOT / "docs" / "paper_table.md").read_text()
    rows = [line for line in text[text.index(heading):].splitlines() if line.startswith(f"| {label} |")]
    return [c.strip() for c in rows[nth].strip("|").split("|")]


def test_paper_table_cells_recomputed_from_the_shipped_records():
    """Two cells of docs/paper_table.md by hand from results/paper_table/results.csv: the seed-0 multiple-choice
    GRPO (Rubric) Mechanics cell (mean and SE over that domain's problems), and the open-ended GRPO (Fmt + Acc)
    change against SFT pooled over the five seeds, with its seed-level SE (each seed's own mean paired change as
    one value)."""
    data = _results("paper_table")
    mech = [v for d, v in data["mcq_rubric_s0"]["correct"].values() if d == "Mechanics"]
    mean, se = _mean_se(mech)
    row = _paper_row("**Multiple choice (MCQ)** (seed 0)", "GRPO (Rubric)")
    assert row[2] == f"{mean:.3f} ± {se:.3f}", (row[2], mean, se)

    runs = [f"oe_fmt_acc_s{s}" for s in range(5)]
    sft = data["sft_oe"]["correct"]
    problems = sorted(sft)
    pooled = [sum(data[r]["correct"][p][1] for r in runs) / 5 - sft[p][1] for p in problems]
    change, change_se = _mean_se(pooled)
    per_seed = [sum(data[r]["correct"][p][1] - sft[p][1] for p in problems) / len(problems) for r in runs]
    seed_mean, seed_se = _mean_se(per_seed)
    expected = (f"{change:+.3f} ± {change_se:.3f} ({change / change_se:+.1f} SE); "
                f"seeds ± {seed_se:.3f} ({seed_mean / seed_se:+.1f} SE, 5)")
    row = _paper_row("**Open-ended (OE), offline judge** (five seeds)", "GRPO (Fmt + Acc)")
    assert row[1] == "5" and row[3] == expected, (row[3], expected)
