"""``python -m lit_grpo {fit,validate,test,predict} --config X.yaml``: LightningCLI in ``omegaconf+`` mode.

``omegaconf+`` resolves ``${...}`` interpolations after every ``--config`` file and command-line
override is applied, so an override reaches the keys that interpolate it. Configs compose: later
``--config`` files override earlier ones. ``--ckpt_path`` loads weights only; the configuration keeps
every setting (see :class:`GRPOCLI`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

from jsonargparse import ArgumentError
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_grpo.data.datamodule import VLMDataModule
from lit_grpo.progress import with_progress_bar
from lit_grpo.rollout import refuse_sampling_option
from lit_grpo.runs import StopAndResume, check_checkpoint_file, check_checkpoint_folders, written_checkpoints

UNKNOWN_SAMPLING_OPTION = re.compile(r"--sampling\.(\w+)|Group 'sampling' does not accept option '(\w+)'")
"""How jsonargparse reports a ``sampling`` key the config class lacks (command line, config file)."""
REFUSED_SAMPLING_OPTION = re.compile(r"sampling\.\w+ is (?:refused|not an option)[^\n]*")
"""A refusal already written by the model's own (nested) parser."""


class GRPOArgumentParser(LightningArgumentParser):
    """Reports a ``sampling`` option that does not exist in one line: a generation option the loss cannot model
    (``repetition_penalty``, ``min_p``, ...) is refused by name, with the reason, instead of a parse dump."""

    def error(self, message: str, ex: Exception | None = None):
        refused, unknown = REFUSED_SAMPLING_OPTION.search(message), UNKNOWN_SAMPLING_OPTION.search(message)
        if refused is None and unknown is None:
            return super().error(message, ex)
        refusal = refused.group(0) if refused else refuse_sampling_option(unknown.group(1) or unknown.group(2))
        if not self.exit_on_error:
            raise ArgumentError(None, refusal) from ex
        sys.stderr.write(f"error: {refusal}\n")
        self.exit(2)


class GRPOCLI(LightningCLI):
    """LightningCLI whose model is any LightningModule given by ``class_path`` (GRPO or SFT).

    The configuration is the truth for every subcommand: ``--ckpt_path`` supplies weights (and, for
    ``fit``, the optimizer and loop state) but not hyper-parameters. Stock LightningCLI would overwrite
    the parsed config with the hyper-parameters saved in the checkpoint, silently dropping e.g. a
    ``--model.init_args.evaluation.scorer`` given to ``test``.
    """

    def _parse_ckpt_path(self) -> None:
        """Keep the parsed configuration; do not merge the checkpoint's saved hyper-parameters over it."""

    def instantiate_trainer(self, **kwargs):
        """The trainer, with lit_grpo's progress bar unless one is configured (or the bar is off)."""
        trainer = self._get(self.config_init, "trainer", default={})
        kwargs.setdefault("callbacks", with_progress_bar(trainer.get("callbacks"), trainer.get("enable_progress_bar")))
        return super().instantiate_trainer(**kwargs)

    def _ckpt_path(self) -> str | None:
        return self.config_init[self.subcommand].get("ckpt_path")

    def before_fit(self) -> None:
        check_checkpoint_file(self._ckpt_path())
        check_checkpoint_folders(self.trainer)
        evaluation = getattr(self.model, "evaluation", None)
        if getattr(evaluation, "before_fit", False) and self._ckpt_path() is None:  # a resumed run has its step 0
            self.trainer.validate(self.model, datamodule=self.datamodule, verbose=False)

    def before_validate(self) -> None:
        check_checkpoint_file(self._ckpt_path())

    before_test = before_predict = before_validate

    def after_fit(self) -> None:
        trainer = self.trainer
        logdir = trainer.logger.log_dir if trainer.logger is not None else None
        written = written_checkpoints(trainer)
        ckpt = ", ".join(written) or "none written"
        short = ""
        if 0 < trainer.max_steps and trainer.global_step < trainer.max_steps:
            short = (f"\nStopped early at step {trainer.global_step} of max_steps {trainer.max_steps} "
                     "(trainer.max_time, max_epochs or a stop signal): the figures above are at that step.\n")
        rank_zero_info(
            f"{short}\nDone. Look at the run with:\n"
            f"  tensorboard --logdir {os.path.dirname(logdir.rstrip('/')) if logdir else 'logs'}\n"
            f"  logs and saved config: {logdir}\n"
            f"  checkpoints:           {ckpt}\n"
        )


def _comment_print_config(args: list[str]) -> list[str]:
    """A bare ``--print_config`` prints the commented config (field docstrings as YAML comments)."""
    return ["--print_config=comments" if a == "--print_config" else a for a in args]


def main(args: list[str] | None = None) -> GRPOCLI:
    from jsonargparse import set_parsing_settings

    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    if args is None:
        sys.argv[1:] = _comment_print_config(sys.argv[1:])
    else:
        args = _comment_print_config(list(args))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # A checkpoint after the optimizer step is what a GRPO step should save; and a deprecation inside
    # Lightning's own pytree helper is not the user's to act on.
    warnings.filterwarnings("ignore", message=".*ModelCheckpoint with manual optimization.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)`? is deprecated.*")
    for noisy in ("httpx", "urllib3", "filelock", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Lightning advertises a cloud logger on every run; lit_grpo logs to TensorBoard.
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(lambda record: "litlogger" not in record.getMessage())
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    try:
        import datasets
        import transformers

        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    stop = StopAndResume(command=["python", "-m", "lit_grpo", *(sys.argv[1:] if args is None else args)])
    stop.install()
    try:
        return GRPOCLI(
            datamodule_class=VLMDataModule,
            subclass_mode_model=True,
            parser_kwargs={"parser_mode": "omegaconf+"},
            parser_class=GRPOArgumentParser,
            save_config_kwargs={"overwrite": True},
            trainer_defaults={"callbacks": [stop]},
            args=args,
        )
    except SIGTERMException:  # Lightning exits 0 after a SIGTERM; a stopped run is not a finished one
        sys.exit(stop.exit_code)
    finally:
        stop.uninstall()
