"""Checkpoints are never lost or half-loaded without a word: a checkpoint folder that cannot be written is
refused before the first step, the closing message names only files that exist, a damaged --ckpt_path file
is named with what is wrong, and weights that do not match the run's trainable set are refused."""

import contextlib
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from lit_grpo.cli import main


class CountSteps(L.Callback):
    steps = 0

    def on_train_batch_end(self, *args, **kwargs):
        CountSteps.steps += 1


class LockFolder(L.Callback):
    """Makes ``folder`` unwritable once training has started (after the startup check)."""

    def __init__(self, folder: str):
        self.folder = folder

    def on_train_start(self, trainer, pl_module):
        _lock(Path(self.folder))


def _lock(folder: Path) -> None:
    """Nobody can write into ``folder``: immutable for root (who ignores permission bits), else read-only."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode:
            pytest.skip("running as root without chattr +i: cannot make a folder unwritable")
    else:
        folder.chmod(0o555)


def _unlock(folder: Path) -> None:
    if folder.exists():
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=False)
        folder.chmod(0o755)


def _files(folder: Path) -> list[str]:
    """What is in ``folder`` besides the run lock (which stays in a folder made unwritable while the run held it: the
    run cannot remove it, and the next run takes the lock over)."""
    return sorted(p.name for p in folder.iterdir() if p.name != ".lit_grpo.lock")


@contextlib.contextmanager
def _locked(*folders: Path):
    try:
        yield
    finally:
        for folder in folders:
            _unlock(folder)


def _config(tmp_path: Path, ckpt: dict | None = None, callbacks: list | None = None, **model) -> Path:
    checkpoint = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": ckpt if ckpt is not None else {"dirpath": str(tmp_path / "ckpt")}}
    cfg = {
        "trainer": {"max_steps": 1, "val_check_interval": 100, "enable_progress_bar": False,
                    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(tmp_path / "logs"), "name": "t",
                                             "default_hp_metric": False}},
                    "callbacks": [checkpoint, {"class_path": "test_checkpoints.CountSteps"}, *(callbacks or [])]},
        "model": {"init_args": {
            "policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}, **model},
            "sampling": {"num_generations": 2, "max_completion_length": 6},
            "evaluation": {"before_fit": False, "num_samples": 0}}},
        "data": {"train": {"generate": {"path": str(tmp_path / "train.parquet"), "kind": "puzzles", "num": 4}},
                 "val": {"generate": {"path": str(tmp_path / "val.parquet"), "kind": "puzzles", "num": 2, "seed": 1}},
                 "batch_size": 2, "eval_batch_size": 2},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(subcommand: str, tmp_path: Path, *args: str, **kwargs):
    return main([subcommand, "--config", "configs/demo.yaml", "--config", str(_config(tmp_path, **kwargs)), *args])


# ---------------------------------------------------------------------------------------------- folders
@pytest.mark.parametrize("case", ["existing_folder", "missing_folder_in_a_locked_one", "under_a_file",
                                  "default_folder_under_a_locked_logger_folder"])
def test_a_checkpoint_folder_that_cannot_be_written_is_refused_before_the_first_step(tmp_path, case):
    locked = tmp_path / "locked"
    locked.mkdir()
    ckpt = {"existing_folder": locked, "missing_folder_in_a_locked_one": locked / "ckpt",
            "under_a_file": tmp_path / "a_file" / "ckpt"}.get(case)
    (tmp_path / "a_file").write_text("not a folder")
    if case == "default_folder_under_a_locked_logger_folder":  # no dirpath: <logs>/t/version_0/checkpoints
        (locked / "t").mkdir()
    CountSteps.steps = 0
    with _locked(locked):
        if case != "under_a_file":
            _lock(locked / "t" if case.startswith("default") else locked)
        if case.startswith("default"):
            over = _config(tmp_path, ckpt={})
            cfg = yaml.safe_load(over.read_text())
            cfg["trainer"]["logger"]["init_args"]["save_dir"] = str(locked)
            over.write_text(yaml.safe_dump(cfg))
            folder = locked / "t" / "version_0" / "checkpoints"
            with pytest.raises(OSError, match=f"checkpoint folder {re.escape(str(folder))} cannot be written"):
                main(["fit", "--config", "configs/demo.yaml", "--config", str(over)])
        else:
            with pytest.raises(OSError, match=f"checkpoint folder {re.escape(str(ckpt))} cannot be written"):
                _run("fit", tmp_path, ckpt={"dirpath": str(ckpt)})
        _unlock(locked / "t")
    assert CountSteps.steps == 0


def test_a_folder_that_becomes_unwritable_stops_the_run_at_its_first_save_in_one_line(tmp_path):
    """The folder becomes unwritable after the startup check: the first save fails with one line naming the file
    and the reason, and no partial file is left."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    CountSteps.steps = 0
    with _locked(ckpt), pytest.raises(OSError) as failed:
        _run("fit", tmp_path, "--trainer.max_steps", "2",
             ckpt={"dirpath": str(ckpt), "save_last": True, "every_n_train_steps": 1},
             callbacks=[{"class_path": "test_checkpoints.LockFolder", "init_args": {"folder": str(ckpt)}}])
    path = ckpt / "epoch=0-step=1.ckpt"
    assert str(failed.value).startswith(f"checkpoint {path} could not be written (Operation not permitted; ")
    assert "make it writable or point the ModelCheckpoint's dirpath at another disk" in str(failed.value)
    assert "\n" not in str(failed.value) and CountSteps.steps == 1 and _files(ckpt) == []


def test_without_the_atomic_plugin_the_closing_message_names_only_checkpoints_that_exist(tmp_path, caplog):
    """With Lightning's own CheckpointIO configured (it swallows a PermissionError), every save fails silently; the
    run warns and its closing message names no checkpoint file."""
    caplog.set_level(logging.INFO)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with _locked(ckpt), pytest.warns(UserWarning, match=f"checkpoint {re.escape(str(ckpt / 'last.ckpt'))} was not "
                                                          "written"):
        cli = _run("fit", tmp_path, "--trainer.max_steps", "2", "--trainer.plugins",
                   "lightning.pytorch.plugins.io.TorchCheckpointIO",
                   ckpt={"dirpath": str(ckpt), "save_last": True, "every_n_train_steps": 1},
                   callbacks=[{"class_path": "test_checkpoints.LockFolder", "init_args": {"folder": str(ckpt)}}])
    assert cli.trainer.global_step == 2 and _files(ckpt) == []
    assert "checkpoints:           none written" in caplog.text and "last.ckpt" not in caplog.text.split("Done.")[1]


# ---------------------------------------------------------------------------------------------- files
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One step of full fine-tuning: (its folder, its last.ckpt)."""
    folder = tmp_path_factory.mktemp("trained")
    _run("fit", folder, ckpt={"dirpath": str(folder / "ckpt"), "save_last": True})
    return folder, folder / "ckpt" / "last.ckpt"


def _damaged(kind: str, good: Path, folder: Path) -> Path:
    data = good.read_bytes()
    cut = {"empty": b"", "truncated_in_half": data[: len(data) // 2], "truncated_after_the_header": data[:100],
           "a_text_file": b"step: 3\n"}[kind]
    path = folder / f"{kind}.ckpt"
    path.write_bytes(cut)
    return path


@pytest.mark.parametrize("subcommand,kind", [("fit", "empty"), ("validate", "truncated_in_half"),
                                             ("test", "truncated_after_the_header"), ("predict", "a_text_file")])
def test_an_empty_or_truncated_checkpoint_is_named_with_what_is_wrong(trained, tmp_path, subcommand, kind):
    folder, good = trained
    bad = _damaged(kind, good, tmp_path)
    what = "is empty (0 bytes)" if kind == "empty" else f"({bad.stat().st_size} bytes) is truncated or not a checkpoint"
    with pytest.raises(ValueError, match=re.escape(f"checkpoint {bad} {what}")):
        _run(subcommand, folder, "--ckpt_path", str(bad))


def test_a_checkpoint_damaged_in_the_middle_is_named_with_the_damaged_member(trained, tmp_path):
    """4 KiB in the middle of one weight's bytes overwritten, the size unchanged: torch.load reads it as other numbers
    (an optimizer moment went NaN and the run trained on); the member's CRC-32 names it."""
    import zipfile

    folder, good = trained
    with zipfile.ZipFile(good) as archive:
        member = max(archive.infolist(), key=lambda m: m.file_size)  # the largest tensor, stored uncompressed
    data = bytearray(good.read_bytes())
    start = member.header_offset + 30 + len(member.orig_filename.encode()) + len(member.extra) + member.file_size // 2
    data[start:start + 4096] = bytes(4096)
    bad = tmp_path / "damaged.ckpt"
    bad.write_bytes(bytes(data))
    assert bad.stat().st_size == good.stat().st_size
    with pytest.raises(ValueError, match=re.escape(f"checkpoint {bad} is damaged: its member {member.filename} does "
                                                   "not match the checksum it was written with")):
        _run("fit", folder, "--ckpt_path", str(bad))


# ---------------------------------------------------------------------------------------------- weights
LORA = {"r": 4, "alpha": 8}
QKVO = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj)"


@pytest.fixture(scope="module")
def lora_qkvo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora")
    _run("fit", folder, ckpt={"dirpath": str(folder / "ckpt"), "save_last": True},
         lora={**LORA, "target_modules": QKVO})
    return folder, folder / "ckpt" / "last.ckpt"


@pytest.mark.parametrize("subcommand,targets,dropped", [
    ("validate", r".*language_model.*\.(q_proj|v_proj)", ("k_proj", "o_proj")),
    ("fit", r".*language_model.*\.(q_proj)", ("k_proj", "v_proj", "o_proj")),
])
def test_lora_weights_the_run_does_not_train_are_refused(lora_qkvo, subcommand, targets, dropped):
    folder, ckpt = lora_qkvo
    saved = torch.load(ckpt, weights_only=False)["state_dict"]
    extra = sorted(k for k in saved if any(f".{d}." in k for d in dropped))
    assert extra
    with pytest.raises(ValueError) as err:
        _run(subcommand, folder, "--ckpt_path", str(ckpt), lora={**LORA, "target_modules": targets})
    message = str(err.value)
    assert f"holds {len(extra)} weights this run does not train, e.g. {extra[:3]}" in message
    assert "lacks" not in message and "target_modules" in message


def test_a_trained_vision_tower_loaded_into_a_run_that_freezes_it_is_refused(tmp_path):
    _run("fit", tmp_path, ckpt={"dirpath": str(tmp_path / "ckpt"), "save_last": True}, freeze_vision_tower=False)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["state_dict"]
    tower = sorted(k for k in saved if "vision_tower" in k)
    assert tower
    with pytest.raises(ValueError, match=re.escape(f"holds {len(tower)} weights this run does not train")):
        _run("validate", tmp_path, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"))


def test_a_matching_checkpoint_still_loads(lora_qkvo):
    folder, ckpt = lora_qkvo
    cli = _run("validate", folder, "--ckpt_path", str(ckpt), lora={**LORA, "target_modules": QKVO})
    saved = torch.load(ckpt, weights_only=False)["state_dict"]
    for name, value in cli.model.state_dict().items():
        if name in saved:
            assert torch.equal(value, saved[name]), name


def _shape_error(message: str) -> tuple[str, list[int], list[int]]:
    m = re.fullmatch(r"checkpoint weight (\S+) has shape \[([\d, ]+)\] where this run's model has \[([\d, ]+)\]: "
                     r"the checkpoint was written by a model of other sizes \(hidden size, layers, vocabulary, LoRA "
                     r"rank\); resume it with the model that wrote it", message)
    assert m, message
    return m.group(1), [int(d) for d in m.group(2).split(",")], [int(d) for d in m.group(3).split(",")]


@pytest.mark.parametrize("subcommand", ["fit", "validate"])
def test_a_checkpoint_of_a_model_of_other_widths_names_the_first_mismatched_weight(trained, tmp_path, subcommand):
    """Written with hidden size 64, loaded into hidden size 128 (same names): one line naming the first weight in name
    order whose shape differs, with both shapes (the model's is the checkpoint's with 64 read as 128)."""
    _, ckpt = trained
    saved = torch.load(ckpt, weights_only=False)["state_dict"]
    with pytest.raises(ValueError) as err:
        _run(subcommand, tmp_path, "--ckpt_path", str(ckpt), embedded={"seed": 0, "hidden_size": 128})
    name, have, want = _shape_error(str(err.value))
    assert list(saved[name].shape) == have and 64 in have
    assert want == [128 if d == 64 else d for d in have]


def test_a_lora_checkpoint_of_another_rank_names_the_first_mismatched_weight(lora_qkvo):
    folder, ckpt = lora_qkvo
    with pytest.raises(ValueError) as err:
        _run("validate", folder, "--ckpt_path", str(ckpt), lora={"r": 8, "alpha": 16, "target_modules": QKVO})
    name, have, want = _shape_error(str(err.value))
    assert "lora_A" in name and have[0] == 4 and want == [8, *have[1:]]


@pytest.mark.parametrize("content,holds", [
    ({"w": torch.zeros(3), "b": torch.zeros(1)}, "a dict of 2 entries such as ['b', 'w']"),
    (torch.zeros(3), "a Tensor"),
], ids=["bare_state_dict", "a_tensor"])
def test_a_torch_file_that_no_run_wrote_is_refused_naming_what_it_holds(trained, tmp_path, content, holds):
    folder, _ = trained
    path = tmp_path / "weights.pt"
    torch.save(content, path)
    with pytest.raises(ValueError, match=re.escape(f"checkpoint {path} is not a checkpoint a run wrote: this "
                                                   f"torch.save file holds {holds}, without Lightning's state_dict")):
        _run("fit", folder, "--ckpt_path", str(path))


def test_a_checkpoint_of_another_optimizer_is_refused_naming_both(trained, tmp_path):
    """Written with AdamW, resumed with SGD: torch would load AdamW's hyper-parameters into SGD's groups and fail at
    the first update (KeyError: 'momentum'); refused in one line before any step, naming both optimizers."""
    _, ckpt = trained
    with pytest.raises(ValueError) as err:
        _run("fit", tmp_path, "--ckpt_path", str(ckpt), "--trainer.max_steps", "2",
             "--model.init_args.optimizer", "torch.optim.SGD", "--model.init_args.optimizer.init_args.lr", "0.5",
             "--model.init_args.optimizer.init_args.momentum", "0.9")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"checkpoint {ckpt} was written with optimizer torch.optim.AdamW, and this run uses "
                              "torch.optim.SGD")


# ---------------------------------------------------------------------------------------------- export
def _export(*args: str) -> str:
    """``python -m lit_grpo.export ARGS``: its ``error:`` line (exit status 1), or ``""`` when it wrote."""
    from lit_grpo.export import main as export

    try:
        export(list(args))
    except SystemExit as exc:
        assert exc.code == 1
        return "error"
    return ""


def _with_policy(good: Path, folder: Path, **policy) -> Path:
    """A copy of checkpoint ``good`` whose recorded policy settings are changed by ``policy``."""
    ckpt = torch.load(good, weights_only=False)
    ckpt["hyper_parameters"]["policy"] = {**dict(vars(ckpt["hyper_parameters"]["policy"])
                                                 if not isinstance(ckpt["hyper_parameters"]["policy"], dict)
                                                 else ckpt["hyper_parameters"]["policy"]), **policy}
    path = folder / "changed.ckpt"
    torch.save(ckpt, path)
    return path


def test_an_export_never_writes_into_a_folder_that_holds_files_or_the_runs_own_model(trained, tmp_path, capsys):
    """Into a folder with a file in it; into the folder the run started from (a copy of the demo model, named by the
    checkpoint): refused in one line, nothing written there; into a new folder: written, every file readable by
    others as the umask allows (0644 under umask 022)."""
    import hashlib
    import shutil

    _, good = trained
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert _export(str(good), str(busy)) == "error"
    assert capsys.readouterr().err == (f"error: {busy} is not an empty folder: export into a new or empty folder "
                                       "(nothing was written)\n")
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert _export(str(good), str(dangling)) == "error"
    assert capsys.readouterr().err == (f"error: {dangling} is a symbolic link to {tmp_path / 'nowhere'}, which does "
                                       "not exist: export into a new or empty folder (nothing was written)\n")
    assert not (tmp_path / "nowhere").exists()
    source = tmp_path / "warm_start"
    shutil.copytree("checkpoints/demo", source)
    before = {p.name: hashlib.sha1(p.read_bytes()).hexdigest() for p in source.iterdir() if p.is_file()}
    assert _export(str(_with_policy(good, tmp_path, name_or_path=str(source))), str(source)) == "error"
    assert capsys.readouterr().err.startswith(f"error: {source} is the folder the run started from")
    assert before == {p.name: hashlib.sha1(p.read_bytes()).hexdigest() for p in source.iterdir() if p.is_file()}
    old = os.umask(0o022)
    try:
        assert _export(str(good), str(tmp_path / "new")) == ""
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "new").iterdir() if p.is_file()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes


def test_an_export_of_a_diverged_checkpoint_or_of_a_model_folder_is_refused_naming_it(trained, tmp_path, capsys):
    _, good = trained
    ckpt = torch.load(good, weights_only=False)
    name = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point())
    ckpt["state_dict"][name][0] = float("nan")
    torch.save(ckpt, tmp_path / "nan.ckpt")
    assert _export(str(tmp_path / "nan.ckpt"), str(tmp_path / "out")) == "error"
    assert f"weight {name} has 1 of" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert _export("checkpoints/demo", str(tmp_path / "out")) == "error"
    assert capsys.readouterr().err == ("error: checkpoints/demo is a model folder (save_pretrained), not a training "
                                       "checkpoint: it already loads as model.init_args.policy.name_or_path; export "
                                       "takes a checkpoint, e.g. checkpoints/<run>/last.ckpt\n")


def test_evaluating_without_a_checkpoint_says_it_evaluates_the_runs_start(trained, tmp_path, caplog):
    folder, good = trained
    with caplog.at_level(logging.INFO):
        _run("validate", folder)
    assert (f"validate: no --ckpt_path, so the weights are the run's start ({folder / 'model'}), not a trained "
            "checkpoint; to evaluate one, add --ckpt_path <run's checkpoint folder>/last.ckpt") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _run("validate", folder, "--ckpt_path", str(good))
    assert "no --ckpt_path" not in caplog.text


def test_an_exported_model_samples_and_stops_as_the_runs_rollouts(trained, tmp_path):
    """The exported folder's generation_config: every stop id the run used, the image tokens suppressed, the run's
    sampling settings; HF generate from it stops on the run's stop id."""
    from transformers import GenerationConfig

    from lit_grpo.export import main as export
    from lit_grpo.policy import PolicyConfig, image_token_ids, load_policy, stop_token_ids

    folder, good = trained
    export([str(good), str(tmp_path / "out")])
    gen = GenerationConfig.from_pretrained(tmp_path / "out")
    model, processor = load_policy(PolicyConfig(name_or_path=str(tmp_path / "out")))
    never = image_token_ids(model, processor)
    run = torch.load(good, weights_only=False)["hyper_parameters"]
    sampling = run["sampling"] if isinstance(run["sampling"], dict) else vars(run["sampling"])
    assert sorted(gen.eos_token_id) == stop_token_ids(model, processor, (), set(never)) and gen.suppress_tokens == never
    assert (gen.do_sample, gen.temperature, gen.top_p, gen.max_new_tokens) == (
        True, sampling["temperature"], sampling["top_p"], sampling["max_completion_length"])
    # the run's top_k 0 (off) is written: left out, transformers would sample with its default top-k of 50
    assert sampling["top_k"] == 0 and gen.top_k == 0
    tok = processor.tokenizer
    ids = tok("Which option?", return_tensors="pt").input_ids
    out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen, max_new_tokens=40,
                         pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
    assert not set(out) & set(never)
    stops = [i for i, t in enumerate(out) if t in gen.eos_token_id]
    assert not stops or stops[0] == len(out) - 1  # ends at its first stop id (or runs to max_new_tokens)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("subcommand", ["fit", "validate"])
def test_a_sharded_checkpoint_folder_without_the_sharded_strategy_is_one_line(trained, tmp_path, subcommand):
    """A whole sharded folder given to a run without configs/fsdp.yaml: named with how to read it (it ended in
    IsADirectoryError inside torch.load)."""
    from lit_grpo.errors import InputError
    from lit_grpo.strategy import save_sharded

    folder, _ = trained
    sharded = tmp_path / "sharded.ckpt"
    save_sharded({"state_dict": {"policy.w": torch.zeros(4)}, "optimizer_states": [], "global_step": 2}, sharded,
                 world_size=1, rank=0, barrier=lambda: None)
    with pytest.raises(InputError, match=rf"checkpoint {re.escape(str(sharded))} is a sharded checkpoint folder "
                                         rf"\(FSDP2\): {subcommand} it with the sharded strategy, --config "
                                         r"configs/fsdp.yaml after the run's config"):
        _run(subcommand, folder, "--ckpt_path", str(sharded))


def _sharded(folder: Path) -> Path:
    """A whole one-rank sharded checkpoint folder of one 1,000-float weight and its AdamW state."""
    from lit_grpo.strategy import save_sharded

    path = folder / "sharded.ckpt"
    optimizer = {"state": {"policy.w": {"step": torch.tensor(2.0), "exp_avg": torch.ones(1000)}},
                 "param_groups": [{"lr": 1e-3, "params": ["policy.w"]}]}
    save_sharded({"state_dict": {"policy.w": torch.arange(1000.0)}, "optimizer_states": [optimizer],
                  "global_step": 2}, path, world_size=1, rank=0, barrier=lambda: None)
    return path


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("damage", ["shard_in_half", "shard_less_one_byte", "shard_missing", "metadata_in_half",
                                    "meta_pt_in_half"])
def test_a_sharded_checkpoint_with_a_file_cut_short_is_one_line_naming_the_file(trained, tmp_path, damage):
    """One file of a sharded folder cut short (or gone): refused before anything loads, naming that file (torch's
    reader ended in a long traceback naming none)."""
    from lit_grpo.errors import InputError
    from lit_grpo.runs import check_checkpoint_file

    path = _sharded(tmp_path)
    check_checkpoint_file(path)  # whole: accepted
    shard = path / "__0_0.distcp"
    name = {"metadata_in_half": ".metadata", "meta_pt_in_half": "meta.pt"}.get(damage, shard.name)
    data = (path / name).read_bytes()
    if damage == "shard_missing":
        shard.unlink()
    else:
        (path / name).write_bytes(data[:len(data) - 1] if damage == "shard_less_one_byte" else data[:len(data) // 2])
    expected = {
        "shard_in_half": rf"checkpoint shard {re.escape(str(shard))} has {len(data) // 2} bytes where the folder's "
                         rf"\.metadata records {len(data)}: the copy was cut short",
        "shard_less_one_byte": rf"checkpoint shard {re.escape(str(shard))} has {len(data) - 1} bytes where the "
                               rf"folder's \.metadata records {len(data)}:",
        "shard_missing": rf"checkpoint shard {re.escape(str(shard))} is missing where the folder's \.metadata "
                         rf"records {len(data)}:",
        "metadata_in_half": rf"checkpoint file {re.escape(str(path / '.metadata'))} cannot be read \(\w+\): it is "
                            "cut short",
        "meta_pt_in_half": rf"checkpoint file {re.escape(str(path / 'meta.pt'))} \({len(data) // 2} bytes\) is "
                           "truncated or not a checkpoint",
    }[damage]
    with pytest.raises(InputError, match=expected) as refused:
        check_checkpoint_file(path)
    assert "\n" not in str(refused.value)
    with pytest.raises(InputError, match=expected):  # the CLI refuses it first, in the same words
        _run("fit", trained[0], "--ckpt_path", str(path))
