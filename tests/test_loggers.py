"""The loggers researchers use: the W&B overlay logs what TensorBoard gets (scalars with their SE bands, the images
the policy saw with its completions, attention overlays, tables) and a resumed fit continues its W&B run; a logger
whose package is missing is one line naming how to install it; the closing message names what the logger wrote."""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import lightning as L
import pytest
import yaml

from lit_grpo.cli import main

ROOT = Path(__file__).resolve().parents[1]


class RecordLogged(L.Callback):
    """Keeps what the run sends to its W&B run (``experiment.log``): every key, and the last value of each."""

    keys: set = set()
    last: dict = {}

    def on_fit_start(self, trainer, pl_module):
        run = trainer.logger.experiment
        log = getattr(run, "log", None)
        if log is None:  # not a W&B run
            return

        def recording(data, *args, **kwargs):
            RecordLogged.keys |= set(data)
            RecordLogged.last.update(data)
            return log(data, *args, **kwargs)

        run.log = recording


def small(folder: Path, **extra) -> Path:
    gen = {"kind": "puzzles", "rules": ["red_count"], "fixed_option_order": True, "panel_size": 16}
    cfg = {"trainer": {"max_steps": 2, "val_check_interval": 2, "limit_val_batches": 1, "enable_progress_bar": False,
                       "logger": {"init_args": {"save_dir": str(folder / "logs")}},
                       "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                      "init_args": {"dirpath": str(folder / "ckpt"), "save_last": True,
                                                    "enable_version_counter": False}},
                                     {"class_path": "lit_grpo.callbacks.CompletionSamples",
                                      "init_args": {"every_n_steps": 1}},
                                     {"class_path": "lit_grpo.tasks.attention.overlays.AttentionOverlays",
                                      "init_args": {"every_n_steps": 2, "num_completions": 1}},
                                     {"class_path": "lit_grpo.callbacks.EvalSummary"},
                                     {"class_path": "test_loggers.RecordLogged"}]},
           "model": {"init_args": {"policy": {"name_or_path": str(ROOT / "checkpoints" / "demo")},
                                   "attention": {"enabled": True},
                                   "evaluation": {"before_fit": True, "num_samples": 0},
                                   "sampling": {"num_generations": 2, "max_completion_length": 4}}},
           "data": {"train": {"generate": {"path": str(folder / "train.parquet"), "num": 16, **gen}},
                    "val": {"generate": {"path": str(folder / "val.parquet"), "num": 2, "seed": 1, **gen}},
                    "batch_size": 2, "eval_batch_size": 2}}
    cfg["trainer"].update(extra)
    path = folder / "small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_wandb_overlay_logs_what_tensorboard_gets_and_a_resume_continues_the_run(tmp_path, monkeypatch, caplog):
    pytest.importorskip("wandb")
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = ["--config", "configs/demo.yaml", "--config", "configs/wandb.yaml", "--config", str(small(tmp_path))]
    main(["fit", *config])
    out = caplog.text
    runs = sorted((tmp_path / "logs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    run_id = runs[0].name.rsplit("-", 1)[1]
    assert f"Weights & Biases:      offline run {run_id} in {runs[0]} (upload: wandb sync {runs[0]})" in out
    assert "tensorboard" not in out
    # the scalars TensorBoard gets, validation SEs as bands
    assert {"train/reward", "train/update/loss", "val/greedy/reward", "valband/greedy/reward/lower",
            "valband/greedy/reward/upper", "train/rollout/attention/asm"} <= RecordLogged.keys
    # images: the attention overlay; tables: the completions (with the image the policy saw), the eval curves
    media = runs[0] / "files" / "media"
    assert list((media / "images" / "train" / "rollout" / "attention" / "overlay").glob("0_*.png"))
    assert list((media / "table" / "train").glob("completions_*.table.json"))
    assert list((media / "table" / "val").glob("eval_curves_*.table.json"))
    table = RecordLogged.last["train/completions"]
    assert table.columns == ["step", "prompt", "image", "gold", "completion", "total", "binary", "boxed_format",
                             "advantage"]
    image = table.data[0][2]  # the prompt's image, next to each of its completions
    assert type(image).__name__ == "Image" and image.image.size == (384, 293)  # the 84 x 64 puzzle, x 384 / 84
    folder = tmp_path / "logs" / "demo" / run_id  # the run's files: the configs' run name, the W&B run id
    assert (folder / "config.yaml").is_file() and (folder / "eval_curves.md").is_file()

    main(["fit", *config, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"), "--trainer.max_steps", "3"])
    runs = sorted((tmp_path / "logs" / "wandb").glob("offline-run-*"))
    assert {r.name.rsplit("-", 1)[1] for r in runs} == {run_id}  # the same W&B run, resumed
    assert (folder / "config_resumed_at_step_2.yaml").is_file()
    rows = (folder / "eval_curves.md").read_text().splitlines()[2:]
    assert [int(r.split("|")[1]) for r in rows] == [0, 2, 3]


@pytest.mark.parametrize("class_path,package,install", [
    ("lit_grpo.loggers.WandbLogger", "wandb", "pip install -e '.[wandb]'"),
    ("lightning.pytorch.loggers.WandbLogger", "wandb", "pip install -e '.[wandb]'"),
    ("lightning.pytorch.loggers.CometLogger", "comet_ml", "pip install comet-ml"),
    ("lightning.pytorch.loggers.MLFlowLogger", "mlflow", "pip install mlflow"),
])
def test_a_logger_whose_package_is_missing_is_one_line_naming_the_install(class_path, package, install, tmp_path,
                                                                          monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else find_spec(name, *a))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
        (tmp_path / "no_checkpoints.yaml").write_text("trainer: {callbacks: []}\n")  # the demo's follow the logger's name
        main(["fit", "--config", "configs/demo.yaml", "--config", str(tmp_path / "no_checkpoints.yaml"),
              "--trainer.logger", class_path])
    assert exc.value.code == 2
    assert err.getvalue() == (f"error: trainer.logger: {class_path} needs the {package} package, which is not "
                              f"installed: {install}\n")


def test_the_closing_message_names_what_a_csv_logger_wrote(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    main(["fit", "--config", "configs/demo.yaml", "--config", str(small(tmp_path)),
          "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
          "--trainer.logger.init_args.save_dir", str(tmp_path / "csv"), "--trainer.max_steps", "1"])
    done = caplog.text[caplog.text.index("Done. Look at the run with:"):]
    metrics = tmp_path / "csv" / "demo" / "version_0" / "metrics.csv"  # the run name carries over
    assert f"  metrics (CSV):         {metrics}" in done and "tensorboard" not in done
    assert metrics.is_file() and (metrics.parent / "config.yaml").is_file()


def test_an_interpolation_the_new_logger_cannot_resolve_is_one_line():
    """The demo's checkpoint folder follows ``trainer.logger.init_args.name``; MLflow's logger has no ``name``."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", "--trainer.logger", "lightning.pytorch.loggers.MLFlowLogger"])
    assert exc.value.code == 2
    assert err.getvalue() == ("error: trainer.callbacks[0].init_args.dirpath: ${run_name:} is the name of "
                              "trainer.logger (the first logger of a list), but lightning.pytorch.loggers.MLFlowLogger "
                              "has none: use a logger with a name (trainer.logger.init_args.name: a TensorBoard, W&B "
                              "or CSV logger), or write this value out\n")


WANDB_LOGIN_LINE = ("error: trainer.logger: lit_grpo.loggers.WandbLogger logs to W&B online, but there is no W&B login "
                    "here (no WANDB_API_KEY, no api.wandb.ai entry in {netrc}): run `wandb login` first, or set "
                    "WANDB_MODE=offline to log locally and upload later with `wandb sync`")


def test_wandb_without_a_login_is_one_line_before_any_model_work(tmp_path, monkeypatch, capsys):
    """No ``WANDB_API_KEY``, no ``.netrc`` entry, not offline: one line naming both ways on, found from the
    environment and the files alone (no network call; W&B never starts); each way on passes the check."""
    pytest.importorskip("wandb")
    from lit_grpo.settings.preflight import check_wandb_login

    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", str(ROOT / "configs/demo.yaml"), "--config", str(ROOT / "configs/wandb.yaml")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err == WANDB_LOGIN_LINE.format(netrc=tmp_path / ".netrc") + "\n"
    assert list(tmp_path.iterdir()) == []  # W&B never started (it writes its settings under HOME)
    logger = "lit_grpo.loggers.WandbLogger"
    assert check_wandb_login(logger, {"offline": True}) is None
    assert check_wandb_login(logger, {"mode": "offline"}) is None
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    assert check_wandb_login(logger, {}) is None  # what `wandb login` writes
    (tmp_path / ".netrc").unlink()
    for name, value in (("WANDB_MODE", "offline"), ("WANDB_API_KEY", "0123456789abcdef")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            assert check_wandb_login(logger, {}) is None
    with pytest.raises(ValueError, match="no api.wandb.ai entry"):
        check_wandb_login(logger, {})
