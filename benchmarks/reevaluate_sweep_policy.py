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
policy (``environment.json``). In the environment recorded beside the policy the same weights and sampling seed give
the same bits, so there anything but ``identical`` is ``DIFFERENT``. A folder with the runner's ``fit.json`` must
be the run named (``--run``). Exit status 0 for identical or within tolerance, 1 otherwise. About a minute on
one core.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
from pathlib import Path

# the runner trains and evaluates in child processes with one torch thread unless OMP_NUM_THREADS says otherwise;
# this process takes the same setting (before torch is imported), so the environment it records and compares with the
# shipped one is the children's, not its own default of one thread per core
os.environ.setdefault("OMP_NUM_THREADS", "1")

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
        # identical figures print no z: the CSV's 6-digit rounding alone would give a meaningless "+0.9 SE"
        versus = "the same on every problem" if same else (
            f"now - recorded {fmt_change(change, digits)}: {'within' if ok else 'beyond'} {z:.2f} SE")
        lines.append(f"  {title}: recorded {fmt_cell(cell([v for _, v in recorded[key].values()]), digits)}, "
                     f"now {fmt_cell(cell([v for _, v in now[key].values()]), digits)}; {versus}")
    return ("identical" if identical else "within tolerance" if close else "DIFFERENT"), lines


def trained_as(policy: Path) -> str | None:
    """The run that trained ``policy``, from the runner's ``fit.json`` beside it (its command names the run's
    generated overlay ``configs/<run>.fit.yaml``); ``None`` when the folder has no such record."""
    path = policy / "fit.json"
    if not path.is_file():
        return None
    found = re.search(r"configs/([^/\s]+)\.fit\.yaml", json.loads(path.read_text()).get("command", ""))
    return found.group(1) if found else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="a shipped policy folder (an exported model: config.json, model.safetensors, ...)")
    p.add_argument("--run", help="its run in results/attention_sweep/results.csv (default: the folder's name)")
    args = p.parse_args(argv)
    policy = Path(args.policy).resolve()
    name = args.run or policy.name
    os.chdir(ROOT)  # the configs' relative paths, as the runner reads them
    from lit_grpo.environment import differences, record
    from lit_grpo.tasks.phyx.experiments import parse
    from lit_grpo.tasks.phyx.experiments.report import read_results

    if not (policy / "model.safetensors").is_file():
        raise SystemExit(f"error: {args.policy} {'holds no model.safetensors' if policy.is_dir() else 'does not exist'}"
                         ": give an exported policy folder, e.g. checkpoints/attention_sweep_refs/oe_fmt_acc_s0")
    recorded = read_results(RESULTS)
    if name not in recorded:
        raise SystemExit(f"error: no run {name!r} in {RESULTS.relative_to(ROOT)}; give its name with --run "
                         f"(runs: {', '.join(sorted(recorded))})")
    made_by = trained_as(policy)
    if made_by and made_by != name:
        raise SystemExit(f"error: {args.policy} is the run {made_by!r} (its fit.json), not {name!r}: leave out --run "
                         "or name the run that trained it")
    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "benchmarks" / "reproduce_demo_phyx_oe_asm_norm1.py")
    reproduce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reproduce)
    with tempfile.TemporaryDirectory() as tmp:
        exp = parse(["phyx", "--config", SWEEP, "--output", tmp])
        run = next(r for r in exp.runs() if r.name == name)
        figures = reproduce.evaluate(exp, run, str(policy), "reevaluated")
    figures = {"correct": figures["accuracy"], "asm": figures["ASM"], "format": figures["format"]}
    outcome, lines = compare(figures, recorded[name])
    env = policy / "environment.json"
    if outcome == "within tolerance" and env.is_file() and not differences(json.loads(env.read_text()), record()):
        # the environment that evaluated it: the same weights and sampling seed give the same bits there
        outcome = "DIFFERENT"
        lines.append("  the environment is the one recorded beside the policy: there it evaluates to the same "
                     "figures, so any difference is one")
    sha = hashlib.sha256((policy / "model.safetensors").read_bytes()).hexdigest()
    print(f"{args.policy} (SHA-256 {sha[:16]}...) against run {name} of {RESULTS.relative_to(ROOT)}:")
    print("\n".join(lines))
    print(f"{outcome} (OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']})")
    if outcome != "identical" and (policy / "environment.json").is_file():
        from lit_grpo.environment import against

        print("\n".join(against(policy / "environment.json", "the policy's run")))
    return 0 if outcome != "DIFFERENT" else 1


if __name__ == "__main__":
    sys.exit(main())
