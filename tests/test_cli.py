"""The CLI end to end: configs parse, the demo trains, checkpoints resume, real-model configs load by path."""

import logging
import shlex
import re
from pathlib import Path

import pytest
import torch
import yaml

from lit_grpo.cli import main
from lit_grpo.tasks.demo.embedded import build_embedded_vlm
from lit_grpo.progress import ProgressBar
from lit_grpo.rewards.registry import REWARDS
from tiny_runs import set_key

CONFIGS = sorted(Path(__file__).parents[1].joinpath("configs").glob("*.yaml"))

if "test_length" not in REWARDS:
    @REWARDS.register("test_length")
    def _length_reward(completions, **_):
        """Varies within every group, so advantages (and gradients) are non-zero from step 0."""
        return [len(c) / 100 for c in completions]


def config_stack(config: Path) -> list[str]:
    """The ``--config`` files of the first documented ``python -m lit_grpo fit`` command in ``config``'s header
    that names it (an overlay is given after its base), else the file alone."""
    for line in config.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = re.search(r"python -m lit_grpo fit\s+(.*)", line)
        stack = re.findall(r"--config\s+(\S+)", m.group(1)) if m else []
        if f"configs/{config.name}" in stack:
            return stack
    return [f"configs/{config.name}"]


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_every_config_parses_as_documented(config, capsys):
    stack = config_stack(config)
    assert stack[-1] == f"configs/{config.name}"  # an overlay comes last, after its base
    with pytest.raises(SystemExit) as exc:
        main(["fit", *[a for c in stack for a in ("--config", c)], "--print_config"])
    assert exc.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["class_path"].startswith("lit_grpo.")
    if config.stem.startswith(("demo_phyx", "granite_vision_phyx")) and "sft" not in config.stem:  # every PhyX
        # condition (not the SFT warm start): the paper's evaluation
        assert printed["trainer"]["logger"]["init_args"]["name"] == config.stem  # the run folder is the config's name
        callbacks = printed["trainer"]["callbacks"]
        assert callbacks[0]["init_args"]["dirpath"] == f"checkpoints/{config.stem}"
        assert {"lit_grpo.tasks.table.AccuracyTable", "lit_grpo.callbacks.PredictionsJSONL"} <= {
            c["class_path"] for c in callbacks}
        assert printed["data"]["test"]["split"] in ("test", "test_mini")
        evaluation = printed["model"]["init_args"]["evaluation"]
        fmt = printed["data"]["test"]["reader_args"]["answer_format"]
        assert (evaluation["scorer"], evaluation["pass_threshold"]) == (
            ("accuracy", None) if fmt == "mcq" else ("open_equivalence", None))  # the paper's protocols


def test_docs_and_config_headers_name_only_existing_configs():
    root = Path(__file__).parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    texts = [p.read_text() for p in pages] + [c.read_text() for c in CONFIGS]
    named = {m for t in texts for m in re.findall(r"configs/[\w./-]+?\.yaml", t)}
    assert named and sorted(n for n in named if not root.joinpath(n).is_file()) == []
    assert {f"configs/{c.name}" for c in CONFIGS} <= named  # every config is documented


def test_documented_judge_block_points_the_oe_demo_at_a_server(tmp_path, capsys, monkeypatch):
    """docs/judge.md's judge YAML, given after configs/demo_phyx_oe.yaml, sets one judge for reward and scorer."""
    page = Path(__file__).parents[1].joinpath("docs", "judge.md").read_text()
    block = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "judge.yaml").write_text(block)
    monkeypatch.setenv("JUDGE_BASE_URL", "http://judge-host:8000/v1")
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo_phyx_oe.yaml", "--config", str(tmp_path / "judge.yaml"),
              "--print_config"])
    model = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
    judge = model["rewards"][1]["kwargs"]["judge"]
    assert judge["base_url"] == "http://judge-host:8000/v1" and judge["api_key_env"] == "JUDGE_API_KEY"
    scorer_judge = model["evaluation"]["judge"]
    assert {k: scorer_judge[k] for k in judge} == judge
    # the paper's OE evaluation: one equivalence call per completion, no threshold on a graded score
    assert model["evaluation"]["scorer"] == "open_equivalence" and model["evaluation"]["pass_threshold"] is None


def test_bare_print_config_has_field_comments(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", "--print_config"])
    out = capsys.readouterr().out
    assert "# Weight of the k3 KL to the reference policy" in out


def test_omegaconf_interpolation_sees_command_line_override(tmp_path, capsys):
    extra = tmp_path / "interp.yaml"
    # relative interpolation: works under every subcommand (absolute keys would need the "fit." prefix)
    extra.write_text("trainer:\n  max_steps: 7\n  val_check_interval: ${.max_steps}\n")
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", "--config", str(extra), "--trainer.max_steps", "3",
              "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["val_check_interval"] == 3


def test_the_checkpoint_folder_follows_the_first_logger_of_a_list(tmp_path, capsys):
    """The shipped configs' checkpoint folder is ``checkpoints/${run_name:}...``: the name of trainer.logger, or of
    its first logger when it is a list (TensorBoard and W&B at once, as configs/wandb.yaml suggests); the relative
    ``${....logger.init_args.name}`` it replaced failed on a list. The name set later by flag is the one used."""
    pair = tmp_path / "pair.yaml"
    pair.write_text("trainer:\n  logger:\n"
                    "    - {class_path: lightning.pytorch.loggers.CSVLogger, init_args: {save_dir: logs, name: one}}\n"
                    "    - {class_path: lit_grpo.loggers.TensorBoardLogger, init_args: {save_dir: logs, name: two}}\n")
    cases = [(["configs/demo.yaml"], [], "checkpoints/demo_grpo"),
             (["configs/demo.yaml", pair], [], "checkpoints/one_grpo"),
             (["configs/demo.yaml"], ["--trainer.logger.init_args.name=lr0"], "checkpoints/lr0_grpo"),
             # a logger that sets no name writes under its default one (Lightning's default logger's too)
             (["configs/demo.yaml"], ["--trainer.logger=true"], "checkpoints/lightning_logs_grpo"),
             (["configs/demo.yaml"], ["--trainer.logger=lightning.pytorch.loggers.CSVLogger"], "checkpoints/demo_grpo"),
             (["configs/demo_phyx_mcq.yaml"], [], "checkpoints/demo_phyx_mcq"),
             (["configs/demo_phyx_mcq.yaml", "configs/demo_phyx_mcq_asm.yaml"], [],
              "checkpoints/demo_phyx_mcq_asm"),
             (["configs/demo_phyx_oe.yaml", pair], [], "checkpoints/one"),
             (["configs/granite_vision_phyx_mcq.yaml", pair], [], "checkpoints/one")]
    for configs, flags, dirpath in cases:
        with pytest.raises(SystemExit):
            main(["fit", *[a for c in configs for a in ("--config", str(c))], *flags, "--print_config"])
        callbacks = yaml.safe_load(capsys.readouterr().out)["trainer"]["callbacks"]
        assert [c["init_args"]["dirpath"] for c in callbacks if c["class_path"].endswith("ModelCheckpoint")] \
            == [dirpath], (configs, flags)


def test_a_run_name_no_logger_gives_is_one_line(capsys):
    """No logger: ``${run_name:}`` names the key that asked and what to set."""
    fix = ": use a logger with a name (trainer.logger.init_args.name: a TensorBoard, W&B or CSV logger), or write " \
          "this value out\n"
    start = "error: trainer.callbacks[0].init_args.dirpath: ${run_name:} is the name of trainer.logger (the " \
            "first logger of a list), but "
    for flag, why in [("--trainer.logger=false", "the run has no logger (false)"),
                      ("--trainer.logger=null", "the run has no logger (null)"),
                      ("--trainer.logger=[]", "the run has no logger ([])")]:  # MLflow's: test_loggers
        with pytest.raises(SystemExit) as exc:
            main(["fit", "--config", "configs/demo.yaml", flag, "--print_config"])
        assert exc.value.code == 2 and capsys.readouterr().err == start + why + fix, flag
    with pytest.raises(SystemExit) as exc:  # an argument: omegaconf's TypeError line named Python's call
        main(["fit", "--config", "configs/demo.yaml", "--trainer.callbacks.init_args.keys=${run_name:x}",
              "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == \
        "error: trainer.callbacks[2].init_args.keys: ${run_name:} takes no argument (got x)\n"
    for name in ("${run_name:}", "v2_${run_name:}"):  # the logger's name asking for itself: was a RecursionError line
        with pytest.raises(SystemExit) as exc:
            main(["fit", "--config", "configs/demo.yaml", f"--trainer.logger.init_args.name={name}", "--print_config"])
        assert exc.value.code == 2 and capsys.readouterr().err == (
            "error: trainer.logger.init_args.name: ${run_name:} is the name of trainer.logger, so that name cannot "
            "hold it: write the name out\n"), name


def _overrides(tmp_path, **extra) -> Path:
    cfg = {
        "trainer": {"max_steps": 2, "val_check_interval": 2, "logger": {
            "class_path": "lit_grpo.loggers.TensorBoardLogger",
            "init_args": {"save_dir": str(tmp_path / "logs"), "name": "t", "default_hp_metric": False}},
            "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                           "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True,
                                         "every_n_train_steps": 1}}]},
        "model": {"init_args": {
            "policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}},
            "rewards": [{"name": "test_length"}],
            "sampling": {"num_generations": 4, "max_completion_length": 16},
            "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3, "weight_decay": 0.0}}}},
        "data": {"train": {"generate": {"path": str(tmp_path / "train.parquet"), "kind": "puzzles", "num": 8}},
                 "val": {"generate": {"path": str(tmp_path / "val.parquet"), "kind": "puzzles", "num": 4, "seed": 1}},
                 "batch_size": 2, "eval_batch_size": 4},
    }
    for key, value in extra.items():
        set_key(cfg, key, value)
    path = tmp_path / "overrides.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_demo_config_trains_and_every_trainable_parameter_changes(tmp_path):
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(_overrides(tmp_path))])
    initial, _ = build_embedded_vlm()
    start = dict(initial.named_parameters())
    trained = {n: p for n, p in cli.model.policy.named_parameters() if p.requires_grad}
    assert len(trained) > 20
    unchanged = [n for n, p in trained.items() if torch.equal(p.detach(), start[n].detach())]
    assert unchanged == []
    frozen = [n for n, p in cli.model.policy.named_parameters() if not p.requires_grad]
    assert frozen and all(torch.equal(cli.model.policy.get_parameter(n), start[n]) for n in frozen)
    assert cli.trainer.global_step == 2
    assert type(cli.trainer.progress_bar_callback) is ProgressBar  # the CLI's default: total max_steps, batch-log lines
    logged = cli.trainer.logged_metrics
    assert {"train/reward", "train/reward/test_length", "train/update/kl", "train/update/loss",
            "train/update/entropy", "train/update/clip_ratio", "train/rollout/completions_per_second",
            "val/greedy/reward/test_length"} <= set(logged)
    run = tmp_path / "logs" / "t" / "version_0"
    assert (run / "config.yaml").is_file()
    hparams = yaml.safe_load((run / "hparams.yaml").read_text())
    # lists of reward specs are flattened, not one string
    assert hparams["rewards.0.name"] == "test_length" and hparams["sampling.num_generations"] == 4


def test_global_step_counts_rollouts(tmp_path):
    """Two optimizer updates per rollout (tests/test_steps.py checks every axis and trigger)."""
    cli = main(["fit", "--config", "configs/demo.yaml", "--config",
                str(_overrides(tmp_path, **{"model.init_args.grpo": {"num_iterations": 2},
                                            "trainer.max_steps": 4}))])
    assert cli.trainer.global_step == 4 and cli.trainer.fit_loop.total_batch_idx + 1 == 4


def test_a_run_cut_short_says_at_which_step_and_names_last_ckpt(tmp_path, caplog):
    """max_time ends the run long before max_steps: the closing message says so and points at last.ckpt. The epoch
    (500 steps) is longer than max_steps, so on a fast machine too max_time, not the epoch's end, stops it."""
    caplog.set_level(logging.INFO)
    over = _overrides(tmp_path, **{"trainer.max_steps": 400, "trainer.max_time": {"seconds": 1},
                                   "trainer.val_check_interval": 400})
    cfg = yaml.safe_load(over.read_text())
    cfg["data"]["train"]["generate"]["num"] = 1000
    over.write_text(yaml.safe_dump(cfg))
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(over),
                "--model.init_args.evaluation.before_fit", "false"])
    step = cli.trainer.global_step
    assert 0 < step < 400
    assert (f"Stopped by trainer.max_time (1 s of training) at step {step} of max_steps 400: the figures above are "
            "at that step. Continue the run (the resumed process gets max_time again) with:") in caplog.text
    assert f"checkpoints:           {tmp_path / 'ckpt' / 'last.ckpt'}" in caplog.text
    command = shlex.split(caplog.text.split("gets max_time again) with:\n", 1)[1].splitlines()[0])
    assert command[:4] == ["python", "-m", "lit_grpo", "fit"] and command[-1] == str(tmp_path / "ckpt" / "last.ckpt")
    caplog.clear()
    resumed = main(command[3:])  # the printed command as it stands: it trains on (it stopped at once before)
    assert step < resumed.trainer.global_step < 400
    assert f"at step {resumed.trainer.global_step} of max_steps 400" in caplog.text


def test_lora_checkpoint_holds_only_the_adapter_and_resumes(tmp_path):
    lora = {"model.init_args.policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0},
                                        "lora": {"r": 4, "alpha": 8}}}
    main(["fit", "--config", "configs/demo.yaml", "--config", str(_overrides(tmp_path, **lora))])
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert ckpt["state_dict"] and all("lora_" in k for k in ckpt["state_dict"])
    assert ckpt["global_step"] == 2 and "rng_states" in ckpt
    assert ckpt["optimizer_states"][0]["state"]
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(_overrides(tmp_path, **lora)),
                "--trainer.max_steps", "3", "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")])
    assert cli.trainer.global_step == 3
    final = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert final["global_step"] == 3 and set(final["state_dict"]) == set(ckpt["state_dict"])
    # the resumed run continued from the saved adapter: its optimizer state has 3 steps, not 1
    assert all(s["step"] == 3 for s in final["optimizer_states"][0]["state"].values())


def test_granite_config_runs_on_a_local_checkpoint_by_path(tmp_path, tiny_model_dir, puzzles_path):
    """configs/granite_vision_visualsphinx.yaml as shipped, pointed at a tiny checkpoint saved to disk."""
    extra = tmp_path / "local.yaml"
    extra.write_text(yaml.safe_dump({
        "trainer": {"accelerator": "cpu", "max_steps": 1, "limit_val_batches": 1, "val_check_interval": 1,
                    "logger": {"class_path": "lit_grpo.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(tmp_path / "logs")}},
                    "callbacks": []},
        "model": {"init_args": {"policy": {"name_or_path": tiny_model_dir, "local_files_only": True},
                                "sampling": {"max_completion_length": 8}}},
        "data": {"train": {"path": puzzles_path, "rows": "2:"}, "val": {"path": puzzles_path, "rows": ":2"},
                 "batch_size": 1},
    }))
    cli = main(["fit", "--config", "configs/granite_vision_visualsphinx.yaml", "--config", str(extra)])
    assert cli.trainer.global_step == 1
    assert cli.trainer.precision == "bf16-mixed"
    assert cli.model.sampling.num_generations == 8 and cli.model.policy.name_or_path == tiny_model_dir
    assert cli.datamodule.batch_size * cli.model.sampling.num_generations == 8


def test_over_long_prompts_are_dropped_and_counted(tmp_path, caplog):
    """Prompts are never truncated: with max_prompt_length below every prompt, all train samples go."""
    import logging

    from lit_grpo.data.datamodule import VLMDataModule

    caplog.set_level(logging.WARNING)
    with pytest.raises(ValueError, match=r"(train: all 8|val: all 4) samples are longer than max_prompt_length=50"):
        main(["fit", "--config", "configs/demo.yaml", "--config", str(_overrides(tmp_path)),
              "--trainer.max_steps", "0", "--data.max_prompt_length", "50"])
    # every embedded prompt has the same length: a limit equal to it keeps all 8
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(_overrides(tmp_path)),
                "--trainer.max_steps", "0", "--data.max_prompt_length", "100000"])
    dm: VLMDataModule = cli.datamodule
    ds = dm.datasets["train"]
    length = cli.model.prompt_length(dm.render(ds[0]), ds[0])
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(_overrides(tmp_path)),
                "--trainer.max_steps", "0", "--data.max_prompt_length", str(length)])
    assert len(cli.datamodule.datasets["train"]) == 8


def test_filter_drops_and_counts_only_the_long_ones(puzzle_samples, caplog):
    import logging
    from lit_grpo.data.datamodule import VLMDataModule

    caplog.set_level(logging.WARNING)
    dm = VLMDataModule(max_prompt_length=10)
    lengths = {s.id: 5 + 2 * i for i, s in enumerate(puzzle_samples[:6])}  # 5, 7, 9, 11, 13, 15
    dm.prompt_length = lambda m, s: lengths[s.id]
    kept = dm._filter("train", puzzle_samples[:6])
    assert [kept[i].id for i in range(len(kept))] == [s.id for s in puzzle_samples[:3]]
    assert "train: dropped 3 of 6 samples longer than max_prompt_length=10 tokens" in caplog.text


@pytest.mark.slow
def test_fmt_acc_asm_demo_trains_with_the_attention_reward(tmp_path):
    """configs/demo_phyx_mcq.yaml + configs/demo_phyx_mcq_asm.yaml as documented (format + accuracy + attention
    on embedded physics, the overlay callback appended on the command line) trains: the ASM is logged as a
    reward in [0, 1] in training and validation, and the overlays and the ASM histogram reach TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec = {"path": str(tmp_path / "physics" / "phyx.parquet"), "reader": "phyx", "split": "test",
            "generate": {"path": str(tmp_path / "physics" / "phyx.parquet"), "kind": "physics", "num": 12, "seed": 0},
            "reader_args": {"answer_format": "mcq"}}
    over = _overrides(tmp_path, **{"trainer.limit_val_batches": 1, "data.train": {**spec, "rows": "4:"},
                                   "data.val": {**spec, "rows": ":4"}, "data.test": {**spec, "rows": ":4"}})
    cfg = yaml.safe_load(over.read_text())
    del cfg["model"]["init_args"]["rewards"]  # keep the condition's Fmt + Acc + ASM list
    over.write_text(yaml.safe_dump(cfg))
    cli = main(["fit", "--config", "configs/demo_phyx_mcq.yaml", "--config", "configs/demo_phyx_mcq_asm.yaml",
                "--config", str(over), "--trainer.callbacks+=lit_grpo.tasks.attention.overlays.AttentionOverlays",
                "--trainer.callbacks.every_n_steps=1", "--trainer.callbacks.num_completions=2"])
    assert cli.trainer.global_step == 2
    assert cli.model.reward_weights == {"format": 1.0, "accuracy": 1.0, "attention": 100.0}
    assert cli.model.pass_columns == ["asm"] and cli.model.policy.config._attn_implementation == "sdpa"
    logged = cli.trainer.logged_metrics
    assert 0.0 <= float(logged["train/reward/attention"]) <= 1.0
    assert 0.0 <= float(logged["val/greedy/reward/attention"]) <= 1.0
    events = EventAccumulator(str(tmp_path / "logs" / "t" / "version_0"), size_guidance={"images": 0})
    events.Reload()
    assert {"train/rollout/attention/overlay/0", "train/rollout/attention/overlay/1"} <= set(events.Tags()["images"])
    assert "train/rollout/attention/asm" in events.Tags()["histograms"]
    assert [e.step for e in events.Images("train/rollout/attention/overlay/0")] == [1, 2]  # the step's number, as its scalars
