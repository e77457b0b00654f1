"""``python -m lit_grpo {fit,validate,test,predict} --config X.yaml``: LightningCLI in ``omegaconf+`` mode.

``omegaconf+`` resolves ``${...}`` interpolations after every ``--config`` file and command-line
override is applied, so an override reaches the keys that interpolate it. Configs compose: later
``--config`` files override earlier ones. ``--ckpt_path`` loads weights only; the configuration keeps
every setting (see :class:`GRPOCLI`).

A mistake in the command line or a config is one ``error:`` line naming the key (exit status 2), found
before any model work and before any log folder: keys are checked against the option types
(:mod:`lit_grpo.settings.args`), inputs and API keys by :mod:`lit_grpo.settings.preflight`. The optimizer is set only as
``model.init_args.optimizer`` (Lightning's top-level ``--optimizer`` is refused, so what
``hparams.yaml`` records is what runs).
"""

from __future__ import annotations

import atexit
import inspect
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_grpo.callbacks import FinalValidation
from lit_grpo.checkpoint_io import with_atomic_io
from lit_grpo.compat import has_option, jsonargparse_import_path, lists_replace, raised_by_jsonargparse
from lit_grpo.settings import ConfigError, HelpFormatter, shown
from lit_grpo.settings.args import (BASE_KEY, SUBCOMMANDS, expand_bases, model_class_of, prepare_args, short_error,
                                    sources, without_subcommand)
from lit_grpo.settings.argv import config_files, iter_options
from lit_grpo.settings.help import extra_help, help_args
from lit_grpo.data.datamodule import VLMDataModule
from lit_grpo.data.sample import prompt_limit
from lit_grpo import environment
from lit_grpo.distributed import end_process_groups, end_with_launcher
from lit_grpo.errors import InputError, UserError, fail
from lit_grpo.loggers import RunFolder, continue_run_folder, logger_lines
from lit_grpo.progress import with_progress_bar
from lit_grpo.settings import argument_types
from lit_grpo.registry import load_option_groups
from lit_grpo.run_lock import RunLock
from lit_grpo.runs import (StopAndResume, check_checkpoint_file, check_checkpoint_folders, check_new_run_folders,
                           remove_unused_folders, written_checkpoints)
from lit_grpo.save_on_failure import SaveOnFailure
from lit_grpo.api_keys import find_credentials

PROG = "python -m lit_grpo"


class GRPOArgumentParser(LightningArgumentParser):
    """jsonargparse's parser, with errors as one line (no usage screen, no dump of the parsed config; an unknown key
    named with its group's options and the config file that set it, :mod:`lit_grpo.settings.args`), and a config
    that holds an API key refused before it is printed (``--print_config``) or saved.
    A subcommand's ``--help`` ends with the options of ``model_class`` (the configured model), of a dataset and
    of every registered reward (:func:`lit_grpo.settings.help.extra_help`)."""

    def __init__(self, *args, model_class: type | None = None, configs: list[str] = (), **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)  # a caller's own formatter wins
        kwargs["allow_abbrev"] = False  # --grpo.loss_typ is refused, as in a config file, not read as loss_type
        super().__init__(*args, **kwargs)
        self.model_class, self.configs = model_class, list(configs)  # configs: to name the one holding a bad key

    def format_help(self) -> str:
        text = super().format_help()
        # only a subcommand's parser has --model: the top-level help stays Lightning's own
        if self.model_class is not None and has_option(self, "--model"):  # a subcommand's parser
            text += extra_help(type(self), self.model_class) + "\n"
        return text

    def error(self, message: str, ex: Exception | None = None):
        # JSONARGPARSE_DEBUG keeps jsonargparse's whole report, for debugging the parser itself
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        fail(short_error(message, ex, self.model_class, self.configs))

    def dump(self, cfg, *args, **kwargs) -> str:
        text = super().dump(cfg, *args, **kwargs)
        tree = yaml.safe_load(text)
        whole = isinstance(tree, dict) and bool({"model", "data", "trainer"} & set(tree))  # not a nested part
        held = find_credentials(tree) if whole else []
        if held:
            fail(f"{held[0]}: an API key never goes into a config (value not shown); export it and set the "
                 "judge's api_key_env to the variable's NAME")
        return text


class RunConfig(SaveConfigCallback):
    """Lightning's config saving (``config.yaml``), into the logger's run folder: ``log_dir`` of TensorBoard, CSV and
    :class:`lit_grpo.loggers.WandbLogger` (Lightning would put a W&B run's config in the ``save_dir`` every run
    shares), with the environment that runs it (``environment.json``, :mod:`lit_grpo.environment`; also in every
    checkpoint). Same arguments."""

    def __init__(self, *args, **kwargs):
        # save_to_log_dir=False: save_config below picks the folder itself, the logger's run folder
        super().__init__(*args, **{**kwargs, "save_to_log_dir": False})
        self._environment = None

    def save_config(self, trainer, pl_module, stage: str) -> None:
        # as trainer.log_dir, without its broadcast: only rank 0 saves, and a collective on one rank hangs the run
        folder = (getattr(trainer.logger, "log_dir", None) or getattr(trainer.logger, "save_dir", None)
                  or trainer.default_root_dir)
        os.makedirs(folder, exist_ok=True)
        # skip_none=False: an option set to null is saved as null, so the saved config rebuilds the same run
        self.parser.save(self.config, os.path.join(folder, self.config_filename), skip_none=False,
                         overwrite=self.overwrite, multifile=self.multifile)
        # what made the run, beside its config (environment_resumed_at_step_<s>.json beside a resumed config)
        environment.write(folder, self.config_filename.replace("config", "environment", 1).rsplit(".", 1)[0]
                          + ".json")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        # recorded once per process: the installed versions do not change during a run
        if self._environment is None:
            self._environment = environment.record()
        checkpoint[environment.CHECKPOINT_KEY] = self._environment


class GRPOCLI(LightningCLI):
    """LightningCLI whose model is any LightningModule given by ``class_path`` (GRPO or SFT).

    The configuration is the truth for every subcommand: ``--ckpt_path`` supplies weights (and, for
    ``fit``, the optimizer and loop state) but not hyper-parameters. Stock LightningCLI would overwrite
    the parsed config with the hyper-parameters saved in the checkpoint, silently dropping e.g. a
    ``--model.init_args.evaluation.scorer`` given to ``test``.
    """

    def __init__(self, *args, run_lock: RunLock | None = None, **kwargs):
        """``run_lock``: the locks of the folders a ``fit`` writes (:mod:`lit_grpo.run_lock`; the caller releases
        them when the run ends)."""
        self.run_lock = run_lock if run_lock is not None else RunLock()
        super().__init__(*args, **kwargs)

    def _parse_ckpt_path(self) -> None:
        """Keep the parsed configuration; do not merge the checkpoint's saved hyper-parameters over it."""

    def instantiate_trainer(self, **kwargs):
        """The trainer, with lit_grpo's progress bar unless one is configured (or the bar is off), checkpoints
        written atomically where they live unless a ``CheckpointIO`` plugin is configured
        (:class:`~lit_grpo.checkpoint_io.AtomicCheckpointIO`); a ``fit`` resumed from a checkpoint logs into the run
        folder the checkpoint names (:func:`continue_run_folder`)."""
        trainer = self._get(self.config_init, "trainer", default={})
        # setdefault: callbacks or plugins a caller passes itself are used as given
        kwargs.setdefault("callbacks", with_progress_bar(trainer.get("callbacks"), trainer.get("enable_progress_bar")))
        kwargs.setdefault("plugins", with_atomic_io(trainer.get("plugins")))
        built = super().instantiate_trainer(**kwargs)
        if self.subcommand == "fit":
            # before anything is logged: the logger must point at the continued folder from its first write
            continue_run_folder(built, self._ckpt_path())
        return built

    def _ckpt_path(self) -> str | None:
        return self.config_init[self.subcommand].get("ckpt_path")

    def instantiate_classes(self) -> None:
        """Build model, data and trainer; a construction error is shown as itself, not inside jsonargparse's
        "does not validate" report with a dump of the whole configuration (:func:`construction_error`)."""
        try:
            super().instantiate_classes()
        except Exception as exc:
            root = construction_error(exc)
            # these are configuration mistakes a constructor reports: one error line, not a traceback
            if isinstance(root, (ValueError, KeyError, FileNotFoundError)):
                fail(str(root.args[0]) if isinstance(root, KeyError) and root.args else str(root))
            if root is exc:
                raise
            raise root from None
        # a DataModule of the user's own may not measure prompts: it is left as it is
        if getattr(self, "datamodule", None) is not None and hasattr(self.datamodule, "prompt_length"):
            self.datamodule.prompt_length = self.model.prompt_length  # the data's over-long filter measures with it
            self.datamodule.prompt_limit = prompt_limit(self.model.policy, getattr(self.model, "sampling", None))

    def parse_arguments(self, parser, args) -> None:
        """Parse, then check the inputs (data paths, rewards, judge, templates, model folder, API keys) before
        anything else runs: no seeding message, model work or log folder
        (:func:`lit_grpo.settings.preflight.check_config`)."""
        from lightning.pytorch.loggers import WandbLogger as WandbLoggerBase

        from lit_grpo.api_keys import key_variables, watch_variables
        from lit_grpo.loggers import mask_under_console_capture
        from lit_grpo.settings.preflight import check_config, logger_classes

        # as LightningCLI does, without its warning about ``args`` next to ``sys.argv`` (main() is called with
        # ``args`` from Python: tests, notebooks)
        from jsonargparse import Namespace

        # parse_object for a config given from Python as a dict or a Namespace, parse_args for a list of arguments
        try:
            with lists_replace():  # a later config's list replaces an earlier one, as docs/configs.md says
                self.config = parser.parse_object(args) if isinstance(args, (dict, Namespace)) \
                    else parser.parse_args(args)
        except SystemExit as exc:  # a module a class_path imports that exits: it would end the command without a word
            path = jsonargparse_import_path(exc)
            if path is None:  # --help, --print_config, a refusal: the parser's own exit
                raise
            raise ConfigError(f"class_path {path}: importing {path.rpartition('.')[0]} called sys.exit({exc.code!r}) "
                              "(fix the module: one that a class_path names must not exit when imported)") from None
        sub = self.config.get("subcommand")
        given = sys.argv[1:] if args is None else args if isinstance(args, list) else []
        # the --config files, beside which a path written relative to the config is also looked for
        files = config_files(given)
        config = (self.config[sub] if sub else self.config).as_dict()
        given_by = sources(given)  # a flag that gave a file gives no value of its own
        flags = [k for k, v, _ in iter_options(given) if k not in ("config", "c") and v not in given_by]
        check_config(config, sub, files, flags, given_by)
        watch_variables(key_variables(config))  # a run's api_key_env masked on the console too
        if any(issubclass(cls, WandbLoggerBase) for _, cls in logger_classes(config.get("trainer") or {})):
            mask_under_console_capture()

    def _check_checkpoint(self) -> None:
        """``--ckpt_path``'s file or folder is whole (:func:`check_checkpoint_file`), and a sharded checkpoint folder
        is read by the sharded strategy (another reads a file: ``IsADirectoryError`` deep in ``torch.load``)."""
        path = self._ckpt_path()
        check_checkpoint_file(path)
        from lit_grpo.strategy import FSDP2Strategy

        # a folder is a sharded checkpoint; only the sharded strategy reads it, any other fails deep in torch.load
        if path is not None and Path(path).is_dir() and not isinstance(self.trainer.strategy, FSDP2Strategy):
            raise InputError(f"checkpoint {path} is a sharded checkpoint folder (FSDP2): {self.subcommand} it with "
                             "the sharded strategy, --config configs/fsdp.yaml after the run's config (fit: the same "
                             "number of ranks; validate and test: any), or export it to one file first "
                             "(python -m lit_grpo.export)")

    def before_fit(self) -> None:
        self._check_checkpoint()
        # the lock on rank 0 only: one process owns a run's lock files
        check_checkpoint_folders(self.trainer, self.run_lock if self.trainer.is_global_zero else None)
        command = next((cb.command for cb in self.trainer.callbacks if isinstance(cb, StopAndResume)), None)
        check_new_run_folders(self.trainer, self._ckpt_path(), command)  # every rank: all of them refuse
        if self.datamodule is not None:  # the training data's own checks (rows, overlap) before the step-0 validation
            self.datamodule.setup("fit")
        evaluation = getattr(self.model, "evaluation", None)
        if getattr(evaluation, "before_fit", False) and self._ckpt_path() is None:  # a resumed run has its step 0
            self.trainer.validate(self.model, datamodule=self.datamodule, verbose=False)

    def before_validate(self) -> None:
        self._check_checkpoint()
        if self._ckpt_path() is None:  # a checkpoint is the usual thing to evaluate: say which weights these are
            policy = getattr(self.model, "hparams", {}).get("policy")
            policy = policy.get("name_or_path") if isinstance(policy, dict) else getattr(policy, "name_or_path", None)
            rank_zero_info(f"{self.subcommand}: no --ckpt_path, so the weights are the run's start"
                           f"{f' ({policy})' if policy else ''}, not a trained checkpoint; to evaluate one, add "
                           "--ckpt_path <run's checkpoint folder>/last.ckpt")

    before_test = before_predict = before_validate

    def after_fit(self) -> None:
        """The closing message: where each configured logger wrote (:func:`lit_grpo.loggers.logger_lines`), the run
        folder and the checkpoints."""
        trainer = self.trainer
        logdir = getattr(trainer.logger, "log_dir", None) if trainer.logger is not None else None
        written = written_checkpoints(trainer)
        ckpt = ", ".join(written) or "none written"
        stop = next((cb for cb in trainer.callbacks if isinstance(cb, StopAndResume)), None)
        short = stop.limit_line(trainer) if stop is not None else ""
        folder = f"  run folder (config, eval curves): {logdir}\n" if logdir else ""
        rank_zero_info(f"{short}\nDone. Look at the run with:\n" + "\n".join(logger_lines(trainer)) + "\n"
                       + folder + f"  checkpoints:           {ckpt}\n")


def construction_error(exc: BaseException) -> BaseException:
    """The error a constructor raised, under the reports jsonargparse wraps it in (each of which repeats the
    parsed configuration)."""
    # jsonargparse may chain its wrappers by cause or by context: followed until a constructor's own error
    while raised_by_jsonargparse(exc) and (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__
    return exc


def _comment_print_config(args: list[str]) -> list[str]:
    """A bare ``--print_config`` prints the commented config (field docstrings as YAML comments)."""
    return ["--print_config=comments" if a == "--print_config" else a for a in args]


def with_notes(exc: BaseException) -> str:
    """The error's message followed by its notes (what was saved when a step failed), as sentences."""
    text = str(exc).rstrip()
    for note in getattr(exc, "__notes__", []):
        text += ("" if text.endswith((".", "!", "?")) else ".") + " " + note
    return text


def run_command(args: list[str] | None) -> list[str]:
    """The command line of this run, for the resume command: ``python -m lit_grpo ...``, or ``python my_run.py ...``
    when a script of the user's (one that registers its own rewards) started the CLI."""
    if args is not None:
        return ["python", "-m", "lit_grpo", *args]
    script = Path(sys.argv[0])
    # under python -m lit_grpo, argv[0] is the package's __main__.py: the resume command is written the same way
    head = ["python", "-m", "lit_grpo"] if (script.name, script.parent.name) == ("__main__.py", "lit_grpo") \
        else ["python", sys.argv[0]]
    return [*head, *sys.argv[1:]]


def masked_excepthook(kind, value, tb) -> None:
    """Python's traceback print, API keys masked (:func:`lit_grpo.api_keys.redact`): an error a library or a reward
    raised with a key in its message or its locals' repr never reaches the console (or a capture of it) whole."""
    import traceback

    from lit_grpo.api_keys import redact

    # the whole traceback text is masked: a key may sit in a message or in a frame's repr
    sys.stderr.write(redact("".join(traceback.format_exception(kind, value, tb))))


def main(args: list[str] | None = None) -> GRPOCLI:
    """Run the CLI; a configuration mistake exits with status 2 and one ``error:`` line (see the module); on the
    command line (``args`` None) a :class:`~lit_grpo.errors.UserError` met later (a bad row, checkpoint or folder)
    exits with status 1 and one ``error:`` line."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from omegaconf.errors import OmegaConfBaseException

    from lit_grpo.api_keys import mask_console, unmask_console

    if args is None:  # the command line: a printed traceback masks API keys too; a launched rank ends with its launcher
        sys.excepthook = masked_excepthook                # and its process groups before the interpreter
        end_with_launcher()
        atexit.register(end_process_groups)
    masked = mask_console()  # everything printed from here on (rewards, tracebacks, logging, W&B's capture of it)
    try:
        return _main(args)
    except ConfigError as exc:
        fail(str(exc))
    except MisconfigurationException as exc:  # a Trainer setting Lightning refuses (max_steps -5, max_time 00:14)
        fail(f"trainer: {exc}")
    except OmegaConfBaseException as exc:  # an interpolation that does not resolve (e.g. a key of another logger)
        key = getattr(exc, "full_key", None)
        key = without_subcommand(key) if key else key  # as other lines name it
        fail(f"{key + ': ' if key else ''}{str(exc).splitlines()[0]}")
    except UserError as exc:  # a wrong file, row, checkpoint or folder met while running: what to fix, no traceback
        if args is not None:  # called from Python (a notebook, a test): the exception itself
            raise
        fail(with_notes(exc), status=1)
    finally:
        if masked and args is not None:  # called from Python: the streams as they were (the command line keeps it
            unmask_console()             # to the end, for what is printed at exit)


def _loader_without_base_key() -> None:
    """Make jsonargparse's ``omegaconf+`` loader drop a config file's top-level ``_base_`` key: the files it names
    are already given before the file (:func:`lit_grpo.settings.args.expand_bases`), and jsonargparse has no option of
    that name. ``omegaconf+`` loads a file with jsonargparse's YAML loader (interpolations are resolved once every
    file and override is merged), so that loader is the one wrapped. Idempotent."""
    import yaml as pyyaml
    from jsonargparse import get_loader, set_loader

    try:
        load = get_loader("omegaconf+")
    except KeyError:  # registered by jsonargparse on first use: its YAML loader
        load = get_loader("yaml")
    # idempotent: main() runs many times in one process (tests, notebooks) and must not stack wrappers
    if getattr(load, "drops_base_key", False):
        return

    def without_base(text: str):
        value = load(text)
        if isinstance(value, dict):
            value.pop(BASE_KEY, None)
        return value

    without_base.drops_base_key = True
    set_loader("omegaconf+", without_base, (pyyaml.YAMLError,))


_resolving_run_name: list[bool] = []
"""Non-empty while :func:`run_name` reads the logger's name (which must not ask for ``${run_name:}`` again)."""


def run_name(*given: Any, _root_: Any) -> str:
    """``${run_name:}`` in a config (``dirpath: checkpoints/${run_name:}_grpo``): the ``name`` of ``trainer.logger``,
    or of the first logger when it is a list of them (TensorBoard and W&B at once): the name the logger writes under,
    its default where the config sets none (``true``: Lightning's default logger's). A relative interpolation of the
    key (``${....logger.init_args.name}``) reads one logger only: a list breaks it.

    Raises:
        InterpolationResolutionError: that logger sets no name (none, switched off, or one without ``name``, as
            MLflow's); omegaconf adds the key that asked, the message says what to set.
    """
    from omegaconf import DictConfig, ListConfig
    from omegaconf.errors import InterpolationResolutionError

    if given:
        raise InterpolationResolutionError(f"${{run_name:}} takes no argument (got {', '.join(map(str, given))})")
    trainer = next((sub["trainer"] for sub in (_root_, *(_root_.get(s) for s in SUBCOMMANDS))
                    if isinstance(sub, DictConfig) and "trainer" in sub), None)
    logger = trainer.get("logger") if isinstance(trainer, DictConfig) else None
    logger = logger[0] if isinstance(logger, ListConfig) and len(logger) else logger
    if logger is True:  # Lightning's default logger, under its default name
        from lightning.pytorch.loggers import TensorBoardLogger

        return inspect.signature(TensorBoardLogger).parameters["name"].default
    init_args = logger.get("init_args") if isinstance(logger, DictConfig) else None
    if _resolving_run_name:  # the logger's name asks for itself: omegaconf would recurse to a RecursionError
        raise InterpolationResolutionError("${run_name:} is the name of trainer.logger, so that name cannot hold it: "
                                           "write the name out")
    _resolving_run_name.append(True)
    try:
        name = init_args.get("name") if isinstance(init_args, DictConfig) else None
    finally:
        _resolving_run_name.pop()
    if isinstance(name, str) and name:
        return name
    what = logger.get("class_path") if isinstance(logger, DictConfig) else None
    raise InterpolationResolutionError(
        "${run_name:} is the name of trainer.logger (the first logger of a list), but "
        + (f"{what} has none" if what else f"the run has no logger ({shown(logger)})") + ": use a logger with a name "
        "(trainer.logger.init_args.name: a TensorBoard, W&B or CSV logger), or write this value out")


def _parsing_settings() -> None:
    """How the command line reads options: field docstrings as their help, a config file's ``_base_`` key dropped
    (:func:`_loader_without_base_key`), ``${run_name:}`` (:func:`run_name`), the tasks' option groups typed
    (:func:`lit_grpo.registry.option_group`)."""
    from jsonargparse import set_parsing_settings
    from omegaconf import OmegaConf

    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    _loader_without_base_key()
    if not OmegaConf.has_resolver("run_name"):  # omegaconf 2.4 renamed register_new_resolver
        getattr(OmegaConf, "register_resolver", OmegaConf.register_new_resolver)("run_name", run_name)
    load_option_groups()  # attention, judge, embedded typed from here on; types read before (a default's check
    argument_types.cache_clear()  # when the core was imported) took them as mappings


def _main(args: list[str] | None) -> GRPOCLI:
    _parsing_settings()
    given = expand_bases(sys.argv[1:] if args is None else list(args))
    model_class = model_class_of(given)
    given = help_args(prepare_args(_comment_print_config(given), model_class), model_class)
    configs = sources(given)  # the files that give values, to name the one that gave a refused value
    if args is None:
        sys.argv[1:] = given
    else:
        args = given
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # A checkpoint after the optimizer step is what a GRPO step should save; and a deprecation inside
    # Lightning's own pytree helper is not the user's to act on.
    warnings.filterwarnings("ignore", message=".*ModelCheckpoint with manual optimization.*")
    # a checkpoint folder holds the run's lock file, and an earlier run's checkpoints refuse a new run (not a warning)
    warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
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
    command = run_command(args)
    stop, lock = StopAndResume(command=command), RunLock(command)
    stop.install()
    try:
        return GRPOCLI(
            datamodule_class=VLMDataModule,
            subclass_mode_model=True,
            parser_class=GRPOArgumentParser,
            parser_kwargs={"parser_mode": "omegaconf+", "prog": PROG, "configs": configs, "model_class": model_class,
                           **{sub: {"model_class": model_class, "configs": configs} for sub in SUBCOMMANDS}},
            save_config_callback=RunConfig,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,  # one optimizer setting: model.init_args.optimizer
            trainer_defaults={"callbacks": [stop, SaveOnFailure(command), RunFolder(), FinalValidation()]},
            args=args,
            run_lock=lock,
        )
    except BaseException as exc:  # Lightning exits 0 after a SIGTERM, 1 after a KeyboardInterrupt: 128 + the signal
        if isinstance(exc, SIGTERMException) or (stop.interrupted and getattr(exc, "code", None) == 1):
            sys.exit(stop.exit_code)
        # a refused or failed run: the folders it made and left unused go
        lock.release()
        remove_unused_folders(lock.created)
        raise
    finally:
        stop.uninstall()
        lock.release()
