"""The embedded readable physics set (the physics demo's data): answers recomputed from the full text, the
hidden quantity measured off the diagram's pixels, options in increasing order, principles the paper's rule
can score, both forms read back (``answer_format: both``), and the SFT reference scoring full marks."""

import io
import re

import pytest
from PIL import Image

from lit_grpo.tasks.phyx.reader import DOMAINS, parse_option_list, read_phyx
from lit_grpo.tasks.phyx.physics import READABLE, generate_items, write_physics
from lit_grpo.tasks.phyx.rubric import principle_match
from lit_grpo.rewards.registry import REWARDS, RewardSpec, build_reward
from lit_grpo.tasks.phyx.templates import physics_tags
from lit_grpo.tasks.phyx.units import split_quantity

NUM = r"(\d+(?:\.\d+)?)"


def _num(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    assert m is not None, f"{pattern!r} not in {text!r}"
    return float(m.group(1))


# subfield -> (k read from the full description, answer from the full description by the textbook formula)
SOLVE = {
    "Newton's Laws": (lambda d: _num(rf"row of {NUM} identical", d),
                      lambda d: _num(rf"row of {NUM} identical", d) * 2.0 * 1.5),            # F = n m a
    "DC Circuits": (lambda d: _num(rf"battery of {NUM} identical", d),
                    lambda d: _num(rf"battery of {NUM} identical", d) * 1.5 / 3.0),           # I = n E / R
    "Heat Transfer": (lambda d: _num(rf"holds {NUM} kg", d) / 0.5,
                      lambda d: _num(rf"holds {NUM} kg", d) * 4200 * 10 / 1000),              # Q = m c dT, kJ
    "Standing Waves": (lambda d: _num(rf"vibrates with {NUM} loop", d),
                       lambda d: _num(rf"vibrates with {NUM} loop", d) * 100 / (2 * 1.0)),    # f = n v / 2L
    "Geometrical Optics": (lambda d: {15: 1, 20: 2, 30: 3, 40: 4}[int(_num(rf"stands {NUM} cm", d))],
                           lambda d: 1 / (1 / 10 - 1 / _num(rf"stands {NUM} cm", d))),         # 1/di = 1/f - 1/do
    "Atomic Physics": (lambda d: _num(rf"level n = {NUM}", d) - 1,
                       lambda d: 13.6 * (1 - 1 / _num(rf"level n = {NUM}", d) ** 2)),         # Bohr, to n = 1
}


def _runs(row: list[bool], gap: int = 2) -> int:
    """Number of runs of True, runs at most ``gap`` apart counted as one (thick polylines leave pinholes)."""
    hits = [i for i, v in enumerate(row) if v]
    return sum(1 for a, b in zip([None, *hits], hits) if a is None or b - a > gap + 1)


def _pixels(img: Image.Image):
    rgb = img.convert("RGB")
    return rgb.load(), rgb.size


def hidden_from_pixels(subfield: str, img: Image.Image) -> int:
    """The hidden quantity measured on the drawing, independently of the generator's code."""
    px, (w, h) = _pixels(img)
    if subfield == "Newton's Laws":  # brown crates of 52 x 55 filled pixels each (outline excluded)
        return round(sum(px[x, y] == (150, 100, 50) for x in range(w) for y in range(h)) / (50 * 53))
    if subfield == "Heat Transfer":  # water column 144 px wide, 50 px per mark
        return round(sum(px[x, y] == (60, 120, 230) for x in range(w) for y in range(h)) / (144 * 50))
    if subfield == "DC Circuits":  # the long plates reach 30 px above the wire; nothing else dark there
        return _runs([sum(px[x, 170]) < 100 for x in range(50, 310)])
    if subfield == "Standing Waves":  # each loop's crest crosses the row at 80 % of the amplitude twice
        top = min(y for x in range(40, 320) for y in range(h) if px[x, y] == (30, 70, 200))
        row = 135 - round(0.8 * (135 - top))  # the string's axis is y = 135
        return _runs([px[x, row] == (30, 70, 200) for x in range(40, 320)]) // 2
    if subfield == "Geometrical Optics":  # the object's x: 6.5 px per cm left of the lens at x = 300
        xs = [x for x in range(w) for y in range(h) if px[x, y] == (200, 30, 30)]
        cm = (300 - sum(xs) / len(xs)) / 6.5
        return {15: 1, 20: 2, 30: 3, 40: 4}[min((15, 20, 30, 40), key=lambda c: abs(c - cm))]
    if subfield == "Atomic Physics":  # the red arrow spans k level gaps of 50 px
        ys = [y for x in range(w) for y in range(h) if px[x, y] == (200, 30, 30)]
        return round((max(ys) - min(ys)) / 50)
    raise KeyError(subfield)


@pytest.fixture(scope="module")
def items():
    return generate_items(48, seed=0, style="readable")


def test_every_answer_matches_an_independent_solution_and_the_drawing(items):
    for it in items:
        options = parse_option_list(it["options"])
        gold, _ = split_quantity(options[it["answer"]])
        read_k, solve = SOLVE[it["subfield"]]
        assert gold == pytest.approx(solve(it["question_description"]), rel=5e-3), it["question_description"]
        img = Image.open(io.BytesIO(it["image"]))
        assert hidden_from_pixels(it["subfield"], img) == read_k(it["question_description"]), it["question_description"]


def test_options_rise_in_value_so_the_letter_is_the_rank(items):
    for it in items:
        values = [split_quantity(t)[0] for t in parse_option_list(it["options"]).values()]
        assert values == sorted(values) and len(set(values)) == 4
        k = SOLVE[it["subfield"]][0](it["question_description"])
        rank = 4 - k if it["subfield"] == "Geometrical Optics" else k - 1  # the image distance falls with d_o
        assert it["answer"] == "ABCD"[int(rank)]


def test_text_without_the_figure_does_not_give_the_answer(items):
    """The simplified text and options are the same for every k of a type: only the figure tells them apart."""
    by_type: dict[str, set] = {}
    for it in items:
        by_type.setdefault(it["subfield"], set()).add((it["question_description_simplified"], it["question"],
                                                       tuple(it["options"])))
    assert all(len(v) == 1 for v in by_type.values()), by_type


def test_six_domains_one_type_each_with_principles_the_paper_rule_scores(items):
    assert {it["category"] for it in items} == set(DOMAINS) and len(READABLE.names()) == 6
    for sub in {it["subfield"] for it in items}:
        assert principle_match(sub, sub, strict=False) == 1.0  # at least two non-stopword tokens
        assert principle_match(sub.split()[0], sub, strict=False) == 0.0


def test_deterministic_by_seed_and_every_k_appears():
    a, b, c = (generate_items(24, seed=s, style="readable") for s in (3, 3, 4))
    assert a == b and a != c
    assert {it["answer"] for it in a} == set("ABCD")
    with pytest.raises(ValueError, match="style must be one of"):
        generate_items(2, style="readble")


@pytest.mark.parametrize("name", ["train.parquet", "train.jsonl"])
def test_both_forms_read_back_with_the_solution(tmp_path, name):
    path = write_physics(tmp_path / name, num=12, seed=0, style="readable")
    items = generate_items(12, seed=0, style="readable")
    both = read_phyx(str(path), answer_format="both")
    assert len(both) == 24
    for i in (0, 5, 11):
        mcq, oe = both[i], both[12 + i]
        options = parse_option_list(items[i]["options"])
        assert (mcq.answer_format, mcq.answer, mcq.options) == ("mcq", items[i]["answer"], options)
        assert (oe.answer_format, oe.answer, oe.options) == ("open", options[items[i]["answer"]], {})
        assert mcq.meta["solution"] == oe.meta["solution"] == items[i]["solution"]
    plain = read_phyx(str(write_physics(tmp_path / "p" / name, num=2, seed=0)), answer_format="mcq")
    assert "solution" not in plain[0].meta  # the PhyX-like set has none
    with pytest.raises(ValueError, match="'mcq', 'open' or 'both'"):
        read_phyx(str(path), answer_format="mixed")


def test_the_sft_reference_earns_every_reward(tmp_path):
    """The warm start's target: four tags, right letter / value with unit, the unit and the principle."""
    both = read_phyx(str(write_physics(tmp_path / "t.parquet", num=6, seed=0, style="readable")), answer_format="both")
    samples = [both[i] for i in range(12)]
    texts = [physics_tags(s) for s in samples]
    assert texts[0].startswith(f"<think>{samples[0].meta['solution']}</think><answer>{samples[0].answer}</answer>")
    cols = {k: [s.columns()[k] for s in samples] for k in samples[0].columns()}
    assert REWARDS.get("format")(texts) == [1.0] * 12
    acc = REWARDS.get("accuracy")(texts, **cols)
    assert acc[:6] == [1.0] * 6 and acc[6:] == [None] * 6  # None: the term does not apply
    oa = build_reward(RewardSpec("open_accuracy"))(texts, **cols)
    assert list(oa[:6]) == [None] * 6 and list(oa[6:]) == [1.0] * 6
    rubric = build_reward(RewardSpec("rubric", kwargs={"strict": False}))
    out = rubric(texts, **cols, completion_length=[len(t) for t in texts])
    comps = out.components
    assert comps["principle"][:6] == [1.0] * 6 and comps["unit"][:6] == [1.0] * 6
    assert comps["principle"][6:] == [1.0] * 6 and comps["unit"][6:] == [1.0] * 6
