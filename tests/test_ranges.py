"""Numeric options are finite and in their declared range however they arrive (a YAML file, ``${oc.env:...}``, a
command-line flag, Python), declared on their types (:mod:`lit_grpo.settings`) and refused in one ``error:`` line
naming the key, before any model work and before anything is written."""

import copy
import dataclasses
import math
import os
import re
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest
import yaml

from lit_grpo.cli import main
from lit_grpo.settings import ConfigError
from lit_grpo.settings.preflight import check_config
from annotated_types import Ge, Gt, Le, Lt

from lit_grpo.settings import Finite, argument_types, problems, rule

ROOT = Path(__file__).parents[1]
NAN, INF = math.nan, math.inf


# ----------------------------------------------------------------- the check itself
@pytest.mark.parametrize("tp, text", [
    (typing.Annotated[int, Ge(1)], ">= 1"), (typing.Annotated[float, Gt(0), Finite], "> 0"),
    (typing.Annotated[float, Le(1)], "<= 1"), (typing.Annotated[float, Lt(0.5)], "< 0.5"),
    (typing.Annotated[float, Gt(0), Le(1)], "in (0, 1]"), (typing.Annotated[float, Ge(0), Lt(1)], "in [0, 1)"),
    (typing.Annotated[float, Ge(-1), Le(2.5)], "in [-1, 2.5]"), (typing.Annotated[float, Finite], "a finite number"),
    (typing.Annotated[int, Ge(2)] | None, ">= 2 or null"), (typing.Literal["a", "b"], "one of a, b"), (float, None),
    (typing.Literal["all"] | bool, "one of all, true, false"),  # W&B's log_model: a bool is a choice too
])
def test_a_declared_type_says_what_it_allows(tp, text):
    assert rule(tp) == text


@pytest.mark.parametrize("x, ok", [(0, True), (1, True), (0.5, True), (-1e-12, False), (1.0000001, False),
                                   (NAN, False), (INF, False), (-INF, False)])
def test_a_range_holds_only_finite_numbers_inside_it(x, ok):
    assert (problems(x, typing.Annotated[float, Ge(0), Le(1), Finite], "x") == []) is ok


UNIT = typing.Annotated[float, Ge(0), Le(1), Finite]


@dataclasses.dataclass
class _Inner:
    p: UNIT = 0.5
    n: int = 1


@dataclasses.dataclass
class _Outer:
    inner: _Inner | None = None
    weights: dict[str, UNIT] = dataclasses.field(default_factory=dict)
    sizes: list[typing.Annotated[int, Ge(1)]] = dataclasses.field(default_factory=list)
    anything: typing.Any = None
    limit: typing.Annotated[float, Gt(0), Finite] | None = None


@pytest.mark.parametrize("value, found", [
    ({"inner": {"p": 0.2, "n": 3}, "weights": {"a": 1.0}, "sizes": [1, 2], "limit": None}, []),
    ({"inner": {"p": 1.5}}, ["o.inner.p: must be in [0, 1] (got 1.5)"]),  # the rule its type declares
    ({"inner": {"n": NAN}}, ["o.inner.n: must be a finite number (got nan)"]),  # an int is finite
    ({"weights": {"a": 0.1, "b": -0.1}}, ["o.weights.b: must be in [0, 1] (got -0.1)"]),
    ({"sizes": [3, 0]}, ["o.sizes[1]: must be >= 1 (got 0)"]),
    ({"limit": 0.0}, ["o.limit: must be > 0 or null (got 0.0)"]),
    ({"limit": INF}, ["o.limit: must be a finite number > 0 or null (got inf)"]),  # inf meets "> 0"
    ({"inner": {"p": None}}, ["o.inner.p: must be a number in [0, 1] (got null)"]),  # None: no number
])
def test_problems_walk_dataclasses_dicts_and_lists_by_their_declared_types(value, found):
    assert problems(value, _Outer, "o") == found


@pytest.mark.parametrize("value, found", [
    # what pydantic's lax mode would convert is refused: the option gets the value as written
    ({"inner": {"n": True}}, ["o.inner.n: expected int (got true)"]),
    ({"inner": {"p": False}}, ["o.inner.p: must be a number in [0, 1] (got false)"]),
    ({"inner": {"n": 2.0}}, ["o.inner.n: expected int (got 2.0)"]),
    ({"inner": {"n": "5"}}, ["o.inner.n: expected int (got '5')"]),  # quoted: a string, not the number
    ({"sizes": [1, True]}, ["o.sizes[1]: must be an integer >= 1 (got true)"]),
    ({"weights": {"a": True}}, ["o.weights.a: must be a number in [0, 1] (got true)"]),
    ({"limit": True}, ["o.limit: must be a number > 0 or null (got true)"]),
    # what a config writes for its declared type stays right: an int for a float, a list for a tuple
    ({"inner": {"p": 1}, "weights": {"a": 0}, "anything": True, "limit": 3}, []),
])
def test_a_scalar_of_another_type_is_refused_not_converted(value, found):
    assert problems(value, _Outer, "o") == found
    assert problems([0.9, 1], tuple[float, float], "betas") == [] and problems(1, bool, "b") == ["b: expected bool (got 1)"]


def test_a_class_path_block_is_checked_by_its_class_and_torch_classes_by_parameter_name():
    from lit_grpo.settings import check_arguments

    adam = {"class_path": "torch.optim.AdamW", "init_args": {"lr": -1e-3, "betas": [0.9, 1.0], "eps": NAN}}
    assert check_arguments(lambda opt: None, {"opt": adam}, "m") == [
        "m.opt.init_args.lr: must be >= 0 (got -0.001)", "m.opt.init_args.betas[1]: must be in [0, 1) (got 1.0)",
        "m.opt.init_args.eps: must be >= 0 (got nan)"]
    assert "momentum" in argument_types("torch.optim.SGD") and "momentum" not in argument_types("torch.optim.AdamW")


# ----------------------------------------------------------------- every numeric option declares its range
ANY_INT = {"seed"}
"""Integer options for which any value is right (a seed)."""


def _option_types():
    from lit_grpo.config import EvalConfig, GRPOConfig, PerfConfig
    from lit_grpo.tasks.attention.meter import AttentionConfig
    from lit_grpo.data.datamodule import VLMDataModule, generator_option_types
    from lit_grpo.tasks.demo.embedded import EmbeddedModelConfig
    from lit_grpo.policy import LoRAConfig, PolicyConfig
    from lit_grpo.tasks.phyx.judge import JudgeConfig
    from lit_grpo.tasks.phyx.judge.offline import OfflineJudgeConfig
    from lit_grpo.rewards.registry import REWARDS, reward_option_types
    from lit_grpo.rollout import SamplingConfig

    groups = {c.__name__: argument_types(c) for c in (
        GRPOConfig, SamplingConfig, EvalConfig, PerfConfig, AttentionConfig, LoRAConfig, PolicyConfig,
        EmbeddedModelConfig, JudgeConfig, OfflineJudgeConfig, VLMDataModule)}
    groups.update({f"reward {n}": reward_option_types(n) for n in REWARDS.names()})
    groups.update({f"generate {k}": generator_option_types(k) for k in ("puzzles", "physics")})
    return groups


def _numbers(tp) -> list:
    """The number types inside ``tp`` (``Annotated`` kept)."""
    base = tp.__origin__ if typing.get_origin(tp) is typing.Annotated else tp
    if base in (int, float):
        return [tp]
    return [n for arg in typing.get_args(tp) if arg is not type(None) for n in _numbers(arg)]


def test_every_numeric_option_declares_its_range():
    """A float option of the module, the data, the judge or a reward declares ``Finite`` (``Annotated[float, Ge(0),
    Finite]``: no bound refuses NaN), and an integer option a range unless it is listed in ANY_INT (see
    lit_grpo.settings). RewardSpec.weight is finite by its ``__post_init__`` (a weight from
    ``${oc.env:...}`` is text when the parser checks the type)."""
    undeclared = [f"{group}.{name}" for group, types in _option_types().items() for name, tp in types.items()
                  for number in _numbers(tp)
                  if (Finite not in getattr(number, "__metadata__", ()) if typing.get_origin(number) is not None
                      and number.__origin__ is float or number is float
                      else typing.get_origin(number) is not typing.Annotated and name not in ANY_INT)
                  and group not in ("generate puzzles", "generate physics")]  # the generators' shapes: ints
    assert undeclared == []


# ----------------------------------------------------------------- refused by the preflight, named by key
@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    """configs/demo.yaml as the CLI parses it (``--print_config``), with a judge reward, a rubric reward and a
    judge-backed scorer added."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", "--print_config"])
    cfg = yaml.safe_load(out.getvalue())
    init = cfg["model"]["init_args"]
    init["rewards"] += [{"name": "rubric", "weight": 1.0, "kwargs": {"weights": {"unit": 0.15}}},
                        {"name": "open_accuracy", "weight": 1.0, "kwargs": {"judge": {"base_url": "http://j:1/v1"}}}]
    init["evaluation"]["scorer"] = "open_accuracy"
    init["evaluation"]["judge"] = {"num_judges": 3, "offline": {"rel_tol": 0.01}}
    return cfg


PREFLIGHT = [  # (key, value, the error line's text): each a value that YAML, ${oc.env} or a flag can give
    ("model.init_args.grpo.max_grad_norm", NAN, "must be > 0, got nan"),
    ("model.init_args.grpo.epsilon_low", 1.5, "must be in [0, 1], got 1.5"),
    ("model.init_args.grpo.beta", INF, "must be a finite number >= 0, got inf"),
    ("model.init_args.grpo.advantage_eps", -1e-4, "must be >= 0, got -0.0001"),
    ("model.init_args.grpo.num_iterations", 0, "must be >= 1, got 0"),
    ("model.init_args.sampling.temperature", NAN, "must be > 0, got nan"),
    ("model.init_args.sampling.top_p", 0.0, "must be in (0, 1], got 0.0"),
    ("model.init_args.evaluation.num_samples", -1, "must be >= 0, got -1"),
    ("model.init_args.evaluation.temperature", -INF, "must be > 0, got -inf"),
    ("model.init_args.evaluation.pass_threshold", NAN, "must be a finite number, got nan"),
    ("model.init_args.evaluation.judge.concurrency", 0, "must be >= 1, got 0"),
    ("model.init_args.evaluation.judge.offline.rel_tol", -0.01, "must be >= 0, got -0.01"),
    ("model.init_args.attention.chunk_scores", 0, "must be >= 1, got 0"),
    ("model.init_args.policy.lora", {"r": 8, "dropout": 1.0}, None),  # -> .lora.dropout
    ("model.init_args.rewards.0.weight", NAN, "must be a finite number, got nan"),
    ("model.init_args.rewards.2.kwargs.weights.unit", -0.1, "must be >= 0, got -0.1"),
    ("model.init_args.rewards.3.kwargs.judge.max_failure_fraction", 1.5, "must be in [0, 1], got 1.5"),
    ("model.init_args.rewards.3.kwargs.judge.timeout_s", INF, "must be a finite number > 0, got inf"),
    ("model.init_args.optimizer.init_args.lr", -1e-3, "must be >= 0, got -0.001"),
    ("model.init_args.optimizer.init_args.weight_decay", NAN, "must be >= 0, got nan"),
    ("model.init_args.optimizer.init_args.betas", [0.9, 1.0], None),  # -> .betas[1]
    ("model.init_args.lr_scheduler.init_args.end_factor", 1.5, "must be in [0, 1], got 1.5"),
    ("model.init_args.lr_scheduler.init_args.total_iters", -1, "must be >= 0, got -1"),
    ("data.batch_size", 0, "must be >= 1, got 0"),
    ("data.eval_batch_size", -INF, "must be an integer >= 1, got -inf"),
    ("data.max_prompt_length", 0, "must be >= 1, got 0"),
    ("data.num_workers", -1, "must be >= 0, got -1"),
    ("data.train.generate.num", 0, "must be >= 1, got 0"),
    ("data.val.generate.panel_size", INF, "must be a finite number, got inf"),
    ("data.train.rows", "::0", "'::0' has step 0; e.g. '1000:3000' or '::2'"),
]
NESTED = {"model.init_args.policy.lora": ("model.init_args.policy.lora.dropout", "must be in [0, 1), got 1.0"),
          "model.init_args.optimizer.init_args.betas": ("model.init_args.optimizer.init_args.betas[1]",
                                                        "must be in [0, 1), got 1.0")}


def _set(cfg: dict, key: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    node, *parents, leaf = [cfg, *key.split(".")]
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return cfg


@pytest.mark.parametrize("key, value, text", PREFLIGHT, ids=[p[0].split("init_args.")[-1] for p in PREFLIGHT])
def test_a_number_out_of_range_is_one_line_naming_its_key(parsed, key, value, text):
    check_config(parsed, "fit")  # as shipped: fine
    with pytest.raises(ConfigError) as err:
        check_config(_set(parsed, key, value), "fit")
    named, text = NESTED.get(key, (key, text))
    named = named.replace(".0.", "[0].").replace(".2.", "[2].").replace(".3.", "[3].")
    ranged = re.fullmatch(r"must be (.*), got (.*)", text)
    if ranged:  # the declared rule (``or null`` where the type admits None) and the value given
        assert str(err.value) in (f"{named}: must be {ranged[1]} (got {ranged[2]})",
                                  f"{named}: must be {ranged[1]} or null (got {ranged[2]})")
    else:
        assert str(err.value) == f"{named} {text}"


@pytest.mark.parametrize("optimizer, scheduler, text", [
    ({"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1, "momentum": -0.9}}, None,
     "model.init_args.optimizer.init_args.momentum: must be >= 0 (got -0.9)"),
    (None, {"class_path": "torch.optim.lr_scheduler.StepLR", "init_args": {"step_size": 0}},
     "model.init_args.lr_scheduler.init_args.step_size: must be >= 1 (got 0)"),
    (None, {"class_path": "torch.optim.lr_scheduler.OneCycleLR", "init_args": {"max_lr": 0.1}},  # torch's own check
     "model.init_args.lr_scheduler: torch.optim.lr_scheduler.OneCycleLR refuses its init_args: You must define "
     "either total_steps OR (epochs AND steps_per_epoch)"),
])
def test_another_optimizer_or_scheduler_is_checked_by_its_parameters_and_by_torch(parsed, optimizer, scheduler, text):
    cfg = copy.deepcopy(parsed)
    cfg["model"]["init_args"]["optimizer"] = optimizer or cfg["model"]["init_args"]["optimizer"]
    cfg["model"]["init_args"]["lr_scheduler"] = scheduler or cfg["model"]["init_args"]["lr_scheduler"]
    with pytest.raises(ConfigError) as err:
        check_config(cfg, "fit")
    assert str(err.value) == text


def test_several_problems_name_the_first_in_full_and_the_keys_of_the_rest(parsed):
    cfg = _set(_set(_set(parsed, "model.init_args.grpo.beta", -1.0), "data.batch_size", 0), "data.num_workers", -2)
    with pytest.raises(ConfigError) as err:
        check_config(cfg, "fit")
    assert str(err.value) == ("model.init_args.grpo.beta: must be >= 0 (got -1.0) (and 2 more problems: "
                              "data.batch_size, data.num_workers)")


# ----------------------------------------------------------------- through the command line: YAML, ${oc.env}, flags
ENV = "LIT_GRPO_TEST_SETTING"
ROUTES = {  # key -> (YAML override, the same through ${oc.env}, the same as flags, the env value, the error line)
    "max_grad_norm": ({"model": {"init_args": {"grpo": {"max_grad_norm": NAN}}}},
                      {"model": {"init_args": {"grpo": {"max_grad_norm": "${oc.env:%s}" % ENV}}}},
                      ["--model.init_args.grpo.max_grad_norm=.nan"], ".nan",
                      "model.init_args.grpo.max_grad_norm: must be > 0 or null (got nan)"),
    "lr": ({"model": {"init_args": {"optimizer": {"init_args": {"lr": -1e-3}}}}},
           {"model": {"init_args": {"optimizer": {"init_args": {"lr": "${oc.env:%s}" % ENV}}}}},
           ["--model.init_args.optimizer.init_args.lr", "-0.001"], "-0.001",
           "model.init_args.optimizer.init_args.lr: must be >= 0 (got -0.001)"),
    "weight": ({"model": {"init_args": {"rewards": [{"name": "binary", "weight": INF}]}}},
               {"model": {"init_args": {"rewards": [{"name": "binary", "weight": "${oc.env:%s}" % ENV}]}}},
               ["--model.init_args.rewards=[{name: binary, weight: .inf}]"], ".inf",
               "model.init_args.rewards[0].weight: must be a finite number (got inf)"),
}


def _redirect(tmp_path: Path) -> Path:
    """Every place a run of configs/demo.yaml would write or build, moved under ``tmp_path``."""
    over = {"trainer": {"logger": {"init_args": {"save_dir": str(tmp_path / "logs")}},
                        "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                       "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True}}]},
            "model": {"init_args": {"policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}}}},
            "data": {split: {"generate": {"path": str(tmp_path / f"{split}.parquet"), "kind": "puzzles", "num": 8,
                                          "seed": seed}} for split, seed in (("train", 0), ("val", 1))}}
    path = tmp_path / "redirect.yaml"
    path.write_text(yaml.safe_dump(over))
    return path


@pytest.mark.parametrize("route", ["yaml", "oc.env", "flags"])
@pytest.mark.parametrize("key", list(ROUTES))
def test_a_bad_number_from_yaml_env_or_flags_is_refused_before_anything_is_built_or_written(tmp_path, capsys,
                                                                                              monkeypatch, route, key):
    as_yaml, as_env, flags, env_value, line = ROUTES[key]
    monkeypatch.setenv(ENV, env_value)
    args = ["fit", "--config", "configs/demo.yaml", "--config", str(_redirect(tmp_path))]
    if route == "flags":
        args += flags
    else:
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(as_yaml if route == "yaml" else as_env))
        args += ["--config", str(tmp_path / "bad.yaml")]
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    line = line.replace("(got nan)", "(got .nan)") if route != "yaml" else f"{tmp_path / 'bad.yaml'}: {line}"  # the
    # file that gave the value is named; a flag's or variable's text is shown as typed
    if route == "flags" and key == "max_grad_norm":  # the flag's ".nan" reaches the check as text: no number
        line = line.replace("must be >", "must be a number >")
    if route == "oc.env" and key == "max_grad_norm":  # resolved late: pydantic's own sentence, the key and value
        assert err.startswith(f"error: {line.split(': ')[0]}: ") and err.endswith("(got .nan)\n"), err
    else:
        assert exc.value.code == 2 and out == "" and err == f"error: {line}\n"
    assert exc.value.code == 2 and out == ""
    # no model built, no data generated, no log folder, config.yaml, hparams.yaml, events or checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["redirect.yaml"] + ["bad.yaml"] * (route != "flags"))


def test_the_readme_demo_with_a_negative_learning_rate_is_one_line_at_once(tmp_path):
    """``python -m lit_grpo fit --config configs/demo.yaml`` with a negative lr: status 2 and one line within
    seconds, no traceback after a step-0 validation, and no log folder left behind."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml",
                           "--model.init_args.optimizer.init_args.lr", "-0.001",
                           "--trainer.logger.init_args.save_dir", str(tmp_path / "logs")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert proc.stderr == "error: model.init_args.optimizer.init_args.lr: must be >= 0 (got -0.001)\n"
    assert not (tmp_path / "logs").exists() and time.monotonic() - start < 60


# ----------------------------------------------------------------- from Python
def _python_cases():
    from lit_grpo.config import GRPOConfig
    from lit_grpo.data.datamodule import DatasetSpec, VLMDataModule
    from lit_grpo.policy import LoRAConfig
    from lit_grpo.rewards import RewardSpec
    from lit_grpo.tasks.phyx.judge import JudgeConfig
    from lit_grpo.rollout import SamplingConfig

    return [
        (lambda: GRPOConfig(max_grad_norm=NAN), "GRPOConfig.max_grad_norm: must be > 0 or null (got nan)"),
        (lambda: GRPOConfig(epsilon_low=1.5), "GRPOConfig.epsilon_low: must be in [0, 1] (got 1.5)"),
        (lambda: SamplingConfig(top_k=-1), "SamplingConfig.top_k: must be >= 0 (got -1)"),
        (lambda: RewardSpec("binary", weight=-INF), "RewardSpec.weight: must be a finite number (got -inf)"),
        (lambda: RewardSpec("rubric", kwargs={"absent_factor": 1.2}),
         "reward 'rubric' option absent_factor: must be in [0, 1] (got 1.2)"),
        (lambda: JudgeConfig(call_deadline_s=NAN), "JudgeConfig.call_deadline_s: must be > 0 (got nan)"),
        (lambda: LoRAConfig(r=0), "LoRAConfig.r: must be >= 1 (got 0)"),
        (lambda: VLMDataModule(batch_size=0), "data.batch_size: must be >= 1 (got 0)"),
        (lambda: DatasetSpec(generate={"path": "x.parquet", "kind": "physics", "num": -5}),
         "DatasetSpec.generate.num: must be >= 1 (got -5)"),
        # a block that names no kind is typed by the default generator's settings (it was not: a traceback at load)
        (lambda: DatasetSpec(generate={"path": "x.parquet", "num": "abc"}),
         "DatasetSpec.generate.num: must be an integer >= 1 (got abc)"),
        (lambda: DatasetSpec(generate={"path": "x.parquet", "kind": "puzzels"}),
         "DatasetSpec.generate.kind: unknown data generator 'puzzels' (did you mean puzzles?); registered: physics, "
         "puzzles"),
    ]


@pytest.mark.parametrize("case", range(11))
def test_python_callers_meet_the_same_ranges(case):
    build, message = _python_cases()[case]
    with pytest.raises(ValueError) as err:
        build()
    assert str(err.value) == message


@pytest.mark.parametrize("key,value,text", [
    ("model.init_args.optimizer.init_args.lr", "-1e-5", "must be >= 0 (got -1e-05)"),
    ("model.init_args.lr_scheduler.init_args.end_factor", "-0.5", "must be in [0, 1] (got -0.5)"),
    ("model.init_args.grpo.beta", "-0.5", "must be >= 0 (got -0.5)"),
    ("model.init_args.sampling.temperature", "-1", "must be > 0"),
])
def test_a_negative_number_after_a_space_is_the_option_s_value(key, value, text, capsys):
    """``--key -1e-5`` as README writes options (a space, not ``=``): the value, refused by its range in one line;
    an optimizer's option once read ``-1e-5`` as a flag ("argument --model: expected one argument")."""
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", f"--{key}", value])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith(f"error: {key}: {text}"), err


@pytest.mark.parametrize("after, named", [
    ([], True),  # the file gave the value the run would get
    (["--model.init_args.optimizer.init_args.lr=-0.001"], False),  # a flag gave it last: no file
    (["--model.init_args.optimizer=torch.optim.SGD", "--model.init_args.optimizer.init_args.lr=-0.001"], False),
    (["--config=GOOD", "--model.init_args.optimizer.init_args.lr=-0.001"], False),
    (["--config=ENV"], False),  # ${oc.env:...} as written in the last file: no file's number
])
def test_a_value_refused_at_the_start_names_only_the_file_that_gave_it(tmp_path, capsys, monkeypatch, after, named):
    """A startup refusal checks the value the run would get: the last source that set it, a file only if it is that
    source (an earlier file with the same number was named though a flag gave it)."""
    bad, good, env = tmp_path / "bad.yaml", tmp_path / "good.yaml", tmp_path / "env.yaml"
    for path, lr in ((bad, -0.001), (good, 0.5), (env, "${oc.env:%s}" % ENV)):
        path.write_text(yaml.safe_dump({"model": {"init_args": {"optimizer": {
            "class_path": "torch.optim.SGD", "init_args": {"lr": lr}}}}}))
    monkeypatch.setenv(ENV, "-0.001")
    after = [a.replace("GOOD", str(good)).replace("ENV", str(env)) for a in after]
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", "--config", str(_redirect(tmp_path)), "--config", str(bad),
              *after])
    assert exc.value.code == 2 and capsys.readouterr().err == "error: " + f"{bad}: " * named + \
        "model.init_args.optimizer.init_args.lr: must be >= 0 (got -0.001)\n"
    assert not (tmp_path / "logs").exists() and not (tmp_path / "model").exists()


@pytest.mark.parametrize("option, text, after, line", [
    ("model.init_args.grpo", "beta: -1\n", [], "model.init_args.grpo.beta: must be >= 0 (got -1)"),  # parse time
    ("model.init_args.rewards", "- {name: format}\n- {name: binary, weight: .inf}\n", [],
     "model.init_args.rewards[1].weight: must be a finite number (got inf)"),  # at the start
    ("model.init_args.optimizer", "class_path: torch.optim.SGD\ninit_args: {lr: -0.5}\n", [],
     "model.init_args.optimizer.init_args.lr: must be >= 0 (got -0.5)"),
    ("model.init_args.optimizer", "class_path: torch.optim.SGD\ninit_args: {lr: -0.5}\n",
     ["--model.init_args.optimizer.init_args.lr=-0.5"], "model.init_args.optimizer.init_args.lr: must be >= 0 (got -0.5)"),
])
def test_a_file_given_to_an_option_is_named_as_a_config_file_is(tmp_path, capsys, option, text, after, line):
    """``--model.init_args.grpo=FILE`` is read as a config file is, so the value it gave is named by it too (not when
    a flag after it gave the value)."""
    path = tmp_path / "option.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", "--config", str(_redirect(tmp_path)), f"--{option}={path}",
              *after])
    assert exc.value.code == 2 and capsys.readouterr().err == "error: " + f"{path}: " * (not after) + line + "\n"
    assert not (tmp_path / "logs").exists() and not (tmp_path / "model").exists()
