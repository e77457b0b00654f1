"""The physics paper's comparison in one command: SFT warm start, the three GRPO conditions, MCQ and OE.

    python -m lit_grpo.tasks.phyx.experiments phyx --config configs/experiments/phyx_demo.yaml

The runner drives the project's own CLI (``python -m lit_grpo fit`` and ``predict``) with the condition
configs as documented, adding only a small overlay per run (seed, where logs and the exported model go,
the evaluation settings); it holds no training code. Per training seed it trains each condition from the
warm start, then evaluates the warm start (the SFT row) and every trained policy on the same held-out
problems with the same sampling seed, and writes the paper's table (rows SFT and the conditions, columns
Overall and the six domains, one table per format) with standard errors, the held-out ASM of every
model, the controls, the seeds' spread and each reward term's within-group spread over training
(:mod:`lit_grpo.tasks.phyx.experiments.report`). A run whose inputs (config files, arguments, starting weights) are
unchanged is reused; ``force`` redoes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from lit_grpo.settings.args import config_with_bases
from lit_grpo.tasks.phyx.experiments.sweep import Sweep, sweep_runs


@dataclasses.dataclass
class Condition:
    """One GRPO condition: its row label and the configs it adds after each format's base config."""

    name: str
    """Row label in the table, e.g. ``GRPO (Rubric)``."""
    key: str
    """Short name used in run names, e.g. ``rubric``."""
    overlays: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """Format key -> config files given after the format's base config (none: the base itself)."""


@dataclasses.dataclass
class Format:
    """One answer format: its base config (the Fmt + Acc condition) and its table title."""

    key: str
    """``mcq`` or ``oe``; used in run names and to pick each condition's overlays."""
    title: str
    """Table title."""
    config: str
    """Base config file of the format."""
    overlays: list[str] = dataclasses.field(default_factory=list)
    """Config files given after the base (and after a condition's overlays) in every run of the format, e.g.
    one pointing the open-ended judge at a server."""


@dataclasses.dataclass
class Control:
    """A control run: one condition trained with extra arguments (the learning-rate-0 control)."""

    format: str = "mcq"
    condition: str = "fmt_acc"
    seed: int = 0
    name: str = "lr 0"
    """Label appended to the condition's name in the report."""
    args: list[str] = dataclasses.field(default_factory=lambda: ["--model.init_args.optimizer.init_args.lr=0"])


@dataclasses.dataclass
class Run:
    """One row of one table: a model to evaluate (and, for the conditions, to train first)."""

    name: str
    format: str
    label: str
    seed: int | None
    configs: list[str]
    fit_args: list[str] | None = None
    """Extra fit arguments; ``None``: nothing to train (the SFT row evaluates the warm start)."""
    tags: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What a sweep's run is (:func:`lit_grpo.tasks.phyx.experiments.sweep.sweep_runs`): ``sweep``, ``role``, ``aggregation``,
    ``weight``; empty for the conditions and controls."""


def _file_hash(paths: list[str]) -> str:
    """A hash of ``paths`` and their contents; a YAML file counts by what it sets (its parsed content), so an edit
    of its comments or layout does not redo a run."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.encode())
        if not Path(p).is_file():
            h.update(b"<missing>")
        elif p.endswith((".yaml", ".yml")):
            h.update(json.dumps(yaml.safe_load(Path(p).read_text()), sort_keys=True, default=str).encode())
        else:
            h.update(Path(p).read_bytes())
    return h.hexdigest()[:16]


def _say(text: str) -> None:
    """One progress line on stderr (the report goes to stdout at the end)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class PhyxExperiment:
    """What to run and where to write it (``configs/experiments/phyx_demo.yaml`` documents each field)."""

    formats: list[Format]
    """Answer formats, each a table."""
    conditions: list[Condition]
    """GRPO conditions, each a row after SFT."""
    output: str = "logs/phyx_demo"
    """Folder of everything the runner writes: ``runs/``, ``tb/`` (one TensorBoard logdir), the tables."""
    warm_start: str = "checkpoints/demo_phyx"
    """The SFT model (``save_pretrained`` folder): the SFT row, and where every condition starts."""
    sft_config: str | None = "configs/demo_phyx_sft.yaml"
    """Config that makes the warm start (it must export to ``warm_start``); run when the warm start is
    missing or ``retrain_sft`` is set."""
    retrain_sft: bool = False
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    """Training seeds of the conditions (``seed_everything``); the tables show the first, the report
    how the ranking moves across all of them."""
    eval_config: str = "configs/experiments/phyx_eval.yaml"
    """Overlay of every evaluation (sampling, seed, metrics); the held-out set is each base config's ``test``."""
    fit_args: list[str] = dataclasses.field(default_factory=list)
    """Extra arguments of every fit (e.g. ``--trainer.max_steps=20``)."""
    eval_args: list[str] = dataclasses.field(default_factory=list)
    """Extra arguments of every evaluation."""
    controls: list[Control] = dataclasses.field(default_factory=list)
    sweeps: list[Sweep] = dataclasses.field(default_factory=list)
    """Sweep axes: a condition trained at several settings of one reward term (its weight, the aggregation), each
    with its reference condition; trained per format and seed after the conditions, reported in their own tables."""
    jobs: int = 1
    """Runs at once (one torch thread each)."""
    launcher: str = "subprocess"
    """``subprocess`` (one ``python -m lit_grpo`` per run, output in ``runs/<name>/*.log``) or ``inprocess``."""
    force: bool = False
    """Redo every run even when its inputs are unchanged."""
    report_only: bool = False
    """Train and evaluate nothing: write the report from the runs already finished (the others are listed as
    not run), e.g. while another invocation is still training the later seeds."""
    chart: bool = True
    """Write the bar chart (needs matplotlib, the ``notebook`` extra)."""

    def __post_init__(self):
        if not self.seeds:
            raise ValueError("seeds must name at least one training seed, e.g. [0, 1]")
        # every fit calls seed_everything(seed), which takes [0, 2**32 - 1]: refused here, once, not in each fit
        if any(not 0 <= s <= 2**32 - 1 for s in self.seeds):
            raise ValueError(f"seeds must be in [0, 4294967295] (seed_everything's range), got {self.seeds}")
        # a seed named twice would count one trained policy twice in the seed-level SE
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must all differ (each is one value of the seed-level SE), got {self.seeds}")
        if self.jobs < 1:
            raise ValueError(f"jobs must be >= 1 (runs at once), got {self.jobs}")

    @functools.cached_property
    def code(self) -> str:
        """:func:`code_version` of this checkout (each run's record keeps the one that made it)."""
        return code_version()

    def runs(self) -> list[Run]:
        """The SFT row per format, each condition per format for the first seed, the controls, then the other
        seeds (in this order, so that an interrupted invocation has the first table and the controls)."""
        out = [Run(f"sft_{f.key}", f.key, "SFT", None, [f.config, *f.overlays]) for f in self.formats]
        fmts = {f.key: f for f in self.formats}
        conds = {c.key: c for c in self.conditions}
        later = []
        for i, seed in enumerate(self.seeds):
            for f in self.formats:
                for c in self.conditions:
                    (out if i == 0 else later).append(
                        Run(f"{f.key}_{c.key}_s{seed}", f.key, c.name, seed,
                            [f.config, *c.overlays.get(f.key, []), *f.overlays], list(self.fit_args)))
                for sw in self.sweeps:
                    (out if i == 0 else later).extend(sweep_runs(sw, f, conds, seed, self.fit_args, Run))
        for k in self.controls:
            if k.format not in fmts or k.condition not in conds:
                raise ValueError(f"control {k}: unknown format or condition (formats {sorted(fmts)}, "
                                 f"conditions {sorted(conds)})")
            c = conds[k.condition]
            out.append(Run(f"{k.format}_{c.key}_{k.name.replace(' ', '')}_s{k.seed}", k.format, f"{c.name}, {k.name}",
                           k.seed, [fmts[k.format].config, *c.overlays.get(k.format, []), *fmts[k.format].overlays],
                           [*self.fit_args, *k.args]))
        return _unique(out + later)

    def path(self, *parts: str) -> Path:
        return Path(self.output, *parts)


def _unique(runs: list[Run]) -> list[Run]:
    """One run per name, at its first place; a sweep's copy of a condition's run lends it its tags.

    Raises:
        ValueError: two runs of one name that would train differently.
    """
    first: dict[str, Run] = {}
    for r in runs:
        seen = first.setdefault(r.name, r)
        if seen is not r:
            if (seen.configs, seen.fit_args) != (r.configs, r.fit_args):
                raise ValueError(f"two different runs are named {r.name}: {seen.fit_args} and {r.fit_args}")
            seen.tags = seen.tags or r.tags
    return list(first.values())


def _write_yaml(path: Path, data: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def fit_overlay(exp: PhyxExperiment, run: Run) -> dict[str, Any]:
    """Seed, logger (``tb/<run>``), callbacks (export to ``runs/<run>``, within-group spread, samples) and start."""
    folder = str(exp.path("runs", run.name))
    return {
        "seed_everything": run.seed,
        "trainer": {
            "enable_checkpointing": False,
            "logger": {"class_path": "lit_grpo.loggers.TensorBoardLogger",
                       "init_args": {"save_dir": str(exp.path("tb")), "name": run.name, "version": "",
                                     "default_hp_metric": False}},
            "callbacks": [
                {"class_path": "lit_grpo.callbacks.ExportPretrained", "init_args": {"dirpath": folder}},
                {"class_path": "lit_grpo.tasks.phyx.experiments.spread.GroupSpread",
                 "init_args": {"path": f"{folder}/group_spread.json"}},
                {"class_path": "lit_grpo.callbacks.CompletionSamples", "init_args": {"every_n_steps": 10}},
            ],
        },
        "model": {"init_args": {"policy": {"name_or_path": exp.warm_start}}},
    }


def eval_overlay(exp: PhyxExperiment, run: Run, model: str) -> dict[str, Any]:
    """No logger or checkpoints; predictions to ``runs/<run>/predictions.jsonl`` (and the saved config to
    ``runs/<run>/config.yaml``); the policy from ``model``."""
    return {
        "trainer": {"logger": False, "enable_checkpointing": False,
                    "default_root_dir": str(exp.path("runs", run.name)),
                    "callbacks": [{"class_path": "lit_grpo.callbacks.PredictionsJSONL",
                                   "init_args": {"path": str(exp.path("runs", run.name, "predictions.jsonl"))}}]},
        "model": {"init_args": {"policy": {"name_or_path": model}}},
    }


def _configs(files: list[str]) -> list[str]:
    return [a for f in files for a in ("--config", f)]


class _Stop:
    """The stop signal the runner received (None: none) and the children it passes it on to, under one lock."""
    signum: int | None = None
    children: dict[subprocess.Popen, bool] = {}  # child -> whether it has been signalled
    lock = threading.RLock()  # the handler may run in a thread that holds it


def stop_signal() -> int | None:
    """The SIGTERM / SIGINT the runner received while :func:`passing_signals_on` (None: none)."""
    return _Stop.signum


@contextlib.contextmanager
def passing_signals_on():
    """While the runner runs (main thread): a SIGTERM or SIGINT to it goes on to every fit and evaluation it has
    started (each in a session of its own, so a Ctrl+C at the terminal reaches it once, through here); each saves
    its last step and exits (``python -m lit_grpo``'s stop), no new run starts, and :func:`launch` returns the child's
    status once it has ended. A second signal goes on too (the child then abandons its step). A SIGHUP (the
    terminal closed) goes on as SIGTERM: the children, in sessions of their own, would not get it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def pass_on(signum: int, frame) -> None:
        if _Stop.signum is None:
            _say(f"{signal.Signals(signum).name} received: passed on to the runs in progress, which save their last "
                 "step; no new run starts. Run the same command again to resume them.")
        _Stop.signum = _Stop.signum or signum
        with _Stop.lock:
            for child in _Stop.children:
                _Stop.children[child] = True
                child.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    _Stop.signum = None
    previous = {s: signal.signal(s, pass_on) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run_child(command: list[str], log: Path, env: dict[str, str]) -> int:
    """``command`` with its output to ``log``, in a session of its own, signalled as :func:`passing_signals_on` says;
    its exit status (128 + the signal when a stop came before it started)."""
    with _Stop.lock:
        if _Stop.signum is not None:
            return 128 + _Stop.signum
        with open(log, "w") as f:
            child = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _Stop.children[child] = False
    try:
        return child.wait()
    finally:
        with _Stop.lock:
            _Stop.children.pop(child, None)


def launch(args: list[str], log: Path, launcher: str) -> tuple[int, float]:
    """Run ``python -m lit_grpo <args>``; ``(exit status, wall seconds)``. Output goes to ``log`` (subprocess)."""
    start = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    if launcher == "inprocess":
        from lit_grpo.cli import main

        try:
            main(args)
            rc = 0
        except SystemExit as exc:  # jsonargparse exits on a bad config
            rc = int(exc.code or 0)
        except Exception as exc:  # reported, and the other runs go on
            log.write_text(f"{type(exc).__name__}: {exc}\n")
            rc = 1
    elif launcher == "subprocess":
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "TOKENIZERS_PARALLELISM": "false"}
        rc = _run_child([sys.executable, "-m", "lit_grpo", *args], log, env)
    else:
        raise ValueError(f"launcher must be 'subprocess' or 'inprocess', got {launcher!r}")
    return rc, time.perf_counter() - start


LOAD_EVERY_S = 30.0
"""Seconds between two samples of the machine's load average while the runner runs."""


class LoadSampler:
    """Context manager sampling the machine's 1-minute load average every ``every_s`` seconds in a thread (at
    entry and exit too), so a report can say how busy the machine was while its runs ran: ``samples``."""

    def __init__(self, every_s: float = LOAD_EVERY_S):
        self.every_s, self.samples = every_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> "LoadSampler":
        self.samples.append(os.getloadavg()[0])
        self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])
        return False


def code_version() -> str:
    """A hash of the lit_grpo package's Python sources (16 hex digits): the code that made a run. Each run's record
    keeps it; reuse does not depend on it (a docs-only change would redo every run), but the report names the runs
    that other code made, since a last-bit change in a reward can train another policy."""
    root = Path(__file__).resolve().parents[3]  # lit_grpo/
    digest = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]


def _stamp(args: list[str], files: list[str], weights: str) -> str:
    """What a run's reuse is keyed on: its config files and the files they extend (``_base_``), the start weights
    and the arguments."""
    files = [f for path in files for f in config_with_bases(path)]
    return _file_hash([*files, str(Path(weights, "model.safetensors"))]) + "|" + " ".join(args)


def _done(record: Path, stamp: str, force: bool) -> dict | None:
    if force or not record.is_file():
        return None
    data = json.loads(record.read_text())
    return data if data.get("stamp") == stamp and data.get("rc") == 0 else None


def run_one(exp: PhyxExperiment, run: Run) -> dict[str, Any]:
    """Train ``run`` (unless it is the SFT row or already done), then evaluate it; returns its status."""
    folder = exp.path("runs", run.name)
    status: dict[str, Any] = {"name": run.name, "fit": None, "eval": None}
    model = exp.warm_start
    if run.fit_args is not None:
        overlay = _write_yaml(exp.path("configs", f"{run.name}.fit.yaml"), fit_overlay(exp, run))
        args = ["fit", *_configs([*run.configs, overlay]), *run.fit_args]
        stamp = _stamp(args, run.configs, exp.warm_start)
        done = _done(folder / "fit.json", stamp, exp.force)
        if done is not None:
            _say(f"{run.name}: fit reused (runs/{run.name}/fit.json)")
        if done is None and stop_signal() is not None:
            return {**status, "not_run": True}
        if done is None:
            stopped = stopped_fit(exp, run, folder / "fit.json", stamp)
            how = f"resumed from {stopped}" if stopped else "started"
            _say(f"{run.name}: fit {how} (log: {folder / 'fit.log'})")
            tb = exp.path("tb", run.name)
            for old in tb.glob("events.out.tfevents.*") if tb.is_dir() and not stopped else []:
                old.unlink()  # a rerun replaces the run's curves
            rc, wall = launch([*args, *(["--ckpt_path", str(stopped)] if stopped else [])], folder / "fit.log",
                              exp.launcher)
            done = {"stamp": stamp, "rc": rc, "wall_s": wall, "command": "python -m lit_grpo " + " ".join(args),
                    "code": exp.code}
            (folder / "fit.json").write_text(json.dumps(done, indent=1))
            status["fit_ran"] = True
            _say(f"{run.name}: fit {'done' if rc == 0 else f'FAILED (exit {rc})'} in {wall / 60:.1f} min")
        status["fit"] = done
        if done["rc"] != 0:
            return status
        model = str(folder)
    overlay = _write_yaml(exp.path("configs", f"{run.name}.eval.yaml"), eval_overlay(exp, run, model))
    args = ["predict", *_configs([*run.configs, exp.eval_config, overlay]), *exp.eval_args]
    stamp = _stamp(args, [*run.configs, exp.eval_config], model)
    done = None if status.get("fit_ran") else _done(folder / "eval.json", stamp, exp.force)
    if done is not None:
        _say(f"{run.name}: evaluation reused")
    if done is None:
        _say(f"{run.name}: evaluation started (log: {folder / 'eval.log'})")
        folder.mkdir(parents=True, exist_ok=True)
        rc, wall = launch(args, folder / "eval.log", exp.launcher)
        done = {"stamp": stamp, "rc": rc, "wall_s": wall, "command": "python -m lit_grpo " + " ".join(args),
                "code": exp.code}
        (folder / "eval.json").write_text(json.dumps(done, indent=1))
        _say(f"{run.name}: evaluation {'done' if rc == 0 else f'FAILED (exit {rc})'} in {wall / 60:.1f} min")
    status["eval"] = done
    return status


def stopped_fit(exp: PhyxExperiment, run: Run, record: Path, stamp: str) -> Path | None:
    """The checkpoint to resume ``run``'s fit from: the one its last launch wrote when a stop signal ended it (exit
    status 143 or 130, the same configs and arguments), where ``python -m lit_grpo`` writes it without a
    ``ModelCheckpoint``: ``<log folder>/checkpoints/last.ckpt``; None: the fit starts anew."""
    last = exp.path("tb", run.name, "checkpoints", "last.ckpt")
    if exp.force or not record.is_file() or not last.exists():
        return None
    data = json.loads(record.read_text())
    return last if data.get("stamp") == stamp and data.get("rc") in (128 + signal.SIGTERM, 128 + signal.SIGINT) \
        else None


def finished(exp: PhyxExperiment, run: Run) -> dict[str, Any]:
    """The status of ``run`` from its records on disk, running nothing (``fit``/``eval`` None: not run)."""
    folder = exp.path("runs", run.name)
    read = lambda name: json.loads((folder / name).read_text()) if (folder / name).is_file() else None  # noqa: E731
    status = {"name": run.name, "fit": read("fit.json") if run.fit_args is not None else None, "eval": read("eval.json")}
    if status["eval"] is None or (run.fit_args is not None and status["fit"] is None):
        status["not_run"] = True
    return status


def ensure_warm_start(exp: PhyxExperiment) -> dict[str, Any] | None:
    """Train the warm start with ``sft_config`` when it is missing or ``retrain_sft`` is set."""
    if Path(exp.warm_start, "model.safetensors").is_file() and not exp.retrain_sft:
        return None
    if not exp.sft_config:
        raise FileNotFoundError(f"no warm start in {exp.warm_start} and no sft_config to make it")
    overlay = _write_yaml(exp.path("configs", "sft.fit.yaml"), {"trainer": {"logger": {
        "class_path": "lit_grpo.loggers.TensorBoardLogger",
        "init_args": {"save_dir": str(exp.path("tb")), "name": "sft", "version": "", "default_hp_metric": False}}}})
    args = ["fit", *_configs([exp.sft_config, overlay])]
    rc, wall = launch(args, exp.path("runs", "sft", "fit.log"), exp.launcher)
    if rc != 0 or not Path(exp.warm_start, "model.safetensors").is_file():
        raise RuntimeError(f"the SFT run failed or did not export to {exp.warm_start} (exit {rc}); see "
                           f"{exp.path('runs', 'sft', 'fit.log')}; its config must export to warm_start")
    return {"rc": rc, "wall_s": wall, "command": "python -m lit_grpo " + " ".join(args)}
