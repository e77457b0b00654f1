"""Experiments that drive the CLI and turn its runs into a paper's table.

``python -m lit_grpo.tasks.phyx.experiments phyx --config configs/experiments/phyx_demo.yaml``: the physics
reward-design paper's comparison (:mod:`lit_grpo.tasks.phyx.experiments.phyx`).
"""

import concurrent.futures
import sys
import time
from typing import Any

from lit_grpo.tasks.phyx.experiments.phyx import (Condition, Control, Format, LoadSampler, PhyxExperiment, Run, ensure_warm_start,
                                      finished, passing_signals_on, run_one, stop_signal)
from lit_grpo.tasks.phyx.experiments.sweep import Setting, Sweep
from lit_grpo.tasks.phyx.experiments.summary import write_report

__all__ = ["Condition", "Control", "Format", "PhyxExperiment", "Run", "Setting", "Sweep", "execute", "main", "parse"]


def parse(args: list[str] | None = None) -> PhyxExperiment:
    """``phyx --config FILE [--key value ...]`` -> the experiment (jsonargparse: later values override earlier)."""
    from jsonargparse import ActionConfigFile, ArgumentParser, set_parsing_settings

    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    from jsonargparse import ArgumentError

    from lit_grpo.settings.args import short_error
    from lit_grpo.settings.argv import config_files

    # abbreviations off, as on the training command line: --job is refused, not read as --jobs
    parser = ArgumentParser(prog="python -m lit_grpo.tasks.phyx.experiments",
                            description="Run an experiment and write its table.", exit_on_error=False, allow_abbrev=False)
    phyx = ArgumentParser(description="The physics paper's table: SFT and three GRPO conditions, MCQ and OE.",
                          exit_on_error=False, allow_abbrev=False)
    phyx.add_argument("--config", action=ActionConfigFile, help="experiment YAML, e.g. configs/experiments/phyx_demo.yaml")
    phyx.add_class_arguments(PhyxExperiment)
    parser.add_subcommands().add_subcommand("phyx", phyx)
    try:
        cfg = parser.parse_args(args).phyx
    except ArgumentError as exc:  # a typo or a wrong type, named by its key in one line (as the training CLI)
        configs = config_files(sys.argv[1:] if args is None else list(args))  # to name the one at fault
        line = short_error(str(exc), exc, configs=configs, root=PhyxExperiment, subcommands=("phyx",))
        parser.exit(2, f"error: phyx: {line}\n")
    cfg.pop("config", None)
    try:
        exp = PhyxExperiment(**{k: v for k, v in vars(phyx.instantiate(cfg)).items() if not k.startswith("__")})
        exp.runs()  # every run resolved before any work: an unknown condition or swept reward is refused here
        return exp
    except ValueError as exc:  # a setting out of range or a run that cannot be built: one line, as the CLI says it
        parser.exit(2, f"error: phyx: {exc}\n")


def main(args: list[str] | None = None) -> dict:
    """Parse, run every run (or reuse it), write the report; exits non-zero naming the runs that failed."""
    exp = parse(args)
    report = execute(exp)
    if report["failed"]:
        raise SystemExit(f"{len(report['failed'])} run(s) failed: {', '.join(report['failed'])}; "
                         f"their logs are in {exp.output}/runs/<name>/")
    return report


def execute(exp: PhyxExperiment) -> dict[str, Any]:
    """Everything: the warm start if needed, every run (``jobs`` at once), then the report files."""
    start = time.perf_counter()
    if exp.jobs > 1 and exp.launcher == "inprocess":
        raise ValueError("jobs > 1 needs launcher: subprocess (in-process runs share one interpreter)")
    runs = exp.runs()
    if exp.report_only:
        sft, statuses = None, [finished(exp, r) for r in runs]
        return write_report(exp, runs, statuses, sft, time.perf_counter() - start)
    with LoadSampler() as load, passing_signals_on():
        sft = ensure_warm_start(exp)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, exp.jobs)) as pool:
            statuses = list(pool.map(lambda r: run_one(exp, r), runs))
    if stop_signal() is not None:  # the runs it reached saved their last step; the same command resumes them
        raise SystemExit(128 + stop_signal())
    wall = time.perf_counter() - start
    return write_report(exp, runs, statuses, sft, wall, load.samples)
