"""``fit --help``: every model, dataset and reward option with its doc and default, and every help flag it names works."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re

import pytest

from lit_grpo.tasks.attention.meter import AttentionConfig
from lit_grpo.cli import GRPOCLI, main
from lit_grpo.settings.args import prepare_args
from lit_grpo.settings.help import help_args
from lit_grpo.config import EvalConfig, GRPOConfig, PerfConfig
from lit_grpo.data.datamodule import DatasetSpec
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards.registry import REWARDS
from lit_grpo.rollout import SamplingConfig
from lit_grpo.sft import SFTModule

GRPO_GROUPS = {"policy": PolicyConfig, "grpo": GRPOConfig, "sampling": SamplingConfig, "evaluation": EvalConfig,
               "attention": AttentionConfig, "perf": PerfConfig}


def run(args: list[str]) -> tuple[int, str]:
    """Exit status and output (stdout + stderr) of ``python -m lit_grpo <args>``, in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), pytest.raises(SystemExit) as exc:
        main(args)
    return exc.value.code, out.getvalue()


def entries(text: str) -> dict[str, str]:
    """``--key`` -> its help entry on one line (jsonargparse's layout: the key at two spaces, the doc indented)."""
    found, key = {}, None
    for line in text.splitlines():
        m = re.match(r"  (--[\w.+]+)", line)
        if m:
            key = m.group(1)
            found[key] = line
        elif key and line.startswith("    "):
            found[key] += " " + line.strip()
        else:
            key = None
    return {k: " ".join(v.split()) for k, v in found.items()}


@pytest.fixture(scope="module")
def fit_help() -> str:
    code, text = run(["fit", "--help"])
    assert code == 0
    return text


def test_fit_help_lists_every_model_option_with_its_doc_and_default(fit_help):
    help_of = entries(fit_help)
    for group, cls in GRPO_GROUPS.items():
        for f in dataclasses.fields(cls):
            entry = help_of[f"--model.init_args.{group}.{f.name}"]
            assert "default:" in entry or "required" in entry, entry
    for top in ("rewards", "optimizer", "lr_scheduler"):
        assert f"--model.init_args.{top}" in help_of
    # docs and defaults as the option classes state them
    assert "Lower clip range of the importance ratio" in help_of["--model.init_args.grpo.epsilon_low"]
    assert "(type: float, default: 0.2)" in help_of["--model.init_args.grpo.epsilon_low"]
    assert "(type: int, default: 8)" in help_of["--model.init_args.sampling.num_generations"]
    assert "default: ibm-granite/granite-" in help_of["--model.init_args.policy.name_or_path"]
    assert "Model options (lit_grpo.GRPOModule, the configured model" in fit_help


def test_fit_help_lists_dataset_and_data_module_options(fit_help):
    help_of = entries(fit_help)
    for f in dataclasses.fields(DatasetSpec):
        assert f"--data.train.{f.name}" in help_of
    assert "(type: str, default: visualsphinx)" in help_of["--data.train.reader"]
    assert "(type: int, default: 4)" in help_of["--data.batch_size"]


# name -> {option: the default as Python writes it}: the registered rewards' signatures, read by hand
REWARD_OPTIONS = {
    "accuracy": {"tag": "'answer'"},
    "attention": {},
    "binary": {"mode": "'official'"},
    "boxed_format": {},
    "format": {"tags": "['think', 'answer', 'unit', 'principle']"},
    "open_accuracy": {"judge": "None"},
    "phyx_official": {},
    "rubric": {"weights": "None", "strict": "False", "judge": "None", "absent_factor": "0.6",
               "length_scale": "4000.0", "length_cap": "0.05", "length_unit": "'chars'",
               "literal_mcq_penalty": "False", "tags": "None"},
}


def test_fit_help_lists_every_reward_with_its_options_docs_and_defaults(fit_help):
    assert set(REWARD_OPTIONS) <= set(REWARDS.names())
    section = fit_help.split("\nRewards: ", 1)[1]
    flat = " ".join(section.split())
    for name, options in REWARD_OPTIONS.items():
        block = " ".join(re.search(rf"\n  {name}: (.*?)(?=\n  [\w.]+: |\n\n|\Z)", section, re.S).group(1).split())
        for option, default in options.items():
            assert f"kwargs.{option}: " in block and f"default: {default})" in block, (name, option, block)
        if not options:
            assert block.endswith("no options")
        assert "(no description)" not in block  # every option has its one-line doc
    assert "kwargs.mode: how the box is found" in flat
    assert "kwargs.judge.base_url" in section and "kwargs.judge.offline.rel_tol" in section  # the judge's fields,
    assert "--kwargs." not in section  # keys of a mapping, not flags (--kwargs.judge.num_judges is no option)


def test_sft_config_help_shows_the_sft_module(capsys):
    code, text = run(["fit", "--config", "configs/demo_sft.yaml", "--help"])
    help_of = entries(text)
    assert code == 0 and "Model options (lit_grpo.SFTModule" in text
    assert "--model.init_args.reference" in help_of and "--model.init_args.grpo.beta" not in help_of


REQUIRED_HELP_ARGUMENT = {
    "--trainer.callbacks.help": "lit_grpo.callbacks.EvalSummary",
    "--trainer.logger.help": "lit_grpo.loggers.TensorBoardLogger",
    "--trainer.plugins.help": "lightning.pytorch.plugins.Precision",
    "--model.lr_scheduler.help": "torch.optim.lr_scheduler.LinearLR",
    "--model.init_args.lr_scheduler.help": "torch.optim.lr_scheduler.LinearLR",
}


def named_help_flags(text: str) -> dict[str, bool]:
    """Each ``--<key>.help`` flag ``text`` names -> whether it requires a class argument."""
    flags = {}
    for m in re.finditer(r"(--[\w.<>]+\.help)( \[CLASS_PATH_OR_NAME\]| CLASS_PATH_OR_NAME)?", text):
        if "<" not in m.group(1):
            flags[m.group(1)] = flags.get(m.group(1), False) or (m.group(2) or "").strip() == "CLASS_PATH_OR_NAME"
    return flags


@pytest.fixture(scope="module")
def parser():
    """The command line's parser, built once (``main`` builds it again on every call)."""
    class Built(Exception):
        pass

    def keep(self, parser, args):
        raise Built(parser)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(GRPOCLI, "parse_arguments", keep)
        with pytest.raises(Built) as exc:
            main(["fit"])
    return exc.value.args[0]


def parse(parser, args: list[str], model_class) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), pytest.raises(SystemExit) as exc:
        parser.parse_args(help_args(prepare_args(args), model_class))
    return exc.value.code, out.getvalue()


def test_every_help_flag_the_help_names_works(fit_help, parser):
    from lit_grpo import GRPOModule

    flags = named_help_flags(fit_help)
    for model_class in (GRPOModule, SFTModule):
        code, text = parse(parser, ["fit", "--model.help", f"lit_grpo.{model_class.__name__}"], model_class)
        assert code == 0 and f"Help for --model.help=lit_grpo.{model_class.__name__}" in text
        flags.update(named_help_flags(text))
    assert {"--model.help", "--data.train.help", "--data.predict.help", "--trainer.logger.help",
            "--model.init_args.policy.lora.help", "--model.init_args.evaluation.judge.help",
            "--model.policy.lora.help", "--model.rewards.help"} <= set(flags)
    assert {f for f, required in flags.items() if required} <= set(REQUIRED_HELP_ARGUMENT)
    for flag, required in sorted(flags.items()):
        args = ["fit", flag] + ([REQUIRED_HELP_ARGUMENT[flag]] if required else [])
        code, text = parse(parser, args, GRPOModule)
        flat = " ".join(text.split())  # jsonargparse wraps a header with a long class path (a task's) at the width
        assert code == 0 and "Help for " in flat and "--" in flat.split("Help for ", 1)[1], (flag, text[-500:])
    code, text = parse(parser, ["fit", "--model.help", "GRPOModule"], GRPOModule)  # the class's short name
    assert code == 0 and "--model.grpo.epsilon_low" in text
    code, text = parse(parser, ["fit", "--model.help"], SFTModule)  # no class: the configured one
    assert code == 0 and "Help for --model.help=lit_grpo.SFTModule" in text


@pytest.mark.parametrize("group,option,doc", [
    ("grpo", "beta", "Weight of the k3 KL to the reference policy"),
    ("sampling", "num_generations", "type: int"),
    ("evaluation", "before_fit", "type: bool"),
    ("policy", "name_or_path", "type: str"),
    ("evaluation.judge", "base_url", "type:"),  # an optional group: jsonargparse's own help (its short keys)
])
def test_the_help_flag_of_every_option_group_works(group, option, doc):
    """``--model.init_args.<group>.help``, as the help's header names it, for the option groups jsonargparse gives
    no help flag of their own (``grpo``, ``sampling``, ...; it answered "unrecognized arguments") and one it does:
    exit 0 and the group's options, each with its doc."""
    code, text = run(["fit", "--config", "configs/demo.yaml", f"--model.init_args.{group}.help"])
    help_of = entries(text)
    assert code == 0, text
    key = f"--model.{'' if group == 'evaluation.judge' else 'init_args.'}{group}.{option}"
    assert doc in help_of[key], help_of.keys()
