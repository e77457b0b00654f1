"""The command line and config files before jsonargparse reads them, and its errors made one line.

jsonargparse refuses a key that names no option (argparse's abbreviations off: ``--grpo.loss_typ`` is not read
as ``loss_type``); :func:`short_error` words its refusal from the declared options of the group the first unknown
part is in (:func:`unknown_key`: the closest option, a renamed option's new name, why a sampling option is refused)
and names the config file that set it (:func:`config_holding`). What no parser can say is checked here first:
where a config file is not valid YAML, a key more than one level below a dict option (which jsonargparse would store
as one key ``a.b``), ``--data`` / ``--trainer`` given a class path or a missing file, options of a class given
before its ``class_path`` (:func:`check_class_order`). A model override whose value is ``null`` (or holds one) is
passed as a nested dict, which jsonargparse parses without the string round trip that turns ``null`` into
``"None"``.

A config file may extend others: its top-level ``_base_`` key (a path, or a list of paths, relative to the file's
own folder, as in mmengine's configs) names them, and ``--config F`` reads as ``--config <F's bases> --config F``
(:func:`expand_bases`), so a base and its overlay compose exactly as files given one after the other do.

:func:`short_error` turns any other jsonargparse error (a union of attempts, the parsed namespace) into one line
naming the key and the refused value, read from the frames that raised its chain of errors
(:mod:`lit_grpo.compat`), and the rule from the option's declared type: jsonargparse's words are passed on where
nothing declared says more, never parsed (``tests/test_structure.py`` refuses a core module that matches a
library's message text).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib
import inspect
import json
import os
import re
import shlex
import types
import typing
from pathlib import Path
from typing import Any, Union

import pydantic
import yaml

from lit_grpo.settings.argv import iter_options, subcommand_at
from lit_grpo.compat import (jsonargparse_class, jsonargparse_import_path, jsonargparse_list_indices,
                             jsonargparse_refusal, jsonargparse_unknown_key)
from lit_grpo.registry import did_you_mean
from lit_grpo.settings import ConfigError, argument_types, bare_type, describe, problems, shown, type_name
from lit_grpo.settings.paths import config_tree, load_yaml, read_config


BASE_KEY = "_base_"
"""The top-level key of a config file that names the config files it extends (:func:`config_with_bases`)."""
ROOT_KEYS = ("seed_everything", "trainer", "model", "data", "ckpt_path", "weights_only", "verbose",
             "return_predictions")
"""Top-level keys of a ``fit`` / ``validate`` / ``test`` / ``predict`` config."""
SUBCOMMANDS = ("fit", "validate", "test", "predict")
OPTIMIZER_HINT = ("the optimizer and its scheduler are part of the model: set them with "
                  "--model.init_args.optimizer (e.g. --model.init_args.optimizer torch.optim.SGD "
                  "--model.init_args.optimizer.init_args.lr 0.5) and --model.init_args.lr_scheduler")
_ABSENT = object()
# a sentinel type that options_of finds no options in: the keys below it are left to jsonargparse
_OPAQUE = object()
"""A type whose sub-keys are not checked here (a ``class_path`` value, a union, a list, ...)."""


def _without_none(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        # Optional[X] is checked as X; any other union could hold either shape, so its keys are not judged
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else _OPAQUE
    return tp


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)  # bounds kept: they word a refusal
    except Exception:  # an annotation that does not resolve here: its keys are still known
        return {}


def options_of(tp: Any, root: bool = False) -> dict[str, Any] | None:
    """Sub-options of ``tp`` and their types: a dataclass's fields, or (``root``) a class's ``__init__``
    parameters; ``None`` when ``tp`` has none that can be checked."""
    tp = _without_none(tp)
    # isinstance(tp, type): is_dataclass is also true of a dataclass instance, which has no options to list
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        return {f.name: hints.get(f.name, _OPAQUE) for f in dataclasses.fields(tp)}
    if root and inspect.isclass(tp):
        hints = _hints(tp.__init__)
        params = inspect.signature(tp.__init__).parameters.values()
        return {p.name: hints.get(p.name, _OPAQUE) for p in params
                # *args / **kwargs name no option a config could set
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return None


def _item(tp: Any) -> Any:
    """``tp`` without ``None``, and a list's item type for a list (its options are its items')."""
    tp = _without_none(tp)
    return typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp


def walk(key: str, model_class: Any, root: Any = None) -> tuple[list[str], Any, dict[str, Any] | None]:
    """The longest start of the dotted ``key`` whose parts name options (``model.init_args`` is the model's own
    options), the type it ends at and that type's options (a list's: its items'); None where they cannot be
    listed (a class given by ``class_path``, a dict, a union). The top level is the training command's
    (:data:`ROOT_KEYS`), or the ``__init__`` parameters of ``root``, a class whose parser this is."""
    done: list[str] = []
    options = options_of(root, root=True) if root is not None else \
        {**dict.fromkeys(ROOT_KEYS, _OPAQUE), "seed_everything": Union[bool, int], **_roots(model_class)}
    tp = None
    for part in key.split("."):
        if done == ["model"] and part == "init_args":
            done.append(part)
            continue
        if options is None or part not in options:
            break
        done.append(part)
        tp = options[part]
        # the model, data and trainer are classes: their options are their __init__'s parameters
        options = options_of(_item(tp), root=len(done) == 1 and root is None) if tp is not _OPAQUE else None
    return done, tp, options


def unknown_key(key: str, model_class: Any, root: Any = None, cls: Any = None, indices: list[int] = ()) -> str:
    """The line for the dotted ``key`` that names no option (jsonargparse refused it): the options of the group its
    first unknown part is in, with the closest one; a renamed option's new name; why a sampling option is refused;
    where the optimizer is set. ``cls``: the class given by ``class_path`` whose ``init_args`` hold the key (an
    optimizer, a callback, a logger: its init arguments are the valid ones, :func:`class_options`); ``indices``:
    the index of each list item on the way (``trainer.callbacks[1].init_args``)."""
    from lit_grpo.rollout import SamplingConfig, refuse_sampling_option

    parts = key.split(".")
    if parts[0] in ("optimizer", "lr_scheduler"):  # a top-level key, as Lightning's own CLI has them
        return f"{parts[0]}: {OPTIMIZER_HINT}"
    done, tp, options = walk(key, model_class, root)
    typo = _class_key_typo(parts, len(done))
    if typo is not None:  # named where it is, with the index of a list's item (trainer.callbacks[1])
        parent = _indexed_parent(".".join(parts[:typo]), indices, model_class)
        return f"{parent}: unknown option {parts[typo + 1]!r}{did_you_mean(parts[typo + 1], CLASS_KEYS)}"
    if options is None or len(done) == len(parts):  # below what can be listed: the last part is the unknown one,
        twice = next((i for i in range(2, len(parts)) if parts[i - 1:i + 1] == ["init_args"] * 2), None)
        end = len(parts) - 1 if cls is None or twice is None else twice  # or a class's init_args written twice
        done, tp, options = parts[:end], None, {}
        if cls is not None and parts[end - 1:end] == ["init_args"]:  # an init argument of a class given by class_path
            options = dict.fromkeys(class_options(cls, declared_type(".".join(parts[:end - 1]), model_class)))
    parent, name, group = ".".join(done), parts[len(done)], _item(tp)
    if group is SamplingConfig:  # a generation option the loss cannot model: refused with the reason
        return refuse_sampling_option(name)
    parent = _indexed_parent(parent, indices, model_class) if parent else parent
    where = f"{parent}: " if parent else ""
    if name in getattr(group, "renamed", {}):  # an option that was renamed: the error names the new one
        return f"{where}{name} is now {group.renamed[name]}"
    # a long list is noise on one error line; --help shows it
    listed = "" if not options else "; valid: " + (", ".join(sorted(options)) if len(options) <= 16 else "see --help")
    return f"{where}unknown option {name!r}{did_you_mean(name, list(options))}{listed}"


CLASS_KEYS = ("class_path", "init_args")
"""The keys of an option given as a class: ``{class_path: ..., init_args: {...}}``."""


def _class_key_typo(parts: list[str], start: int) -> int | None:
    """Where ``parts`` (from ``start``, the first part no option resolves) hold a mistyped ``class_path`` or
    ``init_args``: the index of the class option's ``init_args`` that :func:`_full_key` put before it (the key as
    written leaves it out), or None."""
    typo = next((i for i in range(max(start, 1), len(parts)) if parts[i] not in CLASS_KEYS
                 and did_you_mean(parts[i], CLASS_KEYS)), None)
    return typo - 1 if typo is not None and parts[typo - 1] == "init_args" else None


def class_options(cls: type, option_type: Any) -> list[str]:
    """The init arguments a config may give ``cls``, a class given by ``class_path`` to an option declared
    ``option_type``: jsonargparse's own list (``add_class_arguments``: the parameters a subclass passes on through
    ``**kwargs`` included), less those a ``Callable[[...], X]`` option is called with (an optimizer's ``params``, a
    scheduler's ``optimizer``); empty when jsonargparse cannot list them."""
    from jsonargparse import ArgumentParser

    tp = _without_none(option_type)
    called = typing.get_args(tp)[0] if typing.get_origin(tp) is collections.abc.Callable else []
    try:
        skip = set(list(inspect.signature(cls).parameters)[:len(called)])
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(cls, fail_untyped=False)
    except Exception:  # a class jsonargparse cannot read: no list, the key is still named
        return []
    return sorted({k.split(".")[0] for k in parser.get_defaults().keys()} - skip)


def config_holding(key: str, configs: list[str], indices: list[int] = (), value: Any = _ABSENT,
                   last: bool = False) -> str | None:
    """The config file among ``configs`` that sets the dotted ``key`` (to ``value``, where given: the one refused):
    the first (the parser stops at it), or with ``last`` the last one setting it, if to ``value`` (the value a run
    gets); or None. ``model.init_args.x`` may be written ``model.x``; a config may nest its keys under a subcommand.
    ``indices``: the index of each list's item on the way (``trainer.callbacks[1]``), where known."""
    files = [c for c in configs if Path(c).expanduser().is_file()]  # config text: no file to name
    for config in reversed(files) if last else files:
        node = _set_in(_rooted(config), key, indices)
        if node is not _ABSENT and (value is _ABSENT or _same(node, value)):
            return config
        if node is not _ABSENT and last:  # a later value, not the refused one (an ${oc.env:...} as written)
            return None
    return None


class OptionFile(str):
    """A file given to an option (``--model.init_args.grpo=grpo.yaml``): its path, and the option's dotted ``key``
    under which its content is read (:func:`sources`)."""

    key: str

    def __new__(cls, path: str, key: str) -> OptionFile:
        made = super().__new__(cls, path)
        made.key = key
        return made


def sources(args: list[str]) -> list[str]:
    """The files of ``args`` that give values, in order: each ``--config`` file, and each config-like file (a YAML
    or JSON suffix, or none) given to an option, as an :class:`OptionFile`."""
    found: list[str] = []
    for key, value, _ in iter_options(args):
        if key in ("config", "c") and value:
            found.append(value)
        elif value and Path(value).suffix.lower() in (*CONFIG_SUFFIXES, "") and Path(value).expanduser().is_file():
            found.append(OptionFile(value, key.rstrip("+")))
    return found


def _rooted(config: str) -> dict:
    """The mapping a config gives from the top: a config file's, or an option file's content under its key."""
    if not isinstance(config, OptionFile):
        return config_tree(config)
    try:
        tree = read_config(config)
    except ConfigError:
        return {}
    for part in reversed(config.key.split(".")):
        tree = {part: tree}
    return tree


def _set_in(tree: dict, key: str, indices: list[int]) -> Any:
    """The value a config's mapping ``tree`` gives the dotted ``key`` (see :func:`config_holding`), or ``_ABSENT``."""
    parts = key.split(".")
    short = parts[:2] == ["model", "init_args"] and parts[2:3] != ["init_args"]  # not init_args written twice
    for sub in [tree[s] for s in SUBCOMMANDS if isinstance(tree.get(s), dict)] or [tree]:
        for form in [parts, parts[:1] + parts[2:]] if short else [parts]:
            node: Any = sub
            at = list(indices)
            for part in form:
                if isinstance(node, list):  # a list's item: at its index, else the first that has the part
                    i = at.pop(0) if at else None
                    node = node[i] if i is not None and i < len(node) else \
                        next((n for n in node if isinstance(n, dict) and part in n), {})
                node = node.get(part, _ABSENT) if isinstance(node, dict) else _ABSENT
            if node is not _ABSENT:
                return node
    return _ABSENT


def _same(a: Any, b: Any) -> bool:
    """``a == b`` of one type (``1`` is not ``true``), NaN equal to NaN."""
    return type(a) is type(b) and (a == b or a != a and b != b)


def _import(class_path: str) -> Any:
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module or "lit_grpo"), name)  # a bare name is looked up in lit_grpo
    # any failure means "no class here": the caller falls back to the model class it had
    except (ImportError, AttributeError, ValueError):
        return None


def _roots(model_class: Any) -> dict[str, Any]:
    from lightning.pytorch import Trainer

    from lit_grpo.data.datamodule import VLMDataModule

    return {"trainer": Trainer, "data": VLMDataModule, "model": model_class}


def check_override(key: str, model_class: Any, value: str | None = None) -> None:
    """What jsonargparse cannot say of one ``--key`` of the command line (without the dashes): a top-level
    ``--optimizer``, a key more than one level below a dict option (jsonargparse would store ``a.b`` as one key of
    it), a group given a value that is no config of its options (:func:`_check_group_file`), and a mapping, list or
    file given to an option, read as a config file is (:func:`_check_given_mapping`). Unknown keys are jsonargparse's
    to refuse (:func:`unknown_key` words them).

    Raises:
        ConfigError: naming the key and what to give instead.
    """
    given, key = key, key.rstrip("+")  # "--key+" appends to a list option in jsonargparse
    if key.split(".")[0] in ("optimizer", "lr_scheduler"):
        raise ConfigError(f"--{key}: {OPTIMIZER_HINT}")
    done, tp, options = walk(key, model_class)
    below = key.split(".")[len(done):]
    if value and not below and (key in ("data", "trainer") or _option_group(tp)):
        _check_group_file(key, value, options or {})
    plain = _plain_types(tp)
    if below and all(any(p is t for t in (int, float, str, bool, type(None))) for p in plain):
        raise ConfigError(f"--{key}: {'.'.join(done)} is one value ({type_name(tp, None)}), with no options below it")
    if (_without_none(tp) is dict or typing.get_origin(_without_none(tp)) is dict) and len(below) > 1:
        at = ".".join(done)
        if at.endswith("evaluation.scorer_kwargs") and below[0] == "judge":  # the judge has one place
            raise ConfigError(f"--{key}: the scorer's judge is set with --{at[:-len('scorer_kwargs')]}judge."
                              f"{'.'.join(below[1:])}")
        raise ConfigError(f"--{key}: {at} is a dict: set one of its keys (--{at}.{below[0]}=...) or give it whole "
                          f"(--{at}='{{...}}')")
    if value and not below and str not in plain and _takes_mapping(tp):  # the parser reads a text or scalar option
        _check_given_mapping(given, value, model_class)


def _option_group(tp: Any) -> bool:
    """Whether ``tp`` is one option group (a dataclass such as ``DatasetSpec`` or ``GRPOConfig``), or none."""
    plain = [p for p in _plain_types(tp) if p is not type(None)]
    return len(plain) == 1 and dataclasses.is_dataclass(plain[0])


def _takes_mapping(tp: Any) -> bool:
    """Whether an option of the declared type ``tp`` takes a mapping or a list: a class (the model, the data module,
    an option group), a dict or a list; not a scalar, a path or an option not typed here."""
    for member in _plain_types(tp):
        origin = typing.get_origin(member) or member
        if origin in (dict, list, tuple) or inspect.isclass(origin) and not issubclass(
                origin, (str, int, float, bool, type(None), os.PathLike)):
            return True
    return False


def _plain_types(tp: Any) -> tuple[Any, ...]:
    """The members of ``tp`` without its annotations (``Optional[float]``: float, None)."""
    return typing.get_args(bare_type(tp)) or (bare_type(tp),)


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def _check_group_file(key: str, value: str, options: dict[str, Any]) -> None:
    """``--data=VALUE``, ``--data.val=VALUE``, ``--model.init_args.grpo=VALUE``: a group of ``options`` takes a
    config file of them or YAML text of them (as jsonargparse reads it), or null where it may be none; a class path,
    a path to no file, or (to a dataset's group, which has a ``path``) a data file or folder is named here
    (jsonargparse would say "Unable to load config", or try the value as a class path).

    Raises:
        ConfigError: ``value`` is a class path (``a.b.C``: a group is one class, not a class to choose), a folder, a
            file path (a config suffix, or a ``/``) where no file is, or data given in place of a dataset's options.
    """
    path = Path(value).expanduser()
    if key not in ("data", "trainer") and value.strip() in ("", "~", "null", "Null", "NULL"):
        return  # no such group (a split left out, LoRA off)
    if "path" in options and _names_data(value):
        raise ConfigError(f"--{key} {_takes_options(options, value)}, give --{key}.path={value}")
    # what jsonargparse reads as YAML text itself (a mapping, a "key: value" string, several lines) is left to it
    if path.is_file() or _mapping(value) is not None or ":" in value or "\n" in value:
        return
    if path.is_dir():
        raise ConfigError(f"--{key}: {value!r} is a folder, not a config file")
    # a dotted name ending in a capitalised part looks like a class path, unless it ends like a config file
    if re.fullmatch(r"([A-Za-z_]\w*\.)+[A-Z]\w*", value) and not value.lower().endswith(CONFIG_SUFFIXES):
        raise ConfigError(f"--{key}: {value!r} is a class path, but {key} is one class here, not a class to choose: "
                          f"set its options (--{key}.<option>=...; fit --help lists them) or give a YAML file of them")
    if value.startswith("~"):
        raise ConfigError(f"--{key}: config file {value!r} not found ({path})")
    if path.suffix or "/" in value:
        from lit_grpo.settings.paths import search_roots, wrong_folder

        raise ConfigError(f"--{key}: " + (wrong_folder("config file", value, search_roots()) or f"config file "
                                          f"{value!r} not found (relative paths are read from {os.getcwd()})"))
    raise ConfigError(f"--{key}: {value!r} is neither a config file nor a mapping of {key} options: give a YAML file, "
                      f"'{{option: value}}', or set one option (--{key}.<option>=...)")


def _names_data(value: str) -> bool:
    """Whether ``value``, given where a dataset's options go, names data (a data file, a folder, a hub id), not a
    config file of the options or YAML text of them."""
    from lit_grpo.data.io import DATA_SUFFIXES

    path = Path(value).expanduser()
    if _mapping(value) is not None or value.lstrip().startswith("[") or "\n" in value or ": " in value:
        return False  # YAML text of options, or of a list
    suffix = path.suffix.lower()
    if suffix in DATA_SUFFIXES and suffix not in CONFIG_SUFFIXES:  # .json may hold either: its content says
        return True
    if path.is_file() and suffix not in (".yaml", ".yml"):  # no suffix, .json: a config, or data
        try:
            tree = read_config(value)
            return tree is not None and not isinstance(tree, dict)
        except ConfigError:
            return True
    return not path.is_file() and not value.lower().endswith(CONFIG_SUFFIXES)


def _takes_options(options: dict[str, Any], value: str) -> str:
    return (f"takes the dataset's options ({', '.join(options)}) one by one, or as a mapping or a YAML file of them, "
            f"not {value!r}: to read data from it")


def _mapping(value: str | None) -> dict | None:
    """``value`` read as YAML when it is a mapping, else ``None``."""
    if value is None or not value.lstrip().startswith("{"):
        return None
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return None
    return parsed if isinstance(parsed, dict) else None


def check_as_written(tree: Any, at: str, model_class: Any, source: str = "") -> None:
    """``true``/``false`` in a config file or a mapping given on the command line (``tree``, the value of the dotted
    key ``at``; ``""`` for a whole config) where its option declares a number: jsonargparse's pydantic types would
    take it as 1 or 0 (``beta: true`` would train with beta 1). A flag's ``true`` is refused by the parser itself.

    Raises:
        ConfigError: ``<source>: <key>: must be ... (got true)``.
    """
    if isinstance(tree, dict):
        if not tree and at and at not in SUBCOMMANDS:  # jsonargparse drops an empty mapping, known key or not
            _refuse_unknown(without_subcommand(at), model_class, source)
        for k, v in tree.items():
            if isinstance(k, str):
                check_as_written(v, f"{at}.{k}" if at else k, model_class, source)
        return
    key = without_subcommand(at)
    done, tp, options = walk(key, model_class) if at and at not in SUBCOMMANDS else ([], None, None)
    if len(done) < len(key.split(".")):  # the whole key names no option here: the parser judges the value
        return
    if isinstance(tree, str) and _option_group(tp) and "path" in options and _names_data(tree):
        raise ConfigError(_sourced(source, f"{key} {_takes_options(options, tree)}, set {key}.path: {tree}"))
    found = problems(tree, tp, key) if isinstance(tree, bool) and tp is not None else []
    if found:
        raise ConfigError(_sourced(source, found[0]))


def _sourced(source: str, line: str) -> str:
    """``line`` after the config file or text ``source`` it comes from, where there is one."""
    return f"{source}: {line}" if source else line


def _refuse_unknown(key: str, model_class: Any, source: str) -> None:
    """Refuse the dotted ``key`` of a config where it names no option of a group whose options are known
    (:func:`unknown_key`'s line); a key below a class given by ``class_path`` or a dict is the parser's to judge."""
    done, _, options = walk(key, model_class)
    if options is not None and len(done) < len(key.split(".")):
        raise ConfigError(_sourced(source, unknown_key(key, model_class)))


def _check_given_mapping(given: str, value: str, model_class: Any) -> None:
    """YAML text given to an option that takes a mapping or a list (``--data='{batch_size: 4}'``, ``--data='batch_size:
    4'``, ``--model.init_args.rewards='[...]'``), or a file of it (``--data=data.yaml``), read as a config file is:
    no key given twice, no ``true`` for a number (:func:`check_as_written`), no empty file. ``given``: the key as
    written (``trainer.callbacks+`` appends to a list option)."""
    key = given.rstrip("+")
    if Path(value).expanduser().is_file():  # a file of the option's value (--model=m.yaml)
        tree = read_config(value)
        # nothing in it (comments at most), which jsonargparse would read as null: a split dropped unseen
        node = yaml.compose(Path(value).expanduser().read_text(encoding="utf-8")) if tree is None else True
        if node is None or getattr(node, "value", None) == "":  # not "null" or "~": those say it
            raise ConfigError(f"--{given}: {value} is empty; write the value of {key} in it")
        check_as_written(tree, key, model_class, value)
        return
    try:
        tree = load_yaml(value)
    except yaml.constructor.ConstructorError as exc:  # a key given twice
        raise ConfigError(f"--{given}: {exc.problem}") from None
    except yaml.YAMLError:  # jsonargparse's to refuse
        return
    if isinstance(tree, (dict, list)):
        check_as_written(tree, key, model_class)


def check_config_file(path: str, after_subcommand: bool = False, model_class: Any = None,
                      before: str | None = None) -> None:
    """What jsonargparse cannot say of the config file or text ``path`` (:func:`read_config`): where it is not valid
    YAML (line and column; a key given twice), not a mapping, config text naming ``_base_`` files, or a subcommand's
    block (``fit:``) that is no mapping, or in a config given after the subcommand (whose parser reads no such block);
    with ``model_class``, a ``true`` for a number (:func:`check_as_written`).

    Raises:
        ConfigError: see :func:`read_config`; a config that is not a mapping, config text with a ``_base_`` key, a
            subcommand's block where none is read or one that is not a mapping.
    """
    tree = read_config(path)
    if tree is not None and not isinstance(tree, dict):
        raise ConfigError(f"{path}: a config is a mapping of {', '.join(ROOT_KEYS)}")
    sub = next((s for s in SUBCOMMANDS if isinstance(tree, dict) and s in tree), None)
    if sub and after_subcommand:  # jsonargparse refuses it by a key inside, which may be a real option
        raise ConfigError(f"{path}: a '{sub}:' block is read from a config given before the subcommand (--config F "
                          f"{sub} ...); in one given after it, write its options without the block")
    if tree is None:  # jsonargparse: "unexpected config", naming no file
        raise ConfigError(f"{path}: a config is a mapping of {', '.join(ROOT_KEYS)}; this one is empty")
    outside = [k for k in tree if k not in (*SUBCOMMANDS, BASE_KEY)] if before else []
    if outside:  # the parser before the subcommand reads only the subcommands' blocks: the rest would be ignored
        raise ConfigError(f"{path}: given before the subcommand, a config is read only in its '{before}:' block, so "
                          f"{', '.join(map(str, outside))} would be ignored: give it after the subcommand ({before} "
                          f"--config {path}), or write these keys under '{before}:'")
    if sub and not isinstance(tree[sub], dict):
        raise ConfigError(f"{path}: {sub}: a mapping of {', '.join(ROOT_KEYS[:4])} (got {shown(tree[sub])})")
    if before and not outside and before not in tree and sub:  # blocks for other subcommands only
        raise ConfigError(f"{path}: given before the subcommand {before}, a config is read in its '{before}:' block; it "
                          f"has none (only {', '.join(k + ':' for k in tree if k in SUBCOMMANDS)}), so nothing in it "
                          "would be read")
    # inline text has no folder for its bases' relative paths to start from
    if isinstance(tree, dict) and BASE_KEY in tree and not Path(path).expanduser().is_file():
        raise ConfigError(f"{BASE_KEY} needs a config file (its paths are relative to the file's folder), "
                          "not config text")
    if model_class is not None:
        check_as_written(tree, "", model_class, path)


def config_with_bases(path: str, _seen: tuple[str, ...] = ()) -> list[str]:
    """``path`` preceded by the config files its ``_base_`` key names (each preceded by its own bases, in the order
    given; a base's path is relative to the folder of the file naming it). A file that cannot be read or parsed is
    returned alone (:func:`check_config_file` reports it).

    >>> config_with_bases("configs/demo.yaml")
    ['configs/demo.yaml']

    Raises:
        ConfigError: a ``_base_`` that is not a path or a list of paths, names a file that does not exist, or
            names a file that extends the file naming it (a cycle).
    """
    # a file already on the path from the first config: its bases would loop forever
    if path in _seen:
        raise ConfigError(f"{path}: {BASE_KEY} makes a cycle: {' -> '.join([*_seen, path])}")
    bases = config_tree(path).get(BASE_KEY)  # an unreadable file is returned alone: check_config_file says why
    if bases is None:
        return [path]
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, list) or not all(isinstance(b, str) and b for b in bases):
        raise ConfigError(f"{path}: {BASE_KEY} must be a config file's path or a list of them, got {bases!r}")
    out: list[str] = []
    for base in bases:
        # a base's path is relative to the file naming it, so a config tree moves as one folder
        full = os.path.normpath(os.path.join(os.path.dirname(path), base))
        if not Path(full).is_file():
            raise ConfigError(f"{path}: {BASE_KEY} {base} does not exist ({full}; a base's path is relative to "
                              "the folder of the file naming it)")
        out += config_with_bases(full, (*_seen, path))
    # bases first, in order: a later file overrides an earlier one, so the file itself wins
    return out + [path]


def expand_bases(args: list[str]) -> list[str]:
    """``args`` with every ``--config F`` (``--config=F``, ``-c F``) of a file that has a ``_base_`` key preceded by
    ``--config B`` for each of its bases (:func:`config_with_bases`).

    Raises:
        ConfigError: see :func:`config_with_bases`.
    """
    out: list[str] = []
    last = 0
    for key, value, (start, end) in iter_options(args):
        if key in ("config", "c") and value and Path(value).is_file():
            out += args[last:start]
            last = end
            for base in config_with_bases(value)[:-1]:
                out += ["--config", base]
            out += args[start:end]
    return out + args[last:]


def model_class_of(args: list[str]) -> Any:
    """The model class the arguments configure (the last ``class_path`` given), default ``GRPOModule``."""
    from lit_grpo.module import GRPOModule

    cls: Any = GRPOModule
    for key, value, _ in iter_options(args):
        if key in ("config", "c") and value:
            tree = config_tree(value)  # a file that cannot be read, or no mapping: check_config_file says why
            trees = [tree.get(s) or {} for s in SUBCOMMANDS if isinstance(tree.get(s), dict)] or [tree]
            for t in trees:
                model = t.get("model") if isinstance(t, dict) else None
                path = model.get("class_path") if isinstance(model, dict) else model
                cls = (_import(path) or cls) if isinstance(path, str) else cls
        elif key in ("model", "model.class_path") and value:
            cls = _import(value) or cls
    return cls


def prepare_args(args: list[str], model_class: Any = None) -> list[str]:
    """Check every config file and override of ``args`` for what jsonargparse cannot say (:func:`check_config_file`,
    :func:`check_override`), and that the options of a class come after its ``class_path``
    (:func:`check_class_order`); pass model overrides holding ``null`` or a backslash as a nested dict. Returns the
    arguments to parse.

    Raises:
        ConfigError: see :func:`check_config_file`, :func:`check_override` and :func:`check_class_order`.
    """
    model_class = model_class or model_class_of(args)  # the caller's, when it has read it already
    out: list[str] = []
    last, sub = 0, subcommand_at(args, SUBCOMMANDS)
    for key, value, (start, end) in iter_options(args):
        after_subcommand = sub is not None and start > sub[0]
        out += args[last:start]
        last = end
        if key in ("config", "c") and value:
            check_config_file(value, after_subcommand, model_class, sub[1] if sub and not after_subcommand else None)
        elif key not in ("print_config", "help", "h") and not key.endswith(".help"):  # help: lit_grpo.settings.help
            check_override(key, model_class, value)
        joined = [f"--{key}={value}"] if value and value.startswith("-") and end - start == 2 else None
        out += _as_nested(key, value) or joined or args[start:end]  # "--k -1e-5": a negative number, not a flag
    check_class_order(args)
    return out + args[last:]


CLASS_OPTIONS = ("model", "trainer.logger")
"""Options whose value is a class (``class_path``, ``init_args``) with no default class: their ``init_args`` need a
``class_path`` before them."""
NO_CLASS = ("true", "false", "null", "none", "")
"""Values that set a class option to no class (a logger switched off, or Lightning's default one)."""


def check_class_order(args: list[str]) -> None:
    """Each of :data:`CLASS_OPTIONS` has its ``class_path`` given (by a config file or text, or an argument) before
    its other options, and a run's configs name a model.

    jsonargparse tries options given before any ``class_path`` against the base class and refuses the first
    ("option 'rewards' is not accepted"), which hides the cause: an overlay config given alone or before its base.

    Raises:
        ConfigError: naming the config or argument whose options come first (and the one that switched a logger
            off), or the configs that name no model.
    """
    if any(k in ("help", "h") or k.endswith(".help") for k, _, _ in iter_options(args)):
        return  # help lists the options of whatever it is given
    state: dict[str, str] = {}  # option -> "" (its class_path given) or the argument that switched it off
    configs, sub = [], subcommand_at(args, SUBCOMMANDS)
    for key, value, (start, _) in iter_options(args):
        if key in ("config", "c") and value and sub and start < sub[0]:  # its block is read on its own
            configs.append(value)
            own: dict[str, str] = {}
            _class_order(config_tree(value), own, value, None, before=sub[1])
            state.update(own)
        elif key in ("config", "c") and value:
            configs.append(value)
            _class_order(config_tree(value), state, value, None)
        elif key not in ("print_config",) and value is not None:
            tree: Any = config_tree(value) if key in ("model", "trainer", "data") else None
            tree = tree or (_mapping(value) if _mapping(value) is not None else value)
            for part in reversed(key.rstrip("+").split(".")):
                tree = {part: tree}
            _class_order(tree, state, None, f"--{key}={value}" if len(value) < 40 else f"--{key}")
    check_overlay_order(configs)
    asks_config = any(k == "print_config" for k, _, _ in iter_options(args))
    if configs and state.get("model") != "" and not asks_config and set(args) & set(SUBCOMMANDS):
        given = " ".join(f"--config {shlex.quote(c)}" for c in configs)
        raise ConfigError(f"no model: none of the configs ({', '.join(configs)}) names the model's class_path; a "
                          "config that changes some settings of another (an overlay) goes after the config it "
                          f"changes: --config configs/demo.yaml {given}")


def _class_of(tree: dict, option: str) -> Any:
    """The class path that ``option`` (``model``, ``trainer.logger``) has in a config's mapping (a ``class_path``,
    or the class as a string); :data:`_ABSENT` when it names none."""
    for sub in [tree.get(s) for s in SUBCOMMANDS if isinstance(tree.get(s), dict)] or [tree]:
        value: Any = sub
        for part in option.split("."):
            value = value.get(part, _ABSENT) if isinstance(value, dict) else _ABSENT
        value = value.get("class_path", _ABSENT) if isinstance(value, dict) else value
        if isinstance(value, str) and value.lower() not in NO_CLASS:
            return value
    return _ABSENT


def check_overlay_order(configs: list[str]) -> None:
    """An overlay (a config that names no model) that sets a class option's class, e.g. ``configs/wandb.yaml``'s
    logger, is not replaced by a config given after it that names another class for that option: the overlay would be
    silently ignored (a whole run without W&B).

    Raises:
        ConfigError: naming both configs, both classes and the order that works (the overlay last).
    """
    trees = [config_tree(c) for c in configs]
    for i, (early, tree) in enumerate(zip(configs, trees)):
        if _class_of(tree, "model") is not _ABSENT:
            continue
        for option in CLASS_OPTIONS[1:]:
            mine = _class_of(tree, option)
            later = [(c, _class_of(t, option)) for c, t in zip(configs[i + 1:], trees[i + 1:])]
            replaced = next(((c, cls) for c, cls in later if cls is not _ABSENT and cls != mine), None)
            if mine is not _ABSENT and replaced:
                bases = {c: config_with_bases(c)[:-1] if Path(c).is_file() else [] for c in configs}
                given = [c for c in configs if not any(c in b for b in bases.values())]  # as typed: no _base_
                by = next((f"{c} (its _base_ {replaced[0]})" for c in given if replaced[0] in bases[c]), replaced[0])
                order = " ".join(f"--config {shlex.quote(c)}" for c in [*(g for g in given if g != early), early])
                raise ConfigError(f"{early} sets {option} to {mine}, but {by}, given after it, sets "
                                  f"{replaced[1]}, so {early} would be ignored: a config that changes some settings "
                                  f"of another (an overlay) goes after the config it changes: {order}")


def _class_order(tree: dict, state: dict[str, str], config: str | None, argument: str | None,
                 before: str | None = None) -> None:
    """Update ``state`` (see :func:`check_class_order`) with ``tree``: a config's mapping, or one argument as one;
    ``before``: the subcommand a config is given before (its block is read on its own, not over earlier ones)."""
    for sub in [tree.get(s) for s in SUBCOMMANDS if isinstance(tree.get(s), dict)] or [tree]:
        for option in CLASS_OPTIONS:
            value: Any = sub
            for part in option.split("."):
                value = value.get(part, _ABSENT) if isinstance(value, dict) else _ABSENT
            if value is _ABSENT:
                continue
            if isinstance(value, (bool, type(None))) or isinstance(value, str) and value.lower() in NO_CLASS:
                state[option] = f"{config or argument} switched it off"
            elif isinstance(value, str) or isinstance(value, dict) and value.get("class_path") is not None:
                state[option] = ""
            elif isinstance(value, dict) and value and state.get(option) != "":
                source = shlex.quote(config) if config else argument
                why = f" ({state[option]})" if state.get(option) else ""
                fix = (f"a config given before the subcommand is parsed on its own, so {option} options there need "
                       f"that config's own {option} class_path: give it after the subcommand ({before} --config "
                       f"{source}, without its '{before}:' block)" if before else
                       f"a config that changes some options of another (an overlay) goes after the config it "
                       f"changes: --config BASE.yaml --config {source}" if config else
                       f"give the config that names it first (--config configs/demo.yaml), or --{option}=<class "
                       "path> before it")
                head = f"no {option} class_path comes before" if not before else f"it names no {option} class_path"
                raise ConfigError(f"{config or argument} sets {option} options, but {head}{why}: {fix}")


def _as_nested(key: str, value: str | None) -> list[str] | None:
    """``--model.init_args.a.b=null`` -> ``--model={"init_args": {"a": {"b": null}}}`` (for values holding
    ``null``, which jsonargparse's nested-key path would read back as the string ``"None"``, and lists or mappings
    holding a backslash, whose YAML escapes (``["\\n"]``) that path would not apply)."""
    if value is None or not key.startswith("model.") or key.endswith("+") or key == "model.class_path":
        return None
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return None
    if not _holds_none(parsed) and not (isinstance(parsed, (list, dict)) and "\\" in value):
        return None
    parts = key.split(".")[1:]
    parts = parts if parts[0] in ("init_args", "dict_kwargs") else ["init_args", *parts]
    nested: Any = parsed
    for part in reversed(parts):
        nested = {part: nested}
    return ["--model=" + json.dumps(nested)]


def _holds_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_holds_none(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_none(v) for v in value)
    return False


_NAMED_TYPES = (bool, int, float, str, list, dict, tuple, type(None))


def _causes(ex: BaseException) -> list[BaseException]:
    """``ex`` and the errors it was raised from, outermost first."""
    out: list[BaseException] = []
    while ex is not None and len(out) < 64 and ex not in out:
        out.append(ex)
        ex = ex.__cause__ or ex.__context__
    return out


def _text(ex: BaseException) -> str:
    return str(getattr(ex, "message", None) or ex)


def declared_type(key: str, model_class: Any) -> Any:
    """The type the option at the dotted ``key`` (``model.init_args.grpo.beta``, ``trainer.max_steps``) declares, or
    ``None`` where it cannot be resolved (a top-level key, a ``class_path`` value, an unknown key)."""
    parts = key.split(".")
    done, tp, _ = walk(key, model_class)
    # the model, data and trainer themselves are no option (a top-level key such as seed_everything is)
    top = 2 if parts[:2] == ["model", "init_args"] else 1 if parts[0] in ("model", "data", "trainer") else 0
    return tp if len(done) == len(parts) > top and tp is not _OPAQUE else None


MOVED_CLASSES = {"lit_grpo.callbacks.AttentionOverlays": "lit_grpo.tasks.attention.overlays.AttentionOverlays",
                 "lit_grpo.callbacks.AccuracyTable": "lit_grpo.tasks.table.AccuracyTable"}
"""Class paths that configs used to name -> where the class is now (a config that names the old path is told)."""

def _class_path_problem(causes: list[BaseException]) -> str | None:
    """``cannot import class_path '<path>': <why>`` when a class path in the error chain could not be imported
    (jsonargparse otherwise reports only that no member of the option's type matched), with the new path of a
    moved class (:data:`MOVED_CLASSES`); None when no class path failed."""
    if not causes or not isinstance(causes[-1], (ImportError, AttributeError)):
        return None  # the class imported; a problem with its arguments is reported as any other
    path = jsonargparse_import_path(causes[-1])
    if path is None:
        return None
    why = " ".join(line.strip() for line in _text(causes[-1]).splitlines() if line.strip())
    moved = f"; it moved to {MOVED_CLASSES[path]}" if path in MOVED_CLASSES else ""
    return f"cannot import class_path '{path}'" + (f": {why}" if why else "") + moved


def _takes_class_path(tp: Any) -> bool:
    """Whether an option of type ``tp`` is given as a ``class_path`` and ``init_args`` (a class that is not a
    dataclass, a callable that builds one, or a union holding either)."""
    if typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (Union, types.UnionType):
        return any(_takes_class_path(a) for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) is collections.abc.Callable:
        return True  # the optimizer and scheduler: a class given by class_path, built with the parameters
    return inspect.isclass(tp) and not dataclasses.is_dataclass(tp) and tp.__module__ != "builtins"


def _full_key(keys: list[str], model_class: Any, unknown: bool = False) -> str:
    """The dotted key from the parts each parser named: a class given by ``class_path`` has a parser of its own,
    which names its options without the ``init_args`` they sit below (``model``, then ``grpo.beta``). ``unknown``:
    the last part is a key that parser found no option for, so an ``init_args`` it starts with was written twice."""
    parts: list[str] = []
    for i, part in enumerate(keys):
        if parts and (part.split(".")[0] not in ("class_path", "init_args", "dict_kwargs")
                      or unknown and i + 1 == len(keys)):
            so_far = ".".join(parts)  # the model is always given by class_path (declared_type names no root)
            if so_far == "model" or _takes_class_path(declared_type(so_far, model_class)):
                parts.append("init_args")
        parts.append(part)
    return ".".join(parts)


def _with_indices(key: str, indices: list[int], model_class: Any) -> str:
    """``key`` with the index of each list item in it (``model.init_args.rewards[1].weight``), in order."""
    parts, shown = key.split("."), []
    for i, part in enumerate(parts):
        tp = declared_type(".".join(parts[:i + 1]), model_class)
        members = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
        listed = any(typing.get_origin(m) is list for m in members)  # a list, or a union holding one (callbacks)
        shown.append(f"{part}[{indices.pop(0)}]" if listed and indices and i + 1 < len(parts) else part)
    return ".".join(shown)


def _indexed_parent(parent: str, indices: list[int], model_class: Any) -> str:
    """``parent``, the group of an unknown key, with the index of each list item in it, its own last part included
    (``trainer.callbacks[1]``): :func:`_with_indices` indexes a list only below it, so one part is put after it."""
    return _with_indices(f"{parent}.x", list(indices), model_class).rpartition(".")[0]


def short_error(message: str, ex: BaseException | None = None, model_class: Any = None,
                configs: list[str] = (), root: Any = None, subcommands: tuple[str, ...] = SUBCOMMANDS) -> str:
    """One line from a jsonargparse error ``ex`` (``message`` when there is none): the full key, then the innermost
    explanation. ``configs``: the config files given (the one holding an unknown key is named); ``root`` and
    ``subcommands``: another command line's top-level class and subcommands (:func:`walk`; default: training's).

    The errors ``ex`` was raised from (jsonargparse chains each wrapper to its cause) give the structure: every
    wrapper names one part of the key (``model``, then ``grpo.beta`` of the model's own parser, which is under
    ``init_args``), and the last cause is the explanation; the option's declared type names the classes in it.

    The key and the refused value are read where jsonargparse raised (:func:`lit_grpo.compat.jsonargparse_refusal`),
    the rule from the declared type or pydantic's structured error; jsonargparse's own wording is passed on, never
    parsed.
    """
    causes = _causes(ex) if ex is not None else []
    keys, values = jsonargparse_refusal(causes)
    # a value given whole (a class's mapping, a list) is the user's own text, named by the key: not repeated
    values = [v for v in values if v is None or isinstance(v, (str, int, float, bool))]
    keys = [k for i, k in enumerate(keys) if i + 1 == len(keys) or not keys[i + 1].startswith(k + ".")]  # --data=F:
    key = _full_key(keys, model_class)  # its parser names "data", then "data.batch_size"
    unknown = jsonargparse_unknown_key(causes)
    if unknown is not None:  # a key that names no option: where it was set, and the options there
        return _unknown_line([*keys, unknown], causes, model_class, configs, root, subcommands)
    line = _refused_value(message, causes, key, values, model_class)
    # the config file that set the refused value (a flag's value is no file's)
    source = config_holding(without_subcommand(key, subcommands), list(configs), jsonargparse_list_indices(causes),
                            values[-1]) if key and values else None
    return f"{source}: {line}" if source else line


def with_source(line: str, configs: list[str], flags: list[str] = ()) -> str:
    """``line`` (a :class:`~lit_grpo.settings.Problem`'s, ``model.init_args.rewards[0].weight: ...``, of a value
    the run would get) after the config file that gave that value: the last one setting the key, where no flag of
    ``flags`` (the command line's keys) sets it or a group holding it afterwards."""
    key, value = getattr(line, "key", ""), getattr(line, "value", _ABSENT)
    plain = re.sub(r"\[\d+\]", "", key)
    flags = [_as_model_key(f.rstrip("+")) for f in flags]
    if not key or any(f == plain or plain.startswith(f + ".") or f.startswith(plain + ".") for f in flags):
        return line
    source = config_holding(plain, configs, [int(i) for i in re.findall(r"\[(\d+)\]", key)], value, last=True)
    return f"{source}: {line}" if source else line


def _as_model_key(key: str) -> str:
    """``model.grpo.beta`` -> ``model.init_args.grpo.beta`` (a model option written without ``init_args``)."""
    parts = key.split(".")
    return ".".join(["model", "init_args", *parts[1:]]) if parts[0] == "model" and len(parts) > 1 and parts[1] not in (
        "init_args", "class_path", "dict_kwargs") else key


def _refused_value(message: str, causes: list[BaseException], key: str, values: list[Any], model_class: Any) -> str:
    """:func:`short_error`'s line for a value refused at the dotted ``key``: the key, then the rule it breaks."""
    got = shown(values[-1]) if values else ""
    root = _text(causes[-1]) if causes else message
    detail = next((line.strip() for line in root.splitlines() if line.strip()), message.strip())
    declared = declared_type(key, model_class) if key else None
    key = _with_indices(key, jsonargparse_list_indices(causes), model_class) if key else key
    checked = next((c for c in reversed(causes) if isinstance(c, pydantic.ValidationError)), None)
    if checked is not None and key:  # a declared range or type (pydantic's structured error): the one wording
        return describe(key, checked.errors()[0], declared)
    cls = jsonargparse_class(causes) if declared is None and key.split(".")[-2:-1] == ["init_args"] else None
    if cls is not None and values:  # an init argument of a class_path's class (torch's: CLASS_RANGES): its type
        tp = argument_types(cls).get(key.rsplit(".", 1)[1], Any)
        listed = typing.get_origin(bare_type(tp)) in (list, tuple) and not isinstance(values[-1], (list, tuple))
        found = problems(values[-1], typing.get_args(tp)[0] if listed else tp, key)  # a list's item: its item type
        if found or tp is not Any:  # pydantic's lax mode took what jsonargparse refused (true for a float)
            return found[0] if found else f"{key}: expected {type_name(tp, values[-1])} (got {got})"
    members = typing.get_args(declared) if typing.get_origin(declared) in (Union, types.UnionType) else [declared]
    choices = [a for m in members if typing.get_origin(m) is typing.Literal
               for a in typing.get_args(m)]
    if choices:  # a fixed choice: its Literal names them (the declared type, not the library's wording)
        none = " or null" if type(None) in typing.get_args(declared) else ""
        detail = f"must be one of {', '.join(dict.fromkeys(map(str, choices)))}{none} (got {got})"  # 16 and "16"
    elif declared is not None and (values or typing.get_origin(declared) in (Union, types.UnionType)):
        # the declared type, not jsonargparse's words (for a union they are only its first member's failure)
        detail = f"expected {type_name(declared, None)}" + (f" (got {got})" if values else "")
    for tp in (declared, *_NAMED_TYPES):
        if isinstance(tp, type):
            detail = detail.replace(str(tp), "None" if tp is type(None) else tp.__name__)
    detail = _class_path_problem(causes) or detail
    detail = detail[0].lower() + detail[1:] if detail[:1].isupper() and not detail[1:2].isupper() else detail
    text = f"{key}: {detail}" if key else detail
    return text if len(text) <= 300 else text[:297] + "..."


def _unknown_line(keys: list[str], causes: list[BaseException], model_class: Any, configs: list[str], root: Any,
                  subcommands: tuple[str, ...]) -> str:
    """:func:`short_error`'s line for a key that names no option (the last of ``keys``, relative to the parser that
    refused it): the config that set it, and :func:`unknown_key`'s line."""
    key = without_subcommand(_full_key(keys, model_class, unknown=True), subcommands)  # a config's "fit:" block
    typo = _class_key_typo(key.split("."), 0)  # a mistyped class key: in a file, without the init_args added
    written = key if typo is None else ".".join(p for i, p in enumerate(key.split(".")) if i != typo)
    indices = jsonargparse_list_indices(causes)
    source = config_holding(written, list(configs), indices)
    line = unknown_key(key, model_class, root, jsonargparse_class(causes), list(indices))
    return (f"{source}: " if source else "") + line


def without_subcommand(key: str, subcommands: tuple[str, ...] = SUBCOMMANDS) -> str:
    """``key`` without a leading subcommand (``fit.trainer.max_steps`` -> ``trainer.max_steps``), as error lines
    name keys."""
    return key.partition(".")[2] or key if key.split(".")[0] in subcommands else key
