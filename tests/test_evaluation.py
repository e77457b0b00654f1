"""The accuracy table (pure aggregation) on hand-made records, its Markdown/CSV rendering, and records."""

import math

import pytest

from lit_grpo.data.sample import Sample
from lit_grpo.evaluation import build_records, build_scorer, correctness, extracted_answer
from lit_grpo.rewards import RewardSpec, accuracy_reward
from lit_grpo.tasks.phyx.judged import OpenAccuracyReward
from lit_grpo.tasks.table import accuracy_table, scalar_name, table_csv, table_markdown

NAN = math.nan
RECORDS = [
    {"mode": "greedy", "domain": "Mechanics", "reasoning_type": ["Numerical Reasoning"], "correct": 1.0},
    {"mode": "greedy", "domain": "Mechanics", "reasoning_type": ["Numerical Reasoning", "Spatial Relation Reasoning"],
     "correct": 0.0},
    {"mode": "greedy", "domain": "Optics", "reasoning_type": ["Spatial Relation Reasoning"], "correct": NAN},
    {"mode": "greedy", "domain": "Wave/Acoustics", "reasoning_type": [], "correct": 1.0},
]


def _by_name(rows):
    return {(r["group"], r["name"]): r for r in rows}


def test_accuracy_table_hand_computed():
    """Records without an id: each its own problem. Overall: problems 1, 0, (NaN), 1 -> mean 2/3, SE = std([1, 0,
    1], ddof 1) / sqrt(3) = sqrt(1/3) / sqrt(3) = 1/3."""
    rows = _by_name(accuracy_table(RECORDS))
    overall = rows[("overall", "all")]
    assert (overall["problems"], overall["completions"], overall["unscorable"], overall["correct"]) == (4, 4, 1, 2.0)
    assert overall["accuracy"] == pytest.approx(2 / 3) and overall["se"] == pytest.approx(1 / 3)
    mechanics = rows[("domain", "Mechanics")]
    assert (mechanics["accuracy"], mechanics["se"]) == (0.5, pytest.approx(0.5))  # std([1, 0]) / sqrt(2)
    assert (rows[("domain", "Wave/Acoustics")]["accuracy"], rows[("domain", "Wave/Acoustics")]["se"]) == (1.0, 0.0)
    assert math.isnan(rows[("domain", "Optics")]["accuracy"]) and rows[("domain", "Optics")]["unscorable"] == 1
    assert ("domain", "Thermodynamics") not in rows  # no problem: no row
    assert rows[("reasoning_type", "Numerical Reasoning")]["accuracy"] == 0.5  # records 1 and 2
    # records 2 (0.0) and 3 (NaN): 0 of 1 scorable problem, 2 problems
    spatial = rows[("reasoning_type", "Spatial Relation Reasoning")]
    assert (spatial["problems"], spatial["scored_problems"], spatial["unscorable"], spatial["accuracy"]) == (2, 1, 1, 0.0)
    assert [r["name"] for r in accuracy_table(RECORDS) if r["group"] == "domain"] == [
        "Mechanics", "Wave/Acoustics", "Optics"]  # the paper's order


def test_accuracy_is_a_mean_over_problems_with_its_standard_error():
    """Three problems of 4 completions: a = 1, 1, 0, 1 (0.75); b = 0, 0, NaN, 0 (0); c = 1, NaN, NaN, NaN (1).
    Mean (0.75 + 0 + 1) / 3 = 0.58333; SE = std([0.75, 0, 1], ddof 1) / sqrt(3) = 0.520416 / 1.732051 = 0.300463."""
    values = {"a": [1, 1, 0, 1], "b": [0, 0, NAN, 0], "c": [1, NAN, NAN, NAN]}
    records = [{"id": pid, "correct": float(v)} for pid, vs in values.items() for v in vs]
    (row,) = accuracy_table(records)
    assert row["accuracy"] == pytest.approx(0.583333, abs=1e-6) and row["se"] == pytest.approx(0.300463, abs=1e-6)
    assert (row["problems"], row["completions"], row["correct"], row["unscorable"]) == (3, 12, 4.0, 4)


def test_records_without_domains_give_only_the_overall_row():
    rows = accuracy_table([{"correct": 1.0}, {"correct": 0.0}, {"correct": 0.0}, {"correct": 1.0}])
    assert len(rows) == 1 and rows[0]["accuracy"] == 0.5


def test_markdown_has_the_paper_layout_with_standard_errors_and_problem_counts():
    md = table_markdown(accuracy_table(RECORDS), "test accuracy (greedy)")
    lines = md.splitlines()
    assert lines[2] == ("Accuracy: mean ± standard error over problems of each problem's share of correct completions "
                        "(4 problems, 1 completion each).")
    assert lines[4] == "| Overall | Mechanics | Wave/Acoustics | Optics |"
    assert lines[6] == "| 0.667 ± 0.333 | 0.500 ± 0.500 | 1.000 ± 0.000 | – |"
    assert lines[7] == "| 4 problems | 2 problems | 1 problem | 1 problem |"
    assert "| Spatial Relation Reasoning | 0.000 ± 0.000 | 2 |" in lines
    assert lines[-1] == "1 of 4 completions could not be scored (NaN); 1 problem had none that could."
    assert "n=0" not in md and "| 0 |" not in md


def test_csv_rows():
    text = table_csv(accuracy_table(RECORDS), "greedy").splitlines()
    assert text[0] == "mode,group,name,accuracy,se,problems,completions,correct,unscorable"
    assert text[1] == "greedy,overall,all,0.666667,0.333333,4,4,2,1"
    assert "greedy,domain,Wave/Acoustics,1.000000,0.000000,1,1,1,0" in text
    assert "greedy,domain,Optics,,,1,1,0,1" in text
    assert len(text) == 1 + 1 + 3 + 2


def test_scalar_names_are_tensorboard_safe():
    rows = _by_name(accuracy_table(RECORDS))
    assert scalar_name(rows[("overall", "all")]) == "overall"
    assert scalar_name(rows[("domain", "Wave/Acoustics")]) == "domain/Wave_Acoustics"
    assert scalar_name({"group": "domain", "name": "Modern Physics"}) == "domain/Modern_Physics"


def test_extracted_answer_follows_the_scorer():
    text = r"<think>F = ma</think><answer>B</answer> so \boxed{C}. The answer is D"
    assert extracted_answer("accuracy", text, "mcq") == "B"
    assert extracted_answer("accuracy", "<answer>(c) 5 N</answer>", "mcq") == "C"  # the letter the reward compares
    assert extracted_answer("accuracy", "<answer>5 N</answer>", "open") == "5 N"
    assert extracted_answer("binary", text, "mcq") == "C"
    # the first whole word "answer" is the tag name in "<answer>B": the first capital A-D after it is B
    assert extracted_answer("phyx_official", text, "mcq") == "B"
    assert extracted_answer("phyx_official", r"x \boxed{5 m}", "open") == "5 m"
    assert extracted_answer("some_judge", r"no tag \boxed{1} \boxed{2}", "open") == "2"  # fallback: last box
    assert extracted_answer("some_judge", r"no tag \boxed{(b)}", "mcq") == "B"
    assert extracted_answer("open_accuracy", r"<answer>7.55 N</answer> \boxed{3}", "open") == "7.55 N"
    assert extracted_answer("rubric", "<answer>(c)</answer>", "mcq") == "C"
    assert extracted_answer("rubric", r"\boxed{7.55 N}", "open") == "7.55 N"  # what the offline judge grades


def test_correctness_thresholds_a_graded_score_and_keeps_nan():
    jury = [5 / 6, 1.0, 0.5, 0.0, math.nan, None]  # open_accuracy: correctness 2,2,1 / 2,2,2 / 1,1,1 / 0,0,0 / failed
    assert correctness(jury, pass_threshold=0.75)[:4] == [1.0, 1.0, 0.0, 0.0]
    assert correctness(jury, pass_threshold=1.0)[:4] == [0.0, 1.0, 0.0, 0.0]
    assert correctness(jury)[:4] == [5 / 6, 1.0, 0.5, 0.0]
    assert all(math.isnan(v) for v in correctness(jury, pass_threshold=1.0)[4:])  # cannot score, never wrong


def test_scorer_reuses_a_configured_reward_with_the_same_kwargs():
    judge = {"judge": {"offline": {"rel_tol": 0.02}}}
    configured = [RewardSpec("format"), RewardSpec("open_accuracy", kwargs=judge)]
    assert build_scorer(None, {}, configured) is None
    assert build_scorer("open_accuracy", {}, configured) is None  # reuse: the judge is not asked twice
    assert build_scorer("open_accuracy", judge, configured) is None
    own = build_scorer("open_accuracy", {"judge": {"offline": {"rel_tol": 0.05}}}, configured)
    assert isinstance(own, OpenAccuracyReward) and own.judge.cfg.rel_tol == 0.05
    assert build_scorer("accuracy", {}, configured).func is accuracy_reward


def test_build_records_one_per_completion():
    s = Sample(id="7", images=[], question="Q", options={"A": "1", "B": "2"}, answer="B", fields={"domain": "Optics"},
               meta={"reasoning_type": ["Numerical Reasoning"]})
    msgs = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Q"}]}]]
    recs = build_records([s], msgs, ["<answer>B</answer>", "<answer>A</answer>"], {"accuracy": [1.0, 0.0]},
                         [1.0, 0.0], [1.0, 0.0], 2, "sampled", "accuracy")
    assert [r["extracted"] for r in recs] == ["B", "A"] and [r["correct"] for r in recs] == [1.0, 0.0]
    assert recs[0]["prompt"] == "[user] <image> Q" and recs[1]["domain"] == "Optics" and recs[1]["id"] == "7"
    assert recs[0]["rewards"] == {"accuracy": 1.0} and recs[0]["reasoning_type"] == ["Numerical Reasoning"]
