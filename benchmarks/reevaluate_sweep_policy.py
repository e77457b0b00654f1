"""Whether a shipped policy of the attention sweep evaluates again to its row of the shipped raw results.

    python benchmarks/reevaluate_sweep_policy.py checkpoints/attention_sweep_refs/oe_fmt_acc_norm_s0
    python benchmarks/reevaluate_sweep_policy.py checkpoints/demo_phyx_oe_asm_norm1 --run oe_asm_norm_w1_s0
    python benchmarks/reevaluate_sweep_policy.py checkpoints/demo_phyx --run sft_oe     # the SFT row

Every cell of docs/attention_sweep.md is computed from ``results/attention_sweep/results.csv`` (each run's
per-problem accuracy, held-out ASM and format reward). This script evaluates one shipped policy with the sweep's
own evaluation (``configs/experiments/phyx_attention_sweep.yaml``: 256 held-out problems x 4 sampled completions,
the same sampling seed; the runner's code and overlay) and compares every problem's three figures with that run's
rows (the folder's name is the run's unless ``--run`` says otherwise). It prints each figure as the docs do
(mean ± SE over problems), recorded and now, and one of three outcomes: ``identical`` (every problem's figures as
recorded, to the six significant digits the CSV keeps), ``within tolerance`` (another environment: each figure's
paired change within Bonferroni's 2.39 SE for the three figures, :func:`~lit_grpo.tasks.phyx.experiments.report.
within_se`) or ``DIFFERENT``; when not identical, how this environment differs from the one recorded beside the
policy (``environment.json``). Exit status 0 for identical or within tolerance, 1 otherwise. About a minute on
one core.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = "configs/experiments/phyx_attention_sweep.yaml"
RESULTS = ROOT / "results" / "attention_sweep" / "results.csv"
FIGURES = (("accuracy", "correct", 3), ("held-out ASM", "asm", 4), ("format reward", "format", 3))


def same_as_recorded(now: dict[str, tuple[str, float]], recorded: dict[str, tuple[str, float]]) -> bool:
    """Whether every problem's figure is the recorded one as the CSV writes it (``%.6g``), over the same problems."""
    return now.keys() == recorded.keys() and all(
        float(f"{now[k][1]:.6g}") == recorded[k][1] for k in recorded)


def compare(now: dict[str, dict], recorded: dict[str, dict]) -> tuple[str, list[str]]:
    """``(outcome, lines)``: each figure recorded and now with their paired change, and the outcome
    (``identical`` / ``within tolerance`` / ``DIFFERENT``) over the figures in ``FIGURES``."""
    from statistics import NormalDist

    from lit_grpo.tasks.phyx.experiments.report import cell, fmt_cell, fmt_change, within_se

    z = NormalDist().inv_cdf(1 - 0.05 / (2 * len(FIGURES)))  # Bonferroni: 3 figures, 5 % together, two-sided
    lines, identical, close = [], True, True
    for title, key, digits in FIGURES:
        same = same_as_recorded(now[key], recorded[key])
        ok, change = within_se(now[key], recorded[key], z)
        identical, close = identical and same, close and ok
        lines.append(f"  {title}: recorded {fmt_cell(cell([v for _, v in recorded[key].values()]), digits)}, "
                     f"now {fmt_cell(cell([v for _, v in now[key].values()]), digits)}; now - recorded "
                     f"{fmt_change(change, digits)}: {'same per problem' if same else 'within' if ok else 'beyond'}"
                     f"{'' if same else f' {z:.2f} SE'}")
    return ("identical" if identical else "within tolerance" if close else "DIFFERENT"), lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="a shipped policy folder (an exported model: config.json, model.safetensors, ...)")
    p.add_argument("--run", help="its run in results/attention_sweep/results.csv (default: the folder's name)")
    args = p.parse_args(argv)
    policy = Path(args.policy).resolve()
    name = args.run or policy.name
    os.chdir(ROOT)  # the configs' relative paths, as the runner reads them
    from lit_grpo.tasks.phyx.experiments import parse
    from lit_grpo.tasks.phyx.experiments.report import read_results

    recorded = read_results(RESULTS)
    if name not in recorded:
        raise SystemExit(f"error: no run {name!r} in {RESULTS.relative_to(ROOT)}; give its name with --run "
                         f"(runs: {', '.join(sorted(recorded))})")
    if not (policy / "model.safetensors").is_file():
        raise SystemExit(f"error: {args.policy} holds no model.safetensors: give an exported policy folder")
    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "benchmarks" / "reproduce_demo_phyx_oe_asm_norm1.py")
    reproduce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reproduce)
    with tempfile.TemporaryDirectory() as tmp:
        exp = parse(["phyx", "--config", SWEEP, "--output", tmp])
        run = next(r for r in exp.runs() if r.name == name)
        figures = reproduce.evaluate(exp, run, str(policy), "reevaluated")
    figures = {"correct": figures["accuracy"], "asm": figures["ASM"], "format": figures["format"]}
    outcome, lines = compare(figures, recorded[name])
    sha = hashlib.sha256((policy / "model.safetensors").read_bytes()).hexdigest()
    print(f"{args.policy} (SHA-256 {sha[:16]}...) against run {name} of {RESULTS.relative_to(ROOT)}:")
    print("\n".join(lines))
    print(f"{outcome} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')})")
    if outcome != "identical" and (policy / "environment.json").is_file():
        from lit_grpo.environment import against

        print("\n".join(against(policy / "environment.json", "the policy's run")))
    return 0 if outcome != "DIFFERENT" else 1


if __name__ == "__main__":
    sys.exit(main())
