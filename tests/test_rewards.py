"""Reward string tables: each row's expected value is worked out by hand from the rule it tests."""

import math

import pytest
import torch

from lit_grpo.rewards import (RewardSpec, accuracy_reward, binary_reward, build_rewards, extract_boxed,
                              extract_option_letter, extract_tag, format_reward, score_completions)
from lit_grpo.rewards.registry import REWARDS

BOXED = [  # (text, first, last)
    (r"\boxed{C}", "C", "C"),
    (r"so \boxed{ B } done", "B", "B"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}", r"\frac{1}{2}"),
    (r"\boxed{a{b{c}}d} then \boxed{E}", "a{b{c}}d", "E"),
    (r"\boxed {D}", "D", "D"),
    (r"\fbox{A} or \boxed{B}", "A", "B"),
    (r"\boxed{\{x\}}", r"\{x\}", r"\{x\}"),
    (r"\boxed{A} and \boxed{B", "A", None),  # the last box is unclosed
    (r"\boxed{A", None, None),
    ("no box here", None, None),
    ("\\boxed{multi\nline}", "multi\nline", "multi\nline"),
    ("", None, None),
]


@pytest.mark.parametrize("text,first,last", BOXED)
def test_extract_boxed_table(text, first, last):
    assert extract_boxed(text, "first") == first
    assert extract_boxed(text, "last") == last


BINARY = [  # (completion, gold, official, multiline, last) -- official: the regex \\boxed\{(.*?)\} without DOTALL,
    # stripped, exact; multiline: the same regex with DOTALL; last: the brace-matched last box
    (r"The answer is \boxed{C}.", "C", 1.0, 1.0, 1.0),
    (r"\boxed{ C }", "C", 1.0, 1.0, 1.0),
    (r"\boxed{(C)}", "C", 0.0, 0.0, 0.0),
    (r"\boxed{c}", "C", 0.0, 0.0, 0.0),
    ("C", "C", 0.0, 0.0, 0.0),
    (r"\boxed{A} ... on reflection \boxed{C}", "C", 0.0, 0.0, 1.0),
    (r"\boxed{C} ... no, \boxed{A}", "C", 1.0, 1.0, 0.0),
    (r"\boxed{\text{C}}", "C", 0.0, 0.0, 0.0),
    (r"\boxed{\text{C}}", r"\text{C", 1.0, 1.0, 0.0),  # official rule stops at the first }
    (r"\fbox{C}", "C", 0.0, 0.0, 1.0),  # official rule only knows \boxed{
    (r"\boxed {C}", "C", 0.0, 0.0, 1.0),  # official rule needs \boxed{ exactly
    (r"\boxed{C", "C", 0.0, 0.0, 0.0),
    # "." does not cross a newline officially: a box spanning lines does not match ...
    ("\\boxed{\nC\n}", "C", 0.0, 1.0, 1.0),
    ("\\boxed{C\n}", "C", 0.0, 1.0, 1.0),
    ("\\boxed{\r\nC}", "C", 0.0, 1.0, 1.0),  # \r is not a newline for ".", \n is
    # ... and the search goes on to a later box on one line
    ("\\boxed{\nA\n} so \\boxed{C}", "C", 1.0, 0.0, 1.0),
    ("\\boxed{A\n} \\boxed{ C }", "C", 1.0, 0.0, 1.0),
]


@pytest.mark.parametrize("text,gold,official,multiline,last", BINARY)
def test_binary_reward_table(text, gold, official, multiline, last):
    assert binary_reward([text], answer=[gold]) == [official]
    assert binary_reward([text], answer=[gold], mode="official") == [official]
    assert binary_reward([text], answer=[gold], mode="multiline") == [multiline]
    assert binary_reward([text], answer=[gold], mode="last") == [last]


def test_binary_reward_unknown_mode_raises():
    with pytest.raises(ValueError, match="multiline"):
        binary_reward([], answer=[], mode="lenient")


def test_binary_reward_missing_gold_does_not_apply():
    assert binary_reward([r"\boxed{A}"], answer=[None]) == [None]


FORMAT = [
    ("<think>a</think><answer>B</answer><unit>N</unit><principle>Newton</principle>", 1.0),
    ("<think>\nmulti\nline\n</think>\n<answer>\nB\n</answer>", 0.5),
    ("<think>a</think><think>b</think><answer>B</answer><unit>N</unit><principle>x</principle>", 0.75),
    ("</think>a<think><answer>B</answer>", 0.25),  # think pair out of order
    ("<think>a</think><answer>B</answer></answer><unit>N</unit>", 0.5),  # extra closing answer tag
    ("<think>never closed <answer>B</answer>", 0.25),
    ("plain text", 0.0),
    ("", 0.0),
]


@pytest.mark.parametrize("text,expected", FORMAT)
def test_format_reward_table(text, expected):
    assert format_reward([text]) == [expected]


def test_format_reward_custom_tags():
    assert format_reward(["<think>x</think>\\boxed{A}"], tags=["think"]) == [1.0]


TAGS = [
    ("<answer>B</answer>", "answer", "B"),
    ("<answer>\n  B \n</answer>", "answer", "B"),
    ("<answer>A</answer><answer>B</answer>", "answer", "B"),  # the final pair is graded
    ("<answer>B", "answer", None),
    ("<unit>m/s^2</unit>", "unit", "m/s^2"),
    ("<think>line1\nline2</think>", "think", "line1\nline2"),
    ("<answer></answer>", "answer", ""),
]


@pytest.mark.parametrize("text,tag,expected", TAGS)
def test_extract_tag_table(text, tag, expected):
    assert extract_tag(text, tag) == expected


LETTERS = [
    ("B", "B"), ("b", "B"), ("(B)", "B"), ("[C]", "C"), ("B.", "B"), ("B)", "B"), ("B: 7.55 N", "B"),
    ("**B**", "B"), ("Answer: B", "B"), ("answer: (d)", "D"), ("The answer is C", "C"),
    ("The correct option is (A)", "A"), ("A force of 5 N", None), ("Based on the figure", None),
    ("7.55 N", None), ("K", None), ("", None), ("  D  ", "D"), ("E.", "E"),
]


@pytest.mark.parametrize("text,expected", LETTERS)
def test_extract_option_letter_table(text, expected):
    assert extract_option_letter(text) == expected


def test_option_letter_respects_labels():
    assert extract_option_letter("E", labels="ABCD") is None


ACCURACY = [
    ("<answer>B</answer>", "B", 1.0),
    ("<answer>(b)</answer>", "B", 1.0),
    ("<answer>Answer: B</answer>", "B", 1.0),
    ("<answer>B) 7.55 N</answer>", "B", 1.0),
    ("<answer>Based on the figure, A</answer>", "B", 0.0),
    ("<answer>A</answer>", "B", 0.0),
    ("B", "B", 0.0),  # no answer tag
    ("<think>B</think>", "B", 0.0),
]


@pytest.mark.parametrize("text,gold,expected", ACCURACY)
def test_accuracy_reward_table(text, gold, expected):
    assert accuracy_reward([text], answer=[gold], answer_format=["mcq"]) == [expected]


def test_accuracy_reward_does_not_apply_to_open_ended_rows():
    assert accuracy_reward(["<answer>7.55 N</answer>"], answer=["7.55N"], answer_format=["open"]) == [None]


def test_registry_rejects_duplicates_and_lists_names():
    with pytest.raises(ValueError, match="already registered"):
        REWARDS.register("binary")(lambda completions, **_: [])
    with pytest.raises(ValueError, match=r"^RewardSpec.name: unknown reward 'bianry' \(did you mean binary\?\); "
                       r"registered: accuracy, .*binary"):
        RewardSpec("bianry")  # the name's declared type refuses it when the spec is built
    with pytest.raises(ValueError, match="alias"):
        build_rewards([RewardSpec("format"), RewardSpec("format")])


def test_weighted_total_skips_nan_terms_and_keeps_all_nan_rows_nan():
    fns = build_rewards([RewardSpec("accuracy", 2.0), RewardSpec("format", 0.5, {"tags": ["answer"]})])
    texts = ["<answer>B</answer>", "<answer>B</answer>", "nothing"]
    cols = {"answer": ["B", "7 N", "B"], "answer_format": ["mcq", "open", "mcq"]}
    per, total = score_completions(fns, {"accuracy": 2.0, "format": 0.5}, texts, cols)
    torch.testing.assert_close(per["accuracy"], torch.tensor([1.0, math.nan, 0.0]), equal_nan=True)
    torch.testing.assert_close(total, torch.tensor([2.5, 0.5, 0.0]))
    per, total = score_completions({"a": fns["accuracy"]}, {"a": 1.0}, texts[1:2], {"answer": ["7 N"],
                                   "answer_format": ["open"]})
    assert torch.isnan(total).all()


def test_reward_with_wrong_length_is_named():
    with pytest.raises(ValueError, match="'short'"):
        score_completions({"short": lambda c, **_: [1.0]}, {"short": 1.0}, ["a", "b"], {})


@pytest.mark.parametrize("name, kwargs, unknown, valid", [
    ("binary", {"mdoe": "last"}, "'mdoe' (did you mean mode?)", "mode"),
    ("format", {"tag": ["think"]}, "'tag'", "tags"),
    ("accuracy", {"answer": ["B"], "tag": "answer"}, "'answer'", "tag"),  # a column is not an option
    ("rubric", {"strickt": True}, "'strickt'", "weights, strict, judge"),
    ("attention", {"scale": 2.0}, "'scale'", "none"),
])
def test_unknown_reward_options_are_refused_naming_the_valid_ones(name, kwargs, unknown, valid):
    from lit_grpo.rewards import RewardSpec, build_reward

    with pytest.raises(ValueError) as err:
        build_reward(RewardSpec(name, kwargs=kwargs))
    assert f"has no option {unknown}" in str(err.value) and valid in str(err.value)


@pytest.mark.parametrize("name, kwargs, expected", [
    ("binary", {"mode": 3}, "option mode: expected str (got 3)"),
    ("format", {"tags": "answer"}, "option tags: expected list (got answer)"),
    ("rubric", {"absent_factor": "x"}, "option absent_factor: must be a number in [0, 1] (got x)"),
    ("rubric", {"weights": {"principle": "x"}},
     "option weights.principle: must be a number >= 0 (got x)"),
    # a judge's settings: its own check (unknown keys, did-you-mean, the offline hint), then field by field
    ("open_accuracy", {"judge": {"num_judgse": 3}}, "unknown judge settings ['num_judgse']"),
    ("open_accuracy", {"judge": {"num_judgse": 3}}, "Did you mean num_judges?"),
    ("open_accuracy", {"judge": {"rel_tol": 0.1}}, "rel_tol is an offline judge setting: judge.offline.rel_tol"),
    ("rubric", {"judge": {"timeout_s": "slow"}}, "option judge.timeout_s: must be a number > 0 (got slow)"),
    ("open_accuracy", {"judge": {"offline": {"rel_tol": "a"}}}, "option judge.offline.rel_tol: must be a number >= 0"),
    ("open_accuracy", {"judge": 5}, "option judge: expected one of Judge, JudgeConfig, dict[str, Any], null (got 5)"),
    # a scalar pydantic would convert, also inside a settings mapping
    ("rubric", {"strict": 1}, "option strict: expected bool (got 1)"),
    ("rubric", {"weights": {"unit": True}}, "option weights.unit: must be a number >= 0 (got true)"),
    ("open_accuracy", {"judge": {"num_judges": 3.0}}, "option judge.num_judges: must be an integer >= 1 (got 3.0)"),
    ("open_accuracy", {"judge": {"offline": {"rel_tol": True}}},
     "option judge.offline.rel_tol: must be a number >= 0 (got true)"),
])
def test_reward_option_values_are_checked_against_their_types(name, kwargs, expected):
    from lit_grpo.rewards import RewardSpec, build_reward

    with pytest.raises(ValueError) as err:
        build_reward(RewardSpec(name, kwargs=kwargs))
    assert str(err.value).startswith(f"reward {name!r} ") and expected in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 420


def test_an_aliased_reward_is_named_by_label_and_name():
    from lit_grpo.rewards import RewardSpec, build_reward

    with pytest.raises(ValueError, match=r"^reward 'b2' \(binary\) option mode: expected str \(got 3\)$"):
        build_reward(RewardSpec("binary", kwargs={"mode": 3}, alias="b2"))


@pytest.mark.parametrize("name, kwargs", [
    ("binary", {"mode": "multiline"}), ("format", {"tags": ["think", "answer"]}), ("rubric", {"absent_factor": 1}),
    ("rubric", {"weights": {"principle": 0.5, "unit": 0.5}, "strict": True}),
    ("open_accuracy", {"judge": {"model": "m", "timeout_s": 3, "offline": {"rel_tol": 0.02}}}),
])
def test_reward_option_values_of_the_right_type_pass(name, kwargs):
    from lit_grpo.rewards import RewardSpec, build_reward

    assert callable(build_reward(RewardSpec(name, kwargs=kwargs)))


def test_reward_options_and_columns_come_from_the_registration():
    from lit_grpo.rewards import RewardSpec, build_reward
    from lit_grpo.rewards.registry import reward_info, reward_options

    assert reward_options("binary") == ["mode"]
    assert reward_options("accuracy") == ["tag"]
    assert reward_options("boxed_format") == []
    assert reward_info("attention").columns == ("asm",)
    assert reward_info("phyx_official").gameable and reward_info("accuracy").gameable is None
    assert reward_info("binary").extractor(r"x \boxed{C} \boxed{D}", "mcq") == "C"
    assert build_reward(RewardSpec("binary", kwargs={"mode": "official"}))([r"\boxed{C}"], answer=["C"]) == [1.0]
