"""Rule-based rubric parts on string tables (stuffing attempts included), the combination, the rubric reward."""

import math

import pytest
import torch

from lit_grpo.rewards import RewardOutput, RewardSpec, build_rewards, score_completions

from lit_grpo.tasks.phyx.rubric import STOPWORDS, combine_rubric, principle_match, unit_match

from lit_grpo.tasks.phyx.judged import OpenAccuracyReward, RubricReward
from lit_grpo.tasks.phyx.rubric import principle_tokens

PRINCIPLE = [  # (predicted, gold, paper rule, strict rule) -- worked out from the token sets by hand
    ("Laws of Thermodynamics", "Laws of Thermodynamics", 1.0, 1.0),
    ("LAWS OF THERMODYNAMICS", "Laws of Thermodynamics", 1.0, 1.0),
    ("The laws of the thermodynamics", "Laws of Thermodynamics", 1.0, 1.0),  # stopwords dropped
    ("first law of thermodynamics", "Laws of Thermodynamics", 0.0, 1.0),  # law != laws unless plurals fold
    ("Thermodynamics", "Laws of Thermodynamics", 0.0, 0.0),  # one shared token
    ("Kinematics", "Kinematics", 0.0, 1.0),  # the paper's rule never rewards a one-word label
    ("optics", "Optics", 0.0, 1.0),
    ("kinematics of projectiles", "Kinematics", 0.0, 1.0),  # 1 of 2 predicted tokens is gold: precision 0.5
    ("Newton's second law", "Laws of Motion", 0.0, 0.0),  # {newton, second, law} vs {law, motion}: 1 shared
    ("Electromagnetic induction and Faraday's law", "Electromagnetic Induction", 1.0, 1.0),
    ("Wave optics", "Geometrical Optics", 0.0, 0.0),
    ("of the and", "Laws of Thermodynamics", 0.0, 0.0),  # stopwords only
    ("thermodynamics thermodynamics laws laws", "Laws of Thermodynamics", 1.0, 1.0),  # repeats are one token
    # stuffing: many labels in one tag
    ("Laws of Motion, Laws of Thermodynamics, Geometrical Optics, Rotational Motion, Electromagnetic Induction",
     "Laws of Thermodynamics", 1.0, 0.0),
    ("Kinematics Statics Magnetism Sound Relativity Optics", "Magnetism", 0.0, 0.0),
    ("Laws of Thermodynamics " + "heat " * 30, "Laws of Thermodynamics", 1.0, 0.0),  # over 100 characters
    ("", "Kinematics", 0.0, 0.0),
    (None, "Kinematics", 0.0, 0.0),
]


@pytest.mark.parametrize("pred,gold,paper,strict", PRINCIPLE, ids=[str(p[0])[:40] for p in PRINCIPLE])
def test_principle_match_table(pred, gold, paper, strict):
    assert principle_match(pred, gold) == paper
    assert principle_match(pred, gold, strict=False) == paper
    assert principle_match(pred, gold, strict=True) == strict


def test_stopwords_are_function_words_only():
    assert {"the", "of", "and", "in", "s"} <= STOPWORDS
    assert not {"law", "laws", "motion", "energy", "wave", "heat", "force"} & STOPWORDS
    assert principle_tokens("Newton's Laws of Motion") == ["newton", "laws", "motion"]
    assert principle_tokens("Newton's Laws of Motion", fold_plurals=True) == ["newton", "law", "motion"]


UNIT = [  # (predicted, gold, paper rule, strict rule)
    ("N", "N", 1.0, 1.0),
    (" N ", "N", 1.0, 1.0),
    ("kN", "N", 0.0, 0.0),  # length <= 2: exact match only
    ("N", "kN", 0.0, 0.0),
    ("n", "N", 0.0, 0.0),
    ("m/s", "meters per second", 1.0, 1.0),  # the pair the paper names: its rule compares the units' symbols too
    ("meters per second (m/s)", "m/s", 1.0, 0.0),  # substring hit; pint cannot read the whole field
    ("meter per second", "m/s", 1.0, 1.0),
    ("newtons", "N", 1.0, 1.0),  # symbols N and N: exact, as a 1-character unit must be
    ("kilometres per hour", "km/h", 1.0, 1.0),
    ("meters per second", "m/s^2", 1.0, 0.0),  # m / s is in m / s ** 2: the paper's substring rule, loose as it is
    ("kilonewtons", "N", 0.0, 0.0),
    ("m s^-1", "m/s", 1.0, 1.0),
    ("km/h", "m/s", 0.0, 0.0),  # same dimension, other scale
    ("cm", "m", 0.0, 0.0),
    ("m/s^2", "m/s^2", 1.0, 1.0),
    ("m/s²", "m/s^2", 1.0, 1.0),
    ("m/s", "m/s^2", 1.0, 0.0),  # substring of the gold
    ("kg*m/s^2", "N", 0.0, 1.0),
    ("N·m", "J", 0.0, 1.0),
    ("J/kg K", "J/(kg·K)", 1.0, 1.0),
    ("degrees", "°", 1.0, 1.0),
    ("°", "°", 1.0, 1.0),
    ("ohms", "Ω", 1.0, 1.0),
    ("mW", "MW", 0.0, 0.0),  # case is kept: milli is not mega
    ("eV", "J", 0.0, 0.0),
    ("", "N", 0.0, 0.0),
    (None, "N", 0.0, 0.0),
    # stuffing: several units in one tag
    ("m/s, N, kg, m/s^2, J", "m/s^2", 1.0, 0.0),
    ("m/s^2 or N", "m/s^2", 1.0, 0.0),
    ("m/s m/s m/s", "m/s", 1.0, 0.0),
    ("m/s^2; kg m/s^2; N", "N", 0.0, 0.0),  # the 2-character gold forces exact match even in the paper's rule
    ("m/s^2 " + "kg " * 12, "m/s^2", 1.0, 0.0),  # over the 32-character cap
    # no gold unit (dimensionless answer)
    ("none", None, 1.0, 1.0),
    ("", None, 1.0, 1.0),
    ("dimensionless", "", 1.0, 1.0),
    ("N", None, 0.0, 0.0),
]


@pytest.mark.parametrize("pred,gold,paper,strict", UNIT, ids=[f"{p[0]}|{p[1]}" for p in UNIT])
def test_unit_match_table(pred, gold, paper, strict):
    assert unit_match(pred, gold) == paper
    assert unit_match(pred, gold, strict=True) == strict


W = {"format": 0.1, "accuracy": 0.5, "principle": 0.15, "unit": 0.15, "reasoning": 0.1}


def test_combine_rubric_hand_computed():
    full = {"format": 1, "accuracy": 1, "principle": 1, "unit": 1, "reasoning": 1}
    assert combine_rubric(full, reasoning_absent=False, length=0) == 1.0
    # 0.1*0.75 + 0.5*1 + 0 + 0 + 0 = 0.575; absent reasoning x0.6 = 0.345; minus 100/4000 = 0.025 -> 0.32
    part = {"format": 0.75, "accuracy": 1, "principle": 0, "unit": 0, "reasoning": 0}
    assert combine_rubric(part, reasoning_absent=True, length=100) == pytest.approx(0.32)
    # length penalty caps at 0.05: 1 - 0.05
    assert combine_rubric(full, reasoning_absent=False, length=6000) == pytest.approx(0.95)
    # clipped at 0
    zero = {"format": 0, "accuracy": 0, "principle": 0, "unit": 0, "reasoning": 0}
    assert combine_rubric(zero, reasoning_absent=True, length=50) == 0.0
    # a missing gold principle: the others (0.85 of the weight) are rescaled to 1.0: (0.1+0.5+0.15)/0.85
    no_p = {"format": 1, "accuracy": 1, "principle": math.nan, "unit": 1, "reasoning": 0}
    assert combine_rubric(no_p, reasoning_absent=False, length=0) == pytest.approx(0.75 / 0.85)
    assert math.isnan(combine_rubric({**full, "accuracy": math.nan}, reasoning_absent=False, length=0))
    with pytest.raises(ValueError, match="unknown rubric weights"):
        combine_rubric(full, {"style": 1.0}, reasoning_absent=False, length=0)


MCQ_GOOD = ("<think>F = ma gives 7.55 N</think><answer>B</answer><unit>N</unit>"
            "<principle>Newton's laws of motion</principle>")
MCQ_BARE = "<answer>B</answer><unit>kN</unit><principle>Kinematics</principle>"


def test_rubric_reward_mcq_by_rules():
    reward = RubricReward()
    out = reward([MCQ_GOOD, MCQ_BARE, "nothing"], answer=["B", "B", "B"], answer_format=["mcq"] * 3,
                 principle=["Laws of Motion"] * 3, unit=["N"] * 3, question=["q"] * 3)
    assert isinstance(out, RewardOutput)
    # good: format 1, accuracy 1, principle {newton, laws, motion} & {laws, motion} = 2 -> 1, unit N -> 1,
    # reasoning 0 -> 0.1 + 0.5 + 0.15 + 0.15 = 0.9, think present -> no penalty, minus |y| / 4000
    assert out[0] == pytest.approx(0.9 - len(MCQ_GOOD) / 4000)
    # bare: format 3/4, accuracy 1, principle 0, unit 0 -> 0.575, no think -> x0.6 = 0.345, minus |y| / 4000
    assert out[1] == pytest.approx(0.345 - len(MCQ_BARE) / 4000)
    assert out[2] == 0.0
    assert out.components["principle"] == [1.0, 0.0, 0.0]
    assert out.components["reasoning_absent"] == [0.0, 1.0, 1.0]
    assert out.components["length_penalty"][0] == pytest.approx(len(MCQ_GOOD) / 4000)


def test_rubric_reward_strict_and_literal_penalty_and_tokens():
    text = "<think>x</think><answer>B</answer><unit>N</unit><principle>Kinematics</principle>"
    cols = dict(answer=["B"], answer_format=["mcq"], principle=["Kinematics"], unit=["N"], question=["q"],
                completion_length=[40])
    paper = RubricReward()(([text]), **cols)
    strict = RubricReward(strict=True)([text], **cols)
    assert strict.components["principle"] == [1.0] and paper.components["principle"] == [0.0]
    literal = RubricReward(literal_mcq_penalty=True, length_unit="tokens")([text], **cols)
    # 0.1 + 0.5 + 0 + 0.15 = 0.75; literal reading: x0.6 = 0.45; 40 tokens / 4000 = 0.01
    assert literal[0] == pytest.approx(0.44)


class FakeJudge:
    """The judge seam: returns scripted votes, counts calls."""

    endpoint = "fake"

    def __init__(self, votes):
        self.votes, self.items = votes, []

    def grade(self, items, task):
        self.items.extend(items)
        return [self.votes[i % len(self.votes)] for i in range(len(items))]

    def pop_metrics(self):
        return {"judge/calls": 3.0}


RUBRIC_VOTES = [[{"correctness": 2, "principle": 1, "unit": 0, "reasoning": 2},
                 {"correctness": 1, "principle": 1, "unit": 0, "reasoning": 0},
                 {"correctness": 2, "principle": 0, "unit": 1, "reasoning": 1}]]
OE_TEXT = "<think>a</think><answer>7.55 N</answer><unit>N</unit><principle>Laws of Motion</principle>"


def test_rubric_reward_open_ended_through_the_judge():
    judge = FakeJudge(RUBRIC_VOTES)
    out = RubricReward(judge=judge)([OE_TEXT], answer=["7.55N"], answer_format=["open"], principle=["Laws of Motion"],
                                    unit=["N"], question=["What force?"])
    # correctness (2+1+2)/3/2 = 5/6; principle majority 1; unit majority 0; reasoning (2+0+1)/3/2 = 0.5
    # 0.1*1 + 0.5*5/6 + 0.15*1 + 0 + 0.1*0.5 = 0.716667, minus |y| / 4000
    assert out[0] == pytest.approx(0.1 + 0.5 * 5 / 6 + 0.15 + 0.05 - len(OE_TEXT) / 4000)
    assert out.components["accuracy"] == [pytest.approx(5 / 6)]
    assert out.components["unit"] == [0.0] and out.components["reasoning"] == [0.5]
    assert out.metrics == {"judge/calls": 3.0}
    assert judge.items[0].gold_answer == "7.55N" and judge.items[0].question == "What force?"


def test_rubric_open_ended_no_reasoning_penalised_and_failed_jury_is_nan():
    votes = [[{"correctness": 1, "principle": 1, "unit": 1, "reasoning": 0}] * 3, [None, None, None]]
    out = RubricReward(judge=FakeJudge(votes))([OE_TEXT, OE_TEXT], answer=["7.55N"] * 2, answer_format=["open"] * 2,
                                               principle=["Laws of Motion"] * 2, unit=["N"] * 2, question=["q"] * 2)
    # 0.1 + 0.5*0.5 + 0.15 + 0.15 + 0 = 0.65, reasoning 0 -> x0.6 = 0.39
    assert out[0] == pytest.approx(0.39 - len(OE_TEXT) / 4000)
    assert math.isnan(out[1]) and math.isnan(out.components["accuracy"][1])
    assert out.components["format"][1] == 1.0


def test_open_accuracy_jury_and_min_votes():
    votes = [[{"correctness": 2}, {"correctness": 1}, {"correctness": 2}],
             [{"correctness": 2}, None, {"correctness": 2}]]
    cols = dict(answer=["7.55N", "7.55N", "B"], answer_format=["open", "open", "mcq"], question=["q"] * 3)
    out = OpenAccuracyReward(judge=FakeJudge(votes))(["a", "b", "c"], **cols)
    # row 1: no quorum = failed (NaN); row 2: an MCQ row, where the term does not apply (None)
    assert out[0] == pytest.approx(5 / 6) and math.isnan(out[1]) and out[2] is None
    lenient = FakeJudge(votes)
    lenient.cfg = type("Cfg", (), {"min_votes": 2})()
    assert OpenAccuracyReward(judge=lenient)(["a", "b", "c"], **cols)[1] == 1.0


def test_offline_open_accuracy_is_the_default():
    out = OpenAccuracyReward()(["<answer>0.0463 MN</answer>", "<answer>7.55</answer>", "<answer>9 N</answer>"],
                               answer=["46.3 kN", "7.55N", "7.55N"], answer_format=["open"] * 3)
    assert list(out) == [1.0, 0.5, 0.0]


def test_score_completions_logs_components_and_metrics_outside_the_total():
    fns = build_rewards([RewardSpec("rubric", kwargs={"judge": FakeJudge(RUBRIC_VOTES)}), RewardSpec("format")])
    metrics = {}
    per, total = score_completions(fns, {"rubric": 2.0, "format": 1.0}, [OE_TEXT],
                                   {"answer": ["7.55N"], "answer_format": ["open"], "principle": ["Laws of Motion"],
                                    "unit": ["N"], "question": ["q"]}, metrics)
    assert {"rubric", "format", "rubric/accuracy", "rubric/principle", "rubric/length_penalty"} <= set(per)
    torch.testing.assert_close(total, 2.0 * per["rubric"] + per["format"])
    assert metrics == {"rubric/judge/calls": 3.0}
