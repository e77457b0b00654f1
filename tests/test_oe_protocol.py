"""The two evaluation protocols of open-ended answers: the paper's (one judge call: are the extracted answer, unit
and principle semantically equivalent to the reference; ``open_equivalence``) and the jury's (three calls grade
correctness 0/1/2, correct = all give 2; ``open_accuracy`` with ``pass_threshold: 1``), and the caption that names
the one a table was scored with."""

import math
from pathlib import Path

import pytest
import yaml

from lit_grpo.evaluation import build_scorer, correctness
from lit_grpo.rewards import RewardSpec
from lit_grpo.tasks.phyx.equivalence import OpenEquivalence
from lit_grpo.tasks.phyx.judged import OpenAccuracyReward
from lit_grpo.tasks.phyx.equivalence import extracted_fields
from lit_grpo.tasks.phyx.judge import EQUIVALENCE, parse_vote_strict
from lit_grpo.tasks.table import protocol_caption, table_markdown

ROOT = Path(__file__).resolve().parents[1]
COLS = dict(question=["Q"] * 6, answer=["7.55 N", "7.55 N", "7.55 N", "12 m/s", "B", None],
            answer_format=["open", "open", "open", "open", "mcq", "open"],
            unit=["N", "N", "N", "m/s", None, "N"], principle=["Newton's second law", "Newton's second law",
                                                               "Newton's second law", "kinematics", None, None])
COMPLETIONS = [
    "<think>F = ma = 7.55</think><answer>7.55 N</answer><unit>N</unit><principle>Newton's second law</principle>",
    "<think>F = ma</think><answer>7.2 N</answer><unit>N</unit><principle>Newton's second law</principle>",
    "<think>F = ma</think><answer>7.55 N</answer><unit>N</unit><principle>conservation of energy</principle>",
    "<answer>1200 cm/s</answer><unit>cm/s</unit><principle>kinematics</principle>",
    "<answer>B</answer>",
    "<answer>7.55 N</answer>",
]


class Scripted:
    """A judge whose every call answers ``vote`` (one per call, ``num_judges`` calls); records what it was shown."""

    def __init__(self, votes):
        self.votes, self.seen = votes, []

    def grade(self, items, task):
        self.seen += [(i.completion, task.name) for i in items]
        return [list(self.votes[task.name]) for _ in items]

    def pop_metrics(self):
        return {}


def test_offline_equivalence_verdicts_by_hand():
    """Offline judge: the answer is equivalent when its value is within 1 % in the gold's unit (7.55 N yes; 7.2 N,
    4.6 % off, no; 1200 cm/s = 12 m/s yes); unit and principle by the strict matchers. Not open-ended or no gold:
    None (does not apply)."""
    out = OpenEquivalence()(COMPLETIONS, **COLS)
    assert list(out) == [1.0, 0.0, 1.0, 1.0, None, None]
    assert out.components["answer"] == [1.0, 0.0, 1.0, 1.0, None, None]
    assert out.components["principle"] == [1.0, 1.0, 0.0, 1.0, None, None]
    assert out.components["unit"][:3] == [1.0, 1.0, 1.0]
    strict = OpenEquivalence(require=["answer", "principle"])(COMPLETIONS, **COLS)
    assert list(strict) == [1.0, 0.0, 0.0, 1.0, None, None]  # row 2 names the wrong principle


def test_the_paper_protocol_asks_one_judge_where_the_jury_asks_three():
    """One judge block serves both: the accuracy reward's jury keeps its 3 calls, the scorer makes 1 (unless told)."""
    block = {"num_judges": 3, "min_votes": 2}
    assert OpenEquivalence(judge=block).judge.num_judges == 1
    assert OpenEquivalence(judge=block, num_judges=None).judge.num_judges == 3
    assert OpenEquivalence(judge=block, num_judges=5).judge.num_judges == 5
    assert OpenAccuracyReward(judge=block).judge.num_judges == 3
    with pytest.raises(ValueError, match="require must list some of"):
        OpenEquivalence(require=["reasoning"])


def test_the_two_protocols_differ_where_the_jury_is_split():
    """Jury votes 2, 2, 1 -> open_accuracy 5/6 < 1: not correct under the jury protocol; the one judge finds the
    answer equivalent -> correct under the paper's. The judge sees only the extracted fields, not the reasoning."""
    jury = Scripted({"accuracy": [{"correctness": 2}, {"correctness": 2}, {"correctness": 1}]})
    one = Scripted({"equivalence": [{"answer": 1, "unit": 1, "principle": 0}]})
    cols = {k: v[:1] for k, v in COLS.items()}
    graded = OpenAccuracyReward(judge=jury)(COMPLETIONS[:1], **cols)
    assert list(graded) == [pytest.approx(5 / 6)] and correctness(graded, 1.0) == [0.0]
    paper = OpenEquivalence(judge=one)(COMPLETIONS[:1], **cols)
    assert list(paper) == [1.0] and paper.components["principle"] == [0.0]
    assert one.seen == [("<answer>7.55 N</answer>\n<unit>N</unit>\n<principle>Newton's second law</principle>",
                         "equivalence")]
    failed = Scripted({"equivalence": [None]})  # the call failed: cannot score, never wrong
    assert math.isnan(OpenEquivalence(judge=failed)(COMPLETIONS[:1], **cols)[0])


def test_extracted_fields_and_the_reply_schema():
    assert extracted_fields("<think>x</think>no tags") == ""
    assert extracted_fields("<principle>Ohm's law</principle><answer>3 A</answer>") == (
        "<answer>3 A</answer>\n<principle>Ohm's law</principle>")
    assert parse_vote_strict('{"answer": 1, "unit": 0, "principle": 1}', EQUIVALENCE) == {
        "answer": 1, "unit": 0, "principle": 1}
    with pytest.raises(Exception, match="range|schema|field"):
        parse_vote_strict('{"answer": 2, "unit": 0, "principle": 1}', EQUIVALENCE)


PAPER = ("Scored by `open_equivalence`: the judge decides whether the extracted answer, unit and principle are each "
         "semantically equivalent to the reference, correct = the required ones are (by default the answer; the "
         "paper's evaluation of open-ended answers); judge: the offline rule-based judge, 1 call per completion.")
JURY = ("Scored by `open_accuracy`: a jury of judge calls grades the correctness of each completion 0/1/2, averaged "
        "/ 2 (the paper's accuracy reward for open-ended answers; 1.0 = every juror says fully correct); judge: the "
        "offline rule-based judge, 3 calls per completion; correct = a score of at least 1.")


def test_captions_name_the_protocol_its_judge_and_its_calls():
    assert protocol_caption("open_equivalence") == PAPER
    assert protocol_caption("open_accuracy", 1.0, configured=[("open_accuracy", {})]) == JURY
    served = {"model": "gpt-oss-120b", "base_url": "http://localhost:8000/v1", "num_judges": 3}
    assert protocol_caption("open_equivalence", judge=served).endswith(
        "judge: gpt-oss-120b (served), 1 call per completion.")
    assert protocol_caption("open_accuracy", 1.0, configured=[("open_accuracy", {"judge": served})]).endswith(
        "judge: gpt-oss-120b (served), 3 calls per completion; correct = a score of at least 1.")
    assert protocol_caption("open_equivalence", scorer_kwargs={"num_judges": 5}).endswith("5 calls per completion.")
    assert protocol_caption(None) == "No scorer: no correctness."
    md = table_markdown([{"group": "overall", "name": "all", "accuracy": 0.5, "se": 0.5, "problems": 2,
                          "completions": 2, "correct": 1.0, "unscorable": 0, "scored_problems": 2}], "t", PAPER)
    assert md.splitlines()[2].endswith("(2 problems, 1 completion each). " + PAPER)


def test_open_ended_configs_default_to_the_paper_protocol_and_the_overlay_gives_the_jury():
    for name in ("demo_phyx_oe.yaml", "granite_vision_phyx_oe.yaml"):
        ev = yaml.safe_load((ROOT / "configs" / name).read_text())["model"]["init_args"]["evaluation"]
        assert ev["scorer"] == "open_equivalence" and "pass_threshold" not in ev, name
    jury = yaml.safe_load((ROOT / "configs" / "oe_eval_jury.yaml").read_text())["model"]["init_args"]["evaluation"]
    assert jury == {"scorer": "open_accuracy", "pass_threshold": 1.0}
    # open_equivalence is no training reward of the demo: built (not reused); the jury's verdicts are reused
    specs = [RewardSpec("format"), RewardSpec("open_accuracy")]
    assert isinstance(build_scorer("open_equivalence", {}, specs), OpenEquivalence)
    assert build_scorer("open_accuracy", {}, specs) is None
