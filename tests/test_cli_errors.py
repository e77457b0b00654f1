"""Config mistakes that reach jsonargparse, or that are caught before it, as one line built from structure: the key
from the chain of errors jsonargparse raised, the expected type from the option's declaration, and a mapping given
whole on the command line checked key by key like a config file."""

import pytest

from lit_grpo.cli import main
from lit_grpo.cli_args import declared_type, short_error
from lit_grpo.module import GRPOModule
from lit_grpo.ranges import type_name
from lit_grpo.rewards import RewardSpec, build_reward


def _error(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", *args, "--print_config"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize("arg, line", [
    ("--model.init_args.grpo.beta=abc", "error: model.init_args.grpo.beta: expected a float. Got value: abc"),
    ("--data.batch_size=x", "error: data.batch_size: expected a int. Got value: x"),
    ("--model.init_args.policy.lora.r=x", "error: model.init_args.policy.lora.r: expected a int. Got value: x"),
    # a union names all its members (jsonargparse's cause holds only the first member's failure)
    ("--model.init_args.grpo.max_grad_norm=abc",
     "error: model.init_args.grpo.max_grad_norm: expected one of float, None. Got value: abc"),
    ("--model.init_args.evaluation.temperature=hot",
     "error: model.init_args.evaluation.temperature: expected one of float, None. Got value: hot"),
])
def test_a_wrong_value_is_named_by_its_full_key_and_declared_type(capsys, arg, line):
    assert _error(capsys, arg) == line


@pytest.mark.parametrize("arg, line", [
    ("--model.init_args.sampling={repetition_penalty: 1.05}",
     "error: sampling.repetition_penalty is refused: the loss cannot model it"),
    ("--model={init_args: {sampling: {min_p: 0.1}}}", "error: sampling.min_p is refused: the loss cannot model it"),
    ("--model.init_args.sampling={temperature: 1.0, temprature: 0.5}",
     "error: sampling.temprature is not an option; sampling options: num_generations, temperature, top_p, top_k, "
     "max_completion_length"),
    ("--model.init_args={grpo: {betta: 0.1}}",
     "error: --model.init_args.grpo: unknown option 'betta' (did you mean beta?)"),
    ("--data.train={pth: x.parquet}",
     "error: --data.train: unknown option 'pth' (did you mean path?); valid: generate, path, reader, reader_args, "
     "rows, split"),
])
def test_a_mapping_given_whole_is_checked_key_by_key(capsys, arg, line):
    assert _error(capsys, arg).startswith(line)


def test_a_chain_of_errors_gives_the_key_and_the_last_cause_the_explanation():
    cause = ValueError("Expected a <class 'int'>. Got value: x")
    inner = TypeError('Parser key "policy.lora.r":\n  ' + str(cause))
    inner.__cause__ = cause
    union = ValueError("Does not validate against any of the Union subtypes\nSubtypes: [...]")
    union.__cause__ = inner
    outer = TypeError('Parser key "model":\n  Does not validate against any of the Union subtypes')
    outer.__cause__ = union
    assert short_error(str(outer), outer, GRPOModule) == "model.init_args.policy.lora.r: expected a int. Got value: x"
    assert short_error("Unrecognized arguments: --x") == "unrecognized arguments: --x"  # no chain: the message


def test_declared_types_resolve_through_the_option_groups():
    assert type_name(declared_type("model.init_args.grpo.beta", GRPOModule), "x") == "float"
    assert type_name(declared_type("model.init_args.grpo.max_grad_norm", GRPOModule), "x") == "one of float, None"
    assert type_name(declared_type("data.batch_size", None), "x") == "int"
    assert declared_type("model.init_args.no_such.key", GRPOModule) is None
    assert declared_type("trainer.callbacks", None) is not None and declared_type("seed_everything", None) is None


@pytest.mark.parametrize("kwargs, expected", [
    ({"tags": [1, 2]}, "option 'tags': expected list[str], got [1, 2]"),   # a list, with items of the wrong type
    ({"tags": "think"}, "option 'tags': expected list, got 'think'"),
])
def test_a_reward_option_is_named_by_its_declared_type(kwargs, expected):
    with pytest.raises(ValueError) as err:
        build_reward(RewardSpec("format", kwargs=kwargs))
    assert str(err.value) == f"reward 'format' {expected}"


def test_a_judge_setting_is_found_field_by_field():
    with pytest.raises(ValueError) as err:
        build_reward(RewardSpec("rubric", kwargs={"judge": {"model": "m", "num_judges": "three"}}))
    assert str(err.value) == "reward 'rubric' option 'judge.num_judges': expected int, got three"


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
     "error: --data: 'lit_grpo.nothing.Foo' is a class path, but data is lit_grpo's one data module (not a class to "
     "choose): set its options (--data.train=...; fit --help lists them) or give a YAML file of them"),
    ("--data=lit_grpo.data.datamodule.VLMDataModule",
     "error: --data: 'lit_grpo.data.datamodule.VLMDataModule' is a class path, but data is lit_grpo's one data module "
     "(not a class to choose): set its options (--data.train=...; fit --help lists them) or give a YAML file of them"),
])
def test_a_class_path_that_cannot_be_imported_is_named(capsys, arg, line):
    assert _error(capsys, arg) == line


OVERLAY_LINE = ("error: model: options given but no class_path (e.g. `model: {class_path: lit_grpo.GRPOModule}`); a "
                "config that changes a few options of another (an overlay) goes after it: --config BASE.yaml --config "
                "OVERLAY.yaml (WHY)")


@pytest.mark.parametrize("args, why", [
    # an overlay config given alone (README's ASM overlay without its base)
    (["--config", "configs/demo_phyx_mcq_asm.yaml"], "option 'rewards' is not accepted"),
    (["--config", "configs/demo_phyx_oe_rubric.yaml"], "option 'rewards' is not accepted"),
    # model options on the command line with no config at all
    (["--model.init_args.grpo.beta=0.1"], "unrecognized arguments: --grpo.beta=0.1"),
])
def test_model_options_without_a_class_path_say_so(capsys, args, why):
    with pytest.raises(SystemExit) as exc:
        main(["fit", *args, "--print_config"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.strip() == OVERLAY_LINE.replace("WHY", why), err


def test_an_overlay_after_its_base_is_accepted(capsys):
    with pytest.raises(SystemExit) as exc:  # --print_config exits 0 after printing the merged config
        main(["fit", "--config", "configs/demo_phyx_mcq.yaml", "--config", "configs/demo_phyx_mcq_asm.yaml",
              "--print_config"])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and "name: attention" in out and "weight: 100.0" in out


@pytest.mark.parametrize("key", ["data", "trainer"])
@pytest.mark.parametrize("name", ["missing.yaml", "sub/missing.yml", "missing.json"])
def test_a_missing_group_config_file_is_named(capsys, tmp_path, monkeypatch, key, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "demo.yaml").write_text("model: {class_path: lit_grpo.GRPOModule}\n")
    assert _error(capsys, f"--{key}={name}") == \
        f"error: --{key}: config file {name!r} not found (relative paths are read from {tmp_path})"


def test_a_group_config_file_is_read(capsys, tmp_path):
    path = tmp_path / "data.yaml"
    path.write_text("batch_size: 0\n")
    with pytest.raises(SystemExit) as exc:  # its range is checked after parsing (--print_config stops before)
        main(["fit", "--config", "configs/demo.yaml", f"--data={path}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.strip() == "error: data.batch_size must be >= 1 (prompts per step), got 0"
