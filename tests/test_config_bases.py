"""A config file that extends others (``_base_``): it reads as its bases given before it, as ``--config`` files
compose; the shipped PhyX pairs share one base each and differ in exactly the format's keys."""

from pathlib import Path

import pytest
import yaml

from lit_grpo.cli import main
from lit_grpo.settings.args import config_with_bases, expand_bases
from lit_grpo.tasks.phyx.experiments.phyx import _stamp
from lit_grpo.tasks.phyx.experiments.sweep import config_value
from tiny_runs import composed

ROOT = Path(__file__).parents[1]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def chain(tmp_path):
    """``run.yaml`` extends ``parts/b.yaml`` (which extends ``a.yaml`` beside it) and then ``parts/c.yaml``."""
    _write(tmp_path / "parts" / "a.yaml", "trainer: {max_steps: 7, log_every_n_steps: 3}\n"
           "model: {init_args: {grpo: {beta: 0.25}}}\n")
    _write(tmp_path / "parts" / "b.yaml", "_base_: a.yaml\ntrainer: {max_steps: 8}\n"
           "model: {init_args: {rewards: [{name: format, weight: 2.0}]}}\n")
    _write(tmp_path / "parts" / "c.yaml", "trainer: {max_steps: 9, logger: {init_args: {name: from_c}}}\n")
    return _write(tmp_path / "run.yaml", "_base_: [parts/b.yaml, parts/c.yaml]\ntrainer:\n"
                  "  logger: {init_args: {name: from_run}}\n")


def test_bases_come_first_depth_first_relative_to_the_file_naming_them(chain, tmp_path):
    parts = tmp_path / "parts"
    assert config_with_bases(str(chain)) == [str(parts / "a.yaml"), str(parts / "b.yaml"), str(parts / "c.yaml"),
                                             str(chain)]
    assert expand_bases(["fit", "-c", str(chain), "--trainer.max_steps=3"]) == [
        "fit", "--config", str(parts / "a.yaml"), "--config", str(parts / "b.yaml"), "--config",
        str(parts / "c.yaml"), "-c", str(chain), "--trainer.max_steps=3"]
    assert expand_bases(["fit", "--config=configs/demo.yaml"]) == ["fit", "--config=configs/demo.yaml"]


def test_a_later_file_wins_key_by_key_and_the_command_line_wins_over_all(chain, capsys):
    cfg = composed("configs/demo.yaml", chain)
    trainer, init = cfg["trainer"], cfg["model"]["init_args"]
    assert trainer["max_steps"] == 9                      # c.yaml, the last base to set it
    assert trainer["log_every_n_steps"] == 3              # a.yaml: kept under b and c
    assert trainer["logger"]["init_args"]["name"] == "from_run"
    assert trainer["callbacks"][0]["init_args"]["dirpath"] == "checkpoints/from_run_grpo"  # demo.yaml's ${...}
    assert init["grpo"]["beta"] == 0.25
    assert init["rewards"] == [{"name": "format", "weight": 2.0, "kwargs": {}, "alias": None}]  # a list: replaced
    assert composed("configs/demo.yaml", chain, "configs/oe_eval_jury.yaml")["trainer"]["max_steps"] == 9
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", "--config", str(chain), "--trainer.max_steps=4", "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["max_steps"] == 4


def test_a_later_list_of_the_same_length_replaces_the_earlier_one_item_by_item_too(tmp_path, capsys):
    """demo.yaml: rewards [binary 1.0, boxed_format 0.5], metrics [boxed_format], callbacks [ModelCheckpoint with a
    dirpath, CompletionSamples every 10 steps, EvalSummary]. A later file's list of the same length is what the run
    gets, nothing of the earlier items kept (jsonargparse alone merged them: format got weight 0.5)."""
    two = _write(tmp_path / "two.yaml", "model: {init_args: {rewards: [{name: accuracy}, {name: format}]}}\n")
    init = composed("configs/demo.yaml", two)["model"]["init_args"]
    assert [(r["name"], r["weight"]) for r in init["rewards"]] == [("accuracy", 1.0), ("format", 1.0)]
    one = _write(tmp_path / "one.yaml", "model: {init_args: {rewards: [{name: format, kwargs: {tags: [answer]}, "
                 "alias: fmt}], evaluation: {metrics: [{name: accuracy, weight: 2.0}]}}}\n")
    other = _write(tmp_path / "other.yaml", "model: {init_args: {rewards: [{name: binary}], "
                   "evaluation: {metrics: [{name: format}]}}}\n")
    init = composed("configs/demo.yaml", one, other)["model"]["init_args"]
    assert init["rewards"] == [{"name": "binary", "weight": 1.0, "kwargs": {}, "alias": None}]
    assert init["evaluation"]["metrics"] == [{"name": "format", "weight": 1.0, "kwargs": {}, "alias": None}]
    callbacks = _write(tmp_path / "callbacks.yaml", "trainer:\n  callbacks:\n"
                       "  - {class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {monitor: m}}\n"
                       "  - {class_path: lit_grpo.callbacks.CompletionSamples, init_args: {num_prompts: 2}}\n"
                       "  - lit_grpo.callbacks.EvalSummary\n")
    got = composed("configs/demo.yaml", callbacks)["trainer"]["callbacks"]
    assert [c["init_args"].get("dirpath") for c in got] == [None, None, None]
    assert (got[0]["init_args"]["monitor"], got[1]["init_args"]["num_prompts"]) == ("m", 2)
    # a list extended with += and a flag into the last item still build on the earlier list
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", "--trainer.callbacks+=lit_grpo.callbacks.ExportPretrained",
              "--trainer.callbacks.init_args.merge=true", "--print_config"])
    got = yaml.safe_load(capsys.readouterr().out)["trainer"]["callbacks"]
    assert [c["class_path"].rsplit(".", 1)[1] for c in got] == ["ModelCheckpoint", "CompletionSamples", "EvalSummary",
                                                              "ExportPretrained"]
    assert got[0]["init_args"]["dirpath"] == "checkpoints/demo_grpo" and got[3]["init_args"]["merge"] is True


@pytest.mark.parametrize("text, must", [
    ("_base_: nope.yaml\n", ["_base_ nope.yaml does not exist", "relative to the folder of the file naming it"]),
    ("_base_: 3\n", ["_base_ must be a config file's path or a list of them, got 3"]),
    ("_base_: [ok.yaml, '']\n", ["_base_ must be a config file's path or a list of them"]),
    ("_base_: loop.yaml\n", ["_base_ makes a cycle", "run.yaml -> ", "loop.yaml -> ", "run.yaml"]),
    ("_base_: bad_key.yaml\n", ["bad_key.yaml: trainer: unknown option 'max_stepz' (did you mean max_steps?)"]),
])
def test_a_wrong_base_is_one_error_line(tmp_path, capsys, text, must):
    _write(tmp_path / "ok.yaml", "trainer: {max_steps: 2}\n")
    _write(tmp_path / "loop.yaml", "_base_: run.yaml\n")
    _write(tmp_path / "bad_key.yaml", "trainer: {max_stepz: 2}\n")
    run = _write(tmp_path / "run.yaml", text)
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", "--config", str(run), "--print_config"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert all(m in err for m in must), err


def test_a_base_in_config_text_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", "--config", "{_base_: configs/demo.yaml}", "--print_config"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == ("error: _base_ needs a config file (its paths are relative to the file's "
                                       "folder), not config text\n")


def _differences(a, b, at=""):
    """Dotted keys (list items as ``[i]``) where the trees ``a`` and ``b`` differ, down to the first differing list."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{at}.{k}".lstrip("."))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(isinstance(x, dict) for x in a):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{at}[{i}]")]
    return [] if a == b else [at]


FORMAT_KEYS = ["data.test.reader_args.answer_format", "data.train.reader_args.answer_format",
               "data.val.reader_args.answer_format", "model.init_args.evaluation.scorer",
               "model.init_args.rewards[1].name",  # accuracy | open_accuracy
               "trainer.callbacks[0].init_args.dirpath", "trainer.logger.init_args.name"]


@pytest.mark.parametrize("scale", ["demo", "granite_vision"])
def test_the_mcq_and_oe_configs_differ_only_in_the_format(scale):
    mcq = composed(f"configs/{scale}_phyx_mcq.yaml")
    oe = composed(f"configs/{scale}_phyx_oe.yaml")
    judge = ["model.init_args.evaluation.judge", "model.init_args.rewards[1].kwargs.judge"] \
        if scale == "granite_vision" else []  # the served judge (reward and scorer): OE only
    assert _differences(mcq, oe) == sorted(FORMAT_KEYS + judge)
    assert (mcq["data"]["train"]["reader_args"]["answer_format"], oe["data"]["train"]["reader_args"]["answer_format"]) \
        == ("mcq", "open")
    for name in (f"{scale}_phyx_mcq", f"{scale}_phyx_oe"):
        assert config_with_bases(f"configs/{name}.yaml") == [f"configs/base/{scale}_phyx.yaml", f"configs/{name}.yaml"]


def test_the_experiment_runner_reads_and_keys_runs_on_the_bases(tmp_path):
    assert config_value(["configs/demo_phyx_mcq.yaml"], ("trainer", "max_steps")) == 120  # set by the base
    assert config_value(["configs/demo_phyx_mcq.yaml"], ("trainer", "max_steps"), ["--trainer.max_steps=30"]) == 30
    base = _write(tmp_path / "base.yaml", "trainer: {max_steps: 5}\n")
    run = _write(tmp_path / "run.yaml", "_base_: base.yaml\n")
    before = _stamp([], [str(run)], str(tmp_path))
    assert config_value([str(run)], ("trainer", "max_steps")) == 5
    base.write_text("trainer: {max_steps: 6}\n")  # the run's file is unchanged; its base is not
    assert _stamp([], [str(run)], str(tmp_path)) != before
    assert config_value([str(run)], ("trainer", "max_steps")) == 6
