"""Embedded physics set: answers recomputed independently from the problem text, options, determinism,
both PhyX layouts read back through the PhyX reader."""

import io
import math
import re

import pytest
from PIL import Image

from lit_grpo.tasks.phyx.reader import DOMAINS, canonical_domain, parse_option_list, read_phyx
from lit_grpo.tasks.phyx.physics import PROBLEMS, generate_items, write_physics
from lit_grpo.tasks.phyx.units import derive_unit, split_quantity

NUM = r"(-?\d+(?:\.\d+)?)"


def _nums(pattern: str, text: str) -> list[float]:
    m = re.search(pattern, text)
    assert m is not None, f"{pattern!r} not found in {text!r}"
    return [float(g) for g in m.groups()]


def _sin(deg):
    return math.sin(math.radians(deg))


def _cos(deg):
    return math.cos(math.radians(deg))


# Each function reads the givens from the full description (and question) and solves the problem with
# the textbook formula, independently of the generator's code. Units are those of the correct option.
SOLVE = {
    "Dynamics": lambda d, q: (lambda th, mu: 9.8 * (_sin(th) - mu * _cos(th)))(
        *_nums(rf"inclined at {NUM}° .* friction between the block and the plane is {NUM}", d)),
    "Kinematics": lambda d, q: (lambda v, th: v * v * _sin(2 * th) / 9.8)(*_nums(rf"at {NUM} m/s, {NUM}°", d)),
    "Circuits": lambda d, q: (lambda e, a, b, c: e / (a + b * c / (b + c)))(
        *_nums(rf"{NUM} V battery .*R1 = {NUM} Ω .*R2 = {NUM} Ω and R3 = {NUM} Ω", d)),
    "Electrostatics": lambda d, q: (lambda qq, r: 8.99e9 * abs(qq) * 1e-6 / (r / 100) ** 2)(
        *_nums(rf"charge of \+?{NUM} μC .* P is {NUM} cm", d)),
    "Laws of Thermodynamics": lambda d, q: (lambda th, tc, qh: 1000 * qh * (1 - (tc + 273.15) / (th + 273.15)))(
        *_nums(rf"at {NUM} °C and a cold reservoir at {NUM} °C, absorbing {NUM} kJ", d)),
    "Heat Transfer": lambda d, q: (lambda m1, c1, t1, m2, t2: (m1 * c1 * t1 + m2 * 4186 * t2) / (m1 * c1 + m2 * 4186))(
        *_nums(rf"A {NUM} g block of \w+ \(specific heat {NUM} J/\(kg·K\)\) at {NUM} °C .* into {NUM} g of water "
               rf"at {NUM} °C", d)),
    "Standing Waves": lambda d, q: (lambda length, n, v: n * v / (2 * length))(
        *_nums(rf"length {NUM} m .* with {NUM} loops? .* at {NUM} m/s", d)),
    "Doppler Effect": lambda d, q: (lambda f, vs: f * 340 / (340 - vs if "towards" in d else 340 + vs))(
        *_nums(rf"emitting {NUM} Hz moves at {NUM} m/s", d)),
    "Geometrical Optics": lambda d, q: (lambda do, f: 1 / (1 / f - 1 / do))(
        *_nums(rf"{NUM} cm in front of a thin converging lens of focal length {NUM} cm", d)),
    "Refraction": lambda d, q: (lambda n, t1: math.degrees(math.asin(_sin(t1) / n)))(
        *_nums(rf"\(n = {NUM}\) at {NUM}° from the normal", d)),
    "Quantum Phenomena": lambda d, q: (lambda lam, phi: 1240 / lam - phi)(
        *_nums(rf"wavelength {NUM} nm .* work function is {NUM} eV", d)),
    "Nuclear Physics": lambda d, q: (lambda m0, half, t: m0 * 0.5 ** (t / half))(
        *_nums(rf"holds {NUM} g .* half-life is {NUM} ", d), *_nums(rf"after {NUM} ", q)),
}


@pytest.fixture(scope="module")
def items():
    return generate_items(96, seed=0)


def test_every_correct_option_matches_an_independent_solution(items):
    for it in items:
        options = parse_option_list(it["options"])
        gold, _ = split_quantity(options[it["answer"]])
        expected = SOLVE[it["subfield"]](it["question_description"], it["question"])
        assert gold == pytest.approx(expected, rel=6e-3), (it["subfield"], it["question_description"])


def test_options_are_four_distinct_texts_in_the_gold_unit(items):
    for it in items:
        options = parse_option_list(it["options"])
        texts = [t.strip() for t in options.values()]
        assert list(options) == ["A", "B", "C", "D"] and len(set(texts)) == 4
        units = {derive_unit(t)[0] for t in texts}
        assert len(units) == 1 and None not in units and derive_unit(texts[0])[1] is not None


def test_six_domains_with_at_least_two_problem_types_each(items):
    kinds: dict[str, set] = {}
    for it in items:
        kinds.setdefault(canonical_domain(it["category"]), set()).add(it["subfield"])
    assert set(kinds) == set(DOMAINS) and all(len(v) >= 2 for v in kinds.values())
    assert len(PROBLEMS.names()) == 12


def test_deterministic_by_seed():
    a, b, c = generate_items(12, seed=5), generate_items(12, seed=5), generate_items(12, seed=6)
    assert a == b and a != c


def test_real_data_quirks_appear(items):
    assert any(it["image"][:3] == b"\xff\xd8\xff" for it in items)  # JPEG bytes (named .png in the raw layout)
    assert any(o.endswith(" ") for it in items for o in it["options"])  # a trailing space in an option
    for it in items[:12]:
        img = Image.open(io.BytesIO(it["image"]))
        assert img.size == (360, 270)


@pytest.mark.parametrize("name", ["phyx.parquet", "phyx.jsonl"])
def test_written_layouts_read_back_through_the_phyx_reader(tmp_path, name):
    path = write_physics(tmp_path / name, num=24, seed=0)
    items = generate_items(24, seed=0)
    mcq, oe = read_phyx(str(path), answer_format="mcq"), read_phyx(str(path), answer_format="open")
    assert len(mcq) == len(oe) == 24
    for i in (0, 7, 23):
        options = parse_option_list(items[i]["options"])
        assert mcq[i].options == options and mcq[i].answer == items[i]["answer"]
        assert oe[i].answer == options[items[i]["answer"]].strip() and oe[i].options == {}
        assert mcq[i].fields["principle"] == items[i]["subfield"] and mcq[i].meta["reasoning_type"] == items[i]["reasoning_type"]
        assert mcq[i].images[0].size == (360, 270)
    assert (tmp_path / "images").is_dir() == name.endswith(".jsonl")
