"""The reproduction scripts' comparisons (benchmarks/reproduce_demo.py, benchmarks/reproduce_demo_phyx_oe_asm_norm1.py),
on hand-made figures: what counts as identical, within tolerance (2 SE of the difference; for a retrained policy,
the seed level) and different."""

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


@pytest.fixture(scope="module")
def asm_script():
    spec = importlib.util.spec_from_file_location("reproduce_asm", ROOT / "benchmarks" /
                                                  "reproduce_demo_phyx_oe_asm_norm1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_student_t_quantiles_are_the_tables(asm_script):
    """Student's t quantiles as printed tables give them (two-sided 95 % at 4 and 1 dof; 2.5 % per side over two
    figures at 4 dof: 3.495)."""
    assert asm_script.t_quantile(0.975, 4) == pytest.approx(2.776, abs=1e-3)
    assert asm_script.t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert asm_script.t_quantile(0.9875, 4) == pytest.approx(3.495, abs=1e-3)


def test_seed_level_tolerance_is_the_prediction_interval_for_one_more_seed(asm_script, capsys):
    """Seeds 0.4, 0.5, 0.6, 0.5, 0.5: mean 0.5, sd sqrt(0.02 / 4) = 0.0707; one more seed's interval at 3.495 t
    (Bonferroni over 2 figures) is 0.5 ± 3.495 * 0.0707 * sqrt(1.2) = 0.5 ± 0.271; the ASM seeds are the same
    shape at a tenth of the spread around 0.14 (± 0.0271)."""
    seeds = {"accuracy": [0.4, 0.5, 0.6, 0.5, 0.5], "ASM": [0.13, 0.14, 0.15, 0.14, 0.14]}
    now = lambda acc, asm: {"accuracy": {"0": ("", acc)}, "ASM": {"0": ("", asm)}}  # noqa: E731
    assert asm_script.seed_level(now(0.76, 0.16), seeds)
    assert "0.229 to 0.771: inside" in capsys.readouterr().out
    assert not asm_script.seed_level(now(0.78, 0.16), seeds)
    assert not asm_script.seed_level(now(0.5, 0.17), seeds)  # ASM outside 0.1129 to 0.1671
