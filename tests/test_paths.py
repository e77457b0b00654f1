"""Paths in configs from another folder than the one they are relative to, hub ids that cannot be reached, and a run
refused while setting up: one ``error:`` line at once, no network call for a local path, no log folder left."""

from __future__ import annotations

import contextlib
import http.server
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from lit_grpo.cli import main

ROOT = Path(__file__).resolve().parents[1]


class Hub:
    """A stand-in for the hub on 127.0.0.1 that counts the connections it gets: ``answer`` ``"close"`` hangs up
    without a reply (as an unreachable host does, counted), ``"missing"`` answers as the hub does for a repository
    it does not have (404, ``X-Error-Code: RepoNotFound``)."""

    def __init__(self, answer: str = "close"):
        hub = self
        self.connections = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def handle(self):
                hub.connections += 1
                if answer == "close":
                    self.request.close()
                    return
                super().handle()

            def do_GET(self):
                body = b'{"error": "Repository not found"}'
                self.send_response(404)
                self.send_header("X-Error-Code", "RepoNotFound")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub(monkeypatch):
    """Online (no HF_HUB_OFFLINE) with the hub at a local stand-in; ``hub(answer)`` starts one."""
    import huggingface_hub.constants

    started = []

    def start(answer: str = "close") -> Hub:
        started.append(Hub(answer))
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", started[-1].url)
        return started[-1]

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read once, when it was imported
    yield start
    for h in started:
        h.close()


@pytest.fixture(scope="module", autouse=True)
def warm():
    """Import what the command line imports on first use, so the timed calls below time the command, not imports
    (``python -m lit_grpo`` pays them once at its start)."""
    run("fit", "--config", str(ROOT / "configs" / "demo.yaml"), "--model.init_args.policy.name_or_path", "/nowhere")


def run(*args: str) -> tuple[int, str, float]:
    """Exit status, stderr and seconds of ``python -m lit_grpo <args>`` in this process."""
    err = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as exc:
        main(list(args))
    return exc.value.code, err.getvalue(), time.monotonic() - start


def one_line(code: int, err: str, *must: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for text in must:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def test_readme_demo_from_another_folder_is_one_line_at_once_without_network(tmp_path, monkeypatch, hub):
    """The README's command with the config given from another folder: ``checkpoints/demo`` is the clone's folder,
    not a hub id; refused naming where it looked and where to run from, within 5 s, with no request to the hub."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    stand_in = hub("close")
    code, err, seconds = run("fit", "--config", str(ROOT / "configs" / "demo.yaml"))
    one_line(code, err, "model.init_args.policy.name_or_path 'checkpoints/demo' is not in "
             f"{elsewhere}, the folder this command runs from", f"{ROOT / 'checkpoints' / 'demo'} exists",
             f"run the command from {ROOT}")
    assert seconds < 5 and stand_in.connections == 0
    assert list(elsewhere.iterdir()) == []  # no logs/, no data/embedded/


@pytest.mark.parametrize("case", ["subfolder_phyx", "checkpoint", "own_project_data", "own_project_missing"])
def test_relative_paths_from_the_wrong_folder_say_where_they_were_looked_for(case, tmp_path, monkeypatch, hub):
    stand_in = hub("close")
    if case == "subfolder_phyx":  # a physics demo from the clone's notebooks/ folder
        monkeypatch.chdir(ROOT / "notebooks")
        args = ["fit", "--config", "../configs/demo_phyx_mcq.yaml"]
        must = ["'checkpoints/demo_phyx' is not in", f"run the command from {ROOT}"]
    elif case == "checkpoint":  # README's test command, from another folder, for a run that was never trained
        monkeypatch.chdir(tmp_path)
        args = ["test", "--config", str(ROOT / "configs" / "demo_phyx_mcq.yaml"), "--model.init_args.policy."
                "name_or_path", str(ROOT / "checkpoints" / "demo_phyx"), "--ckpt_path", "checkpoints/nope/last.ckpt"]
        must = ["ckpt_path 'checkpoints/nope/last.ckpt' does not exist: looked in", f"and in {ROOT}, which has "
                "checkpoints/"]
    else:  # a project of one's own: configs/ and data/ side by side, the command run from elsewhere
        project = tmp_path / "project"
        (project / "configs").mkdir(parents=True)
        (project / "data").mkdir()
        (project / "data" / "mine.parquet").write_bytes(b"")
        config = project / "configs" / "run.yaml"
        name = "mine.parquet" if case == "own_project_data" else "other.parquet"
        config.write_text(yaml.safe_dump({"data": {"val": {"path": f"data/{name}"}}}))
        (tmp_path / "elsewhere").mkdir()
        monkeypatch.chdir(tmp_path / "elsewhere")
        args = ["validate", "--config", str(ROOT / "configs" / "demo.yaml"), "--config", str(config),
                "--model.init_args.policy.name_or_path", str(ROOT / "checkpoints" / "demo")]
        must = [f"data.val.path 'data/{name}'", f"run the command from {project}" if name == "mine.parquet"
                else f"and in {project}, which has data/"]
    code, err, seconds = run(*args)
    one_line(code, err, *must)
    assert seconds < 5 and stand_in.connections == 0


@pytest.mark.parametrize("key,value,what", [
    ("--model.init_args.policy.name_or_path", "someowner/somemodel", "model"),
    ("--data.val.path", "someowner/somedata", "dataset"),
])
@pytest.mark.parametrize("answer", ["close", "missing"])
def test_a_hub_id_the_hub_cannot_serve_is_one_line_after_one_request(key, value, what, answer, tmp_path,
                                                                      monkeypatch, hub):
    monkeypatch.chdir(tmp_path)
    stand_in = hub(answer)
    args = ["validate", "--config", str(ROOT / "configs" / "demo.yaml"), key, value]
    if what == "dataset":
        args += ["--model.init_args.policy.name_or_path", str(ROOT / "checkpoints" / "demo")]
    code, err, seconds = run(*args)
    said = "the hub cannot be reached" if answer == "close" else f"the hub has no {what} {value}"
    one_line(code, err, f"{value!r} is no", f"({tmp_path / value})", said)
    # one request, no retries: the hub client's backoff would make 6 with 23 s of sleeps; the HTTP transport itself
    # may open a second connection once when a new one is reset without a reply
    assert stand_in.connections in ((1,) if answer == "missing" else (1, 2)) and seconds < 5, err
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("config,what", [
    ("configs/demo.yaml", "config file 'configs/demo.yaml'"),
    (str(ROOT / "configs" / "demo.yaml"), "model.init_args.policy.name_or_path 'checkpoints/demo'"),
    (str(ROOT / "configs" / "demo_phyx_mcq.yaml"), "model.init_args.policy.name_or_path 'checkpoints/demo_phyx'"),
])
def test_the_real_command_from_another_folder_exits_2_with_one_line_within_5_s(config, what, tmp_path):
    """README's command (the config as README gives it, and by its full path; a physics config, whose model folder
    is set in the base it extends) from another folder, online, the hub at a closed port: one line naming the
    clone, status 2, no traceback, nothing written where it ran, within 5 s of starting Python (found before the
    imports of Lightning, torch and transformers, which take about 5 s)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # the discard port: nothing listens there
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "lit_grpo", "fit", "--config", config],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    one_line(done.returncode, done.stderr, f"{what} is not in {tmp_path}", f"run the command from {ROOT}")
    assert seconds < 5 and "lightning" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def _cases(tmp_path: Path) -> dict[str, tuple[Path, list[str]]]:
    """Where a command runs and its arguments: paths from the wrong folder in the forms a config or command line
    gives them, and forms the early check leaves to the full one."""
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "data" / "mine.parquet").write_bytes(b"")
    own = project / "configs" / "run.yaml"
    own.write_text(yaml.safe_dump({"data": {"val": {"path": "data/mine.parquet"}}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    demo, mcq = str(ROOT / "configs" / "demo.yaml"), str(ROOT / "configs" / "demo_phyx_mcq.yaml")
    model = str(ROOT / "checkpoints" / "demo")
    return {
        "config_file": (elsewhere, ["fit", "--config", "configs/demo.yaml"]),
        "model_folder": (elsewhere, ["fit", "--config", demo]),
        "model_short_form": (elsewhere, ["fit", "--config", demo, "--model.policy.name_or_path", "checkpoints/x"]),
        "subfolder": (ROOT / "notebooks", ["validate", "--config", "../configs/demo_phyx_mcq.yaml"]),
        "ckpt_and_model": (elsewhere, ["test", "--config", mcq, "--ckpt_path", "checkpoints/nope/last.ckpt"]),
        "own_project": (elsewhere, ["validate", "--config", demo, "--config", str(own),
                                    "--model.init_args.policy.name_or_path", model]),
        "override_wins": (elsewhere, ["fit", "--config", demo, "--model.init_args.policy.name_or_path=" + model]),
        "whole_block": (elsewhere, ["fit", "--config", demo, "--model.init_args.policy", f"{{name_or_path: {model}}}"]),
        "print_config": (elsewhere, ["fit", "--config", demo, "--print_config"]),
        "hub_id": (elsewhere, ["fit", "--config", demo, "--model.init_args.policy.name_or_path", "someowner/x"]),
    }


EARLY = {"config_file": "config file 'configs/demo.yaml' is not in",
         "model_folder": "model.init_args.policy.name_or_path 'checkpoints/demo' is not in",
         "model_short_form": "model.init_args.policy.name_or_path 'checkpoints/x' does not exist: looked in",
         "subfolder": "model.init_args.policy.name_or_path 'checkpoints/demo_phyx' is not in",
         "ckpt_and_model": "ckpt_path 'checkpoints/nope/last.ckpt' does not exist: looked in",
         "own_project": "data.val.path 'data/mine.parquet' is not in"}
"""The cases found before the imports, by the start of their message; the others are left to the full check."""


@pytest.mark.parametrize("case", ["config_file", "model_folder", "model_short_form", "subfolder", "ckpt_and_model",
                                  "own_project", "override_wins", "whole_block", "print_config", "hub_id"])
def test_the_early_check_says_what_the_full_check_says(case, tmp_path, monkeypatch, hub):
    """``python -m lit_grpo`` looks for paths from the wrong folder in the arguments and config files before it
    imports Lightning: each case it finds gives the full check's line word for word (``ckpt_and_model``: two
    problems, the first and the key of the other); a path an argument sets in a form it does not read, a fixed
    path, a hub id and ``--print_config`` are left to the full check."""
    from lit_grpo.settings.args import expand_bases
    from lit_grpo.settings.paths import refuse_before_imports

    folder, args = _cases(tmp_path)[case]
    monkeypatch.chdir(folder)
    early = refuse_before_imports(expand_bases(args))  # as python -m lit_grpo calls it
    if case not in EARLY:
        assert early is None
        return
    assert early is not None and early.startswith(EARLY[case]), early
    hub("close")
    code, err, _ = run(*args)
    assert err.strip() == f"error: {' '.join(early.split())}"
    assert case != "ckpt_and_model" or early.endswith("(and 1 more problem: model.init_args.policy.name_or_path)")


def test_a_run_refused_while_setting_up_leaves_no_log_folder(tmp_path):
    """Training rows that are the validation problems (``on_overlap: refuse``) are found when the data is set up,
    after the logger made its folder: the refusal removes the folder it left empty."""
    gen = {"path": str(tmp_path / "same.parquet"), "kind": "puzzles", "num": 4, "seed": 3, "rules": ["red_count"]}
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump({
        "trainer": {"max_steps": 1, "logger": {"init_args": {"save_dir": str(tmp_path / "logs")}},
                    "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": {"dirpath": str(tmp_path / "ckpt")}}]},
        "model": {"init_args": {"policy": {"name_or_path": str(ROOT / "checkpoints" / "demo")}}},
        "data": {"train": {"generate": gen}, "val": {"generate": gen}, "on_overlap": "refuse"}}))
    with pytest.raises(Exception, match="same problem|overlap"):
        main(["fit", "--config", "configs/demo.yaml", "--config", str(config)])
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("logged,status,kept", [
    (None, "failed", False),        # refused while setting up: nothing logged, the folder goes
    ("hparams", "failed", False),   # the hyper-parameters and the saved config are what any start writes
    ("scalar", "failed", True),     # a figure was logged (e.g. the step-0 validation): kept
    ("text", "failed", True),
    (None, "success", True),        # a finished run keeps its folder, empty or not
])
def test_a_failed_run_that_logged_nothing_leaves_no_folder(logged, status, kept, tmp_path):
    from lit_grpo.loggers import TensorBoardLogger

    (tmp_path / "logs" / "other").mkdir(parents=True)  # another run's folder: logs/ itself stays
    logger = TensorBoardLogger(save_dir=str(tmp_path / "logs"), name="run", default_hp_metric=False)
    logger.experiment  # the folder, as Lightning makes it before setting up the data
    (Path(logger.log_dir) / "config.yaml").write_text("seed_everything: 0\n")
    if logged == "hparams":
        logger.log_hyperparams({"lr": 0.1})
    elif logged == "scalar":
        logger.log_metrics({"val/greedy/reward": 0.5, "val/greedy/reward_se": 0.1}, step=0)
    elif logged == "text":
        logger.experiment.add_text("train/completions", "hello", 0)
    logger.finalize(status)
    assert Path(logger.log_dir).exists() == kept
    assert (tmp_path / "logs" / "run").exists() == kept and (tmp_path / "logs" / "other").is_dir()


def test_a_refused_run_removes_the_checkpoint_folder_and_the_parents_it_made(tmp_path):
    """``dirpath: checkpoints/<run>`` in a folder without ``checkpoints/``: both are made by the folder check; a run
    refused after it removes both, and keeps an empty folder that was there before."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import ModelCheckpoint

    from lit_grpo.run_lock import RunLock
    from lit_grpo.runs import check_checkpoint_folders, remove_unused_folders

    (tmp_path / "kept").mkdir()
    dirs = [tmp_path / "checkpoints" / "run" / "a", tmp_path / "checkpoints" / "run" / "b", tmp_path / "kept" / "x"]
    trainer = SimpleNamespace(checkpoint_callbacks=[ModelCheckpoint(dirpath=str(d)) for d in dirs], logger=None,
                              loggers=[])
    lock = RunLock(["test"])
    check_checkpoint_folders(trainer, lock)
    assert all(d.is_dir() for d in dirs)
    lock.release()
    remove_unused_folders(lock.created)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and list((tmp_path / "kept").iterdir()) == []


def test_a_logger_without_its_run_id_yet_gets_no_folder_named_none(tmp_path):
    """W&B's run folder is ``<save_dir>/<name>/<run id>``, and the id exists only once its run starts: the folder
    check before it makes no ``<name>/None`` folder."""
    from types import SimpleNamespace

    from lit_grpo.loggers import WandbLogger
    from lit_grpo.run_lock import RunLock
    from lit_grpo.runs import check_checkpoint_folders

    logger = WandbLogger(save_dir=str(tmp_path / "logs"), name="run", offline=True)
    assert logger.version is None
    trainer = SimpleNamespace(checkpoint_callbacks=[], logger=logger, loggers=[logger])
    lock = RunLock(["test"])
    check_checkpoint_folders(trainer, lock)
    lock.release()
    assert not (tmp_path / "logs" / "run" / "None").exists() and not (tmp_path / "logs").exists()


def test_a_key_may_repeat_in_other_mappings_and_beside_a_merge_key(tmp_path):
    """Only a key given twice in one mapping is refused (by :func:`read_config`): the same key in two mappings, or a
    key that overrides one merged in with ``<<:``, is what YAML means."""
    from lit_grpo.settings.paths import read_config

    config = tmp_path / "c.yaml"
    config.write_text("base: &b {lr: 1, beta: 2}\nrun:\n  <<: *b\n  lr: 3\nother: {lr: 4}\n")
    assert read_config(str(config)) == {"base": {"lr": 1, "beta": 2}, "run": {"lr": 3, "beta": 2},
                                        "other": {"lr": 4}}


def test_a_json_file_indented_with_tabs_is_read_as_json(tmp_path):
    """JSON is no YAML where a tab comes before a key (``json.dump(indent="\\t")``); jsonargparse reads it as JSON,
    and so does :func:`read_config` (a YAML file with a tab stays refused, with its line)."""
    from lit_grpo.settings import ConfigError
    from lit_grpo.settings.paths import read_config

    config = tmp_path / "grpo.json"
    config.write_text('{\n\t"beta": 0.0,\n\t"epsilon_low": 0.2\n}\n')
    assert read_config(str(config)) == {"beta": 0.0, "epsilon_low": 0.2}
    config.write_text("trainer:\n\tmax_steps: 3\n")
    with pytest.raises(ConfigError, match="line 2, column 1: not valid YAML"):
        read_config(str(config))
