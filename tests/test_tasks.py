"""The core knows no task: no core module imports ``lit_grpo.tasks`` (read from the source), importing the core
loads no task and none of the PhyX task's packages (a fresh interpreter), and a configuration's name finds its
task through the registries (the task's folder, or an entry point of the group ``lit_grpo.tasks``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_imports import import_graph, modules

TASK_ONLY = ("pint", "httpx", "math_verify")
"""The PhyX task's packages (the ``phyx`` extra). ``num2words`` stays in the core's requirements: transformers'
SmolVLM / Idefics3 processor imports it, and the families load that processor."""
def core_modules() -> list[str]:
    return sorted(m for m in modules() if not m.startswith(("lit_grpo.tasks", "lit_grpo.testing"))
               and not m.endswith("__main__"))


ALLOWED: set[tuple[str, str]] = set()
"""The core's imports of a task: none (the attention reward's column and overlays plug in through registries and a
class path)."""


def test_no_core_module_imports_a_task():
    graph = import_graph()
    edges = {(m, t) for m in core_modules() for t in graph[m] if t.startswith("lit_grpo.tasks")}
    assert edges == ALLOWED


def fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter at the repository root; it prints one JSON value, returned."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         cwd=Path(__file__).parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


LOADED = """
import importlib, json, sys
def loaded():
    return {"tasks": sorted(k for k in sys.modules if k.startswith("lit_grpo.tasks")),
            "packages": [p for p in %r if p in sys.modules]}
""" % (TASK_ONLY,)


def test_importing_the_core_loads_no_task_and_no_task_package():
    """Every core module (the module, its passes and the callbacks included) loads no task, and none of PhyX's
    packages."""
    first = core_modules()
    out = fresh(LOADED + f"""
for m in {first!r}:
    importlib.import_module(m)
print(json.dumps(loaded()))
""")
    assert {"lit_grpo.grpo", "lit_grpo.rewards.registry", "lit_grpo.data.datamodule", "lit_grpo.config",
            "lit_grpo.evaluation", "lit_grpo.module", "lit_grpo.passes", "lit_grpo.callbacks"} <= set(first)
    assert out == {"tasks": [], "packages": []}


def test_a_module_without_log_prob_pass_columns_imports_no_task(tiny_model_dir):
    """The demo's rewards read sample and rollout fields only: building the module looks up no column provider, so
    no task is imported for it (a fresh interpreter); a reward reading ``asm`` imports the attention task alone and
    runs its pass under the meter."""
    out = fresh(LOADED + f"""
from lit_grpo import GRPOModule
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec
steps = []
m = GRPOModule(policy=PolicyConfig(name_or_path={str(tiny_model_dir)!r}), rewards=[RewardSpec("boxed_format")])
steps.append([loaded(), m.pass_columns, sorted(m.passes.providers)])
m = GRPOModule(policy=PolicyConfig(name_or_path={str(tiny_model_dir)!r}), rewards=[RewardSpec("attention")])
steps.append([loaded(), m.pass_columns, type(m.passes.providers["asm"]).__module__])
print(json.dumps(steps))
""")
    assert out[0] == [{"tasks": [], "packages": []}, [], []]
    assert sorted({".".join(t.split(".")[:3]) for t in out[1][0]["tasks"]}) == ["lit_grpo.tasks",
                                                                              "lit_grpo.tasks.attention"]
    assert out[1][0]["packages"] == [] and out[1][1:] == [["asm"], "lit_grpo.tasks.attention.meter"]


def test_import_of_the_maths_loads_only_the_maths():
    """``import lit_grpo.grpo`` no longer imports the whole package through ``lit_grpo/__init__``: the package,
    the maths (``grpo.py``, ``objectives.py``) and the registry."""
    out = fresh("import json, sys, lit_grpo.grpo\n"
                "print(json.dumps(sorted(k for k in sys.modules if k.startswith('lit_grpo'))))")
    assert out == ["lit_grpo", "lit_grpo.grpo", "lit_grpo.objectives", "lit_grpo.registry"]


def test_a_name_imports_the_tasks_in_order_until_it_is_registered():
    """Tasks are imported in folder order (attention, demo, phyx, visualsphinx), each only when a name is missing:
    the attention reward needs the first, the ``phyx`` reader the third; a core reward needs none."""
    out = fresh(LOADED + """
from lit_grpo.data.datamodule import READERS
from lit_grpo.rewards import REWARDS
steps = []
assert "binary" in REWARDS; steps.append(loaded())
assert "attention" in REWARDS; steps.append(loaded())
READERS.get("phyx"); steps.append(loaded())
READERS.get("visualsphinx"); steps.append(loaded())
print(json.dumps(steps))
""")
    tops = [sorted({".".join(t.split(".")[:3]) for t in s["tasks"]} - {"lit_grpo.tasks"}) for s in out]
    both = ["lit_grpo.tasks.attention", "lit_grpo.tasks.demo", "lit_grpo.tasks.phyx"]
    assert tops == [[], ["lit_grpo.tasks.attention"], both, [*both, "lit_grpo.tasks.visualsphinx"]]
    assert out[1]["packages"] == [] and out[2]["packages"] == ["pint", "httpx"]


def test_a_task_outside_the_package_registers_through_an_entry_point(tmp_path):
    """A distribution declaring ``[lit_grpo.tasks] toy = toy_task`` adds a reader and a reward that a config
    names like the built-in ones; its reader is asked for rows like any other."""
    (tmp_path / "toy_task.py").write_text(textwrap.dedent('''
        from lit_grpo.data.datamodule import READERS
        from lit_grpo.rewards.registry import register_reward

        @READERS.register("toy_rows")
        def read_toy(path, split="train", rows=None):
            return [{"path": path, "split": split}]

        @register_reward("toy_length", columns=("answer",))
        def toy_length(completions, answer, **_):
            return [float(len(c) == len(a)) for c, a in zip(completions, answer)]
        '''))
    info = tmp_path / "toy_task-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-task\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[lit_grpo.tasks]\ntoy = toy_task\n")
    out = fresh(f"""
import json, sys
sys.path.insert(0, {str(tmp_path)!r})
from lit_grpo.data.datamodule import READERS
from lit_grpo.rewards import RewardSpec, build_rewards
rows = READERS.get("toy_rows")("x.jsonl", split="test")
fn = build_rewards([RewardSpec("toy_length")])["toy_length"]
print(json.dumps([rows, fn(["ab", "abc"], answer=["xy", "xy"]), "toy_task" in sys.modules]))
""")
    assert out == [[{"path": "x.jsonl", "split": "test"}], [1.0, 0.0], True]


def test_a_task_whose_extra_is_missing_is_named_in_the_unknown_name_error():
    """Without pint (the ``phyx`` extra not installed), the core's rewards and VisualSphinx still work, and a name
    that is not registered says which task could not be imported and why."""
    out = fresh(LOADED + """
sys.modules["pint"] = None  # as if not installed
from lit_grpo.data.datamodule import READERS
from lit_grpo.rewards import REWARDS
ok = ["binary" in REWARDS, "visualsphinx" in READERS]
try:
    READERS.get("nope")
except KeyError as exc:
    print(json.dumps([ok, str(exc)]))
""")
    assert out[0] == [True, True]
    assert out[1].startswith("unknown dataset reader 'nope'; registered: visualsphinx; task lit_grpo.tasks.phyx not "
                             "loaded: import of pint halted")


def test_a_name_that_is_not_a_string_imports_no_task():
    """``scorer: null`` asks ``None in REWARDS``: no task is imported for it."""
    out = fresh(LOADED + """
from lit_grpo.rewards import REWARDS
print(json.dumps([None in REWARDS, 3 in REWARDS, loaded()]))
""")
    assert out == [False, False, {"tasks": [], "packages": []}]


def test_a_task_types_a_core_option_through_its_registered_group():
    """``evaluation.judge``, ``attention`` and ``policy.embedded`` are typed by the dataclasses their tasks register
    (:func:`lit_grpo.registry.option_group`): read from Python, no task is imported and the two dataclass fields
    are ``Any`` (a mapping or the group's dataclass: :func:`~lit_grpo.registry.option_slot`; a dataclass keeps its
    annotations as written, so that jsonargparse keeps its fields' bounds) and the module's argument a mapping; once
    the command line types the groups, each is its task's class; building a group from a mapping imports its task
    and fills in the defaults. Without pint (the PhyX extra) the other tasks' groups still type."""
    code = LOADED + """
import types, typing
from lit_grpo.config import EvalConfig
from lit_grpo.module import GRPOModule
from lit_grpo.policy import PolicyConfig
from lit_grpo.registry import built_group, load_option_groups
def named(tp):  # the type, None left out of an optional one
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(m for m in typing.get_args(tp) if m is not type(None))
    return f"{tp.__module__}.{tp.__qualname__}" if typing.get_origin(tp) is None else str(tp)
def typed():
    return [named(typing.get_type_hints(EvalConfig)["judge"]), named(typing.get_type_hints(PolicyConfig)["embedded"]),
            named(typing.get_type_hints(GRPOModule.__init__)["attention"])]
steps = [typed(), loaded()]
load_option_groups()
steps += [typed(), built_group("embedded", {"hidden_size": 32}).hidden_size]
print(json.dumps(steps))
"""
    out = fresh(code)
    assert out[:2] == [["typing.Any", "typing.Any", "dict[str, typing.Any]"], {"tasks": [], "packages": []}]
    assert out[2:] == [["lit_grpo.tasks.phyx.judge.config.JudgeConfig", "lit_grpo.tasks.demo.embedded.EmbeddedModelConfig",
                        "lit_grpo.tasks.attention.meter.AttentionConfig"], 32]
    out = fresh('import sys; sys.modules["pint"] = None\n' + code)
    assert out[2][1:] == ["lit_grpo.tasks.demo.embedded.EmbeddedModelConfig",
                          "lit_grpo.tasks.attention.meter.AttentionConfig"]


def test_an_unknown_name_gets_the_one_hint_and_the_registered_names():
    """Every registry words an unknown name the same way (Registry.unknown), with the closest registered name."""
    from lit_grpo.registry import Registry, did_you_mean

    things = Registry("thing")
    things.register("alpha")(object())
    things.register("beta")(object())
    assert things.unknown("alpah") == "unknown thing 'alpah' (did you mean alpha?); registered: alpha, beta"
    assert things.unknown("zzz") == "unknown thing 'zzz'; registered: alpha, beta"
    with pytest.raises(KeyError, match=r"unknown thing 'bta' \(did you mean beta\?\)") as info:
        things.get("bta")
    # a refused value too, shown as its message (a KeyError's str() would quote it)
    assert isinstance(info.value, ValueError) and str(info.value) == things.unknown("bta")
    assert did_you_mean("num_generation", ["num_generations", "temperature"]) == " (did you mean num_generations?)"
    assert did_you_mean("VLLM", ["plain", "vllm"]) == " (did you mean vllm?)"  # case is no distance
