"""The graded answer: the final tag pair outside <think>, and option letters read as the answer, never guessed.

Every expected value is read off the string by hand: a pair quoted inside <think> is reasoning; a later pair
outside <think> overrides an earlier one; a letter counts only where it stands as the answer.
"""

import pytest

from lit_grpo.evaluation import extracted_answer
from lit_grpo.rewards import accuracy_reward, extract_tag, format_reward
from lit_grpo.tasks.phyx.judged import OpenAccuracyReward, RubricReward
from lit_grpo.rewards.parsing import extract_answer, extract_option_letter

QUOTED = [  # (completion, graded <answer>) -- one quoted pair inside <think>, in several spellings
    ("<think>maybe <answer>A</answer>? no</think><answer>B</answer>", "B"),
    ("<think>\nmaybe <answer>\nA\n</answer>?\nno\n</think>\n<answer> B </answer>", "B"),
    ("<think>I'd write <answer>C</answer> then <answer>D</answer></think>\n<answer>B</answer>", "B"),
    ("<answer>A</answer> wait <answer>B</answer>", "B"),  # a later pair outside <think> overrides
    ("<think>a</think><answer>A</answer><think>no, <answer>C</answer></think><answer>B</answer>", "B"),
    ("<think>only <answer>A</answer> inside</think> and nothing after", None),
    ("<think>never closed <answer>B</answer>", "B"),  # an unclosed <think> is not a block
]


@pytest.mark.parametrize("text,graded", QUOTED)
def test_the_graded_block_is_the_final_pair_outside_think(text, graded):
    assert extract_tag(text, "answer") == graded
    assert extract_answer(text) == graded
    expected = None if graded is None else float(graded == "B")
    assert accuracy_reward([text], answer=["B"], answer_format=["mcq"]) == [expected if graded else 0.0]
    assert extracted_answer("accuracy", text, "mcq") == graded


def test_extracting_think_gives_the_think_block():
    text = "<think> step <answer>A</answer> </think><answer>B</answer>"
    assert extract_tag(text, "think") == "step <answer>A</answer>"
    assert extract_tag("<think>first</think> x <think>second</think>", "think") == "first"
    assert extract_tag("<think>unclosed", "think") is None


def test_the_box_fallback_ignores_boxes_inside_think():
    assert extract_answer(r"<think>try \boxed{9 N}</think> so \boxed{7.55 N}") == "7.55 N"
    assert extract_answer(r"<think>try \boxed{9 N}</think> no box after") is None
    assert extracted_answer("open_accuracy", r"<think>\boxed{1}</think><answer>2 m</answer>", "open") == "2 m"


FORMAT_PAIRS = [  # (with quoted tags inside <think>, the same completion without them) -> same format credit
    ("<think>maybe <answer>A</answer>? no</think><answer>B</answer><unit>N</unit><principle>p</principle>",
     "<think>maybe ? no</think><answer>B</answer><unit>N</unit><principle>p</principle>", 1.0),
    ("<think>use <unit>kg</unit> or <unit>N</unit>, <principle>x</principle></think><answer>B</answer>",
     "<think>use  or , </think><answer>B</answer>", 0.5),
    ("<think>quote <think> inside</think><answer>7 N</answer><unit>N</unit>",
     "<think>quote  inside</think><answer>7 N</answer><unit>N</unit>", 0.75),
]


@pytest.mark.parametrize("quoted,plain,credit", FORMAT_PAIRS)
def test_format_credit_is_unchanged_by_tags_quoted_inside_think(quoted, plain, credit):
    assert format_reward([quoted]) == format_reward([plain]) == [credit]


def test_open_answers_grade_the_final_block():
    texts = ["<think>first guess <answer>9 N</answer></think><answer>7.55 N</answer>",
             "<think>first guess <answer>7.55 N</answer></think><answer>9 N</answer>",
             "<answer>9 N</answer> no, <answer>7.55 N</answer>"]
    out = OpenAccuracyReward()(texts, answer=["7.55N"] * 3, answer_format=["open"] * 3)
    assert list(out) == [1.0, 0.0, 1.0]  # offline judge: 2/2, 0/2, 2/2


def test_rubric_unit_and_principle_read_the_final_blocks():
    quoted = ("<think>is it <unit>kg</unit>, <principle>Geometrical Optics</principle>? no</think><answer>B</answer>"
              "<unit>N</unit><principle>Laws of Motion</principle>")
    swapped = ("<think>is it <unit>N</unit>, <principle>Laws of Motion</principle>? no</think><answer>B</answer>"
               "<unit>kg</unit><principle>Geometrical Optics</principle>")
    out = RubricReward()([quoted, swapped], answer=["B", "B"], answer_format=["mcq", "mcq"],
                         principle=["Laws of Motion"] * 2, unit=["N"] * 2)
    assert out.components["unit"] == [1.0, 0.0] and out.components["principle"] == [1.0, 0.0]
    assert out.components["format"] == [1.0, 1.0]


LETTERS = [  # (answer field, letter among A-D) -- both directions: read where it is the answer, else None
    ("Answer seems to be A", "A"), ("I think it is C", "C"), ("the answer is (B).", "B"), ("It is D.", "D"),
    ("My answer is **D**.", "D"), ("so the answer is: C", "C"), ("I choose B", "B"), ("The right option: C", "C"),
    ("C is correct", "C"), ("(A) is the correct answer", "A"), (r"\boxed{C}", "C"), ("$B$", "B"),
    ("the answer should be\nA", "A"),
    ("A force of 5 N", None), ("Based on the figure", None), ("Based on the figure, A", None),
    ("The answer is not C", None), ("It is not C", None), ("either A or B", None), ("The answer is C or D", None),
    ("the force at A is larger than at B", None), ("A is wrong", None), ("It is a", None),
    ("The current is I", None), ("Diagram B", None), ("point B", None), ("Bx", None), ("is Bx", None),
    ("is E", None),  # not an option label
]


@pytest.mark.parametrize("text,letter", LETTERS)
def test_option_letter_table(text, letter):
    assert extract_option_letter(text, labels="ABCD") == letter
    gold = letter or "B"
    expected = 1.0 if letter else 0.0
    options = {k: "x" for k in "ABCD"}
    assert accuracy_reward([f"<answer>{text}</answer>"], answer=[gold], answer_format=["mcq"],
                           options=[options]) == [expected]


def test_a_letter_is_never_a_wrong_one():
    """Across the table, the letter read is the one the field states, or nothing: never another letter."""
    for text, letter in LETTERS:
        for gold in "ABCD":
            if gold != letter:
                assert accuracy_reward([f"<answer>{text}</answer>"], answer=[gold],
                                       options=[{k: "x" for k in "ABCD"}]) == [0.0]


def test_option_labels_of_the_row_limit_the_letters():
    text = "<answer>The current is I</answer>"
    assert accuracy_reward([text], answer=["I"], options=[{k: k for k in "ABCDEFGHIJ"}]) == [1.0]
    assert accuracy_reward([text], answer=["I"], options=[{k: k for k in "ABCD"}]) == [0.0]
