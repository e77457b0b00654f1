"""The official PhyX rule-mode scorer on hand-worked (prediction, gold) pairs, every branch of both rules.

Each expectation was worked out by hand from the scorer's rule text (module docstring of ``lit_grpo.tasks.phyx.official``); the
comment on each row gives the reasoning.
"""


import pytest

from lit_grpo.rewards import REWARDS

from lit_grpo.tasks.phyx.official import phyx_extract, phyx_official_score

MCQ = [  # (prediction, gold, expected score)  # reason
    ("The answer is B", "B", 1.0),  # "answer", then the first capital A-D after it is the B -> equals gold
    ("B", "B", 0.0),  # no answer word, no "X:"; "B:"/"B**"/"**B" absent -> a bare letter scores 0
    ("A", "B", 0.0),  # same: nothing extracted and no fallback pattern
    ("The answer is: Based on the figure, C", "C", 0.0),  # first capital A-D after "answer" is the B of "Based" != C
    ("The answer is: Based on the figure, C", "B", 1.0),  # ... which is the gold here
    ("ANSWER: C", "C", 0.0),  # all-caps ANSWER is not a counted word; no A-D directly before ":"; no fallback
    ("Correct option: D", "D", 1.0),  # "Correct" counts; first capital A-D after it: D
    ("the correct answer is (c)", "C", 0.0),  # lower-case c is never read; no "X:"; "C:"/"C**"/"**C" absent
    ("Option C is right", "c", 1.0),  # extracted C equals the gold case-insensitively
    ("A: 7.55N", "A", 1.0),  # no answer word -> last letter directly followed by ":" is A
    ("A: 5 N\nB: 7 N\nI pick B: 7 N", "B", 1.0),  # no answer word ("pick" is not one); last "X:" is B
    ("A: 5 N, B: 6 N", "A", 1.0),  # last "X:" is B (wrong), falls through: "A:" occurs -> 1
    ("The answer is C. Note option **B** looks close", "B", 1.0),  # extracted C is wrong; "**B" occurs -> 1
    ("The answer is C, not B**", "B", 1.0),  # extracted C is wrong; "B**" occurs -> 1
    ("The answer is C, see **B", "B", 1.0),  # extracted C is wrong; "**B" occurs (no "B**", no "B:") -> 1
    ("The answer is C", "B", 0.0),  # extracted C is wrong and no fallback pattern
    ("My choice: D", "D", 0.0),  # "choice" is not a counted word; "e:" is not A-D; "D:"/"D**"/"**D" absent
    ("answers: D", "D", 0.0),  # "answers" is not the whole word "answer"; "s:" is not "X:"; no fallback
    ("Answer: D", "D", 1.0),  # the plain case
    ("I think Cis fine. answer: A", "A", 1.0),  # letters before the first answer word are ignored; after it: A
    ("answer\n\nAfter checking, D", "D", 0.0),  # first capital A-D after "answer" is the A of "After" != D
    ("The correct option is D:", "D", 1.0),  # "correct" then D
    ("D:", "D", 1.0),  # no answer word; last "X:" is D
    ("Final: **A**", "A", 1.0),  # nothing extracted ("Final" not counted, "l:" not A-D); "A**" occurs -> 1
    ("optional C", "C", 0.0),  # "optional" is not the whole word "option"; nothing else matches
    ("Option", "A", 0.0),  # answer word without any capital A-D after it; no "X:"; no fallback
    ("  \n The answer is A \n", "A", 1.0),  # surrounding whitespace is stripped first; extracted A
    ("The answer: E: no, it is D", "D", 1.0),  # E is not A-D; first capital A-D after "answer" is the D
    ("Answer B: 5 N. The answer is C", "C", 0.0),  # first answer word ("Answer") gives B != C; "C:"/"C**"/"**C" absent
]

OPEN = [  # (prediction, gold, expected score)  # reason
    (r"so \boxed{7.55N}", "7.55N", 1.0),  # box content equals the gold
    (r"\boxed{7.55 N}", "7.55N", 0.0),  # "7.55 n" != "7.55n"; whole text differs; "7.55N" not a substring (space)
    (r"\boxed{ 7.55n }", "7.55N", 1.0),  # box content stripped and compared case-insensitively
    (r"\boxed{\dfrac{1}{2}}", r"\frac{1}{2}", 1.0),  # \dfrac -> \frac in the extraction; gold not a substring of the raw text
    (r"\boxed{2\pi}", "23.14", 1.0),  # \pi -> 3.14 textually: "2" + "3.14"
    (r"\boxed{2\pi}", "6.28", 0.0),  # no arithmetic; "6.28" not in the text
    (r"\boxed{a}\boxed{7.55N}", "7.55N", 1.0),  # first box is "a" (wrong) but the gold is a substring of the text
    (r"\boxed{a} then \boxed{b}", "B", 0.0),  # only the first box ("a") is read; substring rule is case-sensitive
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}", 1.0),  # nested braces are counted to the matching "}"
    (r"\boxed{12 m", "12 M", 0.0),  # unclosed box extracts nothing; text != gold; "12 M" not a substring
    ("The final answer is: 12 M", "12 m", 1.0),  # no box; text after "final answer ... :" is "12 M" == "12 m"
    ("Final Answer：12 M", "12 m", 1.0),  # full-width colon ends the lead-in as well
    ("final answer 12 m", "12 M", 0.0),  # no colon after "final answer": nothing extracted; case-sensitive substring fails
    ("The correct answer: 3.2 M\n\n\nMore text", "3.2 m", 1.0),  # extraction stops at the first "\n\n\n"
    ("The correct answer: 3.2 M\n\nMore text", "3.2 m", 0.0),  # "\n\n" does not stop it: "3.2 M\n\nMore text" != gold
    ("The semifinal answer: 7 M", "7 m", 0.0),  # "semifinal" is not the whole word "final"; "7 m" not a substring
    ("7.55n", "7.55N", 1.0),  # nothing extracted; the whole prediction equals the gold case-insensitively
    ("7.55n", "7.55N ", 1.0),  # whole-prediction comparison strips the gold too
    ("It is 7.55N", "7.55N ", 0.0),  # stored gold with its trailing space is not in the stripped prediction
    ("It is 7.55N m", "7.55N ", 1.0),  # ... and is when a space follows in the prediction
    ("It is 7.55N", "7.55N", 1.0),  # substring rule
    ("It is 7.55n", "7.55N", 0.0),  # substring rule is case-sensitive; whole text differs
    (r"\boxed{7.55N} ", " 7.55N", 1.0),  # gold stripped for the extraction comparison
    (r"The final answer: \dfrac{3}{4} m", r"\frac{3}{4} m", 1.0),  # mapping applies to the final-answer extraction
    (r"\dfrac{3}{4} m", r"\frac{3}{4} m", 0.0),  # no extraction, so no mapping; "\frac{3}{4} m" not a substring
    (r"\boxed {5 m}", "5 M", 0.0),  # "\boxed {" (with a space) is not the box spelling; nothing else matches
    (r"The final answer: \boxed{4 N}", "4 n", 1.0),  # the box wins over the final-answer lead-in: "4 N" == "4 n"
    (r"The final answer: 5 KM \boxed{x", r"5 km \boxed{x", 1.0),  # unclosed box -> final-answer text, equal ignoring case
    ("The correct answer is: Based on 9.8 M", "9.8 m", 0.0),  # extraction "Based on 9.8 M" != gold; case-sensitive substring fails
    ("  12 M  ", "12 m", 1.0),  # prediction stripped, then equal to the gold ignoring case
]


@pytest.mark.parametrize("prediction,gold,expected", MCQ, ids=[f"mcq-{i}" for i in range(len(MCQ))])
def test_official_mcq_rule(prediction, gold, expected):
    assert phyx_official_score(prediction, gold, "mcq") == expected


@pytest.mark.parametrize("prediction,gold,expected", OPEN, ids=[f"open-{i}" for i in range(len(OPEN))])
def test_official_open_rule(prediction, gold, expected):
    assert phyx_official_score(prediction, gold, "open") == expected


def test_table_is_large_enough():
    assert len(MCQ) + len(OPEN) >= 40


def test_extraction_table():
    assert phyx_extract("The answer is: Based on", "mcq") == "B"
    assert phyx_extract("A: 1, B: 2", "mcq") == "B"
    assert phyx_extract("nothing here", "mcq") is None
    assert phyx_extract(r"x \boxed{\dfrac{\pi}{2}} y", "open") == r"\frac{3.14}{2}"
    assert phyx_extract("Final answer: 5 m\n\n\ntail", "open") == "5 m"
    assert phyx_extract("5 m", "open") is None


def test_unknown_answer_format_raises():
    with pytest.raises(ValueError, match="answer_format"):
        phyx_official_score("A", "A", "multiple")


def test_reward_uses_the_stored_gold_and_does_not_apply_without_one():
    reward = REWARDS.get("phyx_official")
    out = reward(["It is 7.55N", "It is 7.55N", "Answer: A", "x"], answer=["7.55N", "7.55N", "A", None],
                 answer_format=["open", "open", "mcq", "open"],
                 meta=[{"answer_raw": "7.55N "}, {}, {}, {}])
    # stored gold "7.55N " is not in the stripped prediction; without answer_raw the stripped gold is
    assert out == [0.0, 1.0, 1.0, None]


RECITE_OPEN = "A: 7.55N B: 5.55N C: 7.65N D: 6.65N"
RECITE_MCQ = "A: 7.55N\nB: 5.55N\nC: 7.65N\nD: 6.65N"


@pytest.mark.parametrize("gold", ["7.55N", "5.55N", "7.65N", "6.65N"])
def test_reciting_every_option_games_the_official_rule(gold):
    """Why the official rule is a test metric only: the substring test (open) and the ``gold:`` test (MCQ)."""
    assert phyx_official_score(RECITE_OPEN, gold, "open") == 1.0
    letter = "ABCD"["7.55N 5.55N 7.65N 6.65N".split().index(gold)]
    assert phyx_official_score(RECITE_MCQ, letter, "mcq") == 1.0


def _module(tiny_model_dir, rewards, scorer=None):
    from lit_grpo import GRPOModule
    from lit_grpo.config import EvalConfig
    from lit_grpo.policy import PolicyConfig
    from lit_grpo.rewards import RewardSpec

    return GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir, local_files_only=True),
                      rewards=[RewardSpec(**r) for r in rewards], evaluation=EvalConfig(scorer=scorer))


@pytest.mark.parametrize("rewards,scorer,warned", [
    ([{"name": "format"}, {"name": "phyx_official"}], None, ["phyx_official"]),
    ([{"name": "phyx_official", "alias": "official", "weight": 0.5}], None, ["official"]),
    ([{"name": "format"}, {"name": "accuracy"}], "phyx_official", []),  # the evaluation scorer: exact, no warning
    ([{"name": "accuracy"}, {"name": "phyx_official", "weight": 0.0}], None, []),  # weight 0: logged only
])
def test_phyx_official_as_a_training_reward_is_named_once_at_startup(tiny_model_dir, caplog, rewards, scorer, warned):
    import logging

    with caplog.at_level(logging.WARNING, logger="lit_grpo.rewards.registry"):
        _module(tiny_model_dir, rewards, scorer)
    lines = [r.getMessage() for r in caplog.records if "can be gamed" in r.getMessage()]
    assert len(lines) == len(warned) and all(f"'{w}'" in line and "reciting every option" in line
                                             for w, line in zip(warned, lines))
