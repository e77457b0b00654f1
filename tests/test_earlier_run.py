"""A run name used again never overwrites the earlier run: a new fit (no ``--ckpt_path``) into a checkpoint folder
that holds checkpoints is refused in one line saying how to continue that run; a resume goes on as before."""

import os
import shlex
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_grpo.cli import main
from lit_grpo.errors import EarlierRunError
from lit_grpo.runs import check_new_run_folders
from tiny_runs import fit_args


def test_a_second_fit_under_one_name_is_refused_and_the_first_runs_checkpoint_is_kept(tmp_path):
    """Run A (2 steps) writes ``last.ckpt``; the same command again is refused before it trains, ``last.ckpt`` keeps
    its bytes, and the command the refusal gives continues run A (to step 3)."""
    args = [*fit_args(tmp_path), "--trainer.max_steps", "2"]
    main(args)
    last = tmp_path / "ckpt" / "last.ckpt"
    before = last.read_bytes()
    assert torch.load(last, weights_only=False)["global_step"] == 2
    with pytest.raises(EarlierRunError) as refused:
        main(args)
    message = str(refused.value)
    resume = shlex.join(["python", "-m", "lit_grpo", *args, "--ckpt_path", str(last)])
    assert message == (f"checkpoint folder {tmp_path / 'ckpt'} already holds an earlier run's checkpoints (last.ckpt), "
                       f"which this new run would overwrite: continue that run with {resume} (and a higher "
                       "--trainer.max_steps if it finished), give this run another name "
                       "(--trainer.logger.init_args.name) or another ModelCheckpoint dirpath, or remove those "
                       "checkpoints to start over")
    assert last.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "logs" / "t").iterdir()) == ["version_0"]  # no log folder either
    command = shlex.split(resume)[3:]
    command[command.index("--trainer.max_steps") + 1] = "3"
    assert main(command).trainer.global_step == 3
    assert torch.load(last, weights_only=False)["global_step"] == 3


def _trainer(tmp_path: Path, **checkpoint) -> L.Trainer:
    return L.Trainer(logger=False, default_root_dir=tmp_path, callbacks=[ModelCheckpoint(**checkpoint)],
                     enable_progress_bar=False)


def test_what_counts_as_an_earlier_runs_checkpoint(tmp_path):
    """Step files without ``last.ckpt`` (named newest first, three then a count) and a sharded checkpoint's folder
    count; the lock file, a killed save's hidden temporary file and other files do not; ``--ckpt_path`` (a resume)
    is never refused; without ``dirpath`` the folder is the trainer's default one."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name in (".lit_grpo.lock", ".last.ckpt.host.123.tmp", "notes.txt"):
        (folder / name).write_text("x")
    trainer = _trainer(tmp_path, dirpath=folder)
    check_new_run_folders(trainer, None)  # nothing of a run there
    for i, name in enumerate(["step=1.ckpt", "step=2.ckpt", "step=3.ckpt", "step=4.ckpt"]):
        (folder / name).write_text("x")
        os.utime(folder / name, (1000 + i, 1000 + i))
    (folder / "step=5.ckpt").mkdir()  # a sharded checkpoint, the newest
    with pytest.raises(EarlierRunError, match=r"checkpoints \(step=5.ckpt, step=4.ckpt, step=3.ckpt and 2 more\), "
                                              rf"which .* continue that run with --ckpt_path {folder / 'step=5.ckpt'} "):
        check_new_run_folders(trainer, None)
    check_new_run_folders(trainer, str(folder / "step=4.ckpt"))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "epoch=0-step=8.ckpt").write_text("x")
    with pytest.raises(EarlierRunError, match=f"^checkpoint folder {tmp_path / 'checkpoints'} already holds"):
        check_new_run_folders(_trainer(tmp_path), None)
