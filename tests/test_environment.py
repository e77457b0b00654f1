"""The environment record (lit_grpo.environment) and the lock file: what a run writes about what made it, how two
records are compared, and that requirements/lock.txt pins every requirement of the project within its ranges."""

import configparser
import re
from pathlib import Path

import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lit_grpo import environment

ROOT = Path(__file__).parents[1]


def test_the_record_names_versions_build_hardware_and_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    rec = environment.record()
    assert rec["torch"]["version"] == torch.__version__ and rec["torch"]["threads"] == torch.get_num_threads()
    assert rec["torch"]["cuda"] == torch.version.cuda and rec["gpus"] == []  # this machine: no CUDA
    assert rec["variables"] == {"OMP_NUM_THREADS": "3"}
    assert rec["packages"]["torch"] == torch.__version__.split("+")[0] or rec["packages"]["torch"] == torch.__version__
    assert rec["cpu"]["model"] and rec["cpu"]["count"] >= 1


def test_differences_are_one_line_per_changed_entry():
    a = {"python": "3.11.7", "torch": {"version": "2.13.0", "threads": 2}, "packages": {"transformers": "5.19.0",
                                                                                       "pillow": "11.0"}}
    b = {"python": "3.11.7", "torch": {"version": "2.13.0", "threads": 1}, "packages": {"transformers": "5.25.0",
                                                                                       "numpy": "2.1"}}
    assert environment.differences(a, b) == ["packages.numpy: absent -> 2.1", "packages.pillow: 11.0 -> absent",
                                             "packages.transformers: 5.19.0 -> 5.25.0", "torch.threads: 2 -> 1"]
    assert environment.differences(a, a) == []


def test_the_summary_names_the_key_libraries_hardware_and_threads():
    rec = {"python": "3.11.7", "torch": {"version": "2.13.0+cpu", "git": "1a2b3c4d5e6f", "threads": 1},
           "cpu": {"model": "Intel Xeon", "count": 2}, "gpus": [], "variables": {"OMP_NUM_THREADS": "1"},
           "packages": {"lightning": "2.6.6", "transformers": "5.25.0", "zipp": "3.0"}}
    assert environment.summary(rec) == ("Python 3.11.7, torch 2.13.0+cpu (git 1a2b3c4, 1 thread), transformers 5.25.0, "
                                        "lightning 2.6.6; CPU: Intel Xeon (2 cores); OMP_NUM_THREADS=1")
    rec.update(gpus=["NVIDIA H100"], variables={})
    rec["torch"]["threads"] = 8
    assert environment.summary(rec).endswith("(git 1a2b3c4, 8 threads), transformers 5.25.0, lightning 2.6.6; "
                                             "CPU: Intel Xeon (2 cores); GPU: NVIDIA H100")


def _requirements() -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines() + cfg["options.extras_require"]["dev"].splitlines()
    return [Requirement(line) for line in lines if line.strip()]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip()).groups()
            pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_pins_every_requirement_within_its_range():
    pins = _lock()
    for req in _requirements():
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"requirements/lock.txt does not pin {req.name}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} not in {req.specifier}"
    assert pins["torch"] == "2.13.0" and "lit-grpo" not in pins


def test_against_a_record_says_what_differs_or_that_there_is_none(tmp_path):
    import json

    rec = environment.record()
    (tmp_path / "same.json").write_text(json.dumps(rec))
    assert environment.against(tmp_path / "same.json", "x") == [
        f"this environment against {tmp_path / 'same.json'} (0 differences):",
        "  none: the same versions, build and hardware"]
    rec["packages"]["transformers"] = "0.0.1"
    (tmp_path / "old.json").write_text(json.dumps(rec))
    lines = environment.against(tmp_path / "old.json", "x")
    assert lines[0].endswith("(1 differences):") and lines[1].startswith("  packages.transformers: 0.0.1 -> ")
    assert environment.against(tmp_path / "none.json", "README's table") == [
        f"no environment is recorded for README's table ({tmp_path / 'none.json'})"]
