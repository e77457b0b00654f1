"""PhyX reader: the three published layouts read back into identical samples; parsers; templates; hub ids."""

import dataclasses
import io
import json

import datasets
import pytest
from PIL import Image

from lit_grpo.tasks.phyx import reader as P
from lit_grpo.tasks.phyx.templates import render_options
from lit_grpo.tasks.phyx.reader import canonical_domain, parse_options_string, parse_reasoning_types, read_phyx
from lit_grpo.tasks.phyx.writer import options_string, write_phyx
from lit_grpo.data.sample import Sample
from lit_grpo.data.sample import render_messages


def _png(colour, size=(40, 30), fmt="PNG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format=fmt)
    return buf.getvalue()


TRICKY = {  # option texts with commas, quotes, a trailing backslash and a trailing space
    "A": "7.55N ",
    "B": "1.54 \\text{ m/s}^2\\",  # one trailing backslash
    "C": 'the "fast", then slow',
    "D": r"\( 22.3^{\circ} \)",
}
ITEMS = [
    {"id": "0", "question": "How large should these pulls be?",
     "question_description": "A patient with a dislocated shoulder is put into a traction apparatus. The pulls "
                             "must combine to produce an outward traction force of 12.8 N.",
     "question_description_simplified": "A patient is put into the traction apparatus shown.",
     "options": [f"{k}: {v}" for k, v in TRICKY.items()], "answer": "A", "image": _png((200, 30, 30)),
     "image_caption": "two ropes", "category": "Mechanics", "subfield": "Statics",
     "reasoning_type": ["Spatial Relation Reasoning"]},
    {"id": "1", "question": "What is the angle of refraction?", "question_description": "Light enters water at 30°.",
     "question_description_simplified": "Light enters water as shown.",
     "options": ["A: 22.1°", "B: 30.0°", r"C: \( 22.3^{\circ} \)", "D: 41.7°"], "answer": "C",
     "image": _png((30, 30, 200), fmt="JPEG"), "image_caption": "", "category": "Optics",
     "subfield": "Geometrical Optics", "reasoning_type": []},
    {"id": "2", "question": "What frequency is heard?", "question_description": "A siren moves at 20 m/s.",
     "question_description_simplified": "", "options": ["A: 529 Hz", "B: 471 Hz", "C: 500 Hz", "D: 0.5 kHz"],
     "answer": "B", "image": _png((30, 200, 30)), "image_caption": "", "category": "Waves/Acoustics",
     "subfield": "Doppler Effect", "reasoning_type": ["Physical Model Grounding Reasoning", "Numerical Reasoning"]},
]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("phyx")
    paths = {"default": write_phyx(ITEMS, root / "default" / "phyx.parquet", "default"),
             "raw": write_phyx(ITEMS, root / "raw" / "PhyX_test.jsonl", "raw")}
    for form in ("mc", "oe"):
        for suffix in ("parquet", "tsv"):
            paths[f"{form}.{suffix}"] = write_phyx(ITEMS, root / f"PhyX_{form.upper()}.{suffix}", form)
    return {k: str(v) for k, v in paths.items()}


def _plain(sample):
    """A sample with its images as (size, pixels) so that samples compare by value."""
    return dataclasses.replace(sample, images=[(im.size, im.tobytes()) for im in sample.images])


def _read(path, **kw):
    ds = read_phyx(path, **kw)
    return [_plain(ds[i]) for i in range(len(ds))]


@pytest.mark.parametrize("other", ["raw", "mc.parquet", "mc.tsv"])
def test_mcq_layouts_read_back_identical(layouts, other):
    assert _read(layouts[other], answer_format="mcq") == _read(layouts["default"], answer_format="mcq")


@pytest.mark.parametrize("other", ["raw", "mc.parquet", "mc.tsv", "oe.parquet", "oe.tsv"])
def test_open_layouts_read_back_identical(layouts, other):
    assert _read(layouts[other], answer_format="open") == _read(layouts["default"], answer_format="open")


def test_first_item_fields_by_hand(layouts):
    s = read_phyx(layouts["raw"])[0]  # answer_format None -> mcq for the raw layout
    assert s.id == "0" and s.answer == "A" and s.answer_format == "mcq"
    assert s.question == "A patient is put into the traction apparatus shown. How large should these pulls be?"
    assert s.options == TRICKY
    assert s.fields == {"domain": "Mechanics", "principle": "Statics", "unit": "N"}
    assert s.meta == {"reasoning_type": ["Spatial Relation Reasoning"], "unit_parsed": "newton", "answer_raw": "A"}
    o = read_phyx(layouts["raw"], answer_format="open")[0]
    assert (o.options, o.answer, o.meta["answer_raw"]) == ({}, "7.55N", "7.55N ")  # OE gold stripped; stored kept


def test_domains_are_canonical_and_units_derived(layouts):
    samples = [read_phyx(layouts["default"])[i] for i in range(3)]
    assert [s.fields["domain"] for s in samples] == ["Mechanics", "Optics", "Wave/Acoustics"]
    assert [s.fields["unit"] for s in samples] == ["N", "°", "Hz"]
    assert samples[2].question == "What frequency is heard?"  # empty simplified description: question only


def test_pre_rendered_files_keep_their_own_form(layouts):
    assert read_phyx(layouts["mc.tsv"])[1].answer_format == "mcq"
    oe = read_phyx(layouts["oe.tsv"])[1]
    assert (oe.answer_format, oe.answer, oe.fields["unit"]) == ("open", r"\( 22.3^{\circ} \)", "°")


def test_jpeg_bytes_under_a_png_name_decode(layouts):
    raw = read_phyx(layouts["raw"])
    img = raw[1].images[0]
    assert img.size == (40, 30) and abs(img.getpixel((5, 5))[2] - 200) < 8  # JPEG is lossy, colour kept
    with open(layouts["raw"].replace("PhyX_test.jsonl", "images/1.png"), "rb") as f:
        assert f.read(3) == b"\xff\xd8\xff"  # the file named 1.png holds JPEG bytes


def test_question_variants(layouts):
    full = read_phyx(layouts["default"], question_variant="full")[1]
    minimal = read_phyx(layouts["raw"], question_variant="minimal")[1]
    assert full.question == "Light enters water at 30°. What is the angle of refraction?"
    assert minimal.question == "What is the angle of refraction?"
    with pytest.raises(ValueError, match="question_variant"):
        read_phyx(layouts["raw"], question_variant="long")


def test_variant_needing_a_missing_column_is_refused(tmp_path):
    (tmp_path / "0.png").write_bytes(_png((0, 0, 0)))
    row = {"index": 0, "question": "Q?", "options": 'A:"1",B:"2"', "answer": "A", "image": "0.png",
           "category": "Optics", "subfield": "Refraction", "reasoning_type": []}
    (tmp_path / "x.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="'question_simply'"):
        read_phyx(str(tmp_path / "x.jsonl"))
    assert read_phyx(str(tmp_path / "x.jsonl"), question_variant="minimal")[0].question == "Q?"


def test_rows_slice_selects_rows(layouts):
    assert [s.id for s in read_phyx(layouts["default"], rows="1:3")] == ["1", "2"]


def test_official_template_reproduces_the_pre_rendered_prompts(layouts):
    table = datasets.load_dataset("parquet", data_files=layouts["mc.parquet"], split="train")
    mcq = read_phyx(layouts["default"], answer_format="mcq")
    for i in range(3):
        assert render_messages(mcq[i], "phyx_official")[0]["content"][1]["text"] == table[i]["question"]
    table = datasets.load_dataset("parquet", data_files=layouts["oe.parquet"], split="train")
    oe = read_phyx(layouts["default"], answer_format="open")
    assert render_messages(oe[0], "phyx_official")[0]["content"][1]["text"] == table[0]["question"]
    assert table[0]["question"].endswith("pulls be? Please answer the question with step by step reasoning.")


def test_hand_written_raw_line_in_the_published_format(tmp_path):
    (tmp_path / "7.png").write_bytes(_png((0, 0, 0)))
    line = {"index": 7, "question": "How large?", "question_simply": "Two pulls.", "question_description": "",
            "options": 'A:"7.55N",B:"5.55N",C:"7.65N",D:"6.65N"', "answer": "A", "image": "7.png",
            "image_caption": "", "category": "Waves & Acoustics", "subfield": "Sound",
            "reasoning_type": "['Numerical Reasoning']"}
    (tmp_path / "x.jsonl").write_text(json.dumps(line) + "\n")
    s = read_phyx(str(tmp_path / "x.jsonl"))[0]
    assert s.options == {"A": "7.55N", "B": "5.55N", "C": "7.65N", "D": "6.65N"}
    assert (s.id, s.question, s.fields["domain"], s.meta["reasoning_type"]) == (
        "7", "Two pulls. How large?", "Wave/Acoustics", ["Numerical Reasoning"])


def test_hub_id_goes_to_load_dataset(monkeypatch):
    calls = []

    def fake(path, split=None, **kw):
        calls.append((path, split))
        rows = [{**it, "image": {"bytes": it["image"], "path": None}} for it in ITEMS]
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake)
    ds = read_phyx("Cloudriver/PhyX", split="test_mini")
    assert calls == [("Cloudriver/PhyX", "test_mini")] and len(ds) == 3 and ds[2].fields["domain"] == "Wave/Acoustics"


OPTION_STRINGS = [  # (one-string options field, parsed)  # what it exercises
    ('A:"7.55N",B:"5.55N",C:"7.65N",D:"6.65N"', {"A": "7.55N", "B": "5.55N", "C": "7.65N", "D": "6.65N"}),
    ('A:"1, 2 and 3",B:"x,y",C:"a , b",D:"d"', {"A": "1, 2 and 3", "B": "x,y", "C": "a , b", "D": "d"}),  # commas
    ('A:"the "fast" one",B:"say "hi"",C:"\'q\'",D:""', {"A": 'the "fast" one', "B": 'say "hi"', "C": "'q'", "D": ""}),
    (r'A:"1.54 \text{ m/s}^2\",B:"2\",C:"c",D:"d\"', {"A": "1.54 \\text{ m/s}^2\\", "B": "2\\", "C": "c", "D": "d\\"}),
    ('A:"1", B:"2",  C:"3" ,D:"4"', {"A": "1", "B": "2", "C": "3", "D": "4"}),  # spaces around the boundaries
    ('A:"7.55N ",B:"x"', {"A": "7.55N ", "B": "x"}),  # a trailing space inside an option is kept
    ('A:"B:"x"",B:"y"', {"A": 'B:"x"', "B": "y"}),  # a label-like text not preceded by '",' stays inside
]


@pytest.mark.parametrize("text,expected", OPTION_STRINGS)
def test_options_string_parser(text, expected):
    assert parse_options_string(text) == expected


def test_options_string_round_trip():
    assert parse_options_string(options_string(TRICKY)) == TRICKY


@pytest.mark.parametrize("text", ['["A", "B"]', 'A:"only one"', 'A:"1",B:"2', "", 'B:"1",C:"2"', "A: 1, B: 2"])
def test_malformed_options_strings_raise(text):
    with pytest.raises(ValueError, match="options"):
        parse_options_string(text)


@pytest.mark.parametrize("spelling", ["Waves/Acoustics", "Wave/Acoustics", "Waves & Acoustics", " waves  &  acoustics"])
def test_wave_domain_spellings_normalise_to_one(spelling):
    assert canonical_domain(spelling) == "Wave/Acoustics"


def test_unknown_domain_raises_listing_the_valid_ones():
    with pytest.raises(ValueError, match="Modern Physics"):
        canonical_domain("Astrophysics")
    assert canonical_domain("modern physics") == "Modern Physics"


def test_reasoning_type_forms():
    assert parse_reasoning_types(["Numerical Reasoning"]) == ["Numerical Reasoning"]
    assert parse_reasoning_types("['Numerical Reasoning', 'Predictive Reasoning']") == ["Numerical Reasoning",
                                                                                       "Predictive Reasoning"]
    assert parse_reasoning_types("Numerical Reasoning, Predictive Reasoning") == ["Numerical Reasoning",
                                                                                 "Predictive Reasoning"]
    assert parse_reasoning_types(None) == [] and parse_reasoning_types("[]") == []


def test_rendered_options_round_trip():
    assert P.parse_rendered_options(render_options(TRICKY)) == TRICKY


def test_physics_rubric_template():
    s = Sample(id="x", images=[], question="Q?", options={"A": "1 m", "B": "2 m"}, answer="A", answer_format="mcq")
    text = render_messages(s, "physics_rubric")[0]["content"][0]["text"]
    assert text.startswith("Q?\n\nOptions:\nA: 1 m\nB: 2 m\n\n")
    for tag in ("<think>", "<answer>", "<unit>", "<principle>"):
        assert tag in text
    assert "only the letter of the correct option" in text
    open_text = render_messages(dataclasses.replace(s, options={}, answer="1 m", answer_format="open"),
                                "physics_rubric")[0]["content"][0]["text"]
    assert "Options" not in open_text and "a number with its unit" in open_text


def test_the_image_folders_looked_in_are_each_named_once(tmp_path):
    """Split ``test``: ``{split}/{split}_image`` and ``test/test_image`` are one folder, listed once."""
    from lit_grpo.tasks.phyx.reader import _image_dirs

    (tmp_path / "test" / "test_image").mkdir(parents=True)
    (tmp_path / "rows.jsonl").write_text("")
    assert _image_dirs(str(tmp_path / "rows.jsonl"), "test") == [tmp_path / "test" / "test_image", tmp_path]
