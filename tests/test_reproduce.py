"""The reproduction scripts' comparisons (benchmarks/reproduce_demo.py), on hand-made figures: what counts as
identical, within tolerance (2 SE of the difference) and different."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("reproduce_demo", ROOT / "benchmarks" / "reproduce_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_table_is_read_cell_by_cell(script):
    table = script.readme_table((ROOT / "README.md").read_text())
    assert sorted(table) == [0, 50, 100, 150, 200]
    assert set(table[0]) == {"sampled accuracy", "greedy accuracy", "sampled format"}
    text, mean, se = table[200]["sampled accuracy"]
    assert text == f"{mean:.3f} ± {se:.3f}" and 0 <= mean <= 1 and 0 < se < 0.1


LOG = """step 200/200 (100%)  train/reward 1.2
validation at step 0 (took 0:00:09): val/greedy/reward/binary 0.7231 +- 0.0281  val/sampled/reward/binary 0.568 +- 0.020  val/sampled/reward/boxed_format 0.918 +- 0.009
validation at step 200 (took 0:00:09): val/greedy/reward/binary 0.800 +- 0.020  val/sampled/reward/binary 0.813 +- 0.018  val/sampled/reward/boxed_format 0.980 +- 0.004
"""


def test_validation_lines_fill_readme_columns_rounded_as_readme(script):
    now = script.run_figures(LOG)
    assert now[0]["greedy accuracy"] == ("0.723 ± 0.028", 0.7231, 0.0281)
    assert now[200]["sampled accuracy"] == ("0.813 ± 0.018", 0.813, 0.018)


def test_identical_within_tolerance_and_different(script):
    then = {0: {"sampled accuracy": ("0.568 ± 0.020", 0.568, 0.020), "greedy accuracy": ("0.723 ± 0.028", 0.723, 0.028)}}
    now = script.run_figures(LOG)
    assert script.compare(then, now) == ("identical", [])
    # 0.821 ± 0.018 then, 0.813 ± 0.018 now: Δ -0.008, SE of the difference sqrt(2) x 0.018 = 0.0255: -0.3 SE;
    # 3 cells compared: Bonferroni's z = Phi^-1(1 - 0.05 / 6) = 2.39
    then[200] = {"sampled accuracy": ("0.821 ± 0.018", 0.821, 0.018)}
    assert script.compare(then, now) == ("within tolerance", [
        "step 200 sampled accuracy: README 0.821 ± 0.018, this run 0.813 ± 0.018 (Δ -0.008 = -0.3 SE: within 2.39 SE)"])
    # 0.898 ± 0.019 then, 0.800 ± 0.020 now: Δ -0.098, SE hypot(0.019, 0.020) = 0.0276: -3.6 SE; 4 cells: z = 2.50
    then[200]["greedy accuracy"] = ("0.898 ± 0.019", 0.898, 0.019)
    verdict, lines = script.compare(then, now)
    assert verdict == "DIFFERENT" and lines[1].endswith("(Δ -0.098 = -3.6 SE: beyond 2.50 SE)")
    then[250] = {"sampled format": ("0.990 ± 0.003", 0.99, 0.003)}  # a step the run never reached
    assert script.compare(then, now)[1][-1] == "step 250 sampled format: README 0.990 ± 0.003, this run: not evaluated"


def test_the_threshold_is_bonferronis_for_the_cells_compared(script):
    # Phi^-1(0.975) = 1.960 (one cell), Phi^-1(1 - 0.05 / 30) = 2.935 (README's 15 cells)
    assert script.bonferroni_z(1) == pytest.approx(1.95996, abs=1e-4)
    assert script.bonferroni_z(15) == pytest.approx(2.9352, abs=1e-3)
