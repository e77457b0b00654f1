"""Config mistakes that reach jsonargparse, or that are caught before it, as one line built from structure: the key
from the chain of errors jsonargparse raised, the expected type from the option's declaration, and an unknown key
(in a flag, a mapping given whole or a config file) named with its group's options and the file that set it."""

from pathlib import Path
from typing import Optional

import pytest
import yaml
from jsonargparse import ArgumentError, ArgumentParser

from lit_grpo.cli import main
from lit_grpo.settings.args import _causes, declared_type, short_error
from lit_grpo.compat import jsonargparse_refusal
from lit_grpo.module import GRPOModule
from lit_grpo.settings import type_name
from lit_grpo.rewards import RewardSpec, build_reward


def _given(capsys, tmp_path, given):
    """The error line for ``given``: a flag, or the text of a config file given after configs/demo.yaml."""
    path = tmp_path / "over.yaml"
    if not given.startswith("--"):
        path.write_text(given + "\n")
        given = f"--config={path}"
    return _error(capsys, given), path


def _error(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", *args, "--print_config"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize("arg, line", [
    ("--model.init_args.grpo.beta=abc", "error: model.init_args.grpo.beta: must be a number >= 0 (got abc)"),
    ("--data.batch_size=x", "error: data.batch_size: must be an integer >= 1 (got x)"),
    ("--model.init_args.policy.lora.r=x", "error: model.init_args.policy.lora.r: must be an integer >= 1 (got x)"),
    # the rule the option declares (pydantic's structured error), null where the type admits None
    ("--model.init_args.grpo.max_grad_norm=abc",
     "error: model.init_args.grpo.max_grad_norm: must be a number > 0 or null (got abc)"),
    ("--model.init_args.evaluation.temperature=hot",
     "error: model.init_args.evaluation.temperature: must be a number > 0 or null (got hot)"),
    # a top-level option's declared type (bool | int), not the first member's failure
    ("--seed_everything=abc", "error: seed_everything: expected bool or int (got abc)"),
    # a choice that is both an int and a str (precision 16 and "16") is listed once
    ("--trainer.precision=bogus", "error: trainer.precision: must be one of 64, 32, 16, transformer-engine, "
                                  "transformer-engine-float16, 16-true, 16-mixed, bf16-true, bf16-mixed, 32-true, "
                                  "64-true, bf16 or null (got bogus)"),
    # a key below a plain value: said before jsonargparse shows its own parse of the rest
    ("--model.init_args.grpo.beta.x=1",
     "error: --model.init_args.grpo.beta.x: model.init_args.grpo.beta is one value (float), with no options below it"),
    ("--model.init_args.grpo.max_grad_norm.a=1", "error: --model.init_args.grpo.max_grad_norm.a: "
     "model.init_args.grpo.max_grad_norm is one value (float or null), with no options below it"),
    # a group given a value that is neither a file nor its options
    ("--trainer=5", "error: --trainer: '5' is neither a config file nor a mapping of trainer options: give a YAML "
                    "file, '{option: value}', or set one option (--trainer.<option>=...)"),
])
def test_a_wrong_value_is_named_by_its_full_key_and_declared_type(capsys, arg, line):
    assert _error(capsys, arg) == line


@pytest.mark.parametrize("arg, line", [
    ("--model.init_args.sampling={repetition_penalty: 1.05}",
     "error: sampling.repetition_penalty is refused: the loss cannot model it"),
    ("--model={init_args: {sampling: {min_p: 0.1}}}", "error: sampling.min_p is refused: the loss cannot model it"),
    ("--model.init_args.sampling={temperature: 1.0, temprature: 0.5}",
     "error: sampling.temprature is not an option (did you mean temperature?); sampling options: num_generations, temperature, top_p, top_k, "
     "max_completion_length"),
    ("--model.init_args={grpo: {betta: 0.1}}",
     "error: model.init_args.grpo: unknown option 'betta' (did you mean beta?)"),
    ("--data.train={pth: x.parquet}",
     "error: data.train: unknown option 'pth' (did you mean path?); valid: generate, path, reader, reader_args, "
     "rows, split"),
])
def test_a_mapping_given_whole_is_checked_key_by_key(capsys, arg, line):
    assert _error(capsys, arg).startswith(line)


def test_a_chain_of_errors_gives_the_key_and_the_value_from_where_jsonargparse_raised():
    """A real chain from jsonargparse (a union option of a nested parser): the key parts of every wrapper, the
    refused value of the innermost, and the type named from the declaration, not from the library's words."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--lora.r", type=Optional[int])
    with pytest.raises(ArgumentError) as err:
        parser.parse_args(["--lora.r=x"])
    chain = _causes(err.value)
    keys, values = jsonargparse_refusal(chain)
    assert keys == ["lora.r"] and values[-1] == "x"  # the union's value, then its member's: the same string
    assert short_error(str(err.value), err.value).startswith("lora.r: ")  # no declared type here: its words follow
    assert short_error("Unrecognized arguments: --x") == "unrecognized arguments: --x"  # no chain: the message


def test_declared_types_resolve_through_the_option_groups():
    assert type_name(declared_type("model.init_args.grpo.beta", GRPOModule), "x") == "float"
    assert type_name(declared_type("model.init_args.grpo.max_grad_norm", GRPOModule), "x") == "float or null"
    assert type_name(declared_type("data.batch_size", None), "x") == "int"
    assert declared_type("model.init_args.no_such.key", GRPOModule) is None
    assert declared_type("trainer.callbacks", None) is not None and declared_type("ckpt_path", None) is None
    assert type_name(declared_type("seed_everything", None), "x") == "bool or int"  # a top-level option
    assert type_name(declared_type("model.init_args.rewards.weight", GRPOModule), "x") == "float"  # a list's item


@pytest.mark.parametrize("kwargs, expected", [
    ({"tags": [1, 2]}, "option tags[0]: expected str (got 1)"),  # an item's type
    ({"tags": "think"}, "option tags: expected list (got think)"),
])
def test_a_reward_option_is_named_by_its_declared_type(kwargs, expected):
    with pytest.raises(ValueError) as err:
        build_reward(RewardSpec("format", kwargs=kwargs))  # refused when the spec is built
    assert str(err.value) == f"reward 'format' {expected}"


def test_a_judge_setting_is_found_field_by_field():
    with pytest.raises(ValueError) as err:
        build_reward(RewardSpec("rubric", kwargs={"judge": {"model": "m", "num_judges": "three"}}))
    assert str(err.value) == "reward 'rubric' option judge.num_judges: must be an integer >= 1 (got three)"


@pytest.mark.parametrize("arg, line", [
    # a moved class: the old path is named with its new one
    ("--trainer.callbacks+=lit_grpo.callbacks.AttentionOverlays",
     "error: trainer.callbacks: cannot import class_path 'lit_grpo.callbacks.AttentionOverlays': module "
     "'lit_grpo.callbacks' has no attribute 'AttentionOverlays'; it moved to "
     "lit_grpo.tasks.attention.overlays.AttentionOverlays"),
    # any class path that cannot be imported says so, not only that no member of the option's type matched
    ("--trainer.callbacks+=no_such_pkg.Callback",
     "error: trainer.callbacks: cannot import class_path 'no_such_pkg.Callback': No module named 'no_such_pkg'"),
    # the same for the other class-valued options: the model and the logger
    ("--model=lit_grpo.GRPOModul",
     "error: model: cannot import class_path 'lit_grpo.GRPOModul': module 'lit_grpo' has no attribute 'GRPOModul'"),
    ("--trainer.logger=lit_grpo.loggers.NoLogger",
     "error: trainer.logger: cannot import class_path 'lit_grpo.loggers.NoLogger': module 'lit_grpo.loggers' has no "
     "attribute 'NoLogger'"),
    # data is one class, not an option of classes: a class path given for it is named as such
    ("--data=lit_grpo.nothing.Foo",
     "error: --data: 'lit_grpo.nothing.Foo' is a class path, but data is one class here, not a class to choose: set "
     "its options (--data.<option>=...; fit --help lists them) or give a YAML file of them"),
])
def test_a_class_path_that_cannot_be_imported_is_named(capsys, arg, line):
    assert _error(capsys, arg) == line


@pytest.mark.parametrize("arg", ["--trainer.callbacks+=exiting_on_import.Callback",
                                 "--model.init_args.optimizer=exiting_on_import.Optimizer"])
def test_a_class_path_whose_module_exits_on_import_is_named(capsys, tmp_path, monkeypatch, arg):
    """A module that calls sys.exit when imported ended the command with its status and no word."""
    (tmp_path / "exiting_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = arg.split("=")[1]
    assert _error(capsys, arg) == (f"error: class_path {path}: importing exiting_on_import called sys.exit(3) (fix "
                                   "the module: one that a class_path names must not exit when imported)")


OVERLAY = "sets model options, but no model class_path comes before: a config that changes some options of another " \
    "(an overlay) goes after the config it changes: --config BASE.yaml --config "
OPTION = "sets model options, but no model class_path comes before: give the config that names it first " \
    "(--config configs/demo.yaml), or --model=<class path> before it"
LOGGER = "sets trainer.logger options, but no trainer.logger class_path comes before"
NO_MODEL = "no model: none of the configs ({}) names the model's class_path; a config that changes some settings of " \
    "another (an overlay) goes after the config it changes: --config configs/demo.yaml {}"


@pytest.mark.parametrize("args, line", [
    # an overlay config given alone, or before its base (README's ASM overlay; an overlay of a _base_ config)
    (["--config", "configs/demo_phyx_mcq_asm.yaml"], f"configs/demo_phyx_mcq_asm.yaml {OVERLAY}"
     "configs/demo_phyx_mcq_asm.yaml"),
    (["--config", "configs/demo_phyx_oe_rubric.yaml", "--config", "configs/demo_phyx_oe.yaml"],
     f"configs/demo_phyx_oe_rubric.yaml {OVERLAY}configs/demo_phyx_oe_rubric.yaml"),
    # the class named on the command line, but after the overlay
    (["--config", "configs/demo_phyx_mcq_asm.yaml", "--model.class_path=lit_grpo.GRPOModule"],
     f"configs/demo_phyx_mcq_asm.yaml {OVERLAY}configs/demo_phyx_mcq_asm.yaml"),
    # a model option on the command line before any class (none at all, or the config after it)
    (["--model.init_args.grpo.beta=0.1"], f"--model.init_args.grpo.beta=0.1 {OPTION}"),
    (["--model.init_args.grpo.beta=0.1", "--config", "configs/demo.yaml"], f"--model.init_args.grpo.beta=0.1 {OPTION}"),
    (["--model.init_args={grpo: {beta: 0.1}}", "--model=lit_grpo.GRPOModule"],
     f"--model.init_args={{grpo: {{beta: 0.1}}}} {OPTION}"),
    # the same for the logger: the overlay's run name without the logger class of its base
    (["--model=lit_grpo.GRPOModule", "--config", "configs/demo_phyx_mcq_asm.yaml"],
     f"configs/demo_phyx_mcq_asm.yaml {LOGGER}: a config that changes some options of another (an overlay) goes "
     "after the config it changes: --config BASE.yaml --config configs/demo_phyx_mcq_asm.yaml"),
    # a logger switched off, then given options (one by one, or as a mapping of the trainer): the switch is named
    (["--config", "configs/demo.yaml", "--trainer.logger=false", "--trainer.logger.init_args.name=x"],
     f"--trainer.logger.init_args.name=x {LOGGER} (--trainer.logger=false switched it off): give the config that "
     "names it first (--config configs/demo.yaml), or --trainer.logger=<class path> before it"),
    (["--config", "configs/demo.yaml", "--trainer.logger=false", "--trainer={logger: {init_args: {name: x}}}"],
     f"--trainer={{logger: {{init_args: {{name: x}}}}}} {LOGGER} (--trainer.logger=false switched it off): give the "
     "config that names it first (--config configs/demo.yaml), or --trainer.logger=<class path> before it"),
    # an overlay's class replaced by a config after it that names another (the W&B overlay before its base: a whole
    # run without W&B): both named, and the order that keeps the overlay
    (["--config", "configs/wandb.yaml", "--config", "configs/demo.yaml"],
     "configs/wandb.yaml sets trainer.logger to lit_grpo.loggers.WandbLogger, but configs/demo.yaml, given after it, "
     "sets lit_grpo.loggers.TensorBoardLogger, so configs/wandb.yaml would be ignored: a config that changes some "
     "settings of another (an overlay) goes after the config it changes: --config configs/demo.yaml --config "
     "configs/wandb.yaml"),
    (["--config", "configs/fsdp.yaml", "--config", "configs/wandb.yaml", "--config", "configs/demo_phyx_mcq.yaml"],
     "configs/wandb.yaml sets trainer.logger to lit_grpo.loggers.WandbLogger, but configs/demo_phyx_mcq.yaml (its "
     "_base_ configs/base/demo_phyx.yaml), given after it, sets lit_grpo.loggers.TensorBoardLogger, so "
     "configs/wandb.yaml would be ignored: a config that changes some settings of another (an overlay) goes after "
     "the config it changes: --config configs/fsdp.yaml --config configs/demo_phyx_mcq.yaml --config "
     "configs/wandb.yaml"),
    # configs of trainer settings alone: no model at all (every config kept in the suggestion, text quoted)
    (["--config", "configs/fsdp.yaml", "--config", "configs/wandb.yaml"], NO_MODEL.format(
        "configs/fsdp.yaml, configs/wandb.yaml", "--config configs/fsdp.yaml --config configs/wandb.yaml")),
    (["--config", "{trainer: {max_steps: 3}}"], NO_MODEL.format(
        "{trainer: {max_steps: 3}}", "--config '{trainer: {max_steps: 3}}'")),
])
def test_options_before_their_class_path_say_so(capsys, args, line):
    with pytest.raises(SystemExit) as exc:
        main(["fit", *args])  # refused while the arguments are read: before any model is built
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.strip() == f"error: {line}", err


@pytest.mark.parametrize("args, printed", [
    (["--config", "configs/demo_phyx_mcq.yaml", "--config", "configs/demo_phyx_mcq_asm.yaml"], "name: attention"),
    (["--model=lit_grpo.GRPOModule", "--config", "configs/demo.yaml", "--config", "configs/demo_phyx_mcq_asm.yaml",
      "--config", "configs/fsdp.yaml"], "class_path: lit_grpo.GRPOModule"),
    (["--config", "configs/demo.yaml", "--config", "configs/fsdp.yaml", "--model.init_args.grpo.beta=0.1"],
     "beta: 0.1"),
    # a logger class given by a trainer file or text counts, after the logger was switched off
    (["--config", "configs/demo.yaml", "--trainer.logger=false",
      "--trainer=logger: {class_path: lightning.pytorch.loggers.CSVLogger}", "--trainer.logger.init_args.name=x"],
     "name: x"),
    # printing the config of trainer settings alone shows it (model: null), as before
    (["--config", "configs/fsdp.yaml"], "strategy:"),
])
def test_options_after_their_class_path_are_accepted(capsys, args, printed):
    with pytest.raises(SystemExit) as exc:  # --print_config exits 0 after printing the merged config
        main(["fit", *args, "--print_config"])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and printed in out, out[-3000:]


def test_an_escape_in_a_list_on_the_command_line_is_applied(capsys):
    """A YAML escape inside a list given as a model option on the command line is read as in a config file."""
    import yaml

    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", r'--model.init_args.policy.extra_stop_tokens=["\n", "a\\b"]',
              "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["policy"]["extra_stop_tokens"] == ["\n", "a\\b"]


def test_help_is_given_whatever_the_order(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--help", "--config", "configs/demo_phyx_mcq_asm.yaml"])
    assert exc.value.code in (0, None) and "--model.help" in capsys.readouterr().out


@pytest.mark.parametrize("key", ["data", "trainer"])
@pytest.mark.parametrize("name", ["missing.yaml", "sub/missing.yml", "missing.json", "missing.YAML", "data.txt",
                                  "~/missing.yaml"])
def test_a_missing_group_config_file_is_named(capsys, tmp_path, monkeypatch, key, name):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "demo.yaml").write_text("model: {class_path: lit_grpo.GRPOModule}\n")
    where = tmp_path / "home" / name[2:] if name.startswith("~") else f"relative paths are read from {tmp_path}"
    assert _error(capsys, f"--{key}={name}") == f"error: --{key}: config file {name!r} not found ({where})"


@pytest.mark.parametrize("key", ["data", "trainer"])
def test_a_folder_or_a_class_path_for_a_group_is_named(capsys, tmp_path, key):
    (tmp_path / "folder.yaml").mkdir()
    assert _error(capsys, f"--{key}={tmp_path / 'folder.yaml'}") == \
        f"error: --{key}: '{tmp_path / 'folder.yaml'}' is a folder, not a config file"
    assert _error(capsys, f"--{key}=lightning.Trainer") == \
        f"error: --{key}: 'lightning.Trainer' is a class path, but {key} is one class here, not a class to choose: " \
        f"set its options (--{key}.<option>=...; fit --help lists them) or give a YAML file of them"


@pytest.mark.parametrize("value", ["~/d.yaml", "{batch_size: 3}", "batch_size: 3"])
def test_a_group_config_from_home_or_as_text_is_read(capsys, tmp_path, monkeypatch, value):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "d.yaml").write_text("batch_size: 3\n")
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", f"--data={value}", "--print_config"])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and "\n  batch_size: 3\n" in out


def test_a_group_config_file_is_read(capsys, tmp_path):
    path = tmp_path / "data.yaml"
    path.write_text("batch_size: 0\n")
    with pytest.raises(SystemExit) as exc:  # its range is checked after parsing (--print_config stops before)
        main(["fit", "--config", "configs/demo.yaml", f"--data={path}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.strip() == f"error: {path}: data.batch_size: must be >= 1 (got 0)"


def test_a_group_config_file_from_another_folder_says_where_it_is(capsys, tmp_path, monkeypatch):
    repo = Path.cwd()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", str(repo / "configs" / "demo.yaml"), "--data=configs/demo_phyx_mcq.yaml"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err == (
        f"error: --data: config file 'configs/demo_phyx_mcq.yaml' is not in {tmp_path}, the folder this command runs "
        "from (relative paths in configs and on the command line are read from there), but "
        f"{repo / 'configs' / 'demo_phyx_mcq.yaml'} exists: run the command from {repo} (cd {repo}), or give the "
        "path from here")


@pytest.mark.parametrize("text, line", [
    # an unknown option of a class given whole: the file, the key and the option, the mapping not echoed back
    ("trainer: {logger: {class_path: lit_grpo.loggers.TensorBoardLogger, init_args: {save_dir: logs, bogus_key: 1}}}",
     "error: {path}: trainer.logger.init_args: unknown option 'bogus_key'"),
    # a config that is no mapping: said as such, no traceback
    ("- a\n- b\n", "error: {path}: a config is a mapping of seed_everything, trainer, model, data"),
    ("5\n", "error: {path}: a config is a mapping of seed_everything, trainer, model, data"),
    ("just some text\n", "error: {path}: a config is a mapping of seed_everything, trainer, model, data"),
])
def test_a_config_given_whole_or_not_a_mapping_is_one_line(capsys, tmp_path, text, line):
    path = tmp_path / "over.yaml"
    path.write_text(text)
    got = _error(capsys, "--config", str(path))
    assert got.startswith(line.format(path=path)) and "{'" not in got and "Traceback" not in got, got


@pytest.mark.parametrize("arg, key", [
    # a class given by class_path has a parser of its own, which names its options without their init_args
    ("--model.init_args.optimizer.init_args.lr=abc", "model.init_args.optimizer.init_args.lr"),
    ("--model.init_args.lr_scheduler.init_args.total_iters=abc", "model.init_args.lr_scheduler.init_args.total_iters"),
    ("--trainer.logger.init_args.default_hp_metric=maybe", "trainer.logger.init_args.default_hp_metric"),
    ("--trainer.callbacks+={class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {every_n_train_steps: "
     "fifty}}", "trainer.callbacks[3].init_args.every_n_train_steps"),  # after configs/demo.yaml's three
    # a dataclass option group has none: its fields follow its key
    ("--model.init_args.policy.lora.r=x", "model.init_args.policy.lora.r"),
    ("--model.init_args.grpo={beta: x}", "model.init_args.grpo.beta"),
])
def test_the_key_of_a_class_option_includes_its_init_args(capsys, arg, key):
    assert _error(capsys, arg).startswith(f"error: {key}: ")


@pytest.mark.parametrize("args, line", [
    # torch's parameters are typed float / int; their ranges (CLASS_RANGES) word what jsonargparse refused
    (["--model.init_args.optimizer.init_args.lr=inf"],
     "model.init_args.optimizer.init_args.lr: must be a finite number >= 0 (got inf)"),
    (["--model.init_args.optimizer.init_args.lr=abc"], "model.init_args.optimizer.init_args.lr: must be a number >= 0 "
                                                       "(got abc)"),
    (["--model.init_args.lr_scheduler=torch.optim.lr_scheduler.LinearLR",
      "--model.init_args.lr_scheduler.init_args.total_iters=1.5"],
     "model.init_args.lr_scheduler.init_args.total_iters: must be an integer >= 0 (got 1.5)"),
    (["--model.init_args.optimizer.init_args.betas=[0.9, abc]"],  # an item of a list: the item's range
     "model.init_args.optimizer.init_args.betas: must be a number in [0, 1) (got abc)"),
    # another class's init argument: its declared type, None in a config's spelling
    (["--trainer.callbacks+={class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {every_n_train_steps: "
      "fifty}}"], "trainer.callbacks[3].init_args.every_n_train_steps: expected int or null (got fifty)"),
    (["--seed_everything=abc"], "seed_everything: expected bool or int (got abc)"),
    # true where a number goes: pydantic's lax mode would take it as 1; the declared rule is named
    (["--model.init_args.optimizer=torch.optim.SGD", "--model.init_args.optimizer.init_args.momentum=true"],
     "model.init_args.optimizer.init_args.momentum: must be a number >= 0 (got true)"),
])
def test_a_class_path_s_init_argument_is_refused_by_its_declared_type(capsys, args, line):
    """Was jsonargparse's wording: ``expected a float. Got value: inf``, ``expected a int``, ``one of int, None``."""
    assert _error(capsys, *args) == "error: " + line


@pytest.mark.parametrize("text, line", [
    ("fit: []", "fit: a mapping of seed_everything, trainer, model, data (got [])"),  # a traceback (AttributeError)
    ("fit: 5", "fit: a mapping of seed_everything, trainer, model, data (got 5)"),
    ("validate: null", "validate: a mapping of seed_everything, trainer, model, data (got null)"),
])
def test_a_subcommand_block_that_is_no_mapping_is_one_line(capsys, tmp_path, text, line):
    """A config given before the subcommand may hold a ``fit:`` block; one that is no mapping is named."""
    path = tmp_path / "block.yaml"
    path.write_text(text + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["--config", str(path), "fit", "--config", "configs/demo.yaml", "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == f"error: {path}: {line}\n"


@pytest.mark.parametrize("text, ignored", [
    ("model: {init_args: {grpo: {beta: -1}}}", "model"),  # an overlay's keys, never read: no range check either
    ("seed_everything: 3\ntrainer: {max_steps: 2}", "seed_everything, trainer"),
    ("fit: {trainer: {max_steps: 2}}\ndata: {batch_size: 2}", "data"),  # beside a block: still ignored
])
def test_keys_outside_the_subcommands_block_of_a_config_given_before_it_are_refused(capsys, tmp_path, text, ignored):
    """The parser before the subcommand reads only a config's ``fit:`` block; the rest was dropped unseen (a run
    with Lightning's defaults, or without the overlay)."""
    path = tmp_path / "early.yaml"
    path.write_text(text + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["--config", str(path), "fit", "--config", "configs/demo.yaml", "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == (
        f"error: {path}: given before the subcommand, a config is read only in its 'fit:' block, so {ignored} would be"
        f" ignored: give it after the subcommand (fit --config {path}), or write these keys under 'fit:'\n")


def test_an_overlays_fit_block_given_before_the_subcommand_needs_its_own_model(capsys, tmp_path):
    """Two configs before the subcommand: the second's model options were refused as "unknown option 'beta'" with the
    first file named; each such config needs its own model class_path."""
    base, overlay = tmp_path / "base.yaml", tmp_path / "overlay.yaml"
    base.write_text(yaml.safe_dump({"fit": yaml.safe_load(Path("configs/demo.yaml").read_text())}))
    overlay.write_text("fit: {model: {init_args: {grpo: {beta: 0.3}}}, trainer: {max_steps: 3}}\n")
    with pytest.raises(SystemExit) as exc:
        main(["--config", str(base), "--config", str(overlay), "fit", "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == (
        f"error: {overlay} sets model options, but it names no model class_path: a config given before the subcommand "
        "is parsed on its own, so model options there need that config's own model class_path: give it after the "
        f"subcommand (fit --config {overlay}, without its 'fit:' block)\n")
    overlay.write_text("fit: {trainer: {max_steps: 3}}\n")  # no model options: read over the first
    with pytest.raises(SystemExit):
        main(["--config", str(base), "--config", str(overlay), "fit", "--print_config"])
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["trainer"]["max_steps"] == 3 and config["model"]["class_path"] == "lit_grpo.GRPOModule"


@pytest.mark.parametrize("given, line", [
    # a flag: refused by jsonargparse, worded from the declared options of the group the first unknown part is in
    ("--data.batch_sise=3", "data: unknown option 'batch_sise' (did you mean batch_size?); valid: batch_size, "
                            "eval_batch_size, max_prompt_length, num_workers, on_bad_row, on_overlap, predict, "
                            "system_prompt, template, test, train, val"),
    ("--model.init_args.polcy.dtype=float32", "model.init_args: unknown option 'polcy' (did you mean policy?); "
                                              "valid: attention, evaluation, grpo, lr_scheduler, optimizer, perf, "
                                              "policy, rewards, sampling"),
    # a start of an option's name is not read as the option (argparse's abbreviations are off, as in a config)
    ("--model.init_args.grpo.loss_typ=dapo", "model.init_args.grpo: unknown option 'loss_typ' (did you mean "
                                             "loss_type?); valid: see --help"),
    ("--model.init_args.policy.lora.rank=4", "model.init_args.policy.lora: unknown option 'rank'; valid: "
                                             "adapter_path, alpha, dropout, r, target_modules"),
    # an init argument of a class given by class_path: the class's own, as jsonargparse lists them (a subclass's
    # **kwargs followed to its base), less what the option is called with (an optimizer's params)
    ("--trainer.logger.init_args.nme=1", "trainer.logger.init_args: unknown option 'nme' (did you mean name?); "
     "valid: comment, default_hp_metric, filename_suffix, flush_secs, log_graph, max_queue, name, prefix, "
     "purge_step, save_dir, sub_dir, version"),
    ("--model.init_args.optimizer.init_args.llr=0.1", "model.init_args.optimizer.init_args: unknown option 'llr' "
     "(did you mean lr?); valid: amsgrad, betas, capturable, differentiable, eps, foreach, fused, lr, maximize, "
     "weight_decay"),
    ("--model.init_args.lr_scheduler.init_args.totl_iters=3", "model.init_args.lr_scheduler.init_args: unknown "
     "option 'totl_iters' (did you mean total_iters?); valid: end_factor, last_epoch, start_factor, total_iters"),
    # init_args itself mistyped: named where it is, not read as an option of the class
    ("--model.init_arg.grpo.beta=1", "model: unknown option 'init_arg' (did you mean init_args?)"),
    ("--trainer.logger.init_arg.name=x", "trainer.logger: unknown option 'init_arg' (did you mean init_args?)"),
    ("--model.init_args.optimizer.clas_path=torch.optim.SGD",
     "model.init_args.optimizer: unknown option 'clas_path' (did you mean class_path?)"),
    ("model: {init_args: {lr_scheduler: {class_pth: torch.optim.lr_scheduler.LinearLR}}}",
     "{path}: model.init_args.lr_scheduler: unknown option 'class_pth' (did you mean class_path?)"),
    ("trainer: {callbacks: [{class_path: lightning.pytorch.callbacks.ModelCheckpoint}, "
     "{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_arg: {save_top_k: 1}}]}",
     "{path}: trainer.callbacks[1]: unknown option 'init_arg' (did you mean init_args?)"),
    # init_args written twice: the second is the unknown option, in the file that wrote it (a flag names none; the
    # options below it are the class's own, not blamed)
    ("--model.init_args.init_args.grpo.beta=1", "model.init_args: unknown option 'init_args'; valid: attention, "
     "evaluation, grpo, lr_scheduler, optimizer, perf, policy, rewards, sampling"),
    ("model: {init_args: {init_args: {grpo: {beta: 1}}}}", "{path}: model.init_args: unknown option 'init_args'"),
    ("--model.init_args.optimizer.init_args.init_args.lr=1", "model.init_args.optimizer.init_args: unknown option "
     "'init_args'; valid: amsgrad, betas, "),
    ("--trainer.logger.init_args.init_args.name=x", "trainer.logger.init_args: unknown option 'init_args'; valid: "
     "comment, "),
    ("trainer: {callbacks: [{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {init_args: "
     "{dirpath: x}}}]}", "{path}: trainer.callbacks[0].init_args: unknown option 'init_args'; valid: "
     "auto_insert_metric_name, dirpath, "),
    # a config file: named with the key; a list's item, the model's short form and a subcommand block too
    ("trainr: {max_steps: 3}", "{path}: unknown option 'trainr' (did you mean trainer?); valid: ckpt_path, data, "
                               "model, return_predictions, seed_everything, trainer, verbose, weights_only"),
    ("model: {init_args: {rewards: [{name: binary, wieght: 1}]}}",
     "{path}: model.init_args.rewards[0]: unknown option 'wieght' (did you mean weight?); valid: alias, kwargs, "
     "name, weight"),
    ("model: {grpo: {betta: 1}}", "{path}: model.init_args.grpo: unknown option 'betta' (did you mean beta?)"),
    # a "fit:" block in a config given after the subcommand is refused as a block (it blamed a real option in the
    # config before it: "configs/demo.yaml: trainer: unknown option 'max_steps'"; "fit: 5" was a KeyError traceback)
    ("fit: {trainer: {max_steps: 3}}",
     "{path}: a 'fit:' block is read from a config given before the subcommand (--config F fit ...); in one given "
     "after it, write its options without the block"),
    ("fit: {model: {init_args: {grpo: {beta: 1}}}}", "{path}: a 'fit:' block is read from a config given before "),
    ("fit: {trainer: {logger: {init_args: {name: x}}}}", "{path}: a 'fit:' block is read from a config given before "),
    ("fit: {data: {batch_sise: 2}}", "{path}: a 'fit:' block is read from a config given before "),
    ("fit: 5", "{path}: a 'fit:' block is read from a config given before "),
    ("trainer: {callbacks: [{class_path: lightning.pytorch.callbacks.ModelCheckpoint}, "
     "{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {save_top_kk: 1}}]}",
     "{path}: trainer.callbacks[1].init_args: unknown option 'save_top_kk' (did you mean save_top_k?); valid: "
     "auto_insert_metric_name, dirpath, "),
    # the file is found by the item's index, not by the first item that has init_args
    ("trainer: {callbacks: [{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {dirpath: a}}, "
     "{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {every_n_stepz: 1}}]}",
     "{path}: trainer.callbacks[1].init_args: unknown option 'every_n_stepz' (did you mean every_n_train_steps?)"),
    ("trainer: {callbacks: [{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {dirpath: a}}, "
     "{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {init_args: {dirpath: b}}}]}",
     "{path}: trainer.callbacks[1].init_args: unknown option 'init_args'; valid: "),
    ("--model.init_args.rewards=[{name: format}, {name: format, wieght: 1}]",
     "model.init_args.rewards[1]: unknown option 'wieght' (did you mean weight?)"),
    # the rules an unknown key of a group carries: a renamed option, a sampling option the loss cannot model
    ("model: {init_args: {perf: {share_prefix: true}}}",
     "{path}: model.init_args.perf: share_prefix is now engine: shared"),
    ("optimizer: {lr: 1}", "{path}: optimizer: the optimizer and its scheduler are part of the model"),
    # below a dict option, one key: a second is refused before jsonargparse would store "a.b" as one key
    ("--data.train.reader_args.a.b=1", "--data.train.reader_args.a.b: data.train.reader_args is a dict: set one of "
                                       "its keys (--data.train.reader_args.a=...) or give it whole"),
])
def test_an_unknown_key_is_refused_by_the_parser_and_named_with_its_group_and_file(capsys, tmp_path, given, line):
    got, path = _given(capsys, tmp_path, given)
    assert got.startswith("error: " + line.format(path=path))




@pytest.mark.parametrize("given, line", [
    ("--model.init_args.grpo.loss_type=dapoo", "model.init_args.grpo.loss_type: unknown loss type 'dapoo' (did you "
     "mean dapo?); registered: bnpo, cispo, dapo, dr_grpo, grpo, luspo, micro-batch-token-mean, sapo, "
     "seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm, token-mean, vespo"),
    ("model: {init_args: {grpo: {scale_rewards: Group}}}", "model.init_args.grpo.scale_rewards: unknown advantage "
     "scaling 'Group' (did you mean group?); registered: batch, batch-std, dr_grpo, group, group-std, grpo, no-std, "
     "none, reinforce++"),
    ("--model.init_args.perf.engine=vlm", "model.init_args.perf.engine: unknown rollout engine 'vlm' (did you mean "
     "vllm?); registered: plain, shared, "),  # then vllm, vllm_server (and any engine a test registered)
    # (the registered names are cut short where a test module may register another in the same process)
    ("--model.init_args.rewards=[{name: format}, {name: binry}]", "model.init_args.rewards[1].name: unknown reward "
     "'binry' (did you mean binary?); registered: accuracy, attention, binary, "),
    ("--model.init_args.evaluation.scorer=nope.module.fn", "model.init_args.evaluation.scorer: unknown reward "
     "'nope.module.fn'; registered: accuracy, "),
    ("--data.template=visualsphinx_sed", "data.template: unknown prompt template 'visualsphinx_sed' (did you mean "
     "visualsphinx_seed?); registered: "),
    ("data: {train: {reader: phix}}", "data.train.reader: unknown dataset reader 'phix' (did you mean phyx?); "
     "registered: "),
])
def test_a_name_no_registry_holds_is_refused_when_the_config_is_read(capsys, tmp_path, given, line):
    """A registered name (loss type, scaling, engine, reward, scorer, template, reader) is checked by its declared
    type while the config is parsed (``--print_config`` stops before any startup check), naming the closest, and
    the config file that gave it."""
    err, path = _given(capsys, tmp_path, given)
    assert err.startswith("error: " + ("" if given.startswith("--") else f"{path}: ") + line)


@pytest.mark.parametrize("given, line", [
    # the index of a list's item, which jsonargparse's keys leave out, read where it was reading the list
    ("model: {init_args: {rewards: [{name: format}, {name: binary, weight: abc}]}}",
     "model.init_args.rewards[1].weight: expected float (got abc)"),
    ("--model.init_args.rewards=[{name: format}, {name: format}, {name: binary, weight: abc}]",
     "model.init_args.rewards[2].weight: expected float (got abc)"),
    ("trainer: {callbacks: [{class_path: lightning.pytorch.callbacks.ModelCheckpoint}, "
     "{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {save_top_k: abc}}]}",
     "trainer.callbacks[1].init_args.save_top_k: "),
])
def test_an_item_of_a_list_is_named_by_its_index(capsys, tmp_path, given, line):
    err, path = _given(capsys, tmp_path, given)
    assert err.startswith("error: " + ("" if given.startswith("--") else f"{path}: ") + line)


@pytest.mark.parametrize("configs, flag, named", [
    (["neg"], None, "neg"),  # the file that gave the refused value
    (["neg", "ok"], None, "neg"),  # refused as it is read, though a later file would set another
    (["ok", "neg"], None, "neg"),
    (["ok"], "--model.init_args.grpo.beta=-1", None),  # a flag's value: the file that set beta gave 0.1, not it
    (["nan"], None, "nan"),  # NaN is no value equal to itself
    (["short"], None, "short"),  # model.grpo.beta, as a config may write model.init_args.grpo.beta
])
def test_a_value_refused_as_a_config_is_read_names_the_config(capsys, tmp_path, configs, flag, named):
    texts = {"neg": "model: {init_args: {grpo: {beta: -1}}}", "ok": "model: {init_args: {grpo: {beta: 0.1}}}",
             "nan": "model: {init_args: {grpo: {beta: .nan}}}", "short": "model: {grpo: {beta: -1}}"}
    args = []
    for name in configs:
        (tmp_path / f"{name}.yaml").write_text(texts[name] + "\n")
        args += ["--config", str(tmp_path / f"{name}.yaml")]
    line = f"model.init_args.grpo.beta: must be >= 0 (got {'nan' if named == 'nan' else -1})"
    assert _error(capsys, *args, *([flag] if flag else [])) == \
        "error: " + (f"{tmp_path / named}.yaml: " if named else "") + line


def test_a_config_given_before_the_subcommand_with_no_block_for_it_is_refused(capsys, tmp_path):
    """``--config F validate`` where F has only a ``fit:`` block: nothing in F was read, and validate ran without it."""
    path = tmp_path / "fit_only.yaml"
    path.write_text(yaml.safe_dump({"fit": yaml.safe_load(Path("configs/demo.yaml").read_text())}))
    with pytest.raises(SystemExit) as exc:
        main(["--config", str(path), "validate", "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == (
        f"error: {path}: given before the subcommand validate, a config is read in its 'validate:' block; it has none "
        "(only fit:), so nothing in it would be read\n")


@pytest.mark.parametrize("text", ["# nothing yet\n", "null\n", "---\n"])
def test_an_empty_config_file_is_named(capsys, tmp_path, text):
    """jsonargparse said ``unexpected config: # nothing yet``, naming no file."""
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    assert _error(capsys, "--config", str(path)) == (
        f"error: {path}: a config is a mapping of seed_everything, trainer, model, data, ckpt_path, weights_only, "
        "verbose, return_predictions; this one is empty")
