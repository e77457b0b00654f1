"""Judge rewards inside ``fit``: a real loopback judge server, the API key never written, a failing judge stops
the run with the endpoint named while earlier checkpoints and logs survive."""

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from lit_grpo.cli import main
from lit_grpo.tasks.phyx.judge import JudgeUnavailableError
from lit_grpo.testing.loopback import LoopbackJudgeServer, Reply, votes_by_seed

KEY_ENV = "LIT_GRPO_TEST_JUDGE_KEY"
KEY = "sk-never-on-disk-4f7a2c9e81b3"


def _config(tmp_path: Path, judge_url: str, rewards: list[dict], **trainer) -> Path:
    """Overrides of configs/demo_phyx_oe.yaml: the given rewards (``"LOOPBACK"`` -> the loopback judge), 12
    embedded physics problems in the open-ended form, G=4, 2 prompts per step."""
    judge = {"base_url": judge_url, "api_key_env": KEY_ENV, "timeout_s": 2.0, "call_deadline_s": 5.0,
             "step_deadline_s": 20.0, "backoff_s": 0.01, "backoff_max_s": 0.05, "max_retries": 1}
    for r in rewards:
        if r.get("kwargs", {}).get("judge") == "LOOPBACK":
            r["kwargs"]["judge"] = judge
    physics = {"path": str(tmp_path / "physics" / "phyx.parquet"), "reader": "phyx", "split": "test",
               "generate": {"path": str(tmp_path / "physics" / "phyx.parquet"), "kind": "physics", "num": 12, "seed": 0},
               "reader_args": {"answer_format": "open"}}
    cfg = {
        "trainer": {"max_steps": 2, "val_check_interval": 2, "limit_val_batches": 1, "logger": {
            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": str(tmp_path / "logs"), "name": "judge", "default_hp_metric": False}},
            "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                           "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True,
                                         "every_n_train_steps": 1}},
                          {"class_path": "lit_grpo.callbacks.CompletionSamples", "init_args": {"every_n_steps": 1}}],
            **trainer},
        "model": {"init_args": {
            "policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}},
            "rewards": rewards,
            "sampling": {"num_generations": 4, "max_completion_length": 12}}},
        "data": {"train": {**physics, "rows": "2:"}, "val": {**physics, "rows": ":2"}, "test": {**physics, "rows": ":2"},
                 "batch_size": 2, "eval_batch_size": 2},
    }
    path = tmp_path / "judge.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_fit_with_judge_rewards_never_writes_the_api_key(tmp_path, monkeypatch, capfd, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    votes = [{"correctness": 2, "principle": 1, "unit": 1, "reasoning": 2},
             {"correctness": 1, "principle": 1, "unit": 0, "reasoning": 1}]
    server_ref = {}

    def script(body, n):
        seen = server_ref["server"].requests[n]
        if seen.headers.get("Authorization") != f"Bearer {KEY}":
            return Reply(status=401)
        return votes_by_seed(votes)(body, n)

    with LoopbackJudgeServer(script) as server:
        server_ref["server"] = server
        rewards = [{"name": "format"}, {"name": "open_accuracy", "kwargs": {"judge": "LOOPBACK"}},
                   {"name": "rubric", "kwargs": {"judge": "LOOPBACK"}}]
        config = _config(tmp_path, server.base_url, rewards)
        cli = main(["fit", "--config", "configs/demo_phyx_oe.yaml", "--config", str(config)])
        assert server.requests and all(r.headers["Authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert cli.trainer.global_step == 2
    logged = cli.trainer.logged_metrics
    # seeds 0, 1, 2 answer votes 0, 1, 0: correctness (2 + 1 + 2) / 3 / 2 on every completion
    assert logged["train/reward/open_accuracy"].item() == pytest.approx(5 / 6)
    assert logged["val/greedy/reward/open_accuracy"].item() == pytest.approx(5 / 6)
    assert logged["val/greedy/accuracy"].item() == 0.0  # the table's scorer: 5/6 is below pass_threshold 1.0
    assert logged["train/reward/rubric/unit"].item() == 1.0  # majority of 1, 0, 1
    assert {"train/reward/open_accuracy/judge/latency_s", "train/reward/open_accuracy/judge/failures",
            "train/reward/open_accuracy/judge/tokens", "train/reward/rubric/judge/calls",
            "train/reward/rubric/principle", "train/reward/rubric/length_penalty"} <= set(logged)
    assert logged["train/reward/open_accuracy/judge/failures"].item() == 0
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".ckpt" for p in files) and any("events.out" in p.name for p in files)
    assert any(p.name == "config.yaml" for p in files) and any(p.name == "hparams.yaml" for p in files)
    leaked = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert leaked == []
    assert KEY_ENV in (tmp_path / "logs" / "judge" / "version_0" / "config.yaml").read_text()
    out, err = capfd.readouterr()
    assert KEY not in out + err + caplog.text and "judge/version_0" in out + err + caplog.text


ECHO_KEY = "sk-live/Q3+9x=7Zt2Wm4f"
"""A key with the characters that escapers rewrite (``/``, ``+``, ``=``)."""


def _echoes(key: str) -> list[str]:
    """The key as servers write it back: as it is, JSON-escaped (PHP's ``\\/``, ``\\u00xx``), percent-encoded, as
    HTML entities, and in base64 / base64url header dumps (``Basic user:key``, ``Bearer key``)."""
    import base64
    import urllib.parse

    return [key, key.replace("/", "\\/"), "".join(f"\\u{ord(c):04x}" for c in key), urllib.parse.quote(key, safe=""),
            "".join(f"&#{ord(c)};" for c in key), base64.b64encode(f"user:{key}".encode()).decode(),
            base64.urlsafe_b64encode(f"Bearer {key}".encode()).decode(), base64.b64encode(key.encode()).decode()]


@pytest.mark.slow
def test_a_key_echoed_in_any_encoding_reaches_no_file_and_no_console(tmp_path, monkeypatch, capfd, caplog):
    """Every other judge call answers HTTP 401 echoing the request's key in one of eight encodings (in turn), through
    fit, test and predict: the failures are logged and counted, and no form of the key is in any file of the runs
    (config.yaml, hparams.yaml, events, checkpoints, tables, predictions) or on the console."""
    monkeypatch.setenv(KEY_ENV, ECHO_KEY)
    forms = _echoes(ECHO_KEY)

    def script(body, n):
        if "semantically equivalent" in json.dumps(body):  # the tables' open_equivalence: one call, so it answers
            return Reply(content=json.dumps({"answer": 1, "unit": 1, "principle": 1}))
        if n % 2:
            return Reply(status=401, raw_body=f'{{"error": "invalid api key", "echo": "{forms[n // 2 % len(forms)]}"}}')
        return votes_by_seed([{"correctness": 2}])(body, n)

    with LoopbackJudgeServer(script) as server:
        rewards = [{"name": "open_accuracy", "kwargs": {"judge": "LOOPBACK"}}]
        cfg = yaml.safe_load(_config(tmp_path, server.base_url, rewards).read_text())
        cfg["model"]["init_args"]["rewards"][0]["kwargs"]["judge"]["max_failure_fraction"] = 0.75
        cfg["model"]["init_args"]["evaluation"] = {"judge": cfg["model"]["init_args"]["rewards"][0]["kwargs"]["judge"]}
        cfg["trainer"]["callbacks"] += [{"class_path": c} for c in ("lit_grpo.tasks.table.AccuracyTable",
                                                                    "lit_grpo.callbacks.PredictionsJSONL")]
        (tmp_path / "judge.yaml").write_text(yaml.safe_dump(cfg))
        args = ["--config", "configs/demo_phyx_oe.yaml", "--config", str(tmp_path / "judge.yaml")]
        cli = main(["fit", *args])
        for sub in ("test", "predict"):
            main([sub, *args, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")])
        assert len(server.requests) > 2 * len(forms) and all(
            r.headers["Authorization"] == f"Bearer {ECHO_KEY}" for r in server.requests)
    assert cli.trainer.global_step == 2
    out, err = capfd.readouterr()
    console = out + err + caplog.text
    assert "HTTP 401 (is the API key in $LIT_GRPO_TEST_JUDGE_KEY right?): {\"error\": \"invalid api key\", \"echo\": " \
           "\"***\"}" in console
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"config.yaml", "hparams.yaml", "last.ckpt", "predictions.jsonl", "test_accuracy_greedy.csv"} <= {
        p.name for p in files}
    assert any("events.out" in p.name for p in files)
    leaked = [(str(p), f) for p in files for f in forms if f.encode() in p.read_bytes()]
    assert leaked == [] and [f for f in forms if f in console] == []


WRONG_PLACES = {
    "api_key interpolated": ("rewards", {"api_key": "${oc.env:%s}" % KEY_ENV}),
    "extra_body.api_key": ("rewards", {"extra_body": {"api_key": "${oc.env:%s}" % KEY_ENV}}),
    "header in extra_body": ("scorer", {"extra_body": {"headers": {"Authorization": "Bearer ${oc.env:%s}" % KEY_ENV}}}),
    "pasted as the model": ("rewards", {"model": KEY}),
    "pasted as api_key_env": ("scorer", {"api_key_env": KEY}),
    "URL password": ("rewards", {"base_url": f"http://judge:{KEY}@127.0.0.1:9/v1"}),
    "run name": ("logger", KEY),
}


@pytest.mark.parametrize("print_config", [True, False], ids=["print_config", "fit"])
@pytest.mark.parametrize("place", list(WRONG_PLACES))
def test_a_key_in_a_config_is_refused_in_one_line_that_does_not_show_it(tmp_path, monkeypatch, capfd, place,
                                                                         print_config):
    monkeypatch.setenv(KEY_ENV, KEY)
    where, value = WRONG_PLACES[place]
    rewards = [{"name": "open_accuracy", "kwargs": {"judge": "LOOPBACK"}}]
    cfg = yaml.safe_load(_config(tmp_path, "http://127.0.0.1:9/v1", rewards).read_text())
    judge = cfg["model"]["init_args"]["rewards"][0]["kwargs"]["judge"]
    if where == "rewards":
        judge.update(value)
    elif where == "scorer":
        cfg["model"]["init_args"]["evaluation"] = {"judge": {**judge, **value}}
    else:
        cfg["trainer"]["logger"]["init_args"]["name"] = value
    (tmp_path / "judge.yaml").write_text(yaml.safe_dump(cfg))
    args = ["fit", "--config", "configs/demo_phyx_oe.yaml", "--config", str(tmp_path / "judge.yaml")]
    with pytest.raises(SystemExit) as exc:
        main(args + ["--print_config"] * print_config)
    out, err = capfd.readouterr()
    assert exc.value.code == 2 and KEY not in out + err
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1 and len(err) < 330
    assert "api_key_env" in err and "value not shown" in err
    assert not (tmp_path / "logs").exists() and not (tmp_path / "model").exists()


def _scalars(logdir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


@pytest.mark.slow
def test_failing_judge_stops_the_run_naming_the_endpoint_and_keeps_what_was_written(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    # step 1 sends at most 2 prompts x 4 completions x 3 jurors = 24 calls, all answered; then HTTP 500 only
    script = lambda body, n: Reply(content='{"correctness": 2}') if n < 24 else Reply(status=500)
    with LoopbackJudgeServer(script) as server:
        rewards = [{"name": "open_accuracy", "kwargs": {"judge": "LOOPBACK"}}]
        cfg = _config(tmp_path, server.base_url, rewards, max_steps=3, limit_val_batches=0)
        with pytest.raises(JudgeUnavailableError) as exc:
            main(["fit", "--config", "configs/demo_phyx_oe.yaml", "--config", str(cfg)])
    assert server.base_url in str(exc.value) and "HTTP 500" in str(exc.value)
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 1
    logdir = tmp_path / "logs" / "judge" / "version_0"
    assert _scalars(logdir, "train/reward/open_accuracy") == [(1, 1.0)]  # step 1, at x = 1
    assert os.path.isfile(logdir / "hparams.yaml")


@pytest.mark.slow
def test_paper_oe_rubric_condition_reaches_the_judge_named_by_the_environment(tmp_path, tiny_model_dir, monkeypatch):
    """configs/granite_vision_phyx_oe.yaml + configs/granite_vision_phyx_oe_rubric.yaml as documented (G=8,
    bf16-mixed, physics rubric prompt, the judge from $JUDGE_BASE_URL) on a tiny local checkpoint and two
    embedded physics problems."""
    votes = [{"correctness": 2, "principle": 1, "unit": 1, "reasoning": 2}]
    with LoopbackJudgeServer(votes_by_seed(votes)) as server:
        monkeypatch.setenv("JUDGE_BASE_URL", server.base_url)
        extra = tmp_path / "local.yaml"
        data = {"path": str(tmp_path / "physics" / "phyx.parquet"), "split": "test", "rows": ":1",
                "generate": {"path": str(tmp_path / "physics" / "phyx.parquet"), "kind": "physics", "num": 2, "seed": 0}}
        extra.write_text(yaml.safe_dump({
            "trainer": {"accelerator": "cpu", "max_steps": 1, "limit_val_batches": 0,
                        "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                                   "init_args": {"save_dir": str(tmp_path / "logs")}}, "callbacks": []},
            "model": {"init_args": {"policy": {"name_or_path": tiny_model_dir, "local_files_only": True},
                                    "sampling": {"max_completion_length": 8}}},
            "data": {"train": data, "val": data, "test": data, "batch_size": 1, "on_overlap": "allow"}}))
        cli = main(["fit", "--config", "configs/granite_vision_phyx_oe.yaml",
                    "--config", "configs/granite_vision_phyx_oe_rubric.yaml", "--config", str(extra)])
        requests = list(server.requests)
    assert requests and all(r.body["model"] == "openai/gpt-oss-120b" for r in requests)
    assert cli.trainer.precision == "bf16-mixed" and cli.model.sampling.num_generations == 8
    assert cli.datamodule.template == "physics_rubric"
    logged = {k: v.item() for k, v in cli.trainer.logged_metrics.items()}
    assert logged["train/reward/rubric/accuracy"] == 1.0
    # one step: 1 prompt x G=8 completions x K=3 jurors; identical completions are asked once
    assert logged["train/reward/rubric/judge/calls"] == len(requests)
    assert logged["train/reward/rubric/judge/calls"] + logged["train/reward/rubric/judge/cache_hits"] == 24
    scorer = cli.model.evaluator.scorer_fn  # the table's open_equivalence, built with the base's judge (same server)
    assert scorer.judge.endpoint == f"{server.base_url}/chat/completions" and cli.model.evaluation.pass_threshold is None
    assert scorer.judge.cfg.num_judges == 1  # the paper's evaluation asks one judge; the rubric's jury keeps K = 3


@pytest.mark.slow
def test_an_unreachable_judge_on_the_command_line_is_one_error_line(tmp_path, monkeypatch, capsys):
    """``python -m lit_grpo fit`` whose judge's port is closed: exit status 1 and one ``error:`` line naming the
    endpoint (no traceback)."""
    import socket
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # closed once the block ends
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = _config(tmp_path, url, [{"name": "open_accuracy", "kwargs": {"judge": "LOOPBACK"}}], max_steps=1,
                  limit_val_batches=0)
    monkeypatch.setattr(sys, "argv", ["lit_grpo", "fit", "--config", "configs/demo_phyx_oe.yaml", "--config", str(cfg)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert exc.value.code == 1 and len(errors) == 1 and url.removesuffix("/v1") in errors[0], err[-2000:]
    assert "Traceback" not in err
