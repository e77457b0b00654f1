"""ARCHITECTURE.md's walk from a dataset row to the loss is measured, not written by hand: one training step of the
demo's set-up (VisualSphinx puzzles, the shared-prefix engine, ``binary`` + ``boxed_format``, DAPO's loss) is traced
with ``sys.setprofile``, and the files of lit_grpo it calls into, in the order it first enters each, equal the
table's file column."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import torch

import lit_grpo

ROOT = Path(lit_grpo.__file__).parent
ARCHITECTURE = Path(__file__).parents[1] / "ARCHITECTURE.md"


def walk_table() -> list[str]:
    """The file column of ARCHITECTURE's walk table (the table after "The walk from a dataset row to the loss")."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("The walk from a dataset row to the loss"):]
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \|", section, flags=re.M)
    numbers = [int(n) for n, _ in rows]
    first = numbers.index(1)
    end = next((i for i in range(first + 1, len(numbers)) if numbers[i] != numbers[i - 1] + 1), len(numbers))
    return [f for _, f in rows[first:end]]


def traced_step(tmp_path: Path, tiny_model_dir: str) -> list[str]:
    """The lit_grpo files (relative to the package) one training step enters, in first-entry order: from the
    data loader turning rows into a batch to the end of ``training_step`` (the update and its log)."""
    from lit_grpo import GRPOConfig, GRPOModule
    from lit_grpo.data.datamodule import DatasetSpec, VLMDataModule
    from lit_grpo.policy import PolicyConfig
    from lit_grpo.rewards import RewardSpec
    from lit_grpo.rollout import SamplingConfig

    data = VLMDataModule(train=DatasetSpec(generate={"path": str(tmp_path / "p.parquet"), "kind": "puzzles",
                                                     "num": 8}), batch_size=2)
    data.setup("fit")
    module = GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir),
                        rewards=[RewardSpec("binary"), RewardSpec("boxed_format", 0.5)],
                        grpo=GRPOConfig(loss_type="dapo"),
                        sampling=SamplingConfig(num_generations=2, max_completion_length=6))
    opt = torch.optim.AdamW(module.trainable_parameters(), lr=1e-3)
    module.optimizers, module.lr_schedulers = (lambda: opt), (lambda: None)
    module.log_dict = module.log = lambda *a, **k: None
    loader = iter(data.train_dataloader())
    seen: list[str] = []

    def profile(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(str(ROOT)):
            rel = Path(os.path.relpath(name, ROOT)).as_posix()
            if rel not in seen:
                seen.append(rel)

    torch.manual_seed(0)
    sys.setprofile(profile)
    try:
        module.training_step(next(loader), 0)
    finally:
        sys.setprofile(None)
    return seen


def test_the_table_reads_its_rows_in_order():
    table = walk_table()
    assert table[0] == "data/sample.py" and len(table) == len(set(table))


def test_architecture_walk_equals_a_traced_training_step(tmp_path, tiny_model_dir):
    assert traced_step(tmp_path, tiny_model_dir) == walk_table()
