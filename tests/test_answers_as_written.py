"""Answers as models and physicists write them: an option letter followed by its reason, ``ms^-2`` for metres per
second squared, temperature differences (``Δ°C``, ``C°``), ``deg C``; never a wrong letter or a wrong unit."""

import pytest

from lit_grpo.tasks.phyx.judge.offline import grade_open_answer
from lit_grpo.rewards.parsing import extract_answer_letter, extract_option_letter
from lit_grpo.tasks.phyx.rubric import unit_match
from lit_grpo.tasks.phyx.units import convert, derive_unit, parse_unit, registry, same_unit, unit_readings

LETTERS = [  # (answer field, the letter it gives; None = no letter, never a wrong one)
    ("The answer is C because I computed the integral.", "C"),
    ("Answer: B since the slope doubles", "B"),
    ("The correct option is D as the field is uniform.", "D"),
    ("I choose B because it is the largest", "B"),
    ("I think the answer is B because the mass cancels", "B"),
    ("It is A, because the force is zero", "A"),
    ("C because the current doubles", "C"),
    ("B - because the mass cancels", "B"),
    ("B — since the charge is conserved", "B"),
    ("(C) because the charge doubles", "C"),
    ("**C** because of symmetry", "C"),
    ("\\boxed{C} because", "C"),
    ("The answer is C given the numbers", "C"),
    ("The answer is (B) due to friction", "B"),
    ("The answer is C because A is wrong", "C"),  # the letter the reason follows, not one inside the reason
    ("The answer is A force of 5 N", None),  # a capital starting a noun phrase
    ("A force because the mass is larger", None),
    ("The force at A is larger because", None),
    ("Not A because it is wrong", None),
    ("Either A or B because both fit", None),
    ("It is A as well as B", None),
    ("the answer is c because", None),  # a lower-case letter before a reason: could be a word
    ("E because", None),  # not among the options A-D
    # a letter, a dash or a colon, a phrase: em dash, en dash, hyphen, colon, with or without spaces
    ("I would pick B — a safe choice.", "B"),
    ("C - the field is uniform", "C"),
    ("C -- the field is uniform", "C"),
    ("D – the slope doubles", "D"),
    ("A—the mass cancels", "A"),
    ("C–uniform field", "C"),
    ("The answer is (D): the slope doubles", "D"),
    ("Option B — 7.55 N", "B"),
    ("I choose **A** — the only one left", "A"),
    ("(B) — a safe choice", "B"),
    ("The force at A — larger than at B", None),  # no cue word before the letter
    ("Either A — or B", None),
    ("A - B = 3", None),  # arithmetic: a lone capital after the dash
    ("A — B", None),
    ("C - The field is uniform", "C"),
]


@pytest.mark.parametrize("text, letter", LETTERS)
def test_a_letter_followed_by_its_reason_is_read(text, letter):
    assert extract_option_letter(text, "ABCD") == letter
    assert extract_answer_letter(f"<think>x</think><answer>{text}</answer>", labels="ABCD") == letter


GRADES = [  # (answer, gold, the offline judge's correctness: 2 right, 1 right number only, 0 wrong)
    ("9.8 ms^-2", "9.8 m/s^2", 2),  # metres per second squared, as physicists write it
    ("9.8 ms-2", "9.8 m/s^2", 2),
    ("9.8 ms⁻²", "9.8 m/s^2", 2),
    ("9.8 \\text{ms}^{-2}", "9.8 m/s^2", 2),
    ("3.0 kms^-1", "3000 m/s", 2),
    ("2 ms^-1", "2 m/s", 2),
    ("9.8 m/s^2", "9.8 ms^-2", 2),  # the gold written so
    ("9.8 ms^-2", "9.8 N", 1),  # right number, other dimension under either reading
    ("5 ms", "0.005 s", 2),  # milliseconds stay milliseconds
    ("5 Δ°C", "5 K", 2),  # a temperature difference of 5 degrees Celsius is 5 K
    ("5 \\Delta ^{\\circ}C", "5 K", 2),
    ("5 C°", "5 K", 2),  # the old "Celsius degrees" of a difference
    ("9 Δ°F", "5 K", 2),
    ("5 Δ°C", "9 K", 0),
    ("5 °C", "5 K", 1),  # 5 °C is 278.15 K: the right number, not the gold
    ("5 deg C", "278.15 K", 2),  # degrees Celsius, never coulomb degrees
    ("25 degrees Celsius", "298.15 K", 2),
]


@pytest.mark.parametrize("answer, gold, grade", GRADES)
def test_the_offline_judge_reads_units_as_physicists_write_them(answer, gold, grade):
    assert grade_open_answer(answer, gold) == grade


def test_an_ambiguous_compact_unit_is_refused_alone_and_read_in_context():
    ureg = registry()
    assert parse_unit("ms^-2") is None  # alone: per millisecond squared or metres per second squared?
    assert unit_readings("ms^-2") == [ureg.Unit("1/millisecond**2"), ureg.Unit("meter/second**2")]
    assert same_unit("ms^-2", "m/s^2") and same_unit("kms^-1", "km/s") and not same_unit("ms^-2", "N")
    assert unit_match("ms^-2", "m/s^2", strict=True) == 1.0 and unit_match("ms^-1", "m/s^2", strict=True) == 0.0
    assert convert(3.0, "kms^-1", "m/s") == 3000.0 and convert(1.0, "ms^-1", "kHz") == 1.0  # per millisecond
    assert derive_unit("9.8 ms^-2") == ("ms^-2", None)  # a gold keeps its unit text, no single reading
    assert parse_unit("ms") == ureg.Unit("millisecond") and parse_unit("m s^-2") == ureg.Unit("meter/second**2")


@pytest.mark.parametrize("text, unit", [
    ("Δ°C", "delta_degree_Celsius"), ("Δ °C", "delta_degree_Celsius"), ("\\Delta{}^{\\circ}C", "delta_degree_Celsius"),
    ("C°", "delta_degree_Celsius"), ("Δ°F", "delta_degree_Fahrenheit"), ("ΔK", "kelvin"), ("deg C", "degree_Celsius"),
    ("degrees Celsius", "degree_Celsius"), ("J/(kg Δ°C)", "joule / kilogram / delta_degree_Celsius"),
])
def test_temperature_units_table(text, unit):
    assert parse_unit(text) == registry().Unit(unit)


@pytest.mark.parametrize("predicted, gold, paper", [
    ("m/s", "meters per second", 1.0),  # the pair the paper says its rule handles
    ("meters per second", "m/s", 1.0), ("newtons", "N", 1.0), ("kilonewtons", "N", 0.0), ("km/h", "m/s", 0.0),
    ("ohms", "Ω", 1.0), ("mW", "MW", 0.0),
])
def test_the_paper_unit_rule_matches_spelled_out_units(predicted, gold, paper):
    assert unit_match(predicted, gold) == paper
