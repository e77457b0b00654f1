"""Inputs checked before any model work starts and before any log folder is made.

:func:`check_config` takes the parsed configuration of one subcommand (a plain nested dict: ``model``,
``data``, ``trainer``) and refuses, in one line naming the key and the valid choices: an API key anywhere
in it (:mod:`lit_grpo.api_keys`; the value is never shown); first, every value out of its declared type
(:mod:`lit_grpo.settings`: numbers not finite or out of range, and names no registry holds: rewards, metrics, the
scorer, the loss type, the advantage scaling, the engine, the prompt template, the reader; through the model's
option groups, the rewards' weights and options, the judge, the data module, the generators, the optimizer and lr
scheduler, which torch is also asked to build on a dummy parameter); then reward options the reward does not take,
an unknown generator, a data path that does not exist (a path is generated only where a ``generate`` block names it), and a model folder that does not exist
(see :func:`lit_grpo.policy.check_model_path`).
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

from lit_grpo.errors import first_and_more
from lit_grpo.settings import ConfigError
from lit_grpo.settings.paths import SPECIAL_CKPT, SPLITS
from lit_grpo.settings import SettingError, check_arguments
from lit_grpo.api_keys import find_credentials



def check_config(config: dict[str, Any], subcommand: str | None, config_files: list[str] = (),
                 flags: list[str] = (), sources: list[str] | None = None) -> None:
    """Raise :class:`~lit_grpo.settings.args.ConfigError` for the first problems found (see the module docstring).
    ``config_files``: the ``--config`` files given, next to which a relative path from the wrong folder is looked
    for (:func:`lit_grpo.settings.paths.search_roots`); the one of ``sources`` (default: those, in order with files
    given to options) that gave a refused value is named, unless one of ``flags`` (the command line's other keys)
    set it."""
    sources = list(config_files) if sources is None else sources
    from lit_grpo.settings.paths import search_roots, wrong_folder

    # credentials first: a later refusal may quote the config, and must never print a key
    held = find_credentials(config)
    if held:
        raise ConfigError(f"{held[0]}: an API key never goes into a config (it would be printed and saved); "
                          "export it and set the judge's api_key_env to the variable's NAME (value not shown)")
    problems = check_ranges(config)
    if problems:  # before anything builds an object that would refuse the same number less clearly
        raise ConfigError(_first_named(problems, sources, list(flags)))
    ckpt = config.get("ckpt_path")
    roots = search_roots(config_files)
    if ckpt and ckpt not in SPECIAL_CKPT and not os.path.exists(ckpt):  # Lightning resolves these names itself
        problems.append(wrong_folder("ckpt_path", ckpt, roots)
                        or f"ckpt_path {ckpt} does not exist (a checkpoint file, or a sharded checkpoint's folder)")
    model = config.get("model") or {}
    init = model.get("init_args") or {} if isinstance(model, dict) else {}
    # every check runs and each problem is kept: one start shows them all, not one per attempt
    for check, arg in ((_check_rewards, init), (_check_evaluation, init), (_check_settings, init),
                       (_check_data, (config.get("data") or {}, subcommand, roots)), (_check_policy, (init, roots)),
                       (_check_trainer, config.get("trainer") or {}), (_check_loggers, config.get("trainer") or {})):
        try:
            check(arg)
        except (ValueError, KeyError, FileNotFoundError, TypeError) as exc:
            # a KeyError's str() adds quotes around its message: its argument is the message itself
            problems.append(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))
    if problems:
        raise ConfigError(_first_named(problems, sources, list(flags)))


def _first_named(problems: list[str], config_files: list[str], flags: list[str]) -> str:
    """:func:`first_and_more`'s line, the first problem after the config file that gave its value (where one did)."""
    from lit_grpo.settings.args import with_source

    return first_and_more([with_source(problems[0], list(config_files), flags), *problems[1:]])


def check_ranges(config: dict[str, Any]) -> list[str]:
    """Every number of the model's and the data module's options that is not finite or out of its declared range
    (:func:`lit_grpo.settings.check_arguments`, through the model class's and ``VLMDataModule``'s constructors), then
    what torch refuses when it builds the configured optimizer and lr scheduler on a dummy parameter."""
    from lit_grpo.data.datamodule import VLMDataModule

    model = config.get("model") or {}
    init = model.get("init_args") or {} if isinstance(model, dict) else {}
    path = model.get("class_path") if isinstance(model, dict) else None
    # the model class the config names, else the default model: the same constructor the parser will call
    problems = check_arguments(path or "lit_grpo.GRPOModule", init, "model.init_args")
    problems += check_arguments(VLMDataModule, config.get("data") or {}, "data")
    # the optimizer is built only once every number is in range: torch would refuse them less clearly
    return problems or _optimizer_problems(init)


def _optimizer_problems(init: dict[str, Any]) -> list[str]:
    import torch

    from lit_grpo.settings.args import _import

    built = None
    for key in ("optimizer", "lr_scheduler"):
        spec, where = init.get(key), f"model.init_args.{key}"
        cls = _import(spec["class_path"]) if isinstance(spec, dict) and spec.get("class_path") else None
        # a scheduler needs the optimizer built just before; without one there is nothing to build it on
        if cls is None or (key == "lr_scheduler" and built is None):
            continue
        # one dummy parameter: torch checks lr, betas, eps... in the constructor, no model needed
        first = [torch.nn.Parameter(torch.zeros(1))] if key == "optimizer" else built
        try:
            built = cls(first, **(spec.get("init_args") or {}))
        # what constructors raise for a bad value; any other error is left to the real build
        except (ValueError, TypeError, ZeroDivisionError) as exc:
            return [f"{where}: {spec['class_path']} refuses its init_args: {exc}"]
    return []


def _check_reward(spec: dict[str, Any], where: str) -> None:
    from lit_grpo.rewards.registry import REWARDS, RewardSpec, check_options, reward_info

    name = spec.get("name")  # registered: its type says so (check_ranges ran first)
    kwargs = spec.get("kwargs") or {}
    try:  # unknown keys (did-you-mean, the valid ones), each value against its parameter's type, judge settings
        check_options(RewardSpec(name, kwargs=kwargs))
    except SettingError as exc:  # a declared type: the full key (the spec's own fields, or one of its options)
        raise ValueError(f"{where}.{exc.problems[0]}" if exc.owner == "RewardSpec"
                         else f"{where}.kwargs.{exc.problems[0]}") from None
    except ValueError as exc:
        raise ValueError(f"{where}.kwargs: {exc}") from None
    fn = REWARDS.get(name)
    if kwargs and not inspect.isclass(fn):  # a reward given options checks their values even on an empty batch
        # (without options there is nothing to check: what it does on an empty batch says nothing of real ones)
        required = [p.name for p in inspect.signature(fn).parameters.values()  # columns it did not declare
                    if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        # every column an empty list: the same call shape as a real batch, with nothing in it
        columns = {c: [] for c in [*reward_info(name).columns, *required] if c != "completions" and c not in kwargs}
        try:
            fn([], **columns, **kwargs)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{where}.kwargs: reward {name!r} refused its options when called on an empty batch "
                             f"(the startup check): {exc}") from None
        except SystemExit as exc:
            raise ValueError(f"{where}: reward {name!r} called sys.exit({exc.code!r}) when called on an empty batch "
                             "(the startup check of its options): a reward returns its values or raises") from None
        except Exception:  # e.g. completions[0] on the empty batch: not an option problem, the batches will tell
            pass


def _check_rewards(init: dict[str, Any]) -> None:
    for key in ("rewards",):
        for i, spec in enumerate(init.get(key) or []):
            _check_reward(spec, f"model.init_args.{key}[{i}]")
    for i, spec in enumerate((init.get("evaluation") or {}).get("metrics") or []):
        _check_reward(spec, f"model.init_args.evaluation.metrics[{i}]")


def _check_evaluation(init: dict[str, Any]) -> None:
    from lit_grpo.registry import built_group

    evaluation = init.get("evaluation") or {}
    where = "model.init_args.evaluation"
    if "judge" in (evaluation.get("scorer_kwargs") or {}):
        # the scorer's judge has one place to be set; two places could disagree
        raise ValueError(f"{where}.scorer_kwargs.judge: the scorer's judge is set with {where}.judge")
    if evaluation.get("scorer") is not None:
        _check_reward({"name": evaluation["scorer"], "kwargs": evaluation.get("scorer_kwargs") or {}},
                      f"{where}.scorer")
    if evaluation.get("judge") is not None:
        try:
            built_group("judge", evaluation["judge"])  # the PhyX task's JudgeConfig: its cross-field rules
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{where}.judge: {exc}") from None


def _check_settings(init: dict[str, Any]) -> None:
    from lit_grpo.config import GRPOConfig, check_settings
    from lit_grpo.rollout import SamplingConfig

    # a group the config leaves out takes its defaults later; the module runs check_settings again when built
    if "grpo" in init and "sampling" in init:
        try:
            check_settings(GRPOConfig(**init["grpo"]), SamplingConfig(**init["sampling"]))
        except ValueError as exc:
            # the message names the full config key, as every other refusal here does
            raise ValueError(re.sub(r"(^|; )(grpo|sampling)\.", r"\1model.init_args.\2.", str(exc))) from None


def _check_policy(arg: tuple[dict[str, Any], list]) -> None:
    from lit_grpo.policy import check_model_path

    init, roots = arg
    policy = init.get("policy") or {}  # its dtype is one of its Literal's choices (checked by the parser)
    if policy.get("dtype") == "float16":
        raise ValueError("model.init_args.policy.dtype: float16 is not supported (no loss scaling: sampling and the "
                         "updates overflow to inf / NaN within a few steps); use bfloat16, or float32 weights with "
                         "trainer.precision bf16-mixed")
    # with embedded set, the folder is built at load time: there is nothing to check yet
    if policy.get("name_or_path") and policy.get("embedded") is None:
        check_model_path(policy["name_or_path"], policy.get("local_files_only", False),
                         "model.init_args.policy.name_or_path", roots)


FLOAT16_PRECISIONS = ("16", "16-mixed", "16-true")


def _check_trainer(trainer: dict[str, Any]) -> None:
    """float16 precision is refused (the loss clips gradients before a float16 scaler would unscale them); a GPU
    accelerator on a machine without CUDA is named before the model is built; Lightning's FSDP strategy (torch's
    first FSDP) needs CUDA GPUs (it refuses a CPU), so it is refused here rather than after the model is built
    (``lit_grpo.strategy.FSDP2Strategy``, the sharded path, runs on CPU processes too)."""
    import torch

    if str(trainer.get("precision")) in FLOAT16_PRECISIONS:
        raise ValueError(f"trainer.precision: {trainer['precision']} (float16) is not supported; use bf16-mixed "
                         "(float32 weights, bf16 compute) or 32")
    strategy = trainer.get("strategy")
    name = strategy.get("class_path", "") if isinstance(strategy, dict) else str(strategy or "")
    if str(trainer.get("accelerator")) in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(f"trainer.accelerator: {trainer['accelerator']} but this machine has no CUDA GPU; on CPU "
                         "processes set --trainer.accelerator cpu (with --trainer.devices N for N processes)")
    # a name starting fsdp covers Lightning's registered variants (fsdp, fsdp_cpu_offload...)
    fsdp1 = name.lower().startswith("fsdp") or name.endswith(".FSDPStrategy")
    if fsdp1 and not torch.cuda.is_available():
        raise ValueError(f"trainer.strategy: {name} needs CUDA GPUs (torch's first FSDP refuses a CPU) and none is "
                         "available; shard with FSDP2 instead (--config configs/fsdp.yaml), or use DDP "
                         "(--trainer.strategy ddp)")


LOGGER_PACKAGES = {"WandbLogger": ("wandb", "pip install -e '.[wandb]'"),
                   "CometLogger": ("comet_ml", "pip install comet-ml"), "MLFlowLogger": ("mlflow", "pip install mlflow"),
                   "NeptuneLogger": ("neptune", "pip install neptune")}
"""Lightning's loggers that need a package of their own: its module and how to install it."""


def logger_classes(trainer: dict[str, Any]) -> list[tuple[str, type]]:
    """``(class path, class)`` of each logger ``trainer.logger`` configures (one, or a list)."""
    from lit_grpo.settings.args import _import

    specs = trainer.get("logger")
    found = []
    for spec in specs if isinstance(specs, list) else [specs]:
        path = spec.get("class_path") if isinstance(spec, dict) else spec if isinstance(spec, str) else None
        cls = _import(path) if path else None
        if isinstance(cls, type):
            found.append((path, cls))
    return found


def _check_loggers(trainer: dict[str, Any]) -> None:
    """A logger whose package is not installed (W&B, Comet, MLflow, Neptune) is named with the command that installs
    it (for W&B, the project's ``wandb`` extra), and a W&B logger that would log online without a login is named
    with the two ways on (:func:`check_wandb_login`), before any model work."""
    import importlib.util

    specs = trainer.get("logger")
    init_args = {s.get("class_path"): s.get("init_args") or {} for s in (specs if isinstance(specs, list) else [specs])
                 if isinstance(s, dict)}
    for path, cls in logger_classes(trainer):
        for base in cls.__mro__:
            # Lightning's own loggers only: a subclass inherits its base's package need through the MRO
            needs = LOGGER_PACKAGES.get(base.__name__) if base.__module__.startswith("lightning.") else None
            if needs and importlib.util.find_spec(needs[0]) is None:
                raise ValueError(f"trainer.logger: {path} needs the {needs[0]} package, which is not installed: "
                                 f"{needs[1]}")
            if needs and needs[0] == "wandb":
                check_wandb_login(path, init_args.get(path, {}))


WANDB_LOCAL_MODES = ("offline", "dryrun", "disabled")
"""``WANDB_MODE`` values (or a logger's ``mode``) that need no W&B login."""


def check_wandb_login(path: str, init_args: dict[str, Any]) -> None:
    """A W&B logger that logs online needs a login, found here without the network as W&B finds it: the
    ``WANDB_API_KEY`` or ``WANDB_IDENTITY_TOKEN_FILE`` variable, or an entry for the W&B host (``WANDB_BASE_URL``,
    default ``api.wandb.ai``) in the ``.netrc`` file ``wandb login`` writes (``NETRC``, else ``~/.netrc`` or
    ``~/_netrc``). Offline (``WANDB_MODE=offline``, ``dryrun`` or ``disabled``; the logger's ``offline: true`` or
    ``mode``) needs none. Without one, ``wandb.init`` fails after the model is built, in a long traceback (or waits
    for a key typed at a prompt).

    Raises:
        ValueError: one line naming the logger and the two ways on (``wandb login``, ``WANDB_MODE=offline``).
    """
    import netrc
    import urllib.parse

    mode = str(os.environ.get("WANDB_MODE") or init_args.get("mode") or "").lower()
    # any of these: offline needs no login, and a key or token file is a login
    if init_args.get("offline") or mode in WANDB_LOCAL_MODES or os.environ.get("WANDB_API_KEY") \
            or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return
    # the host comes from WANDB_BASE_URL: a private W&B server has its own .netrc entry
    host = urllib.parse.urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or ""
    files = [os.environ["NETRC"]] if os.environ.get("NETRC") else \
        [os.path.expanduser(f"~/{name}") for name in (".netrc", "_netrc")]
    for file in files:
        try:
            if os.path.isfile(file) and netrc.netrc(file).authenticators(host):
                return
        except (netrc.NetrcParseError, OSError):  # an unreadable file counts as no login there
            continue
    raise ValueError(f"trainer.logger: {path} logs to W&B online, but there is no W&B login here (no WANDB_API_KEY, "
                     f"no {host} entry in {files[0]}): run `wandb login` first, or set WANDB_MODE=offline to log "
                     "locally and upload later with `wandb sync`")


def _check_data(arg: tuple[dict[str, Any], str | None, list]) -> None:
    from lit_grpo.data.datamodule import DatasetSpec, check_datasets
    data, subcommand, roots = arg
    specs = {k: DatasetSpec(**data[k]) if isinstance(data.get(k), dict) else None
             for k in ("train", "val", "test", "predict")}
    # the same fallbacks as the DataModule: test falls back to val, predict to test
    specs["test"] = specs["test"] or specs["val"]
    specs["predict"] = specs["predict"] or specs["test"]
    wanted = SPLITS.get(subcommand or "", tuple(specs))
    # validation is optional: a run without it trains all the same
    missing = [k for k in wanted if specs[k] is None and k != "val"]
    if missing:
        raise ValueError(f"data.{missing[0]} is not set: {subcommand} reads it")
    check_datasets({k: specs[k] for k in wanted}, roots)
