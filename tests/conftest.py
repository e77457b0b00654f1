"""Shared fixtures: the embedded model saved to disk once per session, and embedded puzzles."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The embedded Granite-Vision-shaped model written with ``save_pretrained`` (default size, seed 0)."""
    from lit_grpo.tasks.demo.embedded import save_embedded_vlm

    return str(save_embedded_vlm(tmp_path_factory.mktemp("models") / "granite_tiny"))


@pytest.fixture(scope="session")
def puzzles_path(tmp_path_factory):
    """24 embedded puzzles in the VisualSphinx parquet layout."""
    from lit_grpo.tasks.visualsphinx.puzzles import write_puzzles

    return str(write_puzzles(tmp_path_factory.mktemp("data") / "puzzles.parquet", num=24, seed=0))


@pytest.fixture(scope="session")
def puzzle_samples(puzzles_path):
    from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx

    ds = read_visualsphinx(puzzles_path)
    return [ds[i] for i in range(len(ds))]


FAMILIES = ["llava_next", "qwen2_vl", "qwen2_5_vl", "idefics3", "smolvlm", "llava"]
"""Every model family the attention capture supports (one tiny model each, see lit_grpo.testing.zoo)."""


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory):
    """``zoo_dir(family)``: that family's tiny model written with ``save_pretrained`` (once per session)."""
    from lit_grpo.testing.zoo import save_vlm

    root, saved = tmp_path_factory.mktemp("zoo"), {}

    def get(family: str) -> str:
        if family not in saved:
            saved[family] = str(save_vlm(root / family, family))
        return saved[family]

    return get


@pytest.fixture
def disk(tmp_path):
    """``disk(name, size)``: a new folder ``tmp_path/name`` on a tmpfs of ``size`` bytes, unmounted after the test
    (a checkpoint folder goes into a subfolder, so that a filler file can share its filesystem)."""
    mounted = []

    def mount(name: str, size: int) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs ({done.stderr.strip() or 'mount failed'}): a folder on a filesystem of "
                        "its own needs root or CAP_SYS_ADMIN")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", "-l", str(folder)], check=False)
