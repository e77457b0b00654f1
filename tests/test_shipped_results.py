"""The shipped raw results (``results/``) give the docs' tables: a few cells recomputed from the raw records with
plain arithmetic (csv and the standard library, not the report's code) and read in the shipped text."""

import csv
import math
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _readme_demo_row(step: int) -> list[str]:
    """README's demo table row of ``step``: its three cells as printed."""
    row = re.search(rf"^\| {step} +\|(.*)\|$", (ROOT / "README.md").read_text(), re.M)
    return [c.strip() for c in row.group(1).split("|")]


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
