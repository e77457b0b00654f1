"""The tiny fit that run-level tests share: the demo config on 8 generated puzzles, 2 prompts x 2 completions of at most
6 tokens, the embedded model (full fine-tuning), no evaluation; a test overrides what it is about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def set_key(cfg: dict, key: str, value: Any) -> None:
    """Set the dotted ``key`` (``model.init_args.grpo.beta``) of a nested config dict, making the parents it lacks."""
    node = cfg
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def composed(*configs: str | Path, subcommand: str = "fit") -> dict:
    """The configuration ``python -m lit_grpo <subcommand> --config <each of configs> --print_config`` prints
    (bases, overlays and defaults merged as the CLI merges them), as a dict."""
    import contextlib
    import io

    import pytest

    from lit_grpo.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        main([subcommand, *[a for c in configs for a in ("--config", str(c))], "--print_config"])
    assert exc.value.code == 0, out.getvalue()
    return yaml.safe_load(out.getvalue())


def fit_args(tmp_path: Path, *, checkpoint: dict | None = None, callbacks: list | None = None,
             logs: Path | None = None, **overrides: Any) -> list[str]:
    """``fit`` arguments for :mod:`lit_grpo.cli` ``main``: ``checkpoint`` is the ``ModelCheckpoint``'s ``init_args``
    (default: ``dirpath`` ``tmp_path/ckpt``, ``last.ckpt`` only, after every step), ``callbacks`` come after it,
    ``logs`` is the TensorBoard ``save_dir`` (run name ``t``), and ``overrides`` set dotted keys
    (``**{"model.init_args.rewards": [...]}``; ``None`` removes the key's value)."""
    cfg = {
        "trainer": {"max_steps": 3, "val_check_interval": 100, "enable_progress_bar": False, "log_every_n_steps": 1,
                    "default_root_dir": str(tmp_path),
                    "logger": {"class_path": "lit_grpo.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(logs or tmp_path / "logs"), "name": "t",
                                             "default_hp_metric": False}},
                    "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": checkpoint if checkpoint is not None else {
                                       "dirpath": str(tmp_path / "ckpt"), "save_top_k": 0, "save_last": True,
                                       "every_n_train_steps": 1}},
                                  *(callbacks or [])]},
        "model": {"init_args": {
            "policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}},
            "sampling": {"num_generations": 2, "max_completion_length": 6},
            "evaluation": {"before_fit": False, "num_samples": 0}}},
        "data": {"train": {"generate": {"path": str(tmp_path / "train.parquet"), "kind": "puzzles", "num": 8}},
                 "val": None, "batch_size": 2, "eval_batch_size": 2},
    }
    for key, value in overrides.items():
        set_key(cfg, key, value)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return ["fit", "--config", "configs/demo.yaml", "--config", str(path)]
