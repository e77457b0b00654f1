"""The experiment runner (``python -m lit_grpo.tasks.phyx.experiments phyx``): its tables from hand-worked predictions, the
within-group spread, and the whole plumbing end to end on 1-step runs of a tiny model with a scripted policy."""

import csv
import dataclasses
import json
import math
import os
from pathlib import Path

import lightning as L
import pytest
import yaml

from lit_grpo.tasks.phyx.experiments import parse
from lit_grpo.tasks.phyx.experiments import execute
from lit_grpo.tasks.phyx.experiments.report import (paired_change, per_problem, pooled, reward_of, row_cells, seed_table,
                                         table_markdown)
from lit_grpo.tasks.phyx.experiments.spread import GroupSpread, group_spread
from lit_grpo.module import GRPOModule


def _rec(i, domain, correct, mode="sampled", asm=None):
    return {"id": str(i), "mode": mode, "domain": domain, "correct": correct,
            "rewards": {} if asm is None else {"attention": asm}}


def test_cells_are_means_over_problems_of_per_problem_means():
    records = [_rec(0, "Optics", 1.0), _rec(0, "Optics", 0.0), _rec(1, "Optics", 1.0), _rec(1, "Optics", 1.0),
               _rec(2, "Mechanics", None), _rec(2, "Mechanics", 0.0), _rec(3, "Mechanics", None),
               _rec(0, "Optics", 0.0, mode="greedy")]
    problems = per_problem(records)
    assert problems == {"0": ("Optics", 0.5), "1": ("Optics", 1.0), "2": ("Mechanics", 0.0)}  # 3: nothing scorable
    cells = row_cells(problems)
    mean, se, n = cells["Overall"]  # values 0.5, 1, 0: mean 0.5, sd 0.5, SE 0.5 / sqrt(3)
    assert (mean, n) == (0.5, 3) and se == pytest.approx(0.5 / math.sqrt(3))
    assert cells["Optics"][:3] == pytest.approx((0.75, 0.25, 2)) and cells["Mechanics"] == (0.0, 0.0, 1)
    assert math.isnan(cells["Thermodynamics"][0]) and cells["Thermodynamics"][2] == 0
    assert per_problem(records, mode="greedy") == {"0": ("Optics", 0.0)}
    before = {"0": ("Optics", 0.5), "1": ("Optics", 0.5), "2": ("Mechanics", 0.5), "9": ("Optics", 1.0)}
    change = paired_change(problems, before)  # differences 0, 0.5, -0.5 on the shared problems 0, 1, 2
    assert change[0] == pytest.approx(0.0) and change[1] == pytest.approx(0.5 / math.sqrt(3)) and change[2] == 3
    asm = per_problem([_rec(0, "Optics", 1.0, asm=0.2), _rec(0, "Optics", 1.0, asm=0.4)], reward_of("attention"))
    assert asm == {"0": ("Optics", pytest.approx(0.3))}


def test_markdown_rows_in_the_papers_layout():
    rows = {"SFT": row_cells({"0": ("Optics", 0.25), "1": ("Mechanics", 0.75)}),
            "GRPO (Fmt + Acc)": row_cells({"0": ("Optics", 0.75), "1": ("Mechanics", 0.75)})}
    md = table_markdown("MCQ", rows, {"GRPO (Fmt + Acc)": (0.25, 0.25, 2)})
    assert "| Model | Overall | Mechanics | Electromagnetism | Thermodynamics | Wave/Acoustics | Optics | Modern Physics" in md
    assert "| SFT | 0.500 ± 0.250 | 0.750 ± 0.000 | – | – | – | 0.250 ± 0.000 | – |" in md
    assert "| GRPO (Fmt + Acc) | 0.750 ± 0.000 | 0.750 ± 0.000 | – | – | – | 0.750 ± 0.000 | – | +0.250 ± 0.250 (+1.0 SE) |" in md


def test_seed_table_ranks_and_spread():
    by_seed = {0: {"a": (0.6, 0.02, 9), "b": (0.5, 0.02, 9)}, 1: {"a": (0.55, 0.02, 9), "b": (0.58, 0.02, 9)}}
    md, same = seed_table(by_seed)
    assert not same
    assert "| a | 0.600 ± 0.020 (#1) | 0.550 ± 0.020 (#2) | 0.050 |" in md
    assert "| b | 0.500 ± 0.020 (#2) | 0.580 ± 0.020 (#1) | 0.080 |" in md
    assert seed_table({0: by_seed[0], 1: {"a": (0.7, 0, 9), "b": (0.1, 0, 9)}})[1]
    # a seed still missing a condition: a dash, and the ranking compared on what both seeds have
    md, same = seed_table({0: {"a": (0.6, 0.02, 9), "b": (0.5, 0.02, 9), "c": (0.4, 0, 9)}, 1: {"a": (0.7, 0, 9), "b": (0.2, 0, 9)}})
    assert same and "| c | 0.400 ± 0.000 (#3) | – | – |" in md and "| b | 0.500 ± 0.020 (#2) | 0.200 ± 0.000 (#2) | 0.300 |" in md


def test_pooled_averages_each_problem_over_seeds_on_shared_problems():
    s0 = {"0": ("Optics", 1.0), "1": ("Mechanics", 0.5), "2": ("Optics", 0.0)}
    s1 = {"0": ("Optics", 0.5), "1": ("Mechanics", 0.0)}  # problem 2 not scored in this seed
    assert pooled([s0, s1]) == {"0": ("Optics", 0.75), "1": ("Mechanics", 0.25)}
    assert pooled([s0]) == s0 and pooled([]) == {}
    base = {"0": ("Optics", 0.25), "1": ("Mechanics", 0.25)}  # differences 0.5 and 0: mean 0.25, SE 0.25
    assert paired_change(pooled([s0, s1]), base) == pytest.approx((0.25, 0.25, 2))


def test_group_spread_by_hand():
    # groups of 4: [1,1,0,0] std = sqrt(1/3); [1,1,1,1] 0; [nan,0,1,nan] std of [0,1] = sqrt(1/2); [nan]*4 left out
    values = [1, 1, 0, 0, 1, 1, 1, 1, math.nan, 0, 1, math.nan] + [math.nan] * 4
    std, frac = group_spread(values, 4)
    assert std == pytest.approx((math.sqrt(1 / 3) + 0 + math.sqrt(1 / 2)) / 3) and frac == pytest.approx(2 / 3)
    assert all(math.isnan(v) for v in group_spread([math.nan] * 4, 4))
    with pytest.raises(ValueError, match="do not split into groups of 4"):
        group_spread([1.0] * 6, 4)


def test_group_spread_callback_averages_over_steps_and_keeps_the_curve_ends(tmp_path):
    class Module:
        logged = []

        def log_dict(self, values, **_):
            self.logged.append(values)

    cb, module = GroupSpread(str(tmp_path / "s.json"), window=2), Module()
    steps = [[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]]  # groups of 2: std sqrt(1/2) twice, then 0, 0, then 0, 0
    for i, acc in enumerate(steps):
        cb.on_train_batch_end(None, module, {"rewards": {"accuracy": acc}, "total": acc, "group_size": 2}, None, i)
    s = cb.summary()["accuracy"]
    assert s["mean_group_std"] == pytest.approx(math.sqrt(0.5) / 3) and s["frac_groups_with_spread"] == pytest.approx(1 / 3)
    assert (s["steps"], s["first"], s["last"]) == (3, 0.75, 0.5)  # step means 0.5, 1, 0
    assert module.logged[0]["train/group_std/accuracy"] == pytest.approx(math.sqrt(0.5))


# ----------------------------------------------------------------------------- end to end, scripted policy
def scripted(sample, k: int) -> str:
    """Completion k of a sample: the gold answer when (id + k) is even for MCQ, when id % 3 == 0 for OE (all four
    completions alike), else a wrong one; every completion carries the four tags."""
    mcq = sample.answer_format == "mcq"
    right = (int(sample.id) + k) % 2 == 0 if mcq else int(sample.id) % 3 == 0
    answer = sample.answer if right else ("ABCD"[("ABCD".index(sample.answer) + 1) % 4] if mcq else "9999 J")
    return (f"<think>reading the figure</think><answer>{answer}</answer><unit>{sample.fields['unit']}</unit>"
            f"<principle>{sample.fields['principle']}</principle>")


@pytest.fixture
def scripted_policy(monkeypatch):
    real = GRPOModule.rollout

    def rollout(self, batch, group_size, greedy=False, temperature=None):
        out = real(self, batch, group_size, greedy=greedy, temperature=temperature)
        return dataclasses.replace(out, completions=[scripted(s, k) for s in batch.samples for k in range(group_size)])

    monkeypatch.setattr(GRPOModule, "rollout", rollout)


def _experiment(tmp_path: Path, model_dir: str, *extra: str):
    """The shipped experiment config with a tiny model, 12 readable problems, 1-step fits, in-process runs: each
    format gets an overlay with its tiny data."""
    spec = {"reader": "phyx", "split": "test",
            "generate": {"path": str(tmp_path / "data" / "p.parquet"), "kind": "physics", "style": "readable",
                         "num": 12, "seed": 0}}
    exp = parse(["phyx", "--config", "configs/experiments/phyx_demo.yaml", "--output", str(tmp_path / "out"),
                 "--warm_start", model_dir, "--launcher", "inprocess", "--jobs", "1", "--seeds", "[0]", *extra])
    exp.fit_args = [a for a in exp.fit_args if not a.startswith("--data.batch_size")]  # the overlay's batch
    for k in exp.controls:
        k.args = [a for a in k.args if not a.startswith("--trainer.max_steps")]  # the overlay's 1 step
    for f in exp.formats:
        reader = {"answer_format": "mcq" if f.key == "mcq" else "open"}
        over = {"trainer": {"max_steps": 1, "max_time": None},
                "model": {"init_args": {"sampling": {"num_generations": 4, "max_completion_length": 8}}},
                "data": {"batch_size": 2, "eval_batch_size": 6,
                         **{split: {**spec, "rows": rows, "reader_args": reader}
                            for split, rows in (("train", "6:"), ("val", ":6"), ("test", ":6"))}}}
        path = tmp_path / f"tiny_{f.key}.yaml"
        path.write_text(yaml.safe_dump(over))
        f.overlays = [str(path)]
    return exp


def test_runner_mcq_fmt_acc_asm_and_control(tmp_path, tiny_model_dir, scripted_policy):
    """The fast path: MCQ only, two conditions and the lr-0 control, in-process."""
    exp = _experiment(tmp_path, tiny_model_dir, "--chart", "false")
    exp.formats = exp.formats[:1]
    exp.conditions = [c for c in exp.conditions if c.key != "rubric"]
    assert [r.name for r in exp.runs()] == ["sft_mcq", "mcq_fmt_acc_s0", "mcq_asm_s0", "mcq_fmt_acc_lr0_s0"]
    report = execute(exp)
    assert report["failed"] == [] and list(report["tables"]) == ["mcq"]
    assert list(report["tables"]["mcq"]) == ["SFT", "GRPO (Fmt + Acc)", "GRPO (Fmt + Acc + ASM)"]
    for row in report["tables"]["mcq"].values():  # every problem half right (k = 0..3 alternate)
        assert row["Overall"] == (0.5, 0.0, 6)
    md = Path(exp.output, "phyx_table.md").read_text()
    assert "| GRPO (Fmt + Acc), lr 0 (mcq, seed 0) | 0.500 ± 0.000 | +0.000 ± 0.000 (+0.0 SE) |" in md
    assert "| Multiple choice (MCQ) | GRPO (Fmt + Acc + ASM) |" in md  # the ASM of every model
    assert not Path(exp.output, "phyx_bars.png").exists()
    assert Path(exp.output, "runs", "sft_mcq", "config.yaml").is_file()  # the evaluation's saved config, not in cwd
    spread = json.loads(Path(exp.output, "runs", "mcq_asm_s0", "group_spread.json").read_text())
    assert spread["terms"]["accuracy"]["mean_group_std"] == pytest.approx(math.sqrt(1 / 3))
    assert spread["terms"]["accuracy"]["first"] == spread["terms"]["accuracy"]["last"] == 0.5
    assert 0 < spread["terms"]["attention"]["mean_group_std"] < 0.5
    # report_only: the finished runs' report, a seed not trained yet listed as not run (and nothing launched)
    exp.seeds, exp.report_only = [0, 1], True
    partial = Path(exp.output, "runs", "mcq_fmt_acc_s1", "predictions.jsonl")  # an evaluation still writing
    partial.parent.mkdir()
    partial.write_text(json.dumps({"id": "0", "mode": "sampled", "domain": "Optics", "correct": 1.0, "rewards": {}}) + "\n")
    report = execute(exp)
    assert report["failed"] == [] and sorted(p.name for p in partial.parent.iterdir()) == ["predictions.jsonl"]
    md = Path(exp.output, "phyx_table.md").read_text()
    assert "| mcq_fmt_acc_s1 |  | 0.0 | 0.0 | not run yet |" in md and "| mcq_fmt_acc_s0 | 1/1 |" in md
    assert "| mcq_fmt_acc_lr0_s0 | 1/1 |" in md and "Stopped before their last step" not in md  # every fit ran its steps
    assert "Scored by `accuracy`: the <answer> letter equals the gold option letter" in md  # the table's protocol
    assert "seed 1" not in md.split("### Seeds")[1].split("###")[0]  # the partial file is not read: no seed table


def test_shipped_experiment_runs_seed_0_and_the_controls_before_the_other_seeds():
    """An interrupted invocation has the first table and the control; a second one reuses them."""
    exp = parse(["phyx", "--config", "configs/experiments/phyx_demo.yaml"])
    assert exp.seeds == [0, 1, 2, 3, 4] and exp.warm_start == "checkpoints/demo_phyx"
    names = [r.name for r in exp.runs()]
    assert names[:15] == ["sft_mcq", "sft_oe", "mcq_fmt_acc_s0", "mcq_rubric_s0", "mcq_asm_s0", "oe_fmt_acc_s0",
                          "oe_rubric_s0", "oe_asm_s0", "mcq_fmt_acc_lr0_s0", "mcq_fmt_acc_s1", "mcq_rubric_s1",
                          "mcq_asm_s1", "oe_fmt_acc_s1", "oe_rubric_s1", "oe_asm_s1"]
    assert len(names) == 2 + 2 * 3 * 5 + 1 and names[-1] == "oe_asm_s4"  # SFT x 2, 2 formats x 3 x 5 seeds, lr 0
    runs = {r.name: r for r in exp.runs()}
    assert runs["sft_oe"].fit_args is None and runs["oe_asm_s1"].seed == 1
    assert runs["oe_asm_s1"].configs == ["configs/demo_phyx_oe.yaml", "configs/demo_phyx_oe_asm.yaml"]
    assert "--model.init_args.optimizer.init_args.lr=0" in runs["mcq_fmt_acc_lr0_s0"].fit_args
    assert runs["mcq_fmt_acc_lr0_s0"].label == "GRPO (Fmt + Acc), lr 0"


@pytest.mark.slow
def test_runner_end_to_end_on_a_tiny_model(tmp_path, tiny_model_dir, scripted_policy):
    exp = _experiment(tmp_path, tiny_model_dir)
    assert exp.runs()[2].configs == ["configs/demo_phyx_mcq.yaml", str(tmp_path / "tiny_mcq.yaml")]
    report = execute(exp)
    assert report["failed"] == []
    out = Path(exp.output)
    # MCQ: ids 0-5, 4 sampled completions each, k = 0..3 -> every problem half right; OE: ids 0 and 3 right
    mcq, oe = report["tables"]["mcq"], report["tables"]["oe"]
    assert list(mcq) == ["SFT", "GRPO (Fmt + Acc)", "GRPO (Rubric)", "GRPO (Fmt + Acc + ASM)"]
    for row in mcq.values():
        assert row["Overall"] == (0.5, 0.0, 6)
    for row in oe.values():
        assert row["Overall"][0] == pytest.approx(2 / 6) and row["Overall"][2] == 6
    # ids 0..5 cycle through beaker, cells, crates, lens, levels, string: OE right on 0 (beaker) and 3 (lens)
    assert oe["SFT"]["Thermodynamics"] == (1.0, 0.0, 1) and oe["SFT"]["Optics"] == (1.0, 0.0, 1)
    assert oe["SFT"]["Mechanics"] == (0.0, 0.0, 1)
    md = (out / "phyx_table.md").read_text()
    assert "| SFT | 0.500 ± 0.000 |" in md and "| GRPO (Fmt + Acc), lr 0 (mcq, seed 0) | 0.500 ± 0.000 |" in md
    assert "| GRPO (Fmt + Acc) | 0.333 ± 0.211 |" in md  # OE: values 1, 0, 0, 1, 0, 0 -> SE sqrt(4/15) / sqrt(6)
    rows = list(csv.DictReader(open(out / "phyx_table.csv")))
    assert {(r["format"], r["model"]) for r in rows} >= {("mcq", "sft_mcq"), ("oe", "oe_asm_s0")}
    assert (out / "phyx_bars.png").stat().st_size > 0
    spread = json.loads((out / "runs" / "mcq_asm_s0" / "group_spread.json").read_text())
    assert spread["global_step"] == 1 and "attention" in spread["terms"]
    # MCQ groups of 4 hold two right and two wrong: accuracy std sqrt(1/3) in every group
    assert spread["terms"]["accuracy"]["mean_group_std"] == pytest.approx(math.sqrt(1 / 3))
    assert (out / "runs" / "mcq_asm_s0" / "model.safetensors").is_file()
    assert any((out / "tb" / "mcq_asm_s0").glob("events.out.tfevents.*"))
    # a second invocation reuses every run
    stamps = {p: p.stat().st_mtime for p in (out / "runs").glob("*/*.json")}
    execute(exp)
    assert {p: p.stat().st_mtime for p in (out / "runs").glob("*/*.json")} == stamps
    assert "Made by other code" not in (out / "phyx_table.md").read_text()  # every run made by this checkout
    # a config's comments and layout are not what a run is keyed on: editing them redoes nothing
    overlay = tmp_path / "tiny_mcq.yaml"
    overlay.write_text("# a comment added after the runs\n\n" + overlay.read_text() + "\n# and one at the end\n")
    execute(exp)
    assert {p: p.stat().st_mtime for p in (out / "runs").glob("*/*.json")} == stamps
    # a run another version of the code made is still reused (reuse is keyed on configs, arguments, weights), and named
    record = out / "runs" / "mcq_asm_s0" / "fit.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "code": "0" * 16}))
    execute(exp)
    md = (out / "phyx_table.md").read_text()
    assert f"Made by other code than this checkout's (lit_grpo sources {exp.code}; " in md
    assert f"reused as they are: 1 of {len(exp.runs())} runs (mcq_asm_s0)." in md


def test_seeds_section_ranks_per_seed_and_pools_over_seeds():
    """The report's seed part from hand-made per-problem accuracies and ASMs (MCQ: SFT 0.25 per problem, ASM 0.1;
    seed 0: Fmt + Acc 1, 0.5, ASM 0.2, 0.1; seed 1: Fmt + Acc 0.5, 0.5, ASM 0.3, 0.3; Rubric not run yet)."""
    from lit_grpo.tasks.phyx.experiments.summary import _seeds_section

    exp = parse(["phyx", "--config", "configs/experiments/phyx_demo.yaml", "--seeds", "[0, 1]"])
    exp.formats = exp.formats[:1]
    runs = exp.runs()
    two = lambda a, b, x=0.1, y=0.1: {"correct": {"0": ("Optics", a), "1": ("Mechanics", b)},  # noqa: E731
                                       "asm": {"0": ("Optics", x), "1": ("Mechanics", y)}}
    data = {"sft_mcq": two(0.25, 0.25), "mcq_fmt_acc_s0": two(1.0, 0.5, 0.2, 0.1), "mcq_rubric_s0": two(0.0, 0.0),
            "mcq_asm_s0": two(0.5, 0.5), "mcq_fmt_acc_s1": two(0.5, 0.5, 0.3, 0.3), "mcq_asm_s1": two(0.0, 0.5)}
    md = "\n".join(_seeds_section(exp, runs, data))
    assert "| GRPO (Fmt + Acc) | 0.750 ± 0.250 (#1) | 0.500 ± 0.000 (#1) | 0.250 |" in md
    assert "| GRPO (Rubric) | 0.000 ± 0.000 (#3) | – | – |" in md
    assert "Same ranking for every seed: yes." in md
    # pooled Fmt + Acc: problems 0.75, 0.5 against 0.25, 0.25 -> differences 0.5, 0.25: mean 0.375, SE 0.125;
    # over seeds: overall 0.75, 0.5 (SE = sd / sqrt 2 = 0.125), changes 0.5, 0.25 (SE 0.125, z 3.0).
    # ASM pooled: 0.25, 0.2 (mean 0.225, SE 0.025), changes 0.15, 0.1 (0.125 +- 0.025, z 5.0); over seeds:
    # overall 0.15, 0.3 (SE 0.075), changes 0.05, 0.2 (0.125 +- 0.075, z 1.7)
    assert ("| GRPO (Fmt + Acc) | 2 | 0.625 ± 0.125; seeds ± 0.125 (2) | +0.375 ± 0.125 (+3.0 SE); seeds ± 0.125 "
            "(+3.0 SE, 2) | 0.2250 ± 0.0250; seeds ± 0.0750 (2) | +0.1250 ± 0.0250 (+5.0 SE); seeds ± 0.0750 "
            "(+1.7 SE, 2) | 0.750, 0.500 |") in md
    assert "| GRPO (Rubric) | 1 |" not in md  # one seed: nothing to pool


@pytest.mark.parametrize("args, message", [
    (["--seeds", "[]"], "error: phyx: seeds must name at least one training seed, e.g. [0, 1]"),
    (["--seeds", "[-1]"], "error: phyx: seeds must be in [0, 4294967295] (seed_everything's range), got [-1]"),
    (["--seeds", "[0, 4294967296]"],
     "error: phyx: seeds must be in [0, 4294967295] (seed_everything's range), got [0, 4294967296]"),
    (["--seeds", "[0, 1, 0]"],
     "error: phyx: seeds must all differ (each is one value of the seed-level SE), got [0, 1, 0]"),
    (["--jobs", "0"], "error: phyx: jobs must be >= 1 (runs at once), got 0"),
    # the sweep's runs are resolved at parse time: an empty sweep, an unknown condition or a reward the condition
    # lacks is one line before any work, not a traceback from the first run
    (["--sweeps", "[{condition: asm, settings: []}]"],
     "error: phyx: sweep asm: settings is empty; give at least one, e.g. [{aggregation: normalize_then_sum, "
     "weight: 1.0}]"),
    (["--sweeps", "[{condition: asm, reference: asm, settings: [{weight: 1.0}]}]"],
     "error: phyx: sweep asm: the reference must be another condition than the one swept (e.g. reference: fmt_acc), "
     "got 'asm'"),
    # a key typo or a wrong type is one line naming the key, not the usage block
    (["--sweeps", "[{condition: asm, setings: []}]"],
     "error: phyx: sweeps: unknown option 'setings' (did you mean settings?); valid: condition, reference, reward, "
     "settings, title"),
    (["--sweeps", '[{condition: asm, settings: [{weight: "one"}]}]'],
     "error: phyx: sweeps.settings.weight: expected a float. Got value: one"),
    (["--jobz", "3"], "error: phyx: unknown option 'jobz' (did you mean jobs?); valid: see --help"),
    # a start of an option's name is refused, not read as the option (--job would run with jobs 3)
    (["--job", "3"], "error: phyx: unknown option 'job' (did you mean jobs?); valid: see --help"),
    (["--sweeps", "[{condition: bogus, settings: [{weight: 1.0}]}]"],
     "error: phyx: sweep: unknown condition 'bogus' (conditions ['asm', 'fmt_acc', 'rubric'])"),
    (["--sweeps", "[{condition: fmt_acc, reference: asm, settings: [{weight: 1.0}]}]"],
     "error: phyx: sweep: no reward 'attention' in the rewards of ['configs/demo_phyx_mcq.yaml'] "
     "(they hold ['format', 'accuracy'])"),
])
def test_runner_settings_out_of_range_are_one_line(capsys, args, message):
    from lit_grpo.tasks.phyx.experiments import parse

    with pytest.raises(SystemExit) as exit_:
        parse(["phyx", "--config", "configs/experiments/phyx_demo.yaml", *args])
    assert exit_.value.code == 2 and capsys.readouterr().err.strip() == message


def test_a_runner_key_in_a_config_file_is_named_with_the_file(capsys, tmp_path):
    from lit_grpo.tasks.phyx.experiments import parse

    bad = tmp_path / "bad.yaml"
    bad.write_text("jobz: 3\n")
    with pytest.raises(SystemExit) as exit_:
        parse(["phyx", "--config", "configs/experiments/phyx_demo.yaml", "--config", str(bad)])
    assert exit_.value.code == 2 and capsys.readouterr().err.strip() == \
        f"error: phyx: {bad}: unknown option 'jobz' (did you mean jobs?); valid: see --help"


# ----------------------------------------------------------------------------- a stop signal to the runner
class TouchAtStep(L.Callback):
    """Writes this process's pid to ``path`` once training step ``step`` has ended."""

    def __init__(self, path: str, step: int):
        self.path, self.step = Path(path), step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step and not self.path.exists():
            self.path.write_text(str(os.getpid()))


RUNNER = """import sys
from pathlib import Path
from lit_grpo.tasks.phyx.experiments.phyx import launch, passing_signals_on, stop_signal
with passing_signals_on():
    rc, _ = launch(sys.argv[2:], Path(sys.argv[1]), "subprocess")
print(f"rc={rc} stop={stop_signal()}")
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [15, 1], ids=["SIGTERM", "SIGHUP"])
def test_a_sigterm_to_the_runner_stops_its_fit_with_a_save_and_the_rerun_resumes_it(tmp_path, signum):
    """The runner's fit (logger and checkpoints as ``fit_overlay`` sets them: no ModelCheckpoint) gets the runner's
    SIGTERM (a SIGHUP goes on as SIGTERM), saves its last step where :func:`stopped_fit` looks, and has ended when
    the runner returns its 143 (it ran on, orphaned, and the rerun started it anew); that checkpoint resumes the
    fit."""
    import signal
    import subprocess
    import sys

    import torch

    from lit_grpo.cli import main
    from lit_grpo.tasks.phyx.experiments.phyx import stopped_fit
    from test_resume import _config

    root = Path(__file__).parents[1]
    touch = tmp_path / "step2.pid"
    over = _config(tmp_path, **{
        "trainer.max_steps": 1000, "trainer.max_epochs": 1, "trainer.enable_checkpointing": False,
        "trainer.logger": {"class_path": "lit_grpo.loggers.TensorBoardLogger",
                           "init_args": {"save_dir": str(tmp_path / "tb"), "name": "run", "version": "",
                                         "default_hp_metric": False}},
        "trainer.callbacks": [{"class_path": "test_experiments.TouchAtStep",
                               "init_args": {"path": str(touch), "step": 2}}],
        "data.train": {"generate": {"path": str(tmp_path / "train.parquet"), "kind": "puzzles", "num": 600}}})
    args = ["fit", "--config", "configs/demo.yaml", "--config", str(over)]
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'tests'}", "HF_HUB_OFFLINE": "1"}
    runner = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "fit.log"), *args],
                              cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        for _ in range(3000):
            if touch.exists() or runner.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"])
        assert runner.poll() is None, (tmp_path / "fit.log").read_text()[-3000:]
        child = int(touch.read_text())
        runner.send_signal(signum)
        out, err = runner.communicate(timeout=300)
    finally:
        os.killpg(runner.pid, signal.SIGKILL) if runner.poll() is None else None
    assert out.strip() == f"rc=143 stop={signum}", err[-3000:]
    assert f"{signal.Signals(signum).name} received: passed on to the runs in progress, which save their last step" \
        in err
    with pytest.raises(ProcessLookupError):  # the fit has ended (and was reaped) when the runner returns
        os.kill(child, 0)
    last = tmp_path / "tb" / "run" / "checkpoints" / "last.ckpt"
    step = torch.load(last, weights_only=False)["global_step"]
    assert 2 <= step < 300
    assert f"Stopped by SIGTERM after step {step} of max_steps 1000; checkpoint written: {last}" \
        in (tmp_path / "fit.log").read_text()
    if signum != signal.SIGTERM:
        return  # the rest is the same for both
    # the rerun's choice: that checkpoint for the same stamp stopped by a signal, nothing for a failed or other run
    exp = dataclasses.make_dataclass("Exp", [("force", bool)])(False)
    exp.path = lambda *parts: tmp_path.joinpath(*parts)
    run = dataclasses.make_dataclass("R", [("name", str)])("run")
    record = tmp_path / "fit.json"
    for rc, stamp, expected in [(143, "s", last), (130, "s", last), (1, "s", None), (143, "other", None)]:
        record.write_text(json.dumps({"stamp": stamp, "rc": rc}))
        assert stopped_fit(exp, run, record, "s") == expected
    cli = main([*args, "--ckpt_path", str(last), "--trainer.max_steps", str(step + 1)])
    assert cli.trainer.global_step == step + 1
    assert all(s["step"] == step + 1 for s in cli.trainer.optimizers[0].state_dict()["state"].values())
