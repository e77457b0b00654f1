"""What a run was made with: library versions, the torch build, the CPU or GPU model and thread counts.

Training is deterministic in one environment and not across two (another transformers or torch build trains another
policy by the last step at this scale), so a figure is citable only with the environment that made it. Every run
writes :func:`record` as ``environment.json`` beside its ``config.yaml`` and into every checkpoint (under
:data:`CHECKPOINT_KEY`); :func:`differences` says, line by line, how two records differ, which the reproduction
scripts print when a result does not reproduce.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from lit_grpo.hparams import flatten_hparams

CHECKPOINT_KEY = "environment"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG", "PYTHONHASHSEED")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what :mod:`platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def packages() -> dict[str, str]:
    """Every installed distribution's version, by its normalised name (what ``pip freeze`` lists)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name.lower().replace("_", "-")] = dist.version
    return dict(sorted(found.items()))


def record() -> dict[str, Any]:
    """This process's environment: ``python``, ``platform``, ``torch`` (version, git commit, CUDA and cuDNN
    versions, threads), ``cpu``, ``gpus`` (model names; empty without CUDA), the thread variables set, and
    ``packages`` (every installed distribution's version)."""
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() \
        else []
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": {"version": str(torch.__version__), "git": torch.version.git_version, "cuda": torch.version.cuda,
                  "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                  "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads()},
        "cpu": {"model": cpu_model(), "count": os.cpu_count()},
        "gpus": gpus,
        "variables": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "packages": packages(),
    }


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """One line per entry that differs between two :func:`record` s (``packages.transformers: 5.19.0 -> 5.25.0``,
    ``cpu.model: A -> B``; an entry one record lacks shows as ``absent``), sorted by name; empty when they agree."""
    a, b = flatten_hparams(recorded), flatten_hparams(current)
    return [f"{key}: {a.get(key, 'absent')} -> {b.get(key, 'absent')}" for key in sorted(a.keys() | b.keys())
            if a.get(key, "absent") != b.get(key, "absent")]


def against(path: str | os.PathLike, what: str) -> list[str]:
    """The lines a reproduction script prints when a result differs: how this environment differs from the record
    at ``path`` (``what``: whose record it is), or that there is none."""
    path = Path(path)
    if not path.is_file():
        return [f"no environment is recorded for {what} ({path})"]
    lines = differences(json.loads(path.read_text()), record())
    return [f"this environment against {path} ({len(lines)} differences):",
            *(f"  {line}" for line in lines or ["none: the same versions, build and hardware"])]


def write(folder: str | os.PathLike, name: str = "environment.json") -> Path:
    """Write :func:`record` as JSON into ``folder`` (created); returns the file."""
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record(), indent=1) + "\n")
    return path


KEY_PACKAGES = ("transformers", "lightning", "peft", "pillow", "numpy", "tokenizers", "datasets", "vllm")
"""The libraries a shipped checkpoint's README names (the rest are in its ``environment.json``)."""


def summary(recorded: dict[str, Any]) -> str:
    """One line naming what made a result, for a checkpoint's README: ``Python 3.11.2, torch 2.13.0+cpu (git
    1a2b3c4, 1 thread), transformers 5.25.0, lightning 2.6.6, ...; CPU: <model> (2 cores); OMP_NUM_THREADS=1``
    (the key libraries that are installed, in :data:`KEY_PACKAGES` order; no GPU part without GPUs)."""
    t, pkgs = recorded["torch"], recorded.get("packages", {})
    threads = f"{t['threads']} thread{'s' if t['threads'] != 1 else ''}"
    parts = [f"Python {recorded['python']}", f"torch {t['version']} (git {str(t['git'])[:7]}, {threads})",
             *(f"{name} {pkgs[name]}" for name in KEY_PACKAGES if name in pkgs)]
    where = [f"CPU: {recorded['cpu']['model']} ({recorded['cpu']['count']} cores)"]
    if recorded.get("gpus"):
        where.append("GPU: " + ", ".join(recorded["gpus"]))
    where += [f"{k}={v}" for k, v in recorded.get("variables", {}).items()]
    return ", ".join(parts) + "; " + "; ".join(where)
