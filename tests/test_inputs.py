"""What a user's input gets: every documented option settable on the command line, a mistake as one short
``error:`` line naming the key and the valid choices (before any model work or log folder), generated data
only where a config asks for it and never stale, one way to set the optimizer, and model folders told apart
from hub ids."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lit_grpo.cli import main
from lit_grpo.data.datamodule import DatasetSpec

ROOT = Path(__file__).parents[1]

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="refused only where no CUDA GPU is")


def run(capsys, *args):
    """``(exit status, stdout, stderr)`` of ``python -m lit_grpo`` run in this process."""
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err, *must):
    """The run failed with status 2 and a single ``error:`` line holding each of ``must``."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    # short enough to read, the list of registered names aside (other test files register rewards of their own)
    assert len(lines[0].split("; registered: ")[0]) < 330, lines[0]
    for text in must:
        assert text in lines[0], (text, lines[0])
    return lines[0]


# ----------------------------------------------------------------- every option group from the command line
SETTINGS = {
    "policy": (["--model.init_args.policy.dtype=bfloat16", "--model.init_args.policy.freeze_vision_tower=false"],
               lambda c: (c["model"]["init_args"]["policy"]["dtype"], c["model"]["init_args"]["policy"]["freeze_vision_tower"]),
               ("bfloat16", False)),
    "lora": (["--model.init_args.policy.lora.r=4", "--model.init_args.policy.lora.alpha=8"],
             lambda c: {k: c["model"]["init_args"]["policy"]["lora"][k] for k in ("r", "alpha", "dropout")},
             {"r": 4, "alpha": 8, "dropout": 0.0}),
    "rewards": (["--model.init_args.rewards=[{name: format}, {name: accuracy, weight: 2.0}]"],
                lambda c: [(r["name"], r["weight"]) for r in c["model"]["init_args"]["rewards"]],
                [("format", 1.0), ("accuracy", 2.0)]),
    "grpo": (["--model.init_args.grpo.beta=0.04", "--model.init_args.grpo.loss_type=grpo",
              "--model.init_args.grpo.micro_batch_size=4"],
             lambda c: {k: c["model"]["init_args"]["grpo"][k] for k in ("beta", "loss_type", "micro_batch_size")},
             {"beta": 0.04, "loss_type": "grpo", "micro_batch_size": 4}),
    "sampling": (["--model.init_args.sampling.temperature=0.7", "--model.init_args.sampling.top_k=5"],
                 lambda c: (c["model"]["init_args"]["sampling"]["temperature"], c["model"]["init_args"]["sampling"]["top_k"]),
                 (0.7, 5)),
    "evaluation": (["--model.init_args.evaluation.num_samples=2", "--model.init_args.evaluation.scorer=accuracy",
                    "--model.init_args.evaluation.judge.num_judges=5",
                    "--model.init_args.evaluation.judge.extra_body.reasoning_effort=low"],
                   lambda c: (c["model"]["init_args"]["evaluation"]["num_samples"],
                              c["model"]["init_args"]["evaluation"]["scorer"],
                              c["model"]["init_args"]["evaluation"]["judge"]["num_judges"],
                              c["model"]["init_args"]["evaluation"]["judge"]["extra_body"],
                              c["model"]["init_args"]["evaluation"]["judge"]["max_tokens"]),
                   (2, "accuracy", 5, {"reasoning_effort": "low"}, 2048)),
    "attention": (["--model.init_args.attention.background_threshold=200", "--model.init_args.attention.grid=tiles"],
                  lambda c: (c["model"]["init_args"]["attention"]["background_threshold"],
                             c["model"]["init_args"]["attention"]["grid"]),
                  (200, "tiles")),
    "perf": (["--model.init_args.perf.engine=plain"],
             lambda c: c["model"]["init_args"]["perf"]["engine"], "plain"),
    "optimizer": (["--model.init_args.optimizer.init_args.lr=0", "--model.init_args.lr_scheduler=null"],
                  lambda c: (c["model"]["init_args"]["optimizer"]["init_args"]["lr"], c["model"]["init_args"]["lr_scheduler"]),
                  (0.0, None)),
    "data": (["--data.batch_size=3", "--data.train.rows=:10", "--data.val.generate.num=32",
              "--data.template=visualsphinx_official"],
             lambda c: (c["data"]["batch_size"], c["data"]["train"]["rows"], c["data"]["val"]["generate"],
                        c["data"]["template"]),
             (3, ":10", {"path": "data/embedded/red_count_val.parquet", "kind": "puzzles", "num": 32, "seed": 1,
                         "rules": ["red_count"], "fixed_option_order": True, "panel_size": 16},
              "visualsphinx_official")),
    "trainer": (["--trainer.max_steps=7", "--trainer.logger.init_args.name=other"],
                lambda c: (c["trainer"]["max_steps"], c["trainer"]["logger"]["init_args"]["name"]), (7, "other")),
}


@pytest.fixture(scope="module")
def overridden():
    """configs/demo.yaml printed once with every group's overrides."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", *[a for args, *_ in SETTINGS.values() for a in args],
              "--print_config"])
    assert exc.value.code == 0
    return yaml.safe_load(out.getvalue())


@pytest.mark.parametrize("group", list(SETTINGS))
def test_every_option_group_is_set_from_the_command_line(overridden, group):
    _, read, expected = SETTINGS[group]
    assert read(overridden) == expected


def test_lora_turned_off_and_the_judge_reset_from_the_command_line(capsys):
    code, out, err = run(capsys, "fit", "--config", "configs/demo.yaml", "--model.init_args.policy.lora.r=4",
                         "--model.init_args.policy.lora=null", "--model.init_args.evaluation.judge.num_judges=5",
                         "--model.init_args.evaluation.judge", "null", "--print_config")
    assert code == 0, err
    printed = yaml.safe_load(out)["model"]["init_args"]
    assert printed["policy"]["lora"] is None and printed["evaluation"]["judge"] is None


def test_a_task_option_group_is_typed_when_the_command_line_starts(tmp_path):
    """The judge and the embedded model are option groups a task types (option_slot): in a fresh process, where the
    core's option dataclasses are imported only after the command line started typing groups, one judge option is
    set on its own (not stored as a list with a warning) and a misspelt one is refused naming its group."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    base = [sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml"]
    done = subprocess.run([*base, "--model.init_args.evaluation.judge.num_judges=5", "--print_config"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr[-2000:]
    judge = yaml.safe_load(done.stdout)["model"]["init_args"]["evaluation"]["judge"]
    assert judge["num_judges"] == 5 and judge["model"] == "openai/gpt-oss-120b"  # the rest: JudgeConfig's defaults
    for option, line in (("evaluation.judge.modle=x", "model.init_args.evaluation.judge: unknown option 'modle' "
                                                      "(did you mean model?)"),
                         ("policy.embedded.seeed=1", "model.init_args.policy.embedded: unknown option 'seeed' "
                                                     "(did you mean seed?)")):
        done = subprocess.run([*base, f"--model.init_args.{option}", "--print_config"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and done.stderr.startswith(f"error: {line}") and done.stderr.count("\n") == 1, \
            done.stderr[-2000:]


def test_an_override_reaches_the_judge_a_later_overlay_interpolates(capsys):
    """The rubric overlay's reward judge is ``${....evaluation.judge}``: one override sets both."""
    code, out, err = run(capsys, "fit", "--config", "configs/granite_vision_phyx_oe.yaml", "--config",
                         "configs/granite_vision_phyx_oe_rubric.yaml", "--model.init_args.evaluation.judge.num_judges=5",
                         "--print_config")
    assert code == 0, err
    init = yaml.safe_load(out)["model"]["init_args"]
    assert init["evaluation"]["judge"]["num_judges"] == 5 and init["rewards"][0]["kwargs"]["judge"]["num_judges"] == 5
    assert init["evaluation"]["judge"]["model"] == "openai/gpt-oss-120b"  # the rest of the judge is kept


# ----------------------------------------------------------------- one-line errors naming the key and the choices
@pytest.mark.parametrize("args, must", [
    (["--model.init_args.grpo.loss_typ=dapo"], ["model.init_args.grpo: unknown option 'loss_typ'",
                                                "did you mean loss_type",
                                                "valid: see --help"]),  # grpo has more than 16 options
    (["--model.init_args.polcy.dtype=float32"], ["'polcy'", "did you mean policy"]),
    (["--model.init_args.policy.lora.rank=4"], ["'rank'", "alpha"]),
    (["--data.train.pth=x.parquet"], ["data.train: unknown option 'pth'", "did you mean path"]),
    (["--trainer.max_stepz=3"], ["trainer: unknown option 'max_stepz'", "did you mean max_steps"]),
    (["--model.init_args.evaluation.scorer_kwargs.judge.num_judges=5"],
     ["--model.init_args.evaluation.judge.num_judges"]),
    (["--model.init_args.evaluation.judge.num_judgez=5"], ["'num_judgez'", "did you mean num_judges"]),
    (["--model.init_args.grpo.beta=abc"], ["model.init_args.grpo.beta", "must be a number >= 0", "abc"]),
    (["--model.init_args.grpo.loss_type=foo"], ["model.init_args.grpo.loss_type", "dapo"]),
    (["--model.init_args.grpo.importance_sampling_level=seq"],  # a Literal: the parser names the key and choices
     ["model.init_args.grpo.importance_sampling_level: must be one of token, sequence (got seq)"]),
    (["--model.init_args.attention.grid=tile"], ["model.init_args.attention.grid: must be one of base, tiles, all or "
                                                 "null (got tile)"]),
    (["--data.on_overlap=keep"], ["data.on_overlap: must be one of refuse, drop, allow (got keep)"]),
    (["--model.init_args.policy.dtype=fp8"], ["model.init_args.policy.dtype: must be one of float32, bfloat16, "
                                              "float16 (got fp8)"]),
    (["--model.init_args.rewards=[{name: binarry}]"], ["rewards[0].name", "'binarry'", "did you mean binary", "rubric"]),
    (["--model.init_args.rewards=[{name: format, kwargs: {tagz: [a]}}]"], ["rewards[0].kwargs", "'tagz'", "tags"]),
    (["--model.init_args.evaluation.scorer=acuracy"], ["evaluation.scorer", "did you mean accuracy"]),
    (["--data.template=visualsphinx_sed"], ["data.template", "visualsphinx_seed"]),
    (["--data.train.reader=phy"], ["data.train.reader", "phyx"]),
    (["--optimizer", "torch.optim.SGD", "--optimizer.lr", "0.5"], ["--optimizer", "--model.init_args.optimizer"]),
    (["--lr_scheduler", "torch.optim.lr_scheduler.StepLR"], ["--lr_scheduler", "--model.init_args.lr_scheduler"]),
    (["--config", "configs/nope.yaml"], ["configs/nope.yaml does not exist"]),
    (["--model.init_args.rewards=[{name: binary, kwargs: {mode: oficial}}]"],
     ["rewards[0].kwargs", "mode must be one of", "'oficial'"]),
    (["--model.init_args.rewards=[{name: format, kwargs: {tags: answer}}]"],
     ["rewards[0].kwargs.tags: expected list (got answer)"]),
    (["--data.val.generate.nmu=64"], ["data.val.generate.nmu", "did you mean num?", "panel_size"]),
    (["--data.train.generate.seeed=3"], ["data.train.generate.seeed", "did you mean seed?"]),
    (["--model.init_args.sampling.top_p=1.5"], ["sampling.top_p: must be in (0, 1]", "1.5"]),
    (["--model.init_args.sampling.top_k=-3"], ["sampling.top_k: must be >= 0", "-3"]),
    (["--data.train.rows=abc"], ["data.train.rows must be a slice", "'abc'"]),
    (["--data.train.rows=5:2"], ["data.train.rows '5:2' keeps no row"]),
    (["--data.batch_size=0"], ["data.batch_size: must be >= 1", "got 0"]),
    (["--trainer.max_steps=-5"], ["trainer: `max_steps` must be a non-negative integer or -1", "-5"]),
    (["--trainer.max_time=00:00:14"], ["trainer: `Timer(duration='00:00:14')` is not a valid duration",
                                       "DD:HH:MM:SS"]),
    (["--trainer.precision=16-mixed"], ["trainer.precision: 16-mixed (float16) is not supported", "bf16-mixed"]),
    (["--model.init_args.policy.dtype=float16"], ["policy.dtype: float16 is not supported", "use bfloat16"]),
    pytest.param(["--config=configs/fsdp.yaml"], ["trainer.accelerator: gpu but this machine has no CUDA GPU",
                                                  "--trainer.accelerator cpu"], marks=NO_CUDA),
    pytest.param(["--trainer.strategy=fsdp"], ["trainer.strategy: fsdp needs CUDA GPUs", "configs/fsdp.yaml"],
                 marks=NO_CUDA),
    pytest.param(["--trainer.strategy=lightning.pytorch.strategies.FSDPStrategy"],
                 ["trainer.strategy: lightning.pytorch.strategies.FSDPStrategy needs CUDA GPUs"], marks=NO_CUDA),
    (["--data.train.path=someowner/somedata"], ["data.train.path 'someowner/somedata'", "not in the local cache"]),
], ids=lambda v: v[0] if isinstance(v, list) and v and v[0].startswith("-") else None)
def test_a_mistake_is_one_line_naming_the_key(capsys, tmp_path, args, must):
    code, out, err = run(capsys, "fit", "--config", "configs/demo.yaml", *args,
                         "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"))
    one_line_error(code, err, *must)
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("text, must", [
    ("trainer:\n  max_steps: 3\n   val_check_interval: 2\n", ["line 3, column 22", "not valid YAML"]),
    ("model:\n  init_args:\n    rewards: [{name: format}\n", ["line 4", "not valid YAML"]),
    # a key given twice: PyYAML would keep the second silently (YAML requires unique keys)
    ("model:\n  init_args:\n    grpo:\n      beta: 0.1\n      epsilon: 0.2\n      beta: 0.3\n",
     ["line 6, column 7", "key 'beta' given twice in one mapping, first on line 4"]),
    ("trainer: {max_steps: 3, max_steps: 4}\n", ["line 1, column 25", "key 'max_steps' given twice"]),
    ("model: {}\ntrainer: {}\nmodel: {}\n", ["line 3, column 1", "key 'model' given twice", "first on line 1"]),
    # true where a number goes: jsonargparse's pydantic types would take it as 1 (a run with beta 1)
    ("model: {init_args: {grpo: {beta: true}}}\n", ["model.init_args.grpo.beta: must be a number >= 0 (got true)"]),
    ("model:\n  init_args:\n    sampling: {top_k: true}\n",
     ["model.init_args.sampling.top_k: must be an integer >= 0 (got true)"]),
    ("data: {batch_size: false}\n", ["data.batch_size: must be an integer >= 1 (got false)"]),
    ("model: {init_args: {evaluation: {judge: {min_votes: true}}}}\n",
     ["model.init_args.evaluation.judge.min_votes: must be an integer >= 1 or null (got true)"]),
    ("model:\n  init_args:\n    grpo:\n      loss_typ: dapo\n", ["model.init_args.grpo", "'loss_typ'", "loss_type"]),
    ("optimizer:\n  class_path: torch.optim.SGD\n", ["optimizer", "--model.init_args.optimizer"]),
    ("trainr:\n  max_steps: 3\n", ["'trainr'", "did you mean trainer"]),
])
def test_a_config_file_mistake_is_one_line_naming_the_file(capsys, tmp_path, text, must):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    code, _, err = run(capsys, "fit", "--config", "configs/demo.yaml", "--config", str(bad))
    one_line_error(code, err, str(bad), *must)


@pytest.mark.parametrize("text, line", [
    ("trainr: {}", "unknown option 'trainr' (did you mean trainer?); valid: ckpt_path, data, model, return_predictions,"
                   " seed_everything, trainer, verbose, weights_only"),
    ("model: {init_args: {grpoo: {}}}", "model.init_args: unknown option 'grpoo' (did you mean grpo?); valid: "
                                        "attention, evaluation, grpo, lr_scheduler, optimizer, perf, policy, rewards, "
                                        "sampling"),
    ("data: {train: {generat: {}}}", "data.train: unknown option 'generat' (did you mean generate?); valid: generate, "
                                     "path, reader, reader_args, rows, split"),
])
def test_an_unknown_key_holding_an_empty_mapping_is_refused(capsys, tmp_path, text, line):
    """jsonargparse drops an empty mapping unseen, known key or not: a mistyped group left empty for later."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", "--config", str(bad), "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == f"error: {bad}: {line}\n"


def test_empty_mappings_of_known_options_are_accepted(capsys, tmp_path):
    """An empty mapping is refused only under a key that names no option: a group, a dict option and a class's
    ``init_args`` may be empty."""
    ok = tmp_path / "ok.yaml"
    ok.write_text("model:\n  init_args:\n    grpo: {}\n    optimizer:\n      class_path: torch.optim.AdamW\n"
                  "      init_args: {}\ndata:\n  train:\n    reader_args: {}\ntrainer:\n  plugins: {}\n")
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", "--config", str(ok), "--print_config"])
    config = yaml.safe_load(capsys.readouterr().out)
    assert exc.value.code in (0, None) and config["model"]["init_args"]["grpo"]["beta"] == 0.0  # demo.yaml's, kept
    assert config["model"]["init_args"]["optimizer"]["class_path"] == "torch.optim.AdamW"


@pytest.mark.parametrize("given, line", [
    ("{trian: {}}", "error: data: unknown option 'trian' (did you mean train?); valid: batch_size, eval_batch_size, "
                    "max_prompt_length, num_workers, on_bad_row, on_overlap, predict, system_prompt, template, test, "
                    "train, val"),
    ("{batch_size: true}", "error: data.batch_size: must be an integer >= 1 (got true)"),
    ("{batch_size: 4, batch_size: 8}", "error: --data: key 'batch_size' given twice in one mapping, first on line 1"),
    ("batch_size: true", "error: data.batch_size: must be an integer >= 1 (got true)"),  # block style, no braces
    ("batch_size: 4\nbatch_size: 8", "error: --data: key 'batch_size' given twice in one mapping, first on line 1"),
    ("FILE", "error: FILE, line 2, column 1: key 'batch_size' given twice in one mapping, first on line 1"),
])
def test_a_mapping_or_file_given_to_data_is_read_as_a_config_file(capsys, tmp_path, given, line):
    """``--data=FILE`` and ``--data='{...}'`` meet the config file's checks: no key twice, no true for a number."""
    file = tmp_path / "data.yaml"
    file.write_text("batch_size: 4\nbatch_size: 8\n")
    code, _, err = run(capsys, "fit", "--config", "configs/demo.yaml", "--data=" + given.replace("FILE", str(file)),
                       "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"))
    assert code == 2 and err == line.replace("FILE", str(file)) + "\n"


@pytest.mark.parametrize("flag, line", [
    ("--model.init_args.grpo=beta: true", "model.init_args.grpo.beta: must be a number >= 0 (got true)"),
    ("--model.init_args.rewards=[{name: binary, weight: 1.0, weight: 2.0}]",
     "--model.init_args.rewards: key 'weight' given twice in one mapping, first on line 1"),
    ("--trainer.callbacks+={class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {every_n_train_steps: 1,"
     " every_n_train_steps: 2}}", "--trainer.callbacks+: key 'every_n_train_steps' given twice in one mapping, first "
                                  "on line 1"),
])
def test_yaml_text_given_to_a_group_a_list_or_a_class_is_read_as_a_config_file(capsys, flag, line):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", flag, "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == f"error: {line}\n"


@pytest.mark.parametrize("name, text", [
    ("dup.json", '{"beta": 0.1, "epsilon_low": 0.2, "beta": 0.3}'),  # JSON is YAML: the YAML loader's line
    ("tabs.json", '{\n\t"beta": 0.1,\n\t"beta": 0.3\n}'),  # a tab before a key: no YAML, read as JSON
])
def test_a_key_given_twice_in_a_json_file_is_refused(capsys, tmp_path, name, text):
    """JSON keeps the last of two equal keys as PyYAML does; a config's second ``beta`` would win unseen."""
    file = tmp_path / name
    file.write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", f"--model.init_args.grpo={file}", "--print_config"])
    at = ", line 1, column 35" if name == "dup.json" else ""
    first = ", first on line 1" if name == "dup.json" else ""
    assert exc.value.code == 2 and capsys.readouterr().err == \
        f"error: {file}{at}: key 'beta' given twice in one mapping{first}\n"


DATASET_OPTIONS = "path, reader, split, rows, generate, reader_args"


@pytest.mark.parametrize("value", ["FILE.parquet", "FILE.jsonl", "FOLDER", "missing.parquet", "owner/dataset",
                                   "ONE.jsonl"])
def test_data_given_to_a_datasets_options_names_its_path_option(capsys, tmp_path, value):
    """``--data.val=x.parquet`` (the split's data, not its options) names ``--data.val.path``; jsonargparse would try
    the value as a class path or a config file ("cannot import", "not UTF-8")."""
    (tmp_path / "FILE.parquet").write_bytes(b"PAR1\xff\x00\x15")
    (tmp_path / "FILE.jsonl").write_text('{"id": 1}\n{"id": 2}\n')
    (tmp_path / "FOLDER").mkdir()
    (tmp_path / "ONE.jsonl").write_text('{"id": 1, "question": "q"}\n')  # one row: a YAML mapping too
    value = str(tmp_path / value) if value.startswith(("FILE", "FOLDER", "ONE")) else value
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", f"--data.val={value}", "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == (
        f"error: --data.val takes the dataset's options ({DATASET_OPTIONS}) one by one, or as a mapping or a YAML "
        f"file of them, not {value!r}: to read data from it, give --data.val.path={value}\n")


@pytest.mark.parametrize("given, data", [
    ("--config=CONFIG", "v.parquet"),  # CONFIG: data: {val: DATA}
    ("--config=CONFIG", "owner/dataset"),
    ("--config=CONFIG", "FOLDER"),
    ("--data={val: DATA}", "v.parquet"),
    ("--data.val=FILE", "v.parquet"),  # FILE holds DATA, a YAML scalar
])
def test_data_in_place_of_a_datasets_options_in_a_config_names_its_path_option(capsys, tmp_path, given, data):
    """In a config (or YAML text or a file given to an option) ``val: x.parquet`` was tried as a class path to
    import ("cannot import class_path 'x.parquet'") or refused as "expected DatasetSpec"."""
    (tmp_path / "FOLDER").mkdir()
    data = str(tmp_path / data) if data == "FOLDER" else data
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data": {"val": data}}))
    (tmp_path / "f.yaml").write_text(data + "\n")
    given = given.replace("CONFIG", str(tmp_path / "c.yaml")).replace("FILE", str(tmp_path / "f.yaml"))
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", given.replace("DATA", data), "--print_config"])
    source = {"--config": f"{tmp_path / 'c.yaml'}: ", "--data.val": f"{tmp_path / 'f.yaml'}: "}.get(
        given.split("=")[0], "")
    assert exc.value.code == 2 and capsys.readouterr().err == (
        f"error: {source}data.val takes the dataset's options ({DATASET_OPTIONS}) one by one, or as a mapping or a "
        f"YAML file of them, not {data!r}: to read data from it, set data.val.path: {data}\n")


@pytest.mark.parametrize("value, path", [
    ("FILE", "v.parquet"),  # a config of the split's options in a file with no suffix
    ("{path: v.parquet}", "v.parquet"),
    ("path: v.parquet", "v.parquet"),
    ("null", None),  # no val split
    ("NULL_FILE", None),  # a file that says null, as a file may (an empty one is refused)
    ("JSON_FILE", "v.parquet"),  # .json: data rows or a config; this one is a mapping of options
])
def test_a_datasets_options_given_whole_are_read(capsys, tmp_path, value, path):
    (tmp_path / "FILE").write_text("path: v.parquet\nsplit: test\n")
    (tmp_path / "NULL_FILE").write_text("# no val split\nnull\n")
    (tmp_path / "JSON_FILE.json").write_text('{"path": "v.parquet", "split": "test"}')
    value = str(tmp_path / value) + ".json" * (value == "JSON_FILE") if value.endswith("FILE") else value
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", f"--data.val={value}", "--print_config"])
    val = yaml.safe_load(capsys.readouterr().out)["data"]["val"]
    assert (val and val["path"]) == path


@pytest.mark.parametrize("key", ["data.val", "model.init_args.grpo", "trainer.callbacks+", "data"])
def test_an_empty_file_given_to_an_option_is_refused(capsys, tmp_path, key):
    """jsonargparse reads an empty file as null: a split or a group switched off unseen, or a vague refusal."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n---\n")  # comments and an empty document: nothing
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", f"--{key}={empty}", "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == \
        f"error: --{key}: {empty} is empty; write the value of {key.rstrip('+')} in it\n"


def test_a_file_given_to_the_model_is_read_as_a_config_file(capsys, tmp_path):
    model = tmp_path / "model.yaml"
    model.write_text("class_path: lit_grpo.GRPOModule\ninit_args:\n  grpo: {beta: true}\n")
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "configs/demo.yaml", f"--model={model}", "--print_config"])
    assert exc.value.code == 2 and capsys.readouterr().err == \
        f"error: {model}: model.init_args.grpo.beta: must be a number >= 0 (got true)\n"


def test_a_str_option_takes_text_that_looks_like_a_mapping(capsys):
    """Only a value whose option is no string is read as YAML before the parser: a system prompt ``{a: 1, a: 2}``
    is text."""
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", "--data.system_prompt={a: 1, a: 2}", "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out)["data"]["system_prompt"] == "{a: 1, a: 2}"


def test_the_scorers_judge_in_its_kwargs_is_named_with_its_one_place(capsys, tmp_path):
    """A rule across two options (the startup check's, after parsing): the line names both keys, not the file."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  init_args:\n    evaluation:\n      scorer_kwargs: {judge: {num_judges: 5}}\n")
    code, _, err = run(capsys, "fit", "--config", "configs/demo.yaml", "--config", str(bad))
    assert code == 2 and err == ("error: model.init_args.evaluation.scorer_kwargs.judge: the scorer's judge is set "
                                 "with model.init_args.evaluation.judge\n")


def test_a_config_file_that_is_not_utf8_is_one_line_naming_file_and_line(capsys, tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("trainer:\n  max_steps: 3  # caf\u00e9\n".encode("latin-1"))
    code, _, err = run(capsys, "fit", "--config", "configs/demo.yaml", "--config", str(bad))
    one_line_error(code, err, f"{bad}, line 2: byte b'\\xe9' is not UTF-8")


def test_a_bad_checkpoint_met_at_run_time_is_one_line_from_the_command(tmp_path):
    """A truncated ``--ckpt_path`` is found after the model is built: ``python -m lit_grpo`` says so in one
    ``error:`` line naming the file (status 1, no traceback); called from Python the exception is raised."""
    bad = tmp_path / "cut.ckpt"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "lit_grpo", "validate", "--config", "configs/demo.yaml",
                           "--ckpt_path", str(bad), "--trainer.logger.init_args.save_dir", str(tmp_path / "logs")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: checkpoint {bad} (104 bytes) is truncated")


def test_the_real_command_prints_the_message_first(tmp_path):
    """``python -m lit_grpo`` with a YAML typo: status 2, the error on the first line, nothing else."""
    bad = tmp_path / "typo.yaml"
    bad.write_text("trainer:\n  max_steps: 3\n   val_check_interval: 2\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml", "--config",
                           str(bad)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: {bad}, line 3, column 22: not valid YAML") and len(proc.stderr) < 200


def test_help_names_the_command_users_type(capsys):
    code, out, _ = run(capsys, "fit", "--help")
    assert code == 0 and out.startswith("usage: python -m lit_grpo [options] fit")


# ----------------------------------------------------------------- no silent substitutes for the user's input
def _small(tmp_path: Path, **data) -> Path:
    """configs/demo.yaml shrunk: an embedded model and logs under ``tmp_path``, small generated sets."""
    gen = {"kind": "puzzles", "rules": ["red_count"], "fixed_option_order": True, "panel_size": 16}
    cfg = {"trainer": {"max_steps": 1, "val_check_interval": 1, "limit_val_batches": 1,
                       "logger": {"init_args": {"save_dir": str(tmp_path / "logs")}},
                       "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                      "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True}}]},
           "model": {"init_args": {"policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}},
                                   "evaluation": {"before_fit": True, "num_samples": 0},
                                   "sampling": {"num_generations": 2, "max_completion_length": 4}}},
           "data": {"train": {"generate": {"path": str(tmp_path / "train.parquet"), "num": 4, **gen}},
                    "val": {"generate": {"path": str(tmp_path / "val.parquet"), "num": 2, "seed": 1, **gen}},
                    "batch_size": 2, "eval_batch_size": 2, **data}}
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("config, key, typo", [
    ("configs/demo.yaml", "data.train.path", "data/embedded/red_count_tarin.parquet"),
    ("configs/demo.yaml", "data.val.path", "data/embedded/red_count_vla.parquet"),
    ("configs/demo_phyx_oe.yaml", "data.train.path", "data/embedded/physics/phyx_tset.parquet"),
    ("configs/demo_phyx_mcq.yaml", "data.train.path", "phyx.parquet"),
    ("configs/granite_vision_phyx_mcq.yaml", "data.train.path", "/data/PhyX/phyx_tset.parquet"),
])
def test_a_mistyped_data_path_is_an_error_naming_it_and_nothing_is_generated(capsys, tmp_path, config, key, typo):
    typo_path = typo if typo.startswith("/") else str(tmp_path / typo)
    code, _, err = run(capsys, "fit", "--config", config, f"--{key}={typo_path}",
                       "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"),
                       f"--model.init_args.policy.name_or_path={tmp_path / 'model'}")
    one_line_error(code, err, key, typo_path, "does not exist")
    assert not Path(typo_path).exists() and not (tmp_path / "logs").exists() and not (tmp_path / "model").exists()


def test_a_wrong_test_path_fails_before_the_model_is_built(capsys, tmp_path):
    code, _, err = run(capsys, "test", "--config", "configs/demo.yaml", "--config", str(_small(tmp_path)),
                       "--data.test.path", str(tmp_path / "tset"))
    one_line_error(code, err, "data.test.path", "does not exist")
    assert not (tmp_path / "model").exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize("block, line", [
    ("{path: PATH, num: abc}", "error: data.train.generate.num: must be an integer >= 1 (got abc)"),
    ("{path: PATH, panel_size: .inf}", "error: data.train.generate.panel_size: must be a finite number (got inf)"),
    ("{path: PATH, kind: puzzels}", "error: data.train.generate.kind: unknown data generator 'puzzels' (did you mean "
                                    "puzzles?); registered: "),
    ("{path: PATH, kind: [puzzles]}", "error: data.train.generate.kind: expected str (got ['puzzles'])"),  # TypeError
    # a value pydantic would convert: the generator would get it as written (num: true made a 1-row set)
    ("{path: PATH, num: true}", "error: data.train.generate.num: must be an integer >= 1 (got true)"),
    ("{path: PATH, panel_size: 16.0}", "error: data.train.generate.panel_size: expected int (got 16.0)"),
    ("{path: PATH, fixed_option_order: 1}", "error: data.train.generate.fixed_option_order: expected bool (got 1)"),
])
def test_a_generate_block_is_typed_by_its_generator_also_without_a_kind(capsys, tmp_path, block, line):
    """A block without ``kind`` is the default generator's (puzzles) and typed by its settings: ``num: abc`` was a
    ``ValueError`` traceback from ``int()`` at load; nothing is generated."""
    out = tmp_path / "gen.parquet"
    code, _, err = run(capsys, "fit", "--config", "configs/demo.yaml", "--data.train.generate=" + block.replace(
        "PATH", str(out)), "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"))
    assert one_line_error(code, err).startswith(line) and not out.exists()


def test_generate_needs_its_own_path():
    with pytest.raises(ValueError, match="data.train.generate needs path"):
        DatasetSpec(path="data/x.parquet", generate={"kind": "puzzles", "num": 4}).check("data.train")


def test_a_path_other_than_the_generated_one_is_the_users_data(tmp_path):
    """``path`` and ``generate.path`` differ: ``path`` is read as is (and must exist), nothing is generated."""
    from lit_grpo.data.datamodule import ensure_generated

    own = tmp_path / "own.parquet"
    ensure_generated({"path": str(own), "kind": "puzzles", "num": 3, "seed": 5})
    spec = DatasetSpec(path=str(own), generate={"path": str(tmp_path / "gen.parquet"), "kind": "puzzles", "num": 6})
    assert len(spec.load()) == 3 and not (tmp_path / "gen.parquet").exists()


@pytest.mark.parametrize("path", ["chekpoints/demo", "checkpoint/demo", "./missing/model", "checkpoints/nope",
                                  "a/b/c", "/abs/missing/model"])
def test_a_missing_model_folder_is_an_error_naming_it(path, monkeypatch):
    from lit_grpo.policy import check_model_path

    monkeypatch.chdir(ROOT)
    with pytest.raises(FileNotFoundError) as exc:
        check_model_path(path)
    assert path in str(exc.value)
    if path.startswith(("chekpoints", "checkpoint/")):
        assert "did you mean checkpoints/demo?" in str(exc.value)


def test_a_hub_id_is_owner_slash_name_and_offline_it_must_be_cached(monkeypatch, tmp_path):
    from lit_grpo.policy import check_model_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="not in the local hub cache"):
        check_model_path("someowner/somemodel")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    asked = []
    monkeypatch.setattr("lit_grpo.settings.paths.check_hub", lambda *args: asked.append(args))
    check_model_path("someowner/somemodel")  # online: the hub is asked once (tests/test_paths.py)
    assert asked == [("someowner/somemodel", "model", "model folder")]
    check_model_path(str(ROOT / "checkpoints" / "demo"))


def test_the_optimizer_set_on_the_model_is_what_runs_and_is_logged(tmp_path):
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(_small(tmp_path)),
                "--model.init_args.evaluation.before_fit=false", "--trainer.limit_val_batches=0",
                "--model.init_args.optimizer", "torch.optim.SGD", "--model.init_args.optimizer.init_args.lr", "0.5"])
    optimizer = cli.model.optimizers().optimizer
    assert type(optimizer).__name__ == "SGD" and optimizer.defaults["lr"] == 0.5
    assert type(cli.trainer.lr_scheduler_configs[0].scheduler).__name__ == "LinearLR"  # the scheduler is kept
    hparams = yaml.safe_load((tmp_path / "logs" / "demo" / "version_0" / "hparams.yaml").read_text())
    assert hparams["optimizer.class_path"] == "torch.optim.SGD" and hparams["optimizer.init_args.lr"] == 0.5
    assert hparams["lr_scheduler.class_path"] == "torch.optim.lr_scheduler.LinearLR"


# ----------------------------------------------------------------- generated data records its settings
def _rows(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


@pytest.mark.parametrize("change", [{"num": 6}, {"seed": 7}, {"panel_size": 24}, {"rules": ["red_count", "count"]}])
def test_changed_generate_settings_regenerate_the_file(tmp_path, caplog, change):
    base = {"path": str(tmp_path / "p.parquet"), "kind": "puzzles", "num": 4, "seed": 0, "rules": ["red_count"],
            "panel_size": 16}
    first = DatasetSpec(generate=base).load()
    before = _rows(base["path"])
    second = DatasetSpec(generate={**base, **change}).load()
    after = _rows(base["path"])
    assert len(first) == 4 and len(second) == change.get("num", 4)
    assert before != after and sorted(change) == [k for k in sorted(change) if k in caplog.text]
    record = json.loads(Path(base["path"] + ".generate.json").read_text())
    assert record == {k: v for k, v in {**base, **change}.items() if k != "path"}


def test_unchanged_settings_reuse_the_file_and_a_file_without_a_record_is_regenerated(tmp_path):
    from lit_grpo.data.datamodule import ensure_generated

    gen = {"path": str(tmp_path / "physics" / "phyx.jsonl"), "kind": "physics", "num": 3, "seed": 0}
    ensure_generated(gen)
    stamp = os.stat(gen["path"]).st_mtime_ns
    ensure_generated(dict(gen))
    assert os.stat(gen["path"]).st_mtime_ns == stamp  # the same settings: not written again
    Path(gen["path"] + ".generate.json").unlink()  # a file made by an older version, or by hand
    ensure_generated({**gen, "num": 5})
    assert len(Path(gen["path"]).read_text().splitlines()) == 5
    spec = DatasetSpec(reader="phyx", split="test", generate={**gen, "num": 5}, reader_args={"answer_format": "mcq"})
    assert len(spec.load()) == 5


def test_two_splits_generating_one_file_must_agree(capsys, tmp_path):
    small = _small(tmp_path)
    code, _, err = run(capsys, "fit", "--config", "configs/demo.yaml", "--config", str(small),
                       f"--data.val.generate.path={tmp_path / 'train.parquet'}")
    one_line_error(code, err, "data.train and data.val generate", "different settings")


# ----------------------------------------------------------------- README commands that users copy
def test_the_readme_lr0_control_has_its_own_run_folder_and_checkpoints(capsys):
    readme = (ROOT / "README.md").read_text()
    control = re.search(r"With `(--model\.init_args\.optimizer\.init_args\.lr 0[^`]*)`", readme).group(1).split()
    printed = []
    for extra in ([], control):
        code, out, err = run(capsys, "fit", "--config", "configs/demo.yaml", *extra, "--print_config")
        assert code == 0, err
        cfg = yaml.safe_load(out)
        printed.append((cfg["trainer"]["logger"]["init_args"]["name"], cfg["trainer"]["callbacks"][0]["init_args"]["dirpath"],
                        cfg["model"]["init_args"]["optimizer"]["init_args"]["lr"]))
    (run_name, run_ckpt, lr), (control_name, control_ckpt, control_lr) = printed
    assert control_lr == 0 and lr > 0
    assert control_name != run_name and control_ckpt != run_ckpt and control_name in control_ckpt
