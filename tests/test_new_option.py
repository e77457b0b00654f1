"""A new option needs one line in one file: its field, with its check declared on its type (ARCHITECTURE.md, "An
option"). This file adds an option group with a range and a choice to a subclass of the module, from here alone, and
shows the command line (jsonargparse), a config file and Python (pydantic) refusing a value out of range and a wrong
choice in one line naming the key; nothing in lit_grpo knows these options.

No ``from __future__ import annotations`` here: jsonargparse reads postponed annotations without their bounds."""

import dataclasses
import math
from typing import Annotated, Literal

import pytest
import yaml
from annotated_types import Ge, Le

from lit_grpo import GRPOModule
from lit_grpo.cli import main
from lit_grpo.settings import Checked, Finite, SettingError


@dataclasses.dataclass
class ToyConfig(Checked):
    """A new option group: one range, one choice."""

    strength: Annotated[float, Ge(0), Le(1), Finite] = 0.5
    """How strong the toy effect is (0 = off)."""
    mode: Literal["fast", "careful"] = "fast"
    """How it is applied."""


class ToyModule(GRPOModule):
    """The module with the new group as an option (``model.init_args.toy``)."""

    def __init__(self, *args, toy: ToyConfig = ToyConfig(), **kwargs):
        super().__init__(*args, **kwargs)
        self.toy = toy


def _run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", "--model.class_path", f"{__name__}.ToyModule", *args,
              "--print_config"])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_the_new_options_parse_with_their_defaults_and_values(capsys):
    code, out, err = _run(capsys, "--model.init_args.toy.strength=0.25", "--model.init_args.toy.mode=careful")
    assert code in (0, None), err
    assert yaml.safe_load(out)["model"]["init_args"]["toy"] == {"strength": 0.25, "mode": "careful"}


@pytest.mark.parametrize("arg, line", [
    ("--model.init_args.toy.strength=1.5", "error: model.init_args.toy.strength: must be in [0, 1] (got 1.5)"),
    ("--model.init_args.toy.strength=-0.1", "error: model.init_args.toy.strength: must be in [0, 1] (got -0.1)"),
    ("--model.init_args.toy.mode=slow", "error: model.init_args.toy.mode: must be one of fast, careful (got slow)"),
])
def test_the_parser_refuses_an_out_of_range_value_and_a_wrong_choice_naming_the_key(capsys, arg, line):
    code, out, err = _run(capsys, arg)
    assert code == 2 and out == "" and err == line + "\n"


def test_a_config_file_is_refused_the_same_way(capsys, tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump({"model": {"init_args": {"toy": {"strength": math.inf}}}}))
    code, out, err = _run(capsys, "--config", str(path))
    assert code == 2 and err == f"error: {path}: model.init_args.toy.strength: must be in [0, 1] (got inf)\n"


@pytest.mark.parametrize("kwargs, message", [
    ({"strength": math.nan}, "ToyConfig.strength: must be in [0, 1] (got nan)"),
    ({"mode": "slow"}, "ToyConfig.mode: must be one of fast, careful (got slow)"),
])
def test_python_callers_meet_the_same_checks(kwargs, message):
    with pytest.raises(SettingError) as err:
        ToyConfig(**kwargs)
    assert str(err.value) == message
