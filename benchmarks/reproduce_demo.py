"""Whether this checkout makes README's demo table again: to the digit, within the standard errors, or not.

    python benchmarks/reproduce_demo.py       # about 4 minutes on 2 idle cores (the demo itself)

Runs ``configs/demo.yaml`` as README gives it (under its own run name, logs in a temporary folder, its checkpoints
removed afterwards), reads the validation line printed at each evaluated step, and compares every cell of README's
table (sampled accuracy, greedy accuracy, sampled format, at steps 0-200) with the run's:

- ``identical``: every cell prints the same digits;
- ``within tolerance``: some digits differ but every difference is within ``z`` standard errors of the difference
  (``sqrt(se_readme^2 + se_now^2)``; treating the two evaluations as independent, which is conservative: they score
  the same 256 puzzles, so the paired SE would be smaller). ``z`` is Bonferroni's for the m cells compared, so that
  two runs of one policy distribution fail the check 5 % of the time, not 5 % per cell (15 cells: z = 2.94; a
  plain 2 SE per cell flags half of all faithful re-runs). Training is deterministic in one environment and not
  across two (docs/install.md#locked), so this is the check that can hold on another machine;
- ``DIFFERENT``: a cell beyond that.

When the digits differ it prints how this environment differs from the one that made README's table
(``results/demo/environment.json``, :mod:`lit_grpo.environment`). Exit status 0 for identical or within tolerance.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import NormalDist

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "results" / "demo" / "environment.json"
COLUMNS = {"sampled accuracy": "val/sampled/reward/binary", "greedy accuracy": "val/greedy/reward/binary",
           "sampled format": "val/sampled/reward/boxed_format"}
"""README's column -> the metric of the validation line that fills it."""
FAMILY_RATE = 0.05
"""The chance that a faithful re-run is called different, over all cells together."""
Figure = tuple[str, float, float]
"""``(as printed, mean, standard error)``."""


def readme_table(markdown: str) -> dict[int, dict[str, Figure]]:
    """README's demo table: ``step -> column -> (text, mean, SE)`` (the rows after the ``| step | ...`` header)."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| step | sampled accuracy"))
    heads = [h.strip() for h in lines[start].strip("|").split("|")]
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        out[int(cells[0])] = {h: _figure(c) for h, c in zip(heads[1:], cells[1:])}
    return out


def _figure(text: str) -> Figure:
    mean, se = (float(x) for x in text.split("±"))
    return text, mean, se


def run_figures(log: str) -> dict[int, dict[str, Figure]]:
    """The run's validation lines (``validation at step S (took ...): val/... 0.812 +- 0.018 ...``) in README's
    columns, rounded as README prints them (3 digits)."""
    out = {}
    for match in re.finditer(r"^validation at step (\d+)[^:]*:(.*)$", log, re.M):
        metrics = dict((k, (float(m), float(s))) for k, m, s in re.findall(r"(\S+) (-?[\d.]+) \+- ([\d.]+)",
                                                                            match.group(2)))
        out[int(match.group(1))] = {col: (f"{metrics[key][0]:.3f} ± {metrics[key][1]:.3f}", *metrics[key])
                                    for col, key in COLUMNS.items() if key in metrics}
    return out


def bonferroni_z(cells: int, rate: float = FAMILY_RATE) -> float:
    """The two-sided threshold, in standard errors, at which ``cells`` comparisons together flag a faithful re-run
    with probability ``rate``: ``Phi^-1(1 - rate / (2 cells))``; 1 cell: 1.96, 15 cells: 2.94."""
    return NormalDist().inv_cdf(1 - rate / (2 * max(cells, 1)))


def compare(then: dict[int, dict[str, Figure]], now: dict[int, dict[str, Figure]]) -> tuple[str, list[str]]:
    """``("identical" | "within tolerance" | "DIFFERENT", one line per cell whose digits differ)``, each difference
    against :func:`bonferroni_z` for the cells compared. A cell the run lacks (a step it did not reach) counts as
    different."""
    lines, worst = [], "identical"
    z = bonferroni_z(sum(len(cells) for cells in then.values()))
    for step, cells in then.items():
        for col, (text, mean, se) in cells.items():
            got = now.get(step, {}).get(col)
            if got is None:
                lines.append(f"step {step} {col}: README {text}, this run: not evaluated")
                worst = "DIFFERENT"
            elif got[0] != text:
                d, sd = got[1] - mean, math.hypot(se, got[2])
                ok = abs(d) <= z * sd
                lines.append(f"step {step} {col}: README {text}, this run {got[0]} "
                             f"(Δ {d:+.3f} = {d / sd if sd else math.inf:+.1f} SE: {'within' if ok else 'beyond'} "
                             f"{z:.2f} SE)")
                worst = "DIFFERENT" if not ok or worst == "DIFFERENT" else "within tolerance"
    return worst, lines


def main() -> int:
    os.chdir(ROOT)
    name = f"reproduce_demo_{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml",
                   f"--trainer.logger.init_args.name={name}", f"--trainer.logger.init_args.save_dir={tmp}"]
        print("running:", " ".join(command[1:]), flush=True)
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        finally:
            shutil.rmtree(ROOT / "checkpoints" / f"{name}_grpo", ignore_errors=True)
    log = done.stdout + done.stderr
    if done.returncode != 0:
        print(log[-3000:])
        print(f"the demo failed (exit {done.returncode})")
        return 2
    verdict, lines = compare(readme_table((ROOT / "README.md").read_text()), run_figures(log))
    print("\n".join(lines))
    print(f"{verdict}: README's demo table against this run")
    if verdict != "identical":
        from lit_grpo.environment import against

        print("\n".join(against(RECORDED.relative_to(ROOT), "README's demo table")))
    return 0 if verdict != "DIFFERENT" else 1


if __name__ == "__main__":
    sys.exit(main())
