"""Runs over several processes and nodes, launched as a user would (``python -m lit_grpo fit``; ``torchrun``), on
loopback only. A sharded (FSDP2, bf16-mixed) and a DDP run of 6 steps on 2 processes (2 epochs of 3 steps), and each
resumed from a checkpoint at an epoch's last step, at an epoch's first step, and after ``max_steps`` stopped a
resumed run at an epoch's end; the sharded one also on 2 nodes (two torchrun node groups on 127.0.0.1, one process
each): every resumed run continues every rank's data, sampling stream, figures and checkpoint names, and ends with
the uninterrupted run's weights bit for bit. Exports of both; sharded checkpoints written atomically, refused in one
line when they cannot resume the run."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml
from launch import free_port, run_together, torchrun

from lit_grpo.errors import InputError

UNITS = 5  # the embedded model: 2 decoder layers, 2 vision layers and the root
STEPS, PER_EPOCH = 6, 3


def _overrides(folder: Path, shared: Path, run: str, export: bool = False) -> Path:
    """The demo on 12 puzzles (3 steps of 2 prompts per rank an epoch), 6 steps (2 epochs), validation at each
    epoch's end (2 puzzles, greedy and 4 samples each) and a checkpoint every step (all kept), every rank's steps
    recorded."""
    callbacks = [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": {"dirpath": str(folder / "ckpt"), "every_n_train_steps": 1, "save_top_k": -1,
                                "save_last": True}},
                 {"class_path": "lit_grpo.testing.record.RecordSteps", "init_args": {"folder": str(folder / "record")}}]
    if export:
        callbacks.append({"class_path": "lit_grpo.callbacks.ExportPretrained",
                          "init_args": {"dirpath": str(folder / "export")}})
    cfg = {"trainer": {"accelerator": "cpu", "max_steps": STEPS, "max_epochs": 2, "val_check_interval": PER_EPOCH,
                       "enable_progress_bar": False, "callbacks": callbacks,
                       "logger": {"class_path": "lit_grpo.loggers.TensorBoardLogger",
                                  "init_args": {"save_dir": str(folder / "logs"), "name": run}}},
           "model": {"init_args": {"policy": {"name_or_path": str(shared / "model")},
                                   "grpo": {"entropy_coef": 0.05},  # a gradient at every step: the embedded
                                   # model earns no reward, so the advantages alone would leave the weights as built
                                   "sampling": {"num_generations": 4, "max_completion_length": 12},
                                   "evaluation": {"before_fit": False}, "lr_scheduler": None,
                                   "optimizer": {"class_path": "torch.optim.AdamW",
                                                 "init_args": {"lr": 1e-3, "weight_decay": 0.0}}}},
           "data": {"train": {"path": str(shared / "train.parquet")}, "val": {"path": str(shared / "val.parquet")},
                    "batch_size": 2, "eval_batch_size": 2}}
    path = folder / "overrides.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _fit(folder: Path, *args: str) -> list[str]:
    return ["-m", "lit_grpo", "fit", "--config", "configs/demo.yaml", *args, "--config",
            str(folder / "overrides.yaml")]


def _checkpoint(folder: Path, step: int | str) -> str:
    """The checkpoint of ``step`` in a run's folder (``last`` for last.ckpt)."""
    if step == "last":
        return str(folder / "ckpt" / "last.ckpt")
    return str(next((folder / "ckpt").glob(f"epoch=*-step={step}.ckpt")))


# the resumed runs: name -> (uninterrupted run, checkpoint step it resumes, max_steps); "*_max" stops at the first
# epoch's end (max_steps 3) and "*_max_resumed" resumes its last.ckpt (written when max_steps stopped it) to the end
RESUMED = {"nodes": ("sharded", PER_EPOCH, STEPS), "sharded_first": ("sharded", PER_EPOCH + 1, STEPS),
           "sharded_max": ("sharded", 2, PER_EPOCH), "sharded_max_resumed": ("sharded_max", "last", STEPS),
           "ddp_last": ("ddp", PER_EPOCH, STEPS), "ddp_first": ("ddp", PER_EPOCH + 1, STEPS),
           "ddp_max": ("ddp", 2, PER_EPOCH), "ddp_max_resumed": ("ddp_max", "last", STEPS)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two uninterrupted runs, the resumed ones of :data:`RESUMED`, and ``evaluated``: ``validate`` of the
    sharded run's last checkpoint on one process (several launches at a time)."""
    from lit_grpo.tasks.visualsphinx.puzzles import write_puzzles
    from lit_grpo.tasks.demo.embedded import save_embedded_vlm

    root = tmp_path_factory.mktemp("ranks")
    shared = root / "shared"
    save_embedded_vlm(shared / "model")
    write_puzzles(shared / "train.parquet", num=2 * 2 * PER_EPOCH, seed=0)
    write_puzzles(shared / "val.parquet", num=2, seed=1)
    f = {name: root / name for name in ("sharded", "ddp", "evaluated", *RESUMED)}
    for name, folder in f.items():
        folder.mkdir()
        _overrides(folder, shared, name, export=name == "sharded")
    fsdp = ["--config", "configs/fsdp.yaml", "--trainer.precision", "bf16-mixed"]
    strategy = {"sharded": [*fsdp, "--trainer.devices", "2"],
                "ddp": ["--trainer.devices", "2", "--trainer.strategy", "ddp"]}

    def resumed(name: str) -> list[str]:
        source, step, max_steps = RESUMED[name]
        return [sys.executable, *_fit(f[name], *strategy[name.split("_")[0]], "--ckpt_path",
                                      _checkpoint(f[source], step)), "--trainer.max_steps", str(max_steps)]

    run_together([[sys.executable, *_fit(f[name], *strategy[name])] for name in strategy], timeout=900)
    port = free_port()
    nodes = [torchrun(1, port, *_fit(f["nodes"], *fsdp), "--trainer.devices", "1", "--trainer.num_nodes", "2",
                      "--ckpt_path", _checkpoint(f["sharded"], PER_EPOCH), nnodes=2, node_rank=i) for i in (0, 1)]
    validate = _fit(f["evaluated"], *fsdp)
    validate[2] = "validate"
    run_together([*nodes, *[resumed(n) for n in RESUMED if n != "nodes" and not n.endswith("_max_resumed")],
                  [sys.executable, *validate, "--trainer.devices", "1", "--ckpt_path",
                   _checkpoint(f["sharded"], "last")]], timeout=900)
    run_together([resumed(n) for n in RESUMED if n.endswith("_max_resumed")], timeout=900)
    return f


def _ranks(folder: Path) -> list[dict]:
    return [json.loads((folder / "record" / f"rank{r}.json").read_text()) for r in (0, 1)]


def _same_steps(resumed: list[dict], uninterrupted: list[dict], first: int) -> None:
    """Every rank's steps from ``first`` on: the same prompts, completions and logged figures; the same validations
    (over both ranks' prompts) at the epochs' ends."""
    for a, b in zip(resumed, uninterrupted):
        assert [s["step"] for s in b["steps"]] == list(range(1, STEPS + 1))
        assert [s["step"] for s in a["steps"]] == list(range(first, first + len(a["steps"])))
        for x in a["steps"]:
            y = b["steps"][x["step"] - 1]
            assert x["ids"] == y["ids"] and x["completions"] == y["completions"]
            assert x["logged"] == pytest.approx(y["logged"], rel=1e-6, abs=1e-7)
            assert x["logged"]["train/update/grad_norm"] > 0  # the weights compared below have moved
        assert [v["step"] for v in b["validations"]] == [PER_EPOCH, STEPS]
        for v in a["validations"]:
            assert v in b["validations"] and v["logged"]["val/sampled/completion_length"]
    assert resumed[0]["steps"][0]["ids"] != resumed[1]["steps"][0]["ids"]  # each rank its own share of the data
    assert resumed[0]["steps"][0]["completions"] != resumed[1]["steps"][0]["completions"]


def _same_weights(folder: Path, uninterrupted: Path) -> None:
    weights, after = torch.load(uninterrupted / "record" / "weights.pt"), torch.load(folder / "record" / "weights.pt")
    assert set(after) == set(weights)
    for name, value in weights.items():
        torch.testing.assert_close(after[name], value, rtol=0, atol=0, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RESUMED))
def test_a_resumed_run_continues_the_uninterrupted_one_on_every_rank(runs, name):
    """Resumed at an epoch's last step (Lightning makes the resumed run's first iterator before it sets the
    sampler's epoch: every prompt of the next epoch differed on both ranks), at an epoch's first step, at the end
    that ``max_steps`` put in an epoch's end, and from the ``last.ckpt`` that stop wrote."""
    source, step, max_steps = RESUMED[name]
    reference = "ddp" if name.startswith("ddp") else "sharded"
    first = (PER_EPOCH if step == "last" else step) + 1
    resumed = _ranks(runs[name])
    _same_steps(resumed, _ranks(runs[reference]), first)
    assert [s["step"] for s in resumed[0]["steps"]] == list(range(first, max_steps + 1))
    # the checkpoints it writes carry the uninterrupted run's epoch in their names
    written = sorted(p.name for p in (runs[name] / "ckpt").glob("epoch=*"))
    assert written == sorted(p.name for p in (runs[reference] / "ckpt").glob("epoch=*")
                             if first <= int(p.stem.split("step=")[1]) <= max_steps)
    if max_steps == STEPS:
        _same_weights(runs[name], runs[reference])


@pytest.mark.slow
def test_sharded_run_resumed_on_two_nodes_continues_the_one_node_run(runs):
    sharded, nodes = _ranks(runs["sharded"]), _ranks(runs["nodes"])
    assert [(r["global_rank"], r["node_rank"], r["local_rank"], r["world_size"]) for r in sharded] == \
        [(0, 0, 0, 2), (1, 0, 1, 2)]
    assert [(r["global_rank"], r["node_rank"], r["local_rank"], r["world_size"]) for r in nodes] == \
        [(0, 0, 0, 2), (1, 1, 0, 2)]
    for r in sharded + nodes:  # every rollout gathers each unit once; each rank holds half of the weights
        assert all(s["rollout_all_gathers"] == UNITS for s in r["steps"])
        held, whole = r["parameter_bytes"]
        assert 0.45 < held / whole < 0.55
    assert sum(r["parameter_bytes"][0] for r in sharded) == sharded[0]["parameter_bytes"][1]
    # full fine-tuning, vision tower frozen: 2 decoder layers x 9, the (tied) embedding, final norm, 4 projector
    # weights and LLaVA-NeXT's image_newline
    assert len(torch.load(runs["sharded"] / "record" / "weights.pt")) == 25
    # the folder checkpoints: one shard per rank, nothing left half-written beside them
    names = sorted(p.name for p in (runs["sharded"] / "ckpt").iterdir())
    assert names == [f"epoch={(s - 1) // PER_EPOCH}-step={s}.ckpt" for s in range(1, STEPS + 1)] + ["last.ckpt"]
    assert sorted(p.name for p in (runs["sharded"] / "ckpt" / "last.ckpt").iterdir()) == \
        [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]


@pytest.mark.slow
def test_ddp_ranks_hold_every_weight(runs):
    assert all(r["parameter_bytes"][0] == r["parameter_bytes"][1] for r in _ranks(runs["ddp"]))


@pytest.mark.slow
def test_a_sharded_checkpoint_is_evaluated_on_another_number_of_ranks(runs):
    """``validate --ckpt_path`` on the 2-rank checkpoint folder with one process: the weights it evaluates are the
    run's final weights (read into one rank's shards: all of them)."""
    record = json.loads((runs["evaluated"] / "record" / "rank0.json").read_text())
    assert record["world_size"] == 1 and record["parameter_bytes"][0] == record["parameter_bytes"][1]
    assert len(record["validations"]) == 1 and "val/greedy/reward" in record["validations"][0]["logged"]
    weights, evaluated = torch.load(runs["sharded"] / "record" / "weights.pt"), torch.load(runs["evaluated"] /
                                                                                          "record" / "weights.pt")
    assert set(evaluated) == set(weights)
    for name, value in weights.items():
        torch.testing.assert_close(evaluated[name], value, rtol=0, atol=0, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("run", ["sharded", "ddp"])
def test_export_writes_the_trained_policy(runs, tmp_path, run):
    """``python -m lit_grpo.export`` of the last checkpoint (a sharded folder; a single file) and, for the sharded run,
    the ExportPretrained callback at the end of fit: folders that load by path with the run's final weights."""
    from lit_grpo.export import main
    from lit_grpo.policy import PolicyConfig, load_policy

    weights = torch.load(runs[run] / "record" / "weights.pt")
    main([str(runs[run] / "ckpt" / "last.ckpt"), str(tmp_path / "export")])
    folders = [tmp_path / "export"] + ([runs[run] / "export"] if run == "sharded" else [])
    # what trained the weights goes with them: the record the run wrote beside its config
    trained_in = json.loads((runs[run] / "logs" / run / "version_0" / "environment.json").read_text())
    for folder in folders:
        assert json.loads((folder / "environment.json").read_text()) == trained_in
        model, _ = load_policy(PolicyConfig(name_or_path=str(folder)))
        params = dict(model.named_parameters())
        for name, value in weights.items():
            torch.testing.assert_close(params[name.removeprefix("policy.")].detach(), value, rtol=0, atol=0)


@pytest.mark.slow
def test_a_sharded_checkpoint_that_cannot_resume_the_run_is_refused_in_one_line(runs, tmp_path):
    """Another number of ranks; another trainable set (LoRA); another model size."""
    from lit_grpo.tasks.demo.embedded import EmbeddedModelConfig
    from lit_grpo.policy import LoRAConfig, PolicyConfig, load_policy
    from lit_grpo.strategy import META, check_compatible

    path = runs["sharded"] / "ckpt" / "last.ckpt"
    meta = torch.load(path / META, weights_only=False)

    def module(**policy):
        holder = torch.nn.Module()
        holder.policy = load_policy(PolicyConfig(**policy))[0]
        return holder

    same = module(name_or_path=str(runs["sharded"].parent / "shared" / "model"))
    check_compatible(path, meta, same, 2)  # the run that wrote it
    check_compatible(path, meta, same, None)  # evaluation: any number of ranks
    cases = [(same, 1, ["written by 2 ranks and this run has 1", "trainer.devices x trainer.num_nodes to 2",
                        "python -m lit_grpo.export"]),
             (module(name_or_path=str(tmp_path / "lora"), embedded=EmbeddedModelConfig(), lora=LoRAConfig(r=4)), 2,
              ["lacks 16 weights this run trains", "holds 25 weights this run does not train"]),
             (module(name_or_path=str(tmp_path / "wide"), embedded=EmbeddedModelConfig(hidden_size=32)), 2,
              ["holds policy.", "of shape", "this run's is", "another model"])]
    for holder, world, must in cases:
        with pytest.raises(InputError) as err:
            check_compatible(path, meta, holder, world)
        assert "\n" not in str(err.value) and str(path) in str(err.value)
        for text in must:
            assert text in str(err.value)


# ----------------------------------------------------------------- atomic sharded saves (one process, no launch)


def _save(path: Path, value: float, step: int) -> None:
    from lit_grpo.strategy import save_sharded

    checkpoint = {"state_dict": {"policy.w": torch.full((4,), value)}, "optimizer_states": [], "global_step": step}
    save_sharded(checkpoint, path, world_size=1, rank=0, barrier=lambda: None)


def _load(path: Path) -> tuple[float, int]:
    import torch.distributed.checkpoint as dcp

    weights = {"policy.w": torch.zeros(4)}
    dcp.load({"state_dict": weights}, checkpoint_id=path, no_dist=True)
    return float(weights["policy.w"][0]), torch.load(path / "meta.pt")["global_step"]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_sharded_save_replaces_the_folder_whole_or_not_at_all(tmp_path, monkeypatch):
    """A save over an older one replaces it; a save killed while writing shards, or after them but before its
    metadata, leaves the older checkpoint whole at its name (a half-written one only in a hidden sibling); a single-file checkpoint at the name is replaced by the folder."""
    import torch.distributed.checkpoint as dcp

    from lit_grpo.strategy import save_sharded

    path = tmp_path / "last.ckpt"
    _save(path, 1.0, 2)
    _save(path, 2.0, 4)
    assert _load(path) == (2.0, 4) and sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    real_save = dcp.save

    def killed_in_shards(state, checkpoint_id):
        (Path(checkpoint_id) / "__0_0.distcp").write_bytes(b"half")
        raise KeyboardInterrupt

    def killed_after_shards(*args, **kwargs):
        real_save(*args, **kwargs)
        raise SystemExit(143)

    for kill in (killed_in_shards, killed_after_shards):
        monkeypatch.setattr(dcp, "save", kill)
        with pytest.raises((KeyboardInterrupt, SystemExit)):
            _save(path, 3.0, 6)
        assert _load(path) == (2.0, 4)
        assert all(p.name == "last.ckpt" or p.name.startswith(".last.ckpt.") for p in tmp_path.iterdir())
    monkeypatch.setattr(dcp, "save", real_save)
    _save(path, 3.0, 6)
    assert _load(path) == (3.0, 6) and sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    single = tmp_path / "single.ckpt"
    single.write_bytes(b"a single-file checkpoint")
    save_sharded({"state_dict": {"policy.w": torch.ones(4)}, "global_step": 1}, single, 1, 0, lambda: None)
    assert _load(single) == (1.0, 1) and sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "single.ckpt"]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_sharded_save_killed_while_renaming_leaves_a_whole_folder_at_the_name(tmp_path, monkeypatch):
    """A kill after the shards are written, right after a rename that moves the folder at the name: the name still
    holds a whole checkpoint (the older or the newer one), never nothing."""
    import os

    path = tmp_path / "last.ckpt"
    _save(path, 1.0, 2)
    real_replace = os.replace

    def killed(src, dst):  # the process dies right after a rename that moves the folder at the name
        real_replace(src, dst)
        if path in (Path(src), Path(dst)):
            raise SystemExit(137)

    monkeypatch.setattr(os, "replace", killed)
    try:  # where the system swaps the two folders in one step, no such rename happens
        _save(path, 2.0, 4)
    except SystemExit:
        pass
    monkeypatch.setattr(os, "replace", real_replace)
    assert _load(path) in ((1.0, 2), (2.0, 4))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_what_the_sharded_strategy_cannot_read_is_refused_in_one_line(tmp_path):
    """A single-file checkpoint given to the sharded strategy; a sharded folder without its DCP metadata, or without
    its ``meta.pt`` (copies cut short): named with what is wrong, before anything loads."""
    from lit_grpo.runs import check_checkpoint_file
    from lit_grpo.strategy import FSDP2Strategy

    single = tmp_path / "single.ckpt"
    torch.save({"state_dict": {}}, single)
    with pytest.raises(InputError, match=r"single.ckpt is a single file, written without sharding: FSDP2Strategy "
                                         r"reads sharded checkpoint folders; resume it without configs/fsdp.yaml"):
        FSDP2Strategy().load_checkpoint(single)
    for missing in (".metadata", "meta.pt"):
        cut = tmp_path / f"cut_{missing.strip('.')}.ckpt"
        _save(cut, 1.0, 2)
        check_checkpoint_file(cut)  # whole
        (cut / missing).unlink()
        with pytest.raises(InputError, match=rf"{cut.name} is not a whole sharded checkpoint \(it has no "
                                             rf"{re.escape(missing)}\); use an earlier checkpoint or copy it again$"):
            check_checkpoint_file(cut)


@pytest.mark.slow
def test_a_two_rank_run_without_a_logger_saves_its_config_and_checkpoint(tmp_path):
    """``trainer.logger: false`` on 2 DDP processes, 1 step: the config is saved (where Lightning puts it with no
    logger: ``default_root_dir``) and the checkpoint written; rank 0 alone saving the config once asked Lightning
    for ``trainer.log_dir``, a broadcast the other rank never joined, and the run hung there."""
    from lit_grpo.tasks.visualsphinx.puzzles import write_puzzles
    from lit_grpo.tasks.demo.embedded import save_embedded_vlm

    save_embedded_vlm(tmp_path / "model")
    write_puzzles(tmp_path / "train.parquet", num=4, seed=0)
    cfg = {"trainer": {"accelerator": "cpu", "devices": 2, "strategy": "ddp", "max_steps": 1, "logger": False,
                       "limit_val_batches": 0, "enable_progress_bar": False, "default_root_dir": str(tmp_path / "root"),
                       "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                      "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True}}]},
           "model": {"init_args": {"policy": {"name_or_path": str(tmp_path / "model")},
                                   "sampling": {"num_generations": 2, "max_completion_length": 4},
                                   "evaluation": {"before_fit": False}}},
           "data": {"train": {"path": str(tmp_path / "train.parquet")}, "val": None, "batch_size": 1}}
    (tmp_path / "overrides.yaml").write_text(yaml.safe_dump(cfg))
    run_together([[sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml", "--config",
                   str(tmp_path / "overrides.yaml")]], timeout=180)
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()
    assert yaml.safe_load((tmp_path / "root" / "config.yaml").read_text())["trainer"]["max_steps"] == 1


@pytest.mark.slow
def test_a_busy_master_port_leaves_no_rank_running(tmp_path):
    """``MASTER_PORT`` held by another program: rank 0 cannot open the process group's store and fails; rank 1 (its
    child, waiting on that port) stops within seconds with one line naming rank 0's pid (it stayed for the group's
    30-minute timeout, or for ever)."""
    import os
    import signal
    import socket
    import subprocess
    import time

    from lit_grpo.tasks.demo.embedded import save_embedded_vlm
    from lit_grpo.tasks.visualsphinx.puzzles import write_puzzles

    save_embedded_vlm(tmp_path / "model")
    write_puzzles(tmp_path / "train.parquet", num=12, seed=0)
    write_puzzles(tmp_path / "val.parquet", num=2, seed=1)
    _overrides(tmp_path, tmp_path, "busy")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(8)  # accepts connections and never answers
        port = busy.getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        log = tmp_path / "out.log"
        with open(log, "w") as out:
            rank0 = subprocess.Popen([sys.executable, *_fit(tmp_path, "--trainer.devices", "2", "--trainer.strategy",
                                                            "ddp")], cwd=Path(__file__).parents[1], env=env,
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rank0.wait(timeout=300)
            left, deadline = True, time.monotonic() + 60
            while left and time.monotonic() < deadline:  # any process left in the launch's process group?
                try:
                    os.killpg(rank0.pid, 0)
                    time.sleep(0.2)
                except ProcessLookupError:
                    left = False
            ended = time.monotonic() - (deadline - 60)
        finally:
            try:
                os.killpg(rank0.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    text = log.read_text()
    assert rank0.returncode not in (0, None), text[-3000:]
    assert not left, f"a rank still runs 60 s after rank 0 ended\n{text[-3000:]}"
    assert re.search(rf"error: rank 1 \(pid \d+\) stops: the process that launched it \(pid {rank0.pid}\) has ended",
                     text), text[-3000:]
    print(f"rank 1 gone {ended:.1f} s after rank 0 ended")
