"""A reward outside the package, named in the config by its dotted path (``name: my_pkg.my_reward``): the path
imports the module; a plain function's parameters without a default are the columns it reads, those with one its
options; a reward its module registers keeps what its registration says."""

from __future__ import annotations

import textwrap

import pytest

from lit_grpo.settings.preflight import _check_rewards
from lit_grpo.rewards import RewardSpec, build_rewards, score_completions
from lit_grpo.rewards.registry import REWARDS, reward_info, reward_options


@pytest.fixture(autouse=True)
def _no_toy_reward_left():
    """The rewards a test's own modules register (by loading a module or a dotted path) are gone after it: other
    files' tests (e.g. the help's listing of every reward) see the package's rewards alone, whichever ran first. A
    task's rewards that a test loaded stay (their module is imported once)."""
    from lit_grpo.rewards.registry import INFO

    before = set(REWARDS._entries)
    yield
    for name in set(REWARDS._entries) - before:
        if not getattr(REWARDS._entries[name], "__module__", "").startswith("lit_grpo."):
            del REWARDS._entries[name]
            INFO.pop(name, None)


SOURCE = '''
from lit_grpo.rewards.registry import register_reward

def same_length(completions, answer, scale: float = 1.0, **_):
    """1 * scale when the completion is as long as the gold answer, else 0."""
    return [scale * float(len(c) == len(a)) for c, a in zip(completions, answer)]

@register_reward("{prefix}_starts", columns=("answer", "options"))
def starts(completions, answer, options, **_):
    return [float(c.startswith(a)) for c, a in zip(completions, answer)]

def exact(completions, answer):
    return [float(c == a) for c, a in zip(completions, answer)]

@register_reward("{prefix}_longer", columns=("answer",))
def longer(completions, answer, margin: int = 0):
    return [float(len(c) > len(a) + margin) for c, a in zip(completions, answer)]

def first_length(completions, answer, **_):
    return [float(len(completions[0]) == len(a)) for a in answer]  # right on any real batch, not on an empty one

def leaving(completions, level: int = 1, **_):
    raise SystemExit(3)

def picky(completions, level: int = 1, **_):
    if level > 2:
        raise ValueError(f"level must be at most 2, got {level}")
    return [1.0] * len(completions)

def mutates(completions, answer, options, **_):
    completions[:] = ["x"] * len(completions)
    answer[:] = ["changed"] * len(answer)
    for o in options:
        o["A"] = "changed"
    return [0.0] * len(completions)

def reads(completions, answer, options, **_):
    return [float(c == a and o["A"] == "1") for c, a, o in zip(completions, answer, options)]

CALLED = []

def typo(completions, anwser):
    CALLED.append(anwser)
    return [0.0] * len(completions)

def optional(completions, anwser=None, **_):
    return [1.0] * len(completions)

class Contains:
    def __init__(self, ignore_case: bool = False):
        self.ignore_case = ignore_case

    def __call__(self, completions, unit, **_):
        low = (lambda s: s.lower()) if self.ignore_case else (lambda s: s)
        return [float(low(u) in low(c)) for c, u in zip(completions, unit)]
'''


@pytest.fixture
def my_rewards(tmp_path, monkeypatch, request):
    """A module ``my_rewards_<test>`` on ``sys.path`` (a name per test: registrations last for the process)."""
    name = f"my_rewards_{request.node.name.replace('[', '_').replace(']', '').replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SOURCE.replace("{prefix}", name)))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_plain_function_by_path_reads_its_columns_and_takes_its_options(my_rewards):
    path = f"{my_rewards}.same_length"
    spec = RewardSpec(path, weight=2.0, kwargs={"scale": 0.5})
    fns = build_rewards([spec])
    assert list(fns) == ["same_length"] and spec.label == "same_length"  # logged under its own name
    assert reward_info(path).columns == ("answer",) and reward_options(path) == ["scale"]
    per, total = score_completions(fns, {"same_length": 2.0}, ["ab", "abc"], {"answer": ["xy", "xy"]})
    assert per["same_length"].tolist() == [0.5, 0.0] and total.tolist() == [1.0, 0.0]  # 2 * 0.5 * 1, 2 * 0.5 * 0


def test_a_registered_reward_by_path_keeps_its_registration(my_rewards):
    path = f"{my_rewards}.starts"
    assert path in REWARDS and REWARDS.get(path) is REWARDS.get(f"{my_rewards}_starts")
    assert reward_info(path).columns == ("answer", "options")
    fn = build_rewards([RewardSpec(path)])["starts"]
    assert fn(["42 m", "x"], answer=["42", "42"], options=[None, None]) == [1.0, 0.0]


def test_a_class_by_path_reads_the_columns_of_its_call(my_rewards):
    path = f"{my_rewards}.Contains"
    assert reward_info(path).columns == ("unit",) and reward_options(path) == ["ignore_case"]
    fn = build_rewards([RewardSpec(path, kwargs={"ignore_case": True})])["Contains"]
    assert fn(["3 M/S", "3 km"], unit=["m/s", "m/s"]) == [1.0, 0.0]


def test_a_path_is_checked_at_startup_like_a_registered_name(my_rewards):
    """The startup check accepts the path, refuses an option it does not take, and a path that names nothing."""
    _check_rewards({"rewards": [{"name": f"{my_rewards}.same_length", "kwargs": {"scale": 2.0}}]})
    with pytest.raises(ValueError, match=r"rewards\[0\]\.kwargs: .*'scael'"):
        _check_rewards({"rewards": [{"name": f"{my_rewards}.same_length", "kwargs": {"scael": 2.0}}]})
    for missing in (f"{my_rewards}.nothing_here", "no_such_package_xyz.reward"):
        with pytest.raises(ValueError, match=rf"rewards\[0\]\.name: unknown reward '{missing}'"):
            _check_rewards({"rewards": [{"name": missing}]})


def test_a_path_whose_module_fails_to_import_or_is_not_a_reward_says_so(tmp_path, monkeypatch):
    """A module that imports a package which is not installed names that package (not "unknown reward"), one that
    raises or exits on import says so; an attribute that is not callable is named with its type; a path with no
    module part is an unknown name."""
    (tmp_path / "rewards_needing_pkg.py").write_text("import surely_not_installed_pkg\n\ndef r(completions):\n"
                                                      "    return [0.0] * len(completions)\n")
    (tmp_path / "rewards_with_a_number.py").write_text("NOT_A_REWARD = 3\n")
    (tmp_path / "rewards_failing.py").write_text("raise RuntimeError('no config here')\n")  # an error of its own
    (tmp_path / "rewards_exiting.py").write_text("import sys\nsys.exit(3)\n")  # ended the command without a word
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = {
        "rewards_needing_pkg.r": "rewards[0].name: reward 'rewards_needing_pkg.r': importing rewards_needing_pkg failed: "
                                 "No module named 'surely_not_installed_pkg'",
        "rewards_with_a_number.NOT_A_REWARD": "rewards[0].name: reward 'rewards_with_a_number.NOT_A_REWARD': "
                                              "rewards_with_a_number.NOT_A_REWARD is a int, not a function or class",
        "rewards_failing.r": "rewards[0].name: reward 'rewards_failing.r': importing rewards_failing failed: "
                             "RuntimeError: no config here",
        "rewards_exiting.r": "rewards[0].name: reward 'rewards_exiting.r': importing rewards_exiting failed: "
                             "it called sys.exit(3)",
        ".r": "rewards[0].name: unknown reward '.r'",
        "no_such_module_here.r": "rewards[0].name: unknown reward 'no_such_module_here.r'",
    }
    for name, message in cases.items():
        with pytest.raises(ValueError) as info:
            _check_rewards({"rewards": [{"name": name}]})
        assert str(info.value).startswith("model.init_args." + message), (name, str(info.value))


def test_an_unknown_name_lists_the_tasks_that_could_not_be_imported(monkeypatch):
    """A task whose extra is not installed registers nothing; an unknown name then says which task and why, in every
    registry's message (rewards, readers, generators, templates, engines)."""
    from lit_grpo import registry
    from lit_grpo.data.datamodule import GENERATORS

    monkeypatch.setitem(registry.unloadable, "lit_grpo.tasks.example",
                        "No module named 'pint'; pip install the extra that holds it")
    want = "; task lit_grpo.tasks.example not loaded: No module named 'pint'; pip install the extra that holds it"
    for reg in (REWARDS, GENERATORS):
        assert reg.listing().endswith(want)
    with pytest.raises(ValueError, match="task lit_grpo.tasks.example not loaded: No module named 'pint'"):
        _check_rewards({"rewards": [{"name": "no_such_reward"}]})


def test_a_reward_written_without_kwargs_gets_only_the_columns_it_names(my_rewards):
    """A plain function by path and a registered one, both without ``**_`` (as a user writes them): called in a run,
    with every column a step passes (``id``, ``answer_format``, ``options``...), each gets the ones it names."""
    columns = {"answer": ["ab", "x"], "id": ["0", "1"], "answer_format": ["mcq", "mcq"], "options": [None, None],
               "question": ["q", "q"]}
    fns = build_rewards([RewardSpec(f"{my_rewards}.exact"), RewardSpec(f"{my_rewards}.longer", kwargs={"margin": 1})])
    per, total = score_completions(fns, {"exact": 1.0, "longer": 1.0}, ["ab", "xyz"], columns)
    assert per["exact"].tolist() == [1.0, 0.0] and per["longer"].tolist() == [0.0, 1.0]
    assert total.tolist() == [1.0, 1.0]


def test_the_startup_check_names_what_it_refuses_and_lets_an_index_on_the_empty_batch_pass(my_rewards):
    """The startup check calls a reward given options on an empty batch: one that reads ``completions[0]`` passes it
    (its batches will tell); an option value refused there names the check; ``sys.exit`` there is one line. A reward
    without options is not called (nothing to check; one that raises or exits on an empty batch, as ``max()`` of
    nothing does, is right on real ones, and a real batch's failure names it)."""
    _check_rewards({"rewards": [{"name": f"{my_rewards}.first_length"}]})
    with pytest.raises(ValueError, match=r"rewards\[0\]\.kwargs: reward '.*picky' refused its options when called on "
                                         r"an empty batch \(the startup check\): level must be at most 2, got 3"):
        _check_rewards({"rewards": [{"name": f"{my_rewards}.picky", "kwargs": {"level": 3}}]})
    with pytest.raises(ValueError, match=r"rewards\[0\]: reward '.*leaving' called sys.exit\(3\) when called on an "
                                         r"empty batch"):
        _check_rewards({"rewards": [{"name": f"{my_rewards}.leaving", "kwargs": {"level": 1}}]})
    _check_rewards({"rewards": [{"name": f"{my_rewards}.leaving"}, {"name": f"{my_rewards}.picky"}]})


def test_a_reward_that_changes_its_inputs_changes_nothing_a_later_reward_scores(my_rewards):
    fns = build_rewards([RewardSpec(f"{my_rewards}.mutates"), RewardSpec(f"{my_rewards}.reads")])
    columns = {"answer": ["ab", "cd"], "options": [{"A": "1"}, {"A": "1"}]}
    per, _ = score_completions(fns, {"mutates": 1.0, "reads": 1.0}, ["ab", "zz"], columns)
    assert per["reads"].tolist() == [1.0, 0.0]
    assert columns == {"answer": ["ab", "cd"], "options": [{"A": "1"}, {"A": "1"}]}  # the step's own, untouched


def test_a_reward_that_paints_an_image_changes_nothing_a_later_reward_sees():
    from PIL import Image

    def painter(completions, images, **_):
        for im in images:
            im.paste((255, 0, 0), (0, 0, 2, 2))
        return [0.0] * len(completions)

    def reader(completions, images, **_):
        return [float(im.getpixel((0, 0))[0]) for im in images]

    image = Image.new("RGB", (2, 2), (10, 20, 30))
    columns = {"images": [image, image]}  # a group's rows share their prompt's image
    per, _ = score_completions({"painter": painter, "reader": reader}, {"painter": 1.0, "reader": 1.0}, ["a", "b"],
                               columns)
    assert per["reader"].tolist() == [10.0, 10.0] and image.getpixel((0, 0)) == (10, 20, 30)


def test_sys_exit_in_a_reward_on_a_batch_is_a_reward_error_naming_it():
    from lit_grpo.rewards.registry import RewardError

    def leaves(completions, **_):
        raise SystemExit(3)

    with pytest.raises(RewardError, match=r"^reward 'leaves' called sys.exit\(3\) while scoring a batch of 2 "
                                          r"completions: a reward returns values \(None or NaN where it cannot score\)$"):
        score_completions({"leaves": leaves}, {"leaves": 1.0}, ["a", "b"], {})


def test_a_reward_taking_a_column_the_data_lacks_is_refused_at_startup(my_rewards, tmp_path):
    """A parameter without a default that no column gives (``anwser``) stops the run before any step, in one line
    naming the reward, the parameter and the columns the data (generated puzzles), the rollout and the log-prob pass
    give; the reward is never called on a batch (nor with None)."""
    import importlib

    from tiny_runs import fit_args

    from lit_grpo.cli import main
    from lit_grpo.errors import InputError

    columns = "answer, answer_format, completion_length, id, images, meta, options, question, truncated"
    with pytest.raises(InputError) as exc:
        main(fit_args(tmp_path, **{"model.init_args.rewards": [{"name": f"{my_rewards}.typo"}],
                                   "trainer.max_steps": 1}))
    assert str(exc.value) == (f"reward 'typo' takes the column(s) 'anwser', which the data does not have; its "
                              f"columns: {columns} (fix the parameter's name, or give it a default to make it "
                              "optional)")
    assert importlib.import_module(my_rewards).CALLED == []  # never called (no options: no empty-batch check)


def test_only_a_parameter_without_default_that_no_column_gives_is_unmet(my_rewards):
    """Optional parameters, ``**kwargs``, options bound from the config and a class's ``__call__`` columns."""
    from lit_grpo.rewards import unmet_columns

    fns = build_rewards([RewardSpec(f"{my_rewards}.{n}") for n in ("typo", "optional", "exact", "Contains")]
                        + [RewardSpec(f"{my_rewards}.same_length", kwargs={"scale": 2.0})])
    given = {"answer", "options"}
    assert [line.split(" takes")[0] for line in unmet_columns(fns, given)] == ["reward 'typo'", "reward 'Contains'"]
    assert unmet_columns(fns, given | {"anwser", "unit"}) == []
