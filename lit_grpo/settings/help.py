"""What ``python -m lit_grpo fit --help`` shows besides LightningCLI's own help, and help flags that work as named.

LightningCLI's help lists the trainer's and the data module's options, but a model given by ``class_path``
appears as one ``--model`` line, and the rewards are registered names, not classes. :func:`extra_help` adds
three sections after it: the configured model class's options (each with its one-line doc, type and default,
as jsonargparse prints them), the options of one dataset (``data.train`` / ``val`` / ``test`` / ``predict``),
and every registered reward with what it reads and its options (``kwargs``). :func:`help_args` makes the help
flags that these name work on the command line: ``--model.help`` without a class shows the configured one, and
a nested ``--model.init_args.<key>.help`` (``--model.init_args.policy.lora.help``) is read below that class.
"""

from __future__ import annotations

import argparse
import inspect
import textwrap
from typing import Any

from lit_grpo.compat import argument_groups, help_formatter

MODEL_HELP = "model.help"


def help_args(args: list[str], model_class: Any) -> list[str]:
    """``args`` with the model's help flags in the form jsonargparse reads: ``--model.help`` without a class ->
    ``--model.help <the configured class>``; ``--model[.init_args].<key>.help`` -> ``--model.help <class>
    --model.<key>.help``."""
    from lit_grpo.settings.argv import iter_options

    path = f"{model_class.__module__}.{model_class.__qualname__}"
    out, last, model_help = [], 0, False
    for key, value, (start, end) in iter_options(args):
        out += args[last:start]
        last = end
        if key == MODEL_HELP:
            model_help = True
            out += [f"--{MODEL_HELP}", value or path]
        elif key.startswith("model.") and key.endswith(".help"):
            nested = key.removeprefix("model.").removeprefix("init_args.")
            group = _option_group(model_class, nested.removesuffix(".help").split("."))
            if group is not None and value is None:  # an option group (grpo, sampling): no help action of its own
                from jsonargparse import ArgumentParser

                from lit_grpo.settings import HelpFormatter

                parser = ArgumentParser(prog="python -m lit_grpo fit", usage=argparse.SUPPRESS,
                                        formatter_class=HelpFormatter)
                parser.add_class_arguments(group, f"model.init_args.{nested.removesuffix('.help')}",
                                           fail_untyped=False, sub_configs=True)
                print(parser.format_help())
                raise SystemExit(0)
            out += ([] if model_help else [f"--{MODEL_HELP}", path]) + [f"--model.{nested}"]
            out += [value] if value is not None else []
            model_help = True
        else:
            out += args[start:end]
    return out + args[last:]


def _option_group(model_class: Any, parts: list[str]) -> type | None:
    """The dataclass option group at ``parts`` below ``model_class``'s ``__init__`` (``["grpo"]`` -> ``GRPOConfig``),
    which jsonargparse gives no ``.help`` flag of its own; None for anything else (a class given by ``class_path``,
    an optional group, a plain option: jsonargparse's own help flag, or its error, stands)."""
    import dataclasses

    from lit_grpo.settings.args import walk

    done, tp, _ = walk(".".join(["model", "init_args", *parts]), model_class)
    return tp if len(done) == len(parts) + 2 and isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def extra_help(parser_class: type, model_class: Any) -> str:
    """The sections ``fit --help`` adds (see the module docstring): ``model_class``'s options as
    ``--model.init_args.<key>``, one dataset's options, the registered rewards."""
    from lit_grpo.data.datamodule import DatasetSpec

    name = f"{model_class.__module__.split('.')[0]}.{model_class.__name__}"
    model = _options(parser_class, model_class, "model.init_args")
    data = _options(parser_class, DatasetSpec, "data.train")
    return "\n".join([
        _heading(f"Model options ({name}, the configured model; either model's: --model.help lit_grpo.GRPOModule, "
                 "--model.help lit_grpo.SFTModule). In a config they sit under model.init_args; a nested option's own "
                 "help: --model.init_args.<option>.help"),
        model,
        _heading("Dataset options, shown for data.train; data.val, data.test and data.predict take the same "
                 "(--data.val.path ...)"),
        data,
        reward_help(parser_class),
    ])


def _heading(text: str) -> str:
    return "\n" + textwrap.fill(text, width=100) + ":"


def _options(parser_class: type, cls: type, prefix: str) -> str:
    """``cls``'s options under ``prefix`` as jsonargparse's help formats them (groups, docs, types, defaults)."""
    parser = parser_class()
    parser.add_class_arguments(cls, prefix, fail_untyped=False, sub_configs=True)
    formatter = help_formatter(parser)
    for title, group in argument_groups(parser):
        actions = [a for a in group if a.metavar != "CONFIG" and "-h" not in a.option_strings]
        if not actions:
            continue
        formatter.start_section(title)  # argparse's default groups: no title (None)
        formatter.add_arguments(actions)
        formatter.end_section()
    return formatter.format_help().rstrip("\n")


def reward_help(parser_class: type) -> str:
    """Every registered reward: its summary (the docstring's first paragraph), the columns it reads, and each
    option with its type, default and doc (from the reward's ``Args:`` section); then the fields of each settings
    class an option takes as a mapping (a judge's :class:`~lit_grpo.tasks.phyx.judge.JudgeConfig`)."""
    from docstring_parser import DocstringStyle, parse

    from lit_grpo.rewards.registry import REWARDS, reward_info, reward_options, settings_class

    settings_of: dict[type, list[str]] = {}
    lines = [_heading("Rewards: model.init_args.rewards is a list of {name, weight, kwargs, alias}; the total is "
                      "the weighted sum. Registered rewards, the columns each reads, and its options (kwargs)")]
    for name in REWARDS.names():
        entry = REWARDS.get(name)
        fn = entry.__init__ if inspect.isclass(entry) else entry
        params = {arg.strip(): p.description for obj in {entry, fn}  # "a, b: ..." documents both
                  for p in parse(inspect.getdoc(obj) or "", style=DocstringStyle.GOOGLE).params
                  for arg in p.arg_name.split(",")}
        reads = ", ".join(reward_info(name).columns) or "the completions only"
        lines.append(_wrap(f"{name}: {summary(entry)} (reads: {reads})", 2))
        signature = inspect.signature(fn).parameters
        for option in reward_options(name):
            p = signature[option]
            kind = p.annotation if isinstance(p.annotation, str) else inspect.formatannotation(p.annotation)
            default = "required" if p.default is p.empty else f"default: {p.default!r}"
            settings = settings_class(name, option)
            if settings is not None:
                settings_of.setdefault(settings, []).append(f"{name}.kwargs.{option}")
            doc = _one_line(params.get(option)) or "(no description)"
            lines.append(_wrap(f"kwargs.{option}: {doc} (type: {kind}, {default})", 6))
        if not reward_options(name):
            lines.append("      no options")
    for settings, users in settings_of.items():  # keys of a reward's kwargs, not flags: shown without dashes
        lines += [_heading(f"{settings.__name__} settings: the keys of the mapping given as {', '.join(users)}"),
                  _options(parser_class, settings, "kwargs." + users[0].rsplit(".", 1)[-1]).replace("--kwargs.",
                                                                                                    "kwargs.")]
    return "\n".join(lines)


def summary(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring, on one line."""
    return _one_line((inspect.getdoc(obj) or "").split("\n\n", 1)[0])


def _wrap(text: str, indent: int) -> str:
    return textwrap.fill(text, width=100, initial_indent=" " * indent, subsequent_indent=" " * (indent + 2))


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())
