"""Runs that never lose work: checks before the first step, a checkpoint and a resume command on a stop
signal, and resumes that continue the same run.

- :func:`check_checkpoint_folders`: every folder a ``ModelCheckpoint`` will write into is created and
  written to before the first step (a run whose folder cannot be written would otherwise train up to its first
  save, and with Lightning's own ``CheckpointIO``, which swallows a ``PermissionError``, to the end, saving
  nothing), and what killed saves left there is removed. The saves themselves are atomic
  (:mod:`lit_grpo.checkpoint_io`).
- :func:`check_new_run_folders`: a new ``fit`` (no ``--ckpt_path``) is refused where a checkpoint folder holds an
  earlier run's checkpoints, which it would overwrite; the refusal says how to continue that run.
- :func:`check_checkpoint_file`: a ``--ckpt_path`` file that is empty, truncated or not a checkpoint is
  refused with its path and what is wrong (torch alone says ``EOFError`` and names no file).
- :class:`StopAndResume` (added to every run by the CLI): SIGTERM or SIGINT finishes the current
  training step, writes a checkpoint, prints the command that resumes the run and exits with
  128 + the signal number; a step that does not finish within a grace period (a reward that hangs) is
  abandoned (:class:`StepAbandoned`) and the last finished step saved instead; a checkpoint resumes where its
  run stopped, inside an epoch (also when ``max_steps`` or ``max_time`` ended it there) or at an epoch's end.
- :func:`written_checkpoints`: the checkpoint files a run really wrote, for its closing message.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_grpo.compat import mark_loader_finished, request_graceful_stop
from lit_grpo.checkpoint_io import check_lightning_checkpoint, remove_leftovers
from lit_grpo.errors import CheckpointWriteError, EarlierRunError, InputError, UnwritableFolderError
from lit_grpo.run_lock import RunLock


def check_writable(folder: str | os.PathLike, what: str = "checkpoint folder",
                   fix: str = "point the ModelCheckpoint's dirpath elsewhere") -> None:
    """Create ``folder`` (with its parents) and write and delete a small file in it.

    Raises:
        PermissionError / OSError: naming the folder (``what``) and the reason, when either fails.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # a real file, not os.access: the check fails exactly where the save would (read-only mount, ownership, ACLs)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write_test_"):
            pass
    except OSError as exc:
        raise UnwritableFolderError(f"{what} {folder} cannot be written ({exc.strerror or exc}): make it writable or "
                                    f"{fix}") from None


def checkpoint_folder(trainer: L.Trainer, cb: ModelCheckpoint) -> str:
    """The folder the trainer's ``ModelCheckpoint`` ``cb`` will write into: its ``dirpath``, else Lightning's default
    ``<logger save_dir>/<name>/<version>/checkpoints`` (``<default_root_dir>/checkpoints`` without a logger)."""
    if cb.dirpath is not None:
        return str(cb.dirpath)
    if trainer.loggers:
        logger = trainer.loggers[0]
        # a str version is a run id (W&B) or a name given in the config; an int is TensorBoard's version_N
        version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
        return os.path.join(logger.save_dir or trainer.default_root_dir, str(logger.name), version, "checkpoints")
    return os.path.join(trainer.default_root_dir, "checkpoints")


def checkpoint_folders(trainer: L.Trainer) -> list[str]:
    """The folders the trainer's ``ModelCheckpoint`` callbacks will write into (:func:`checkpoint_folder`)."""
    return [checkpoint_folder(trainer, cb) for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)]


def earlier_checkpoints(folder: str | os.PathLike, cb: ModelCheckpoint) -> list[Path]:
    """The checkpoints in ``folder`` (files or sharded checkpoint folders named ``*.ckpt``, ``cb``'s extension; not
    the hidden temporary files of a save), ``cb``'s ``last.ckpt`` first, then newest first; none when it is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    # exists(): a last.ckpt linking a removed step file (save_last="link") is no checkpoint to continue from
    found = [p for p in folder.iterdir() if p.name.endswith(cb.FILE_EXTENSION) and not p.name.startswith(".")
             and p.exists()]
    last = cb.CHECKPOINT_NAME_LAST + cb.FILE_EXTENSION
    # last.ckpt first: it is what a resume reads; then the newest step file
    return sorted(found, key=lambda p: (p.name != last, -p.stat().st_mtime, p.name))


def check_new_run_folders(trainer: L.Trainer, ckpt_path: str | None, command: list[str] | None = None) -> None:
    """A new ``fit`` (no ``ckpt_path``) never writes into a checkpoint folder holding an earlier run's checkpoints:
    it would replace that run's ``last.ckpt`` (the file ``test --ckpt_path`` and a resume read) and its step files
    with its own. A resume (``ckpt_path`` given) continues whatever run its checkpoint is.

    Raises:
        EarlierRunError: naming the folder, its checkpoints, the command that continues that run (``command`` with
            ``--ckpt_path``) and the other ways out (another run name or ``dirpath``, removing the checkpoints).
    """
    if ckpt_path is not None:
        return
    for cb in trainer.checkpoint_callbacks:
        folder = checkpoint_folder(trainer, cb) if isinstance(cb, ModelCheckpoint) else None
        # a remote folder (s3://...) cannot be listed here: left to the run
        found = earlier_checkpoints(folder, cb) if folder is not None and "://" not in folder else []
        if not found:
            continue
        names = ", ".join(p.name for p in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        resume = resume_command(command, str(found[0])) if command else f"--ckpt_path {found[0]}"
        raise EarlierRunError(
            f"checkpoint folder {folder} already holds an earlier run's checkpoints ({names}), which this new run "
            f"would overwrite: continue that run with {resume} (and a higher --trainer.max_steps if it finished), "
            "give this run another name (--trainer.logger.init_args.name) or another ModelCheckpoint dirpath, or "
            "remove those checkpoints to start over")


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and each of its parents that do not exist yet, ``folder`` first: what making it creates."""
    out = []
    while not folder.exists() and folder != folder.parent:
        out.append(folder)
        folder = folder.parent
    return out


def check_checkpoint_folders(trainer: L.Trainer, lock: RunLock | None = None) -> None:
    """:func:`check_writable` on every local folder of :func:`checkpoint_folders`; with a ``lock``, each of them and
    the logger's folder locked for this run (:class:`~lit_grpo.run_lock.RunLock`: another live run holding one
    is refused, naming it); then the leftovers of saves killed there removed
    (:func:`~lit_grpo.checkpoint_io.remove_leftovers`).

    Raises:
        UnwritableFolderError: a folder cannot be written.
        FolderInUseError: another live run holds a folder.
    """
    # remote folders are left to their filesystem: nothing local to create or lock
    folders = [f for f in checkpoint_folders(trainer) if "://" not in f]
    if lock is not None:  # each folder and the parents made for it, before any is made
        lock.created += [(made, "checkpoint folder") for folder in folders for made in missing_folders(Path(folder))]
    for folder in folders:
        check_writable(folder)
    if lock is not None:
        for folder in folders:
            lock.acquire(folder, "checkpoint folder")
        # a logger that names its folder only once its run starts (W&B: the run id) has none to check yet
        has_folder = trainer.logger is not None and getattr(trainer.logger, "version", 0) is not None
        logdir = trainer.logger.log_dir if has_folder else None
        if isinstance(logdir, str) and "://" not in logdir:
            if not os.path.exists(logdir):
                lock.created.append((Path(logdir), "log folder"))
            check_writable(logdir, "log folder", "point trainer.logger's save_dir elsewhere")
            lock.acquire(logdir, "log folder")
    for folder in folders:
        remove_leftovers(folder)


def remove_unused_folders(created: list[tuple[Path, str]]) -> None:
    """After a run that failed, remove the folders it made and left unused: a log folder holding only what any start
    writes (:func:`lit_grpo.loggers.remove_if_unused`), an empty checkpoint folder and each parent made for it
    (``checkpoints/`` of ``checkpoints/<run>``) left empty; a refused run leaves no folder."""
    from lit_grpo.loggers import remove_if_unused

    for folder, what in created:
        if what == "log folder":
            remove_if_unused(folder)
        elif folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def check_checkpoint_file(path: str | os.PathLike | None) -> None:
    """Refuse a ``--ckpt_path`` file that cannot be a whole checkpoint.

    Lightning writes checkpoints with ``torch.save`` (a zip archive); an empty file, a copy cut short (its
    central directory missing) is named here instead of failing inside ``torch.load``.
    A folder must be a whole sharded checkpoint (:func:`check_sharded_checkpoint`). Special values (``last``,
    ``best``, ``hpc``, ``registry...``) and remote URLs are left to Lightning.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is empty or truncated, naming the file and its size.
    """
    # Lightning resolves these names itself (last, best, hpc, a registry entry) and reads remote URLs itself
    if path is None or str(path) in ("last", "best", "hpc") or str(path).startswith("registry") \
            or "://" in str(path):
        return
    path = Path(path)
    if path.is_dir():
        check_sharded_checkpoint(path)
        return
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    check_whole_archive(path)
    check_lightning_checkpoint(path)


def check_whole_archive(path: Path, what: str = "checkpoint") -> None:
    """Refuse a file that is empty or not a whole ``torch.save`` zip archive (its central directory or a member cut
    off).

    Raises:
        InputError: naming the file (as ``what``) and its size.
    """
    size = path.stat().st_size
    if size == 0:
        raise InputError(f"{what} {path} is empty (0 bytes): it was never written completely; "
                         "use an earlier checkpoint")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    # not a zip at all, or unreadable: no members, refused below in the same words
    except (zipfile.BadZipFile, OSError, EOFError):
        members = []
    # a member whose bytes would end past the file's end: the copy or the save was cut short
    if not members or any(m.header_offset + m.compress_size > size for m in members):
        raise InputError(f"{what} {path} ({size} bytes) is truncated or not a checkpoint: a checkpoint is a zip "
                         "archive written by torch.save, and this file holds no complete one (a copy cut short, a "
                         "save that was interrupted?); use an earlier checkpoint or copy it again")
    with zipfile.ZipFile(path) as archive:  # each member against the CRC-32 torch.save wrote: a copy whose bytes
        bad = archive.testzip()             # changed in the middle loads without an error, as other numbers
    if bad is not None:
        raise InputError(f"{what} {path} is damaged: its member {bad} does not match the checksum it was written with "
                         "(a disk or copy error); use an earlier checkpoint or copy it again")


SHARDED_META = "meta.pt"
"""The non-tensor part of a sharded checkpoint folder (:mod:`lit_grpo.strategy`; Lightning's name for it)."""


def check_sharded_checkpoint(path: Path) -> None:
    """Refuse a checkpoint folder that is not a whole sharded checkpoint (:mod:`lit_grpo.strategy`): no ``.metadata``
    (torch's distributed checkpoint) or no ``meta.pt`` (a copy cut short, or not a checkpoint), a ``.metadata`` torch
    cannot read, a shard file it names missing or shorter than the bytes it records there, or a ``meta.pt`` that is
    not a whole archive.

    Raises:
        InputError: naming the folder and what it lacks, or the file that is cut short.
    """
    import torch.distributed.checkpoint as dcp

    missing = [name for name in (".metadata", SHARDED_META) if not (path / name).is_file()]
    if missing:
        raise InputError(f"checkpoint folder {path} is not a whole sharded checkpoint (it has no "
                         f"{' and no '.join(missing)}); use an earlier checkpoint or copy it again")
    try:
        # torch's distributed checkpoint records where each tensor's bytes lie: enough to check the shards' sizes
        storage = dcp.FileSystemReader(path).read_metadata().storage_data or {}
    except Exception as exc:  # a pickle cut short: torch's own error names no file
        raise InputError(f"checkpoint file {path / '.metadata'} cannot be read ({type(exc).__name__}): it is cut "
                         "short or not torch's distributed-checkpoint metadata; use an earlier checkpoint or copy it "
                         "again") from None
    ends: dict[str, int] = {}  # shard file -> the end of the last bytes the metadata records in it
    for info in storage.values():
        # several tensors share one shard file: its recorded end is the furthest of theirs
        ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
    for name, end in sorted(ends.items()):
        shard = path / name
        size = shard.stat().st_size if shard.is_file() else None
        if size is None or size < end:
            state = "is missing" if size is None else f"has {size} bytes"
            raise InputError(f"checkpoint shard {shard} {state} where the folder's .metadata records {end}: the copy "
                             "was cut short (a transfer or save that did not finish?); use an earlier checkpoint or "
                             "copy it again")
    check_whole_archive(path / SHARDED_META, "checkpoint file")


def check_trainable_weights(state_dict: dict[str, Any], trainable: set[str] | dict[str, tuple[int, ...]],
                            prefix: str = "") -> None:
    """The checkpoint's weights under ``prefix`` must be exactly the run's ``trainable`` names: checkpoints hold
    only trainable weights and load non-strictly, so a mismatch would silently leave weights untrained (missing)
    or keep weights the run neither trains nor saves again (unexpected, e.g. LoRA on q,k,v,o loaded into q,v).
    With ``trainable`` a mapping of names to shapes, each saved tensor must have its weight's shape (a checkpoint of
    a model of other sizes: hidden size, vocabulary, LoRA rank).

    Raises:
        ValueError: the counts and a few names of the missing and of the unexpected weights, or the first weight
        whose shape differs, with both shapes.
    """
    saved = {k for k in state_dict if k.startswith(prefix)}
    missing, unexpected = sorted(set(trainable) - saved), sorted(saved - set(trainable))
    if not missing and not unexpected:
        shapes = trainable if isinstance(trainable, dict) else {}
        for name in sorted(shapes):
            # a saved entry without a shape has nothing to compare
            have = tuple(getattr(state_dict[name], "shape", shapes[name]))
            if have != tuple(shapes[name]):
                raise InputError(f"checkpoint weight {name} has shape {list(have)} where this run's model has "
                                 f"{list(shapes[name])}: the checkpoint was written by a model of other sizes (hidden "
                                 "size, layers, vocabulary, LoRA rank); resume it with the model that wrote it")
        return
    parts = [f"lacks {len(missing)} weights this run trains, e.g. {missing[:3]}"] if missing else []
    if unexpected:
        parts.append(f"holds {len(unexpected)} weights this run does not train, e.g. {unexpected[:3]}")
    raise InputError(f"checkpoint {'; '.join(parts)}: it was written with another model or another trainable set "
                     "(model.policy: lora and its target_modules, freeze_vision_tower); configure this run as the "
                     "one that wrote it")


def check_same_optimizer(checkpoint: dict[str, Any], optimizer: Any, path: Any = None) -> None:
    """The checkpoint's optimizer (``hyper_parameters.optimizer.class_path``) must be the run's: torch loads another
    optimizer's state without a word (AdamW's groups into SGD, which then fails at its first update; into Adam, which
    then silently decouples its weight decay), so a resumed run would not be the run that wrote it.

    Raises:
        InputError: both optimizers named, in one line.
    """
    saved = ((checkpoint.get("hyper_parameters") or {}).get("optimizer") or {})
    saved = saved.get("class_path") if isinstance(saved, dict) else None
    run = optimizer.get("class_path") if isinstance(optimizer, dict) else None
    # compared by class name too: torch.optim.AdamW and torch.optim.adamw.AdamW are one class under two paths
    if saved and run and saved != run and saved.rsplit(".", 1)[-1] != run.rsplit(".", 1)[-1]:
        where = f"checkpoint {path}" if path else "the checkpoint"
        raise InputError(f"{where} was written with optimizer {saved}, and this run uses {run}: its optimizer state "
                         f"does not fit this one; resume with model.init_args.optimizer {saved}, or start a new run")


def written_checkpoints(trainer: L.Trainer) -> list[str]:
    """The last and best checkpoint files of the trainer's ``ModelCheckpoint`` callbacks that exist on disk."""
    paths = []
    for cb in trainer.checkpoint_callbacks:
        for p in (getattr(cb, "last_model_path", ""), getattr(cb, "best_model_path", "")):
            if p and p not in paths and os.path.exists(p):  # a file, or a sharded checkpoint's folder
                paths.append(p)
    return paths


def resume_where_stopped(checkpoint: dict[str, Any]) -> None:
    """Make Lightning resume a checkpoint's training loop where the run stopped, in place.

    - An epoch that training left early (``max_steps``, ``max_time`` or a stop request) is marked unfinished
      again. Lightning ends such an epoch anyway, and a checkpoint written at the end of training
      (``ModelCheckpoint(save_last=True)`` does) or of the epoch records it as ended: resumed with a higher
      ``max_steps`` the run would skip the rest of the epoch, or train 0 steps once ``max_epochs`` is
      reached. Recognised by an ended epoch whose last batch was never reached; reopened, it is restored as
      a mid-epoch checkpoint and the data loader's saved position continues it.
    - An epoch whose last batch was reached: the train loader's saved iterator is marked finished, so the
      next epoch starts a new one (with the shuffle generator where the uninterrupted run's would be).
      Lightning does not restart the iterator of the first epoch after a resume, and the iterator's state
      does not say it is finished (Lightning stops at the loader's length, before its ``StopIteration``):
      the next epoch would have no batch at all. Written after the epoch's end (at the end of training or
      of the epoch), the batch count of the epoch is cleared too: Lightning would count the next epoch's
      batches on from it and end that epoch early.
    """
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    batches, epochs = loop.get("epoch_loop.batch_progress"), loop.get("epoch_progress")
    # saved before a batch of this epoch ran: nothing to reopen or mark
    if not batches or not epochs or not batches["current"]["ready"]:  # saved before a batch of this epoch
        return
    current = epochs["current"]
    ended = current["ready"] == current["started"] == current["processed"] > 0  # written after the epoch's end
    if batches.get("is_last_batch", False):
        for state in loop.get("state_dict", {}).get("combined_loader", []):
            mark_loader_finished(state)  # torchdata StatefulDataLoader
        if ended:  # the next epoch starts at its first batch
            batches["current"] = dict.fromkeys(batches["current"], 0)
            batches["is_last_batch"] = False
            for progress in (epochs["current"], epochs["total"]):  # saved in on_train_epoch_end, before Lightning
                progress["completed"] = progress["processed"]      # counts the epoch completed: count it here
    elif ended:
        for progress in (epochs["current"], epochs["total"]):
            # reopened: one epoch less started-and-finished; the loader's saved position continues inside it
            progress["processed"] = progress["completed"] = progress["started"] - 1
        checkpoint["epoch"] = current["started"] - 1


STOP_GRACE_S = 30.0
"""How long a stop signal waits for the current step before abandoning it (``LIT_GRPO_STOP_GRACE_S`` sets it)."""


class StepAbandoned(SIGTERMException):
    """A stop signal abandoned the step in progress: it did not finish within the grace period (a reward or a
    judge that does not return), or a second signal came. Lightning treats it as its own SIGTERM stop; the last
    finished step is saved by :class:`~lit_grpo.save_on_failure.SaveOnFailure`."""


def stop_grace_s() -> float:
    """``LIT_GRPO_STOP_GRACE_S`` (seconds, > 0), else :data:`STOP_GRACE_S`.

    Raises:
        InputError: the variable is not a positive number.
    """
    text = os.environ.get("LIT_GRPO_STOP_GRACE_S", "").strip()
    if not text:
        return STOP_GRACE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0  # refused below, in the same words as a non-positive number
    if not value > 0:
        raise InputError(f"LIT_GRPO_STOP_GRACE_S={text!r} is not a number of seconds > 0: set it to how long a stop "
                         f"signal waits for the current step (default {STOP_GRACE_S:g}), or unset it")
    return value


def resume_command(command: list[str], ckpt_path: str) -> str:
    """``command`` with any ``--ckpt_path`` replaced by ``ckpt_path``, quoted for a shell."""
    args, skip = [], False
    for a in command:
        if skip:
            skip = False
        elif a == "--ckpt_path":
            skip = True
        elif not a.startswith("--ckpt_path="):  # the --ckpt_path=x spelling too
            args.append(a)
    return shlex.join([*args, "--ckpt_path", ckpt_path])


class _SignalWatch:
    """A thread on each rank that tells every rank of a signal any rank received, within ``every_s``: an
    all-reduce (max) of the signal number, over a process group of its own (gloo) so that it never meets the
    training's collectives. Every rank's thread runs the same rounds; the first rank to stop it ends them all."""

    def __init__(self, owner: StopAndResume, every_s: float = 0.5):
        import torch.distributed as dist

        self.owner, self.every_s = owner, every_s
        self.group = dist.new_group(backend="gloo")
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="lit-grpo-signal-watch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import torch
        import torch.distributed as dist

        while True:
            # one collective carries both flags: the signal (any rank's, by max) and whether any rank is done
            state = torch.tensor([int(self.owner.signum or 0), int(self._done.is_set())])
            try:
                dist.all_reduce(state, op=dist.ReduceOp.MAX, group=self.group)
            except Exception:  # another rank has gone: nothing left to tell
                return
            if int(state[0]):
                self.owner.start_grace(int(state[0]))
            if int(state[1]):
                return
            self._done.wait(self.every_s)

    def stop(self) -> None:
        """End the rounds on every rank (this one's next round says so) and wait for this rank's thread to end (a
        thread left inside a collective aborts the process at its exit)."""
        self._done.set()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=10 * self.every_s)


class StopAndResume(L.Callback):
    """A stopped run is a resumable run.

    - SIGTERM (what a scheduler sends at a time limit) or SIGINT (Ctrl+C) during training: the current step
      finishes (Lightning's own SIGTERM handling, which SIGINT joins), a checkpoint is written
      (``last.ckpt`` in the first ``ModelCheckpoint``'s folder), the command that resumes the run is printed,
      and the CLI exits with 128 + the signal number (143, 130). A step that has not finished ``grace_s`` after
      the signal (a reward or a judge that does not return), or a second signal, abandons the step
      (:class:`StepAbandoned`, raised in the main thread, which a sleep or a Python loop gives way to) and the last
      finished step is saved instead (one process), with the same exit status. During evaluation the run stops
      at the next batch; outside a trainer run (model loading) SIGTERM stops at once; either way with the same
      exit status, and nothing trained is lost.
    - A checkpoint resumes where the run stopped, inside an epoch or at its end (:func:`resume_where_stopped`).

    The handlers are installed by :meth:`install` (the CLI calls it first thing) or at the first ``setup``.
    Lightning forgets a SIGTERM that arrives between two trainer runs (e.g. during the last batch of the
    validation before ``fit``); this callback remembers it and stops the next run at its start.

    Args:
        command: the command line of the run (``python -m lit_grpo fit ...``), for the resume command.
        grace_s: how long a signal waits for the current step before abandoning it (default :func:`stop_grace_s`).
    """

    def __init__(self, command: list[str] | None = None, grace_s: float | None = None):
        self.command = command
        self.grace_s = stop_grace_s() if grace_s is None else grace_s
        self.signum: int | None = None
        self.interrupted = False  # a KeyboardInterrupt ended the run (Lightning then exits 1)
        self._timer: threading.Timer | None = None
        self._abandon = False
        self.final_validation_left = False  # a stop during the validation after the last step: resumed, it runs again
        self._in_run = self._forwarding = False
        self._previous: dict[int, Any] = {}
        self._unsaved: set[str] = set()
        self._watch: _SignalWatch | None = None

    @property
    def exit_code(self) -> int:
        """128 + the signal that stopped the run (SIGTERM when none was seen here)."""
        return 128 + int(self.signum or signal.SIGTERM)

    # ------------------------------------------------------------------ signals
    def install(self) -> None:
        """Handle SIGTERM and SIGINT from now on (main thread only; once)."""
        if not self._previous and threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
            for s in self._previous:
                signal.signal(s, self._on_signal)

    def uninstall(self) -> None:
        """Put back the handlers :meth:`install` replaced."""
        for s, handler in self._previous.items():
            if handler is not None and threading.current_thread() is threading.main_thread():
                signal.signal(s, handler)
        self._previous = {}

    def _on_signal(self, signum: int, frame) -> None:
        if self._forwarding:  # our own call into Lightning's handler, which calls this one last
            return
        again, name = self.signum is not None, signal.Signals(signum).name
        self.signum = self.signum or signum
        if not self._in_run:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            self._say(f"{name} received outside training: stopping now, nothing trained is lost "
                      f"(exit status {self.exit_code})")
            raise SystemExit(self.exit_code)
        if again and (self._abandon or self._timer is not None):  # the grace period is over, or a second signal
            self._abandon = False
            self.cancel_timer()
            raise StepAbandoned
        if again:
            return
        if signum == signal.SIGINT and self._watch is None:
            self._forward(frame)  # Lightning's SIGTERM handling: the step finishes, then the loop stops
        self._say(f"{name} received: the run stops after the current step (or evaluation batch) and writes a "
                  f"checkpoint; a step not finished within {self.grace_s:g} s (a reward that hangs?) or a second "
                  "signal abandons it, and the last finished step is saved")
        self._timer = threading.Timer(self.grace_s, self._grace_over, [threading.main_thread().ident])
        self._timer.daemon = True
        self._timer.start()

    def start_grace(self, signum: int) -> None:
        """Another rank received ``signum`` (:class:`_SignalWatch`'s thread): this rank's step gets the same grace."""
        if self.signum is None and self._in_run:
            self.signum = signum
            self._timer = threading.Timer(self.grace_s, self._grace_over, [threading.main_thread().ident])
            self._timer.daemon = True
            self._timer.start()

    def _grace_over(self, main: int) -> None:
        """The grace period has passed (timer thread): interrupt the main thread, whose handler abandons the step;
        SIGINT to the main thread alone, so that a ``sleep`` there returns (a process signal may go to any thread)."""
        self._abandon = True
        signal.pthread_kill(main, signal.SIGINT)

    def cancel_timer(self) -> None:
        """Stop waiting for the step: it is over (the stop's save begins) or abandoned."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _forward(self, frame) -> None:
        handler = signal.getsignal(signal.SIGTERM)
        if callable(handler) and handler != self._on_signal:
            self._forwarding = True
            try:
                handler(signal.SIGTERM, frame)
            finally:
                self._forwarding = False

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.install()
        self._in_run = True
        if stage == "fit" and not getattr(trainer.fit_loop.run, "finishes_validation", False):
            trainer.fit_loop.run = self._validate_then(trainer, trainer.fit_loop.run)

    def state_dict(self) -> dict[str, Any]:
        return {"final_validation_left": self.final_validation_left}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.final_validation_left = bool(state_dict.get("final_validation_left", False))

    def _validate_then(self, trainer: L.Trainer, run: Any) -> Any:
        """The fit loop's ``run``, preceded by the validation a stop interrupted after the last training step: Lightning
        would resume such a run as finished (``max_steps`` reached), with neither that validation nor its figures.
        Called once the checkpoint's loops are restored; the validation runs whole, as it would have."""
        def validate_then_run() -> None:
            if self.final_validation_left:
                self.final_validation_left = False
                loop = trainer.fit_loop
                loop.setup_data()
                loop.epoch_loop.val_loop.restarting = False  # from its first batch
                trainer.validating = True
                loop.epoch_loop.val_loop.run()
                trainer.training = True
            run()
        validate_then_run.finishes_validation = True
        return validate_then_run

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._in_run = False
        self.cancel_timer()
        self._end_watch()

    # ------------------------------------------------------------------ several ranks
    def _own_sigterm(self, trainer: L.Trainer) -> None:
        """Several ranks: a signal to any rank stops them all after the same step. Lightning's own SIGTERM handler
        acts on rank 0's signal alone (a signal to another rank left that rank's loop and every rank waiting in a
        collective), so here this callback's handler is the only one: it notes the signal, and each step's end decides
        for all ranks (:meth:`on_train_batch_end`); a thread makes the signal known to every rank at once, so that
        a step that hangs on any rank is abandoned on each after the grace period."""
        import torch.distributed as dist

        if trainer.world_size < 2 or not (dist.is_available() and dist.is_initialized()):
            return
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
        if self._watch is None:
            self._watch = _SignalWatch(self)

    def _end_watch(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._own_sigterm(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """Several ranks: stop all of them after this step when any received a signal (Lightning then raises its
        stop on every rank at the same point, as it does for one process)."""
        if self._watch is None:
            return
        import torch
        import torch.distributed as dist

        # on the root device: the default group may be NCCL, which reduces only device tensors
        flag = torch.tensor([int(self.signum or 0)], device=trainer.strategy.root_device)
        # every rank reaches this at the same step's end, so the collective never waits on a rank still training
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if int(flag.item()):
            self.signum = self.signum or int(flag.item())
            request_graceful_stop(trainer)

    def _stop_if_signalled(self) -> None:
        """A signal Lightning did not see (it arrived before this trainer run registered its handler)."""
        if self.signum is not None:
            raise SIGTERMException

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._own_sigterm(trainer)
        self._stop_if_signalled()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            self._stop_if_signalled()

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_if_signalled()

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_if_signalled()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._warn_if_not_saved(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._warn_if_not_saved(trainer)

    def _warn_if_not_saved(self, trainer: L.Trainer) -> None:
        """Lightning's save swallows a ``PermissionError``: say so when a recorded checkpoint is not on disk."""
        for cb in trainer.checkpoint_callbacks:
            for path in (getattr(cb, "last_model_path", ""), getattr(cb, "best_model_path", "")):
                if path and not os.path.exists(path) and path not in self._unsaved:
                    self._unsaved.add(path)
                    rank_zero_warn(f"checkpoint {path} was not written (is {os.path.dirname(path)} still "
                                   "writable?); the run goes on, but this checkpoint does not exist")

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            resume_where_stopped(checkpoint)
            # trainer.max_time is each process's budget (a job's time limit): Lightning's Timer would count the
            # stopped run's time too, and a run that max_time stopped would stop again at once
            checkpoint.get("callbacks", {}).pop("Timer", None)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._in_run = False
        self.cancel_timer()
        self._end_watch()
        if isinstance(exception, KeyboardInterrupt):
            self.interrupted, self.signum = True, self.signum or signal.SIGINT
            self._say(f"Interrupted after step {trainer.global_step}; nothing more is written. "
                      + self._newest(trainer))
        elif isinstance(exception, StepAbandoned):
            name = signal.Signals(self.signum or signal.SIGTERM).name
            saves = trainer.state.fn == TrainerFn.FITTING and trainer.world_size == 1 and any(
                type(cb).__name__ == "SaveOnFailure" for cb in trainer.callbacks)
            self._say(f"Stopped by {name}: the step after step {trainer.global_step} did not finish (within "
                      f"{self.grace_s:g} s, or before a second signal) and is abandoned"
                      + (" (a reward or a judge that does not return?)." if saves else
                         f". Nothing more is written. {self._newest(trainer)}"))
        elif isinstance(exception, SIGTERMException):
            self._stop(trainer)

    # ------------------------------------------------------------------ the stop
    def _stop(self, trainer: L.Trainer) -> None:
        name = signal.Signals(self.signum or signal.SIGTERM).name
        if trainer.state.fn != TrainerFn.FITTING or trainer.global_step == 0:
            stage = trainer.state.fn.value if trainer.state.fn is not None else "the run"
            self._say(f"Stopped by {name} during {stage}, before any training step finished: nothing to resume "
                      f"(exit status {self.exit_code}).")
            return
        path = self.stop_path(trainer)
        # a stop during the validation after the last step: the resumed run must validate first (_validate_then)
        last = trainer.validating and (trainer.should_stop or 0 < trainer.max_steps <= trainer.global_step)
        self.final_validation_left = last  # kept in the checkpoint: the resumed run validates first
        try:
            # weights_only=False: a resume needs the optimizer, the
            # loops and the callbacks' state, not the weights alone
            trainer.save_checkpoint(path, weights_only=False)
        except CheckpointWriteError as exc:  # one line: the file, the reason, the room left, what is still there
            self._say(f"Stopped by {name} after step {trainer.global_step}, but the {exc}. " + self._newest(trainer))
            return
        # Lightning's save can swallow a PermissionError: only the file on disk proves the checkpoint exists
        if not os.path.exists(path):
            self._say(f"Stopped by {name} after step {trainer.global_step}, but the checkpoint {path} could not "
                      "be written. " + self._newest(trainer))
            return
        resume = (resume_command(self.command, path) if self.command
                  else f"trainer.fit(model, datamodule, ckpt_path={path!r})")
        self._say(f"Stopped by {name} " + ("during the validation after the last step, " if last else "")
                  + f"after step {trainer.global_step}"
                  + (f" of max_steps {trainer.max_steps}" if trainer.max_steps > 0 else "")
                  + f"; checkpoint written: {path}\nResume the run (same prompts, completions and weights as "
                  "if it had not stopped; " + ("the validation runs again, whole, and the run ends with its figures"
                                              if last else "a higher --trainer.max_steps trains further")
                  + f") with:\n  {resume}")

    def limit_line(self, trainer: L.Trainer) -> str:
        """What ended a ``fit`` (``max_steps``; before it ``max_time``, ``max_epochs``, an early-stopping callback; a
        signal says so itself), and the command that continues the run from its ``last.ckpt``; "" when a signal
        stopped it or there is nothing to continue from."""
        from lightning.pytorch.callbacks import EarlyStopping, Timer

        if not 0 < trainer.max_steps or self.signum is not None:
            return ""
        if trainer.global_step >= trainer.max_steps:  # finished: say how to train on
            written = [p for p in written_checkpoints(trainer) if os.path.basename(p) == "last.ckpt"]
            if not written or not self.command:
                return ""
            # twice the steps as the example: the same max_steps again would train 0 steps
            more = resume_command([*self.command, "--trainer.max_steps", str(2 * trainer.max_steps)], written[0])
            return (f"\nFinished trainer.max_steps ({trainer.max_steps}). To train further, continue the run with a "
                    f"higher max_steps:\n  {more}\n")
        extra: list[str] = []
        timer = next((cb for cb in trainer.callbacks if isinstance(cb, Timer)), None)
        stopper = next((cb for cb in trainer.callbacks if isinstance(cb, EarlyStopping) and cb.stopped_epoch), None)
        if timer is not None and timer.time_remaining() is not None and timer.time_remaining() <= 0:
            # max_time from Timer's public clock: read after fit, its training time is fixed, so the sum is exact
            duration = timer.time_elapsed() + timer.time_remaining()
            why, more = f"trainer.max_time ({duration:g} s of training)", (
                "the resumed process gets max_time again")
        elif stopper is not None:
            why, more = f"early stopping on {stopper.monitor}", "give it more patience, or drop it, to train further"
        elif trainer.max_epochs is not None and 0 <= trainer.max_epochs <= trainer.current_epoch:
            why, more = f"trainer.max_epochs ({trainer.max_epochs})", "with a higher max_epochs"
            extra = ["--trainer.max_epochs", str(2 * max(trainer.max_epochs, 1))]  # the same count again stops at once
        else:
            why, more = "the trainer", "with the same settings"
        written = [p for p in written_checkpoints(trainer) if os.path.basename(p) == "last.ckpt"]
        if not written:
            return (f"\nStopped by {why} at step {trainer.global_step} of max_steps {trainer.max_steps}; no last.ckpt "
                    "was written (ModelCheckpoint(save_last=True) keeps one), so the run cannot be continued.\n")
        resume = resume_command([*self.command, *extra], written[0]) if self.command else \
            f"ckpt_path={written[0]!r}"
        return (f"\nStopped by {why} at step {trainer.global_step} of max_steps {trainer.max_steps}: the figures above "
                f"are at that step. Continue the run ({more}) with:\n  {resume}\n")

    @staticmethod
    def stop_path(trainer: L.Trainer) -> str:
        """``last.ckpt`` in the first ``ModelCheckpoint`` folder (recorded as its last checkpoint when it saves one),
        else in the trainer's default checkpoint folder."""
        for cb in trainer.checkpoint_callbacks:
            if isinstance(cb, ModelCheckpoint) and cb.dirpath is not None:
                # the first ModelCheckpoint's folder: where the run's own saves, and so its resume command, point
                path = os.path.join(cb.dirpath, cb.CHECKPOINT_NAME_LAST + cb.FILE_EXTENSION)
                if cb.save_last:  # the checkpoint's own record of the last file, for the resumed run
                    cb.last_model_path = path
                return path
        return os.path.join(trainer.log_dir or trainer.default_root_dir, "checkpoints", "last.ckpt")

    @staticmethod
    def _newest(trainer: L.Trainer) -> str:
        written = written_checkpoints(trainer)
        if not written:
            return "No checkpoint of this run exists."
        return f"The newest checkpoint is {max(written, key=os.path.getmtime)}."

    @staticmethod
    @rank_zero_only
    def _say(text: str) -> None:
        print(f"\n{text}\n", file=sys.stderr, flush=True)
