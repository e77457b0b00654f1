"""notebooks/attention_maps.ipynb is committed without outputs and runs end to end (nbclient, this venv's kernel)."""

import re
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "attention_maps.ipynb"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert "DATA = None" in code[0].source
    # the default comparison: the shipped warm start against the shipped ASM policy (paths from notebooks/)
    defaults = dict(re.findall(r'^(MODEL|COMPARE_WITH) = "([^"]+)"', code[0].source, re.M))
    assert defaults == {"MODEL": "../checkpoints/demo_phyx", "COMPARE_WITH": "../checkpoints/demo_phyx_oe_asm_norm1"}
    for folder in defaults.values():
        assert (NOTEBOOK.parent / folder / "model.safetensors").is_file(), folder


@pytest.mark.slow
def test_notebook_runs_end_to_end_and_draws_the_overlays(tmp_path):
    assert "python3" in KernelSpecManager().find_kernel_specs(), "install ipykernel (pip install -e '.[notebook]')"
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells[1].source += (f"\nWORKDIR = {str(tmp_path)!r}\nNUM_SAMPLES = 6\nMAX_NEW_TOKENS = 12"
                           "\nMODEL = None\nCOMPARE_WITH = None")  # the random embedded models, built here
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print('kernel', sys.prefix)"))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"kernel {sys.prefix}" in text, "the notebook ran on another Python than this environment's"
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) >= 5  # overlay, per-token bars, token overlays, per-group bars, comparison
    asm = float(re.search(r"ASM = ([0-9.]+)", text).group(1))
    assert 0.0 <= asm <= 1.0
    groups = dict(re.findall(r"^\s*([\w/ -]+?): ASM ([0-9.]+) ±", text, re.M))
    assert "all" in groups and all(0 <= float(v) <= 1 for v in groups.values())
    domains = {"Mechanics", "Electromagnetism", "Thermodynamics", "Wave/Acoustics", "Optics", "Modern Physics"}
    assert set(groups) & domains, "the per-domain table is missing"
    assert any(g.endswith("Reasoning") for g in groups), "the per-reasoning-type table is missing"
    assert re.search(r"all: A [0-9.]+ ± [0-9.]+  B [0-9.]+ ± [0-9.]+  B - A [+-][0-9.]+ ± [0-9.]+ \(paired, n=6\)", text)
    assert (tmp_path / "checkpoints" / "embedded" / "granite_vision_tiny_seed1" / "config.json").is_file()
    # section 4: every (grid, row) choice on both checkpoints, the default's paired change exactly 0
    choices = re.findall(r"grid=(\w+)\s+row=(\w+)\s*: ASM ([0-9.]+) ± [0-9.]+  change vs default ([+-][0-9.]+) ± "
                         r"[0-9.]+ \(paired, n=6\)", text)
    combos = [(g, r) for g in ("base", "tiles", "all") for r in ("own", "final")]
    assert [(g, r) for g, r, _, _ in choices] == combos * 2
    assert all(float(d) == 0.0 for g, r, _, d in choices if (g, r) == ("base", "own"))
    assert all(0.0 <= float(a) <= 1.0 for _, _, a, _ in choices)
    assert len(figures) >= 6
