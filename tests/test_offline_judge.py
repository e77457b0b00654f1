"""The rule-based offline judge: open-ended grading table (0/1/2 worked out by hand) and rubric votes."""

import pytest

from lit_grpo.tasks.phyx.judge import ACCURACY, RUBRIC, JudgeConfig, JudgeItem, OfflineJudgeConfig, build_judge
from lit_grpo.tasks.phyx.judge.offline import OfflineJudge, grade_open_answer, read_quantity, reasoning_score

GRADE = [  # (answer, gold, expected): 2 = value within 1 % in the gold unit; 1 = right number with a missing or
    # wrong unit, or within 5 %; 0 = otherwise
    ("7.55 N", "7.55N", 2),
    ("7.55N", "7.55N ", 2),  # PhyX OE golds can carry a trailing space
    ("7.6 N", "7.55N", 2),  # 0.66 % off
    ("7.8 N", "7.55N", 1),  # 3.3 % off
    ("9 N", "7.55N", 0),
    ("-7.55 N", "7.55N", 0),
    ("7.55", "7.55N", 1),  # unit missing
    ("7.55 kN", "7.55N", 1),  # right number, wrong prefix
    ("7.55 m/s", "7.55N", 1),  # right number, wrong dimension
    ("0.0463 MN", "46.3 kN", 2),
    ("46300 N", "46.3 kN", 2),
    ("1.6e-19 J", r"3.2 \times 10^{-19} J", 0),  # math-verify alone would round both to 0.0
    (r"3.2 \times 10^{-19} J", "3.2e-19 J", 2),
    ("5e-7 m", "5e-8 m", 0),
    ("500 nm", "5e-7 m", 2),
    ("5 kN", "5", 1),  # math-verify alone drops the unit and calls these equal
    ("25 %", "0.25", 2),
    ("0.25", "0.25", 2),
    (r"2\sqrt{3} m/s", "3.46 m/s", 2),  # closed form evaluated: 3.4641
    (r"\frac{3}{4}", "0.75", 2),
    (r"\( 22.3^{\circ} \)", "22.3°", 2),
    ("22.3 degrees", r"\( 22.3^{\circ} \)", 2),
    ("0.389 rad", r"\( 22.3^{\circ} \)", 2),  # 22.3° = 0.3892 rad
    ("20 °C", "293.15 K", 2),
    ("v = 7.55 m/s", "7.55 m/s", 2),
    (r"\boxed{7.55\,\text{m/s}}", "7.55 m/s", 2),
    (r"1.54 \text{ m/s}^2", r"1.54 \text{ m/s}^2", 2),
    ("5 m/s", r"5\,\mathrm{m\,s^{-1}}", 2),  # markup with braces inside it: unit read, same quantity
    ("5000 m/s", r"5\,\mathrm{km\,s^{-1}}", 2),
    (r"5\,\mathrm{km\,s^{-1}}", "5 m/s", 1),  # same number, another quantity: 1 (the scale's partial)
    ("about seven newtons", "7.55N", 0),
    ("", "7.55N", 0),
    (None, "7.55N", 0),
    (r"m g \sin\theta", r"mg\sin(\theta)", 2),  # symbolic gold: math-verify
    (r"mg\cos\theta", r"mg\sin\theta", 0),
]


@pytest.mark.parametrize("answer,gold,expected", GRADE, ids=[f"{g[0]}|{g[1]}" for g in GRADE])
def test_grade_open_answer_table(answer, gold, expected):
    assert grade_open_answer(answer, gold) == expected


def test_unit_from_the_unit_tag_and_gold_unit_from_the_label():
    assert grade_open_answer("7.55", "7.55N", unit="N") == 2
    assert grade_open_answer("7.55", "7.55N", unit="kN") == 1
    assert grade_open_answer("7.55 N", "7.55", gold_unit="N") == 2
    assert grade_open_answer("7.8 N", "7.55N", partial_rel_tol=0.01) == 0


def test_read_quantity():
    assert read_quantity("F = ma = 7.55 N") == (7.55, "N")
    value, unit = read_quantity(r"\frac{\sqrt{3}}{2} m")
    assert value == pytest.approx(0.8660254) and unit == "m"
    assert read_quantity("no number") == (None, "")


def test_reasoning_proxy():
    assert reasoning_score(None) == 0 and reasoning_score("  ") == 0
    assert reasoning_score("short guess") == 1
    assert reasoning_score("word " * 25) == 1  # long but no number or equation
    assert reasoning_score("T = mg so " + "word " * 20) == 2


THINK = "<think>" + "The tension balances gravity so T = m g = 0.77 * 9.8 which gives 7.55 newtons " * 2 + "</think>"


def test_offline_rubric_votes():
    judge = OfflineJudge(num_judges=3)
    good = JudgeItem("q", "7.55N", THINK + "<answer>7.55</answer><unit>N</unit><principle>Newton's laws of motion"
                     "</principle>", gold_unit="N", gold_principle="Laws of Motion")
    votes = judge.grade([good], RUBRIC)[0]
    assert votes == [{"correctness": 2, "principle": 1, "unit": 1, "reasoning": 2}] * 3
    bare = JudgeItem("q", "7.55N", "<answer>7.55 N</answer>", gold_unit="N", gold_principle="Laws of Motion")
    # no reasoning: full correctness is capped at 1 (the judge's instruction); unit read from the answer
    assert judge.vote(bare, RUBRIC) == {"correctness": 1, "principle": 0, "unit": 1, "reasoning": 0}
    assert judge.vote(bare, ACCURACY) == {"correctness": 2}  # the accuracy task does not judge reasoning
    boxed = JudgeItem("q", "7.55N", r"so \boxed{7.55 N}")
    assert judge.vote(boxed, ACCURACY) == {"correctness": 2}
    assert judge.pop_metrics() == {"judge/offline_graded": 1.0} and judge.pop_metrics() == {}


def test_offline_settings_have_their_own_block():
    """The offline judge's settings live under judge.offline, apart from the HTTP judge's; a flat one is refused
    naming where it goes."""
    judge = build_judge({"num_judges": 2, "offline": {"rel_tol": 0.05, "min_reasoning_words": 3}})
    assert judge.cfg == OfflineJudgeConfig(rel_tol=0.05, partial_rel_tol=0.05, min_reasoning_words=3)
    item = JudgeItem("q", "7.55N", "<answer>7.8 N</answer>")  # 3.3 % off: full marks only at 5 %
    assert judge.grade([item], ACCURACY) == [[{"correctness": 2}] * 2]  # K = num_judges identical votes
    assert build_judge({}).grade([item], ACCURACY)[0] == [{"correctness": 1}] * 3  # default 1 %: partial
    assert JudgeConfig(offline={"partial_rel_tol": 0.1}).offline.partial_rel_tol == 0.1
    for flat in ("rel_tol", "partial_rel_tol", "min_reasoning_words"):
        with pytest.raises(ValueError, match=rf"{flat} is an offline judge setting: judge.offline.{flat}"):
            JudgeConfig.from_dict({flat: 1})
    with pytest.raises(ValueError,
                       match=r"unknown offline judge settings \['rel_tolerance'\]\. Did you mean rel_tol\? Valid: "):
        JudgeConfig.from_dict({"offline": {"rel_tolerance": 0.1}})
