"""The PhyX conditions' demo configs end to end on the embedded physics set: ``fit`` logs every reward, its
components and the judge statistics with hand-worked values; ``test`` writes the accuracy table; ``predict``
writes JSONL.

Rewards are worked out by hand on a *scripted policy*: the real policy samples (so the update runs), then
each completion's text is replaced by one of four kinds chosen by ``(sample id + k) % 4``, k the completion's
index in its group, so every group holds each kind once:

- ``perfect``: a long ``<think>`` with equations, the gold answer, the gold unit and the gold principle;
- ``wrong``: an empty ``<think>``, a wrong answer (MCQ: the next letter; open: ``9999 <unit>``), right unit
  and principle;
- ``none``: no tags at all;
- ``terse``: ``<think>short</think>`` and the answer only (MCQ: the gold letter; open: the gold number
  without its unit, which the offline judge grades partially correct, 1 of 2).

Every completion ends in a 200-character filler, so the rubric's length penalty is its cap, 0.05.
"""

import csv
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from lit_grpo.cli import main
from lit_grpo.module import GRPOModule
from lit_grpo.rewards.registry import REWARDS

if "test_even_id" not in REWARDS:
    @REWARDS.register("test_even_id")
    def _even_id(completions, id, **_):
        """1 for samples with an even id: a scorer whose table can be worked out by hand."""
        return [1.0 if int(i) % 2 == 0 else 0.0 for i in id]


FILL = " " + "filler " * 29  # 204 characters outside every tag
THINK = " ".join(["we", "apply", "the", "law", "step", "by", "step", "so", "x", "=", "1"] * 2)  # 22 words, an '='
CONDITIONS = {  # condition -> the documented --config stack
    "mcq_fmt_acc": ["configs/demo_phyx_mcq.yaml"],
    "mcq_rubric": ["configs/demo_phyx_mcq.yaml", "configs/demo_phyx_mcq_rubric.yaml"],
    "oe_fmt_acc": ["configs/demo_phyx_oe.yaml"],
    "oe_rubric": ["configs/demo_phyx_oe.yaml", "configs/demo_phyx_oe_rubric.yaml"],
}


def scripted_completion(sample, kind: int) -> str:
    """Completion ``kind`` (0 perfect, 1 wrong, 2 none, 3 terse) for ``sample``; see the module docstring."""
    mcq = sample.answer_format == "mcq"
    unit = sample.fields["unit"]
    wrong = "ABCD"[("ABCD".index(sample.answer) + 1) % 4] if mcq else f"9999 {unit}"
    tags = f"<unit>{unit}</unit><principle>{sample.fields['principle']}</principle>"
    if kind == 0:
        return f"<think>{THINK}</think><answer>{sample.answer}</answer>{tags}{FILL}"
    if kind == 1:
        return f"<think></think><answer>{wrong}</answer>{tags}{FILL}"
    if kind == 2:
        return FILL
    assert mcq or sample.answer.endswith(unit), sample.answer
    number = sample.answer if mcq else sample.answer[: -len(unit)].strip()
    return f"<think>short</think><answer>{number}</answer>{FILL}"


@pytest.fixture
def scripted_policy(monkeypatch):
    real = GRPOModule.rollout

    def rollout(self, batch, group_size, greedy=False, temperature=None):
        out = real(self, batch, group_size, greedy=greedy, temperature=temperature)
        texts = [scripted_completion(s, (int(s.id) + k) % 4) for s in batch.samples for k in range(group_size)]
        return dataclasses.replace(out, completions=texts)

    monkeypatch.setattr(GRPOModule, "rollout", rollout)


def _overrides(tmp_path: Path, model_dir: str, fmt: str, rows: dict[str, str], batch_size: int = 2,
               eval_batch_size: int = 3, **trainer) -> Path:
    """Small runs of a demo config: 12 embedded problems (each type once, ids 0-11), G=4, short completions."""
    spec = {"path": str(tmp_path / "physics" / "phyx.parquet"), "reader": "phyx", "split": "test",
            "generate": {"path": str(tmp_path / "physics" / "phyx.parquet"), "kind": "physics", "num": 12, "seed": 0},
            "reader_args": {"answer_format": fmt}}
    cfg = {
        "trainer": {"max_steps": 1, "val_check_interval": 1, "limit_val_batches": 1,
                    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(tmp_path / "logs"), "name": "t"}},
                    "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True,
                                                 "every_n_train_steps": 1}},
                                  {"class_path": "lit_grpo.tasks.table.AccuracyTable"},
                                  {"class_path": "lit_grpo.callbacks.PredictionsJSONL"}], **trainer},
        "model": {"init_args": {"policy": {"name_or_path": model_dir},
                                "sampling": {"num_generations": 4, "max_completion_length": 8}}},
        "data": {**{split: {**spec, "rows": r} for split, r in rows.items()}, "on_overlap": "allow",
                 "batch_size": batch_size, "eval_batch_size": eval_batch_size},
    }
    path = tmp_path / "over.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _configs(stack: list[str], over: Path) -> list[str]:
    return [a for c in [*stack, str(over)] for a in ("--config", c)]


# Hand-worked train means over the one batch (ids 0 and 1: calorimetry, gold principle "Heat Transfer", unit °C;
# circuit, "Circuits", A), each group holding the four kinds once. Rubric weights: format 0.1, accuracy 0.5,
# principle 0.15, unit 0.15, reasoning 0.1; x0.6 when reasoning is absent; minus the 0.05 length penalty.
#   format: perfect 1, wrong 1, none 0, terse 0.5 (think + answer)                        -> 0.625
#   MCQ accuracy: 1, 0, 0, 1                                                               -> 0.5
#   MCQ rubric, paper rules (principle needs 2 shared tokens: "Heat Transfer" 1, "Circuits" 0, one word):
#     id 0: 0.9 - .05 = 0.85, 0.6 * 0.4 - .05 = 0.19, 0, 0.55 - .05 = 0.50
#     id 1: 0.75 - .05 = 0.70, 0.6 * 0.25 - .05 = 0.10, 0, 0.50               -> (1.54 + 1.30) / 8 = 0.355
#   open_accuracy, offline judge: correctness 2, 0, 0, 1 (right number, no unit) / 2       -> 0.375
#   OE rubric, offline judge (strict matchers; correctness capped at 1 without reasoning):
#     perfect 1.0 - .05 = 0.95; wrong 0.6 * (0.1 + 0.15 + 0.15) - .05 = 0.19; none 0;
#     terse 0.05 + 0.25 + 0.05 (reasoning 1 of 2) - .05 = 0.30                             -> 1.44 / 4 = 0.36
TRAIN = {
    "mcq_fmt_acc": {"reward": 1.125, "reward/format": 0.625, "reward/accuracy": 0.5},
    "mcq_rubric": {"reward": 0.355, "reward/rubric": 0.355, "reward/rubric/format": 0.625,
                   "reward/rubric/accuracy": 0.5, "reward/rubric/principle": 0.25, "reward/rubric/unit": 0.5,
                   "reward/rubric/reasoning": 0.0, "reward/rubric/reasoning_absent": 0.5,
                   "reward/rubric/length_penalty": 0.05},
    "oe_fmt_acc": {"reward": 1.0, "reward/format": 0.625, "reward/open_accuracy": 0.375,
                   "reward/open_accuracy/judge/offline_graded": 8},
    "oe_rubric": {"reward": 0.36, "reward/rubric": 0.36, "reward/rubric/format": 0.625,
                  "reward/rubric/accuracy": 0.375, "reward/rubric/principle": 0.5, "reward/rubric/unit": 0.5,
                  "reward/rubric/reasoning": 0.375, "reward/rubric/reasoning_absent": 0.5,
                  "reward/rubric/length_penalty": 0.05, "reward/rubric/judge/offline_graded": 8},
}


@pytest.mark.parametrize("condition", CONDITIONS)
def test_demo_twins_train_on_the_embedded_physics_set(condition, tmp_path, tiny_model_dir, scripted_policy):
    """Each condition's demo twin as documented (rewards, offline judge, scorer), one step on real embedded
    physics problems: every reward, component and judge statistic logged with its hand-worked value."""
    fmt = "mcq" if condition.startswith("mcq") else "open"
    over = _overrides(tmp_path, tiny_model_dir, fmt, {"train": "0:2", "val": "0:2", "test": "0:2"})
    cli = main(["fit", *_configs(CONDITIONS[condition], over)])
    logged = {k: v.item() for k, v in cli.trainer.logged_metrics.items()}
    assert cli.trainer.global_step == 1
    expected = TRAIN[condition]
    assert {k: round(logged[f"train/{k}"], 6) for k in expected} == pytest.approx(expected)
    # validation, greedy: id 0 perfect, id 1 wrong -> half correct under the condition's scorer
    assert logged["val/greedy/accuracy"] == pytest.approx(0.5)
    assert cli.model.evaluation.scorer == ("accuracy" if fmt == "mcq" else "open_equivalence")
    if fmt != "mcq":  # the table's own open_equivalence (offline judge, one call) graded the 2 greedy answers
        assert logged["val/greedy/accuracy/judge/offline_graded"] == 2
    if condition == "oe_fmt_acc":  # the reward's jury graded them too (its own question: correctness 0/1/2)
        assert logged["val/greedy/reward/open_accuracy/judge/offline_graded"] == 2
        assert type(cli.model.evaluator.scorer_fn).__name__ == "OpenEquivalence"


ASM_CONDITIONS = {"mcq_asm": ["configs/demo_phyx_mcq.yaml", "configs/demo_phyx_mcq_asm.yaml"],
                  "oe_asm": ["configs/demo_phyx_oe.yaml", "configs/demo_phyx_oe_asm.yaml"]}


@pytest.mark.parametrize("condition", ASM_CONDITIONS)
def test_asm_twins_add_the_attention_reward_to_fmt_acc(condition, tmp_path, tiny_model_dir, scripted_policy):
    """The Fmt + Acc + ASM twins as documented: the same format and accuracy values as the Fmt + Acc condition
    (hand-worked above), plus the ASM in [0, 1] at the config's attention weight (100: the term's within-group
    spread is ~0.004, so at weight 1 it moves no advantage) in the total."""
    fmt = "mcq" if condition.startswith("mcq") else "open"
    over = _overrides(tmp_path, tiny_model_dir, fmt, {"train": "0:2", "val": "0:2", "test": "0:2"})
    cli = main(["fit", *_configs(ASM_CONDITIONS[condition], over)])
    logged = {k: v.item() for k, v in cli.trainer.logged_metrics.items()}
    base = TRAIN[f"{fmt if fmt == 'mcq' else 'oe'}_fmt_acc"]
    acc = "accuracy" if fmt == "mcq" else "open_accuracy"
    assert logged["train/reward/format"] == pytest.approx(base["reward/format"])
    assert logged[f"train/reward/{acc}"] == pytest.approx(base[f"reward/{acc}"])
    asm = logged["train/reward/attention"]
    assert 0.0 < asm < 1.0
    weight = {s.name: s.weight for s in cli.model.reward_specs}["attention"]
    assert weight == 100.0
    assert logged["train/reward"] == pytest.approx(base["reward"] + weight * asm, abs=1e-4)
    assert [s.name for s in cli.model.reward_specs] == ["format", acc, "attention"]


# Test table, greedy: ids 0-5 get kinds 0, 1, 2, 3, 0, 1 (perfect, wrong, none, terse, perfect, wrong).
# Domains: 0 calorimetry (Thermodynamics), 1 circuit (Electromagnetism), 2 decay (Modern Physics), 3 Doppler
# (Wave/Acoustics), 4 field lines (Electromagnetism), 5 heat engine (Thermodynamics). The paper's evaluation
# (open_equivalence, the configs' default): the terse answer (no unit) is not equivalent; the jury (open_accuracy with
# pass_threshold 1.0, configs/oe_eval_jury.yaml): the terse answer (jury 0.5) is not correct. Both: correct = 1, 0, 0,
# 0, 1, 0; the caption names the protocol.
OE_TABLE = {("overall", "all"): "0.333333", ("domain", "Thermodynamics"): "0.500000",
            ("domain", "Electromagnetism"): "0.500000", ("domain", "Modern Physics"): "0.000000",
            ("domain", "Wave/Acoustics"): "0.000000"}  # Mechanics and Optics have no problem here: no row


@pytest.mark.parametrize("condition,protocol", [("oe_fmt_acc", "paper"), ("oe_rubric", "paper"),
                                                ("oe_fmt_acc", "jury")])
def test_oe_demo_twins_test_writes_the_table_with_the_offline_judge(condition, protocol, tmp_path, tiny_model_dir,
                                                                    scripted_policy):
    over = _overrides(tmp_path, tiny_model_dir, "open", {"test": ":6"})
    jury = ["configs/oe_eval_jury.yaml"] if protocol == "jury" else []
    cli = main(["test", *_configs([*CONDITIONS[condition], *jury], over)])
    run = Path(cli.trainer.logger.log_dir)
    rows = {(r["group"], r["name"]): r for r in csv.DictReader(open(run / "test_accuracy_greedy.csv"))}
    assert {k: rows[k]["accuracy"] for k in OE_TABLE} == OE_TABLE and ("domain", "Mechanics") not in rows
    assert rows[("overall", "all")]["problems"] == "6" and rows[("overall", "all")]["unscorable"] == "0"
    # SE over the 6 problems: std([1, 0, 0, 0, 1, 0], ddof 1) / sqrt(6) = 0.516398 / 2.449490 = 0.210819
    assert rows[("overall", "all")]["se"] == "0.210819"
    assert ("| 0.333 ± 0.211 | 0.500 ± 0.500 | 0.500 ± 0.500 | 0.000 ± 0.000 | 0.000 ± 0.000 |"
            in (run / "test_accuracy_greedy.md").read_text())
    scored = ("Scored by `open_accuracy`: a jury of judge calls" if protocol == "jury" else
              "Scored by `open_equivalence`: the judge decides whether the extracted answer, unit and principle")
    calls = "3 calls per completion; correct = a score of at least 1." if protocol == "jury" else "1 call per completion."
    caption = (run / "test_accuracy_greedy.md").read_text().splitlines()[2]
    assert scored in caption and caption.endswith("judge: the offline rule-based judge, " + calls)
    metrics = cli.trainer.callback_metrics
    assert metrics["test/greedy/accuracy"].item() == pytest.approx(2 / 6)
    if condition == "oe_fmt_acc":  # the graded reward beside the 0/1 table: 1, 0, 0, 0.5, 1, 0
        assert metrics["test/greedy/reward/open_accuracy"].item() == pytest.approx(2.5 / 6)


@pytest.mark.slow
def test_mcq_demo_fit_then_test_writes_the_table_and_predict_writes_jsonl(tmp_path, tiny_model_dir):
    over = _overrides(tmp_path, tiny_model_dir, "mcq", {"train": "6:", "val": ":6", "test": ":6"},
                      max_steps=2, val_check_interval=2)
    cli = main(["fit", *_configs(CONDITIONS["mcq_fmt_acc"], over)])
    assert cli.trainer.global_step == 2
    ckpt = str(tmp_path / "ckpt" / "last.ckpt")
    # ids 0..5 cycle through the problem types: calorimetry (Thermodynamics), circuit (Electromagnetism),
    # decay (Modern Physics), doppler (Wave/Acoustics), field lines (Electromagnetism), heat engine
    # (Thermodynamics). The scorer marks even ids correct: 0, 2, 4.
    cli = main(["test", *_configs(CONDITIONS["mcq_fmt_acc"], over), "--ckpt_path", ckpt,
                "--model.init_args.evaluation.scorer", "test_even_id"])
    run = Path(cli.trainer.logger.log_dir)
    rows = {(r["group"], r["name"]): r for r in csv.DictReader(open(run / "test_accuracy_greedy.csv"))}
    assert all(int(r["problems"]) > 0 for r in rows.values())  # no row without a problem
    expected = {("overall", "all"): "0.500000", ("domain", "Thermodynamics"): "0.500000",
                ("domain", "Electromagnetism"): "0.500000", ("domain", "Modern Physics"): "1.000000",
                ("domain", "Wave/Acoustics"): "0.000000"}
    assert {k: rows[k]["accuracy"] for k in expected} == expected, rows
    assert rows[("overall", "all")]["problems"] == "6"
    md = (run / "test_accuracy_greedy.md").read_text()
    # SE over the 6 problems: std([1, 0, 1, 0, 1, 0], ddof 1) / sqrt(6) = 0.547723 / 2.449490 = 0.223607
    assert "| 0.500 ± 0.224 | 0.500 ± 0.500 | 0.500 ± 0.500 | 0.000 ± 0.000 | 1.000 ± 0.000 |" in md
    tb = _scalars(run)
    assert tb["test/greedy/accuracy/overall"] == pytest.approx(0.5)
    assert tb["test/greedy/accuracy/domain/Modern_Physics"] == pytest.approx(1.0)
    assert "test/greedy/accuracy_table/text_summary" in tb
    assert cli.trainer.callback_metrics["test/greedy/accuracy"] == pytest.approx(0.5)

    cli = main(["predict", *_configs(CONDITIONS["mcq_fmt_acc"], over), "--ckpt_path", ckpt])
    every = [json.loads(x) for x in (Path(cli.trainer.logger.log_dir) / "predictions.jsonl").read_text().splitlines()]
    lines = [x for x in every if x["mode"] == "greedy"]  # and the config's 4 sampled completions per problem
    assert [x["id"] for x in lines] == ["0", "1", "2", "3", "4", "5"]
    assert sorted(x["id"] for x in every if x["mode"] == "sampled") == [str(i) for i in range(6) for _ in range(4)]
    assert lines[3]["domain"] == "Wave/Acoustics" and set(lines[0]["rewards"]) == {"format", "accuracy"}
    assert {"prompt", "completion", "extracted", "correct"} <= set(lines[0])
    assert "<answer>" in lines[0]["prompt"] and "Options:\nA: " in lines[0]["prompt"]


def _scalars(run: Path) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run))
    acc.Reload()
    out = {tag: acc.Scalars(tag)[-1].value for tag in acc.Tags()["scalars"]}
    out.update({tag: 1.0 for tag in acc.Tags().get("tensors", [])})  # text summaries are stored as tensors
    return out
