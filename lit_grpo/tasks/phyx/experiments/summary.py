"""The runner's report: the two tables, the ASM, the controls, the seeds and the reward spread, on disk.

Writes into the experiment's output folder ``phyx_table.md`` (everything below), ``phyx_table.csv``
(every model's cells), ``results.csv`` (the raw per-run, per-problem figures every cell is computed from), ``phyx_bars.png`` (the tables as grouped bars) and, into each run's TensorBoard
folder under ``tb/``, its held-out figures as ``heldout/...`` scalars, so the runs sit side by side.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import yaml

from lit_grpo.tasks.table import protocol_caption
from lit_grpo.tasks.phyx.experiments.report import (COLUMNS, Cell, bar_chart, correct_of, fmt_cell, fmt_change, paired_change,
                                         per_problem, pooled, read_records, results_csv, reward_of, row_cells, seed_cell, seed_table,
                                         fmt_with_seeds, table_csv, table_markdown)
from lit_grpo.tasks.phyx.experiments.phyx import LOAD_EVERY_S, PhyxExperiment, Run
from lit_grpo.tasks.phyx.experiments.sweep import config_value, sweep_sections

SIGNAL_TERMS = ("total", "format", "accuracy", "open_accuracy", "rubric", "rubric/accuracy", "rubric/principle",
                "rubric/unit", "rubric/reasoning", "attention")
"""Reward terms whose within-group spread over training the report lists (those a run has)."""


def _scalars(folder: Path, values: dict[str, float], step: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(folder)) as writer:
        for tag, v in values.items():
            if not math.isnan(v):
                writer.add_scalar(tag, v, step)


def _spread(exp: PhyxExperiment, run: Run) -> dict[str, Any]:
    path = exp.path("runs", run.name, "group_spread.json")
    return json.loads(path.read_text()) if path.is_file() else {}


def collect(exp: PhyxExperiment, runs: list[Run]) -> dict[str, dict[str, Any]]:
    """Per run: per-problem correctness, format and ASM (sampled mode), or nothing when it has no predictions."""
    out = {}
    for run in runs:
        path = exp.path("runs", run.name, "predictions.jsonl")
        if not path.is_file():
            continue
        records = read_records(path)
        out[run.name] = {"correct": per_problem(records, correct_of), "asm": per_problem(records, reward_of("attention")),
                         "format": per_problem(records, reward_of("format"))}
    return out


def _overall(problems: dict) -> Cell:
    return row_cells(problems)["Overall"]


def write_report(exp: PhyxExperiment, runs: list[Run], statuses: list[dict], sft: dict | None,
                 wall_s: float, load: list[float] | None = None) -> dict[str, Any]:
    """Write the report files; returns ``{"tables", "failed", "markdown"}``. ``load``: the machine's 1-minute load
    averages sampled while the runs ran (:class:`lit_grpo.tasks.phyx.experiments.phyx.LoadSampler`)."""
    not_run = {s["name"] for s in statuses if s.get("not_run")}  # e.g. still evaluating: its file is partial
    data = collect(exp, [r for r in runs if r.name not in not_run])
    first = exp.seeds[0] if exp.seeds else None
    tables, changes, lines = {}, {}, []
    failed = [s["name"] for s in statuses if not s.get("not_run")
              and ((s.get("fit") or {}).get("rc", 0) != 0 or (s.get("eval") or {}).get("rc", 1) != 0)]
    lines += [f"# The physics paper's table, demo scale ({', '.join(f.title for f in exp.formats)})", "",
              f"Warm start `{exp.warm_start}`; training seeds {exp.seeds}; held-out problems of each base config's "
              "`test` set; sampled completions as set in "
              f"`{exp.eval_config}`. Cells: mean ± standard error over problems of the per-problem accuracy.", ""]
    for f in exp.formats:
        sft_run = next(r for r in runs if r.format == f.key and r.fit_args is None)
        rows = [sft_run] + [r for r in runs if r.format == f.key and r.seed == first and r.fit_args is not None
                            and r.label in {c.name for c in exp.conditions}]
        tables[f.key] = {r.label: row_cells(data[r.name]["correct"]) for r in rows if r.name in data}
        base = data.get(sft_run.name, {}).get("correct", {})
        changes[f.key] = {r.label: paired_change(data[r.name]["correct"], base)
                          for r in rows[1:] if r.name in data and base}
        lines.append(table_markdown(f"{f.title} (seed {first})", tables[f.key], changes[f.key]))
        lines += [caption(exp, sft_run), ""]
    lines += _asm_section(exp, runs, data, first)
    lines += _controls_section(exp, runs, data)
    lines += _seeds_section(exp, runs, data)
    lines += sweep_sections(exp, runs, data, lambda r: _steps(exp, r), lambda r: caption(exp, r))
    lines += _signal_section(exp, runs, first)
    lines += _runs_section(exp, runs, statuses, sft, wall_s, failed, load or [])
    markdown = "\n".join(lines) + "\n"
    out = Path(exp.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "phyx_table.md").write_text(markdown)
    everything = {f.key: {r.name: row_cells(data[r.name]["correct"]) for r in runs if r.format == f.key and r.name in data}
                  for f in exp.formats}
    (out / "results.csv").write_text(results_csv(data))  # the raw per-problem figures behind every cell
    (out / "phyx_table.csv").write_text(table_csv(everything, {r.name: r.seed for r in runs if r.seed is not None}))
    if exp.chart and any(tables.values()):
        bar_chart(tables, out / "phyx_bars.png", {f.key: f.title for f in exp.formats})
    for run in runs:
        if run.name in data:
            cells = row_cells(data[run.name]["correct"])
            tags = {f"heldout/accuracy/{c.replace('/', '_').replace(' ', '_')}": cells[c][0] for c in COLUMNS}
            tags["heldout/asm"] = _overall(data[run.name]["asm"])[0]
            step = _spread(exp, run).get("global_step", 0)
            _scalars(exp.path("tb", run.name if run.fit_args is not None else run.name), tags, step)
    print(markdown)
    return {"tables": tables, "failed": failed, "markdown": markdown}


def _asm_section(exp: PhyxExperiment, runs: list[Run], data: dict, first: int | None) -> list[str]:
    # the rows are the first seed's, as in the accuracy tables: the heading says so (pooled figures: the sweep's)
    out = [f"### Attention (ASM) on held-out images (seed {first})", "",
           "Share of the final layer's image attention on foreground pixels, averaged over each completion's "
           "tokens (the attention reward's score), on the completions each model samples for the held-out problems.",
           "", "| Format | Model | ASM | Δ vs SFT | Format reward |", "|---|---|---|---|---|"]
    for f in exp.formats:
        sft = next(r for r in runs if r.format == f.key and r.fit_args is None)
        base = data.get(sft.name, {}).get("asm", {})
        for r in [sft] + [r for r in runs if r.format == f.key and r.seed == first and r.fit_args is not None]:
            if r.name not in data:
                continue
            change = fmt_change(paired_change(data[r.name]["asm"], base), 4) if r is not sft and base else ""
            out.append(f"| {f.title} | {r.label} | {fmt_cell(_overall(data[r.name]['asm']), 4)} | {change} | "
                       f"{fmt_cell(_overall(data[r.name]['format']))} |")
    return out + [""]


def _controls_section(exp: PhyxExperiment, runs: list[Run], data: dict) -> list[str]:
    controls = [r for r in runs if r.fit_args is not None and not r.tags and r.label not in {c.name for c in exp.conditions}]
    if not controls:
        return []
    out = ["### Controls", "", "| Run | Overall | Δ vs SFT | ASM |", "|---|---|---|---|"]
    for r in controls:
        if r.name not in data:
            out.append(f"| {r.label} (`{r.name}`) | not evaluated | | |")
            continue
        sft = next(s for s in runs if s.format == r.format and s.fit_args is None)
        base = data.get(sft.name, {}).get("correct", {})
        out.append(f"| {r.label} ({r.format}, seed {r.seed}) | {fmt_cell(_overall(data[r.name]['correct']))} | "
                   f"{fmt_change(paired_change(data[r.name]['correct'], base)) if base else ''} | "
                   f"{fmt_cell(_overall(data[r.name]['asm']))} |")
    return out + [""]


def _seeds_section(exp: PhyxExperiment, runs: list[Run], data: dict) -> list[str]:
    if len(exp.seeds) < 2:
        return ["### Seeds", "", f"One training seed ({exp.seeds}); give `--seeds [0,1]` to see how the ranking moves.", ""]
    out = ["### Seeds", "", "Overall accuracy of each condition per training seed (rank in brackets).", ""]
    for f in exp.formats:
        by_seed = {}
        for s in exp.seeds:
            rows = {r.label: _overall(data[r.name]["correct"]) for r in runs
                    if r.format == f.key and r.seed == s and r.name in data and r.label in {c.name for c in exp.conditions}}
            if rows:
                by_seed[s] = rows
        if len(by_seed) < 2:
            continue
        md, same = seed_table(by_seed)
        out += [f"**{f.title}**", "", md, f"Same ranking for every seed: {'yes' if same else 'no'}.", ""]
        out += _pooled_rows(exp, runs, data, f.key)
    return out


def _pooled_rows(exp: PhyxExperiment, runs: list[Run], data: dict, fmt: str) -> list[str]:
    """Each condition's accuracy and held-out ASM pooled over the seeds it has, and their paired changes against
    the SFT row: each at the evaluation level (per-problem means over the seeds, SE over problems) followed by the
    seed-level SE (each seed's own figure or change as one value, :func:`~lit_grpo.tasks.phyx.experiments.report.
    seed_cell`), as the sweep's pooled table; the verdicts in the docs use the seed level."""
    sft = next(r for r in runs if r.format == fmt and r.fit_args is None)
    base = data.get(sft.name, {})
    out = ["| Model (mean over seeds) | seeds | Overall | Δ Overall vs SFT | ASM | ASM Δ vs SFT | Overall per seed |",
           "|---|---|---|---|---|---|---|"]
    for c in exp.conditions:
        done = [r for r in runs if r.format == fmt and r.label == c.name and r.fit_args is not None and r.name in data]
        if len(done) < 2 or not base.get("correct"):
            continue
        cells = []
        for key, digits in (("correct", 3), ("asm", 4)):
            both = pooled([data[r.name][key] for r in done])
            per_seed = [_overall(data[r.name][key])[0] for r in done]
            changes = [paired_change(data[r.name][key], base[key])[0] for r in done]
            cells += [fmt_with_seeds(_overall(both), seed_cell(per_seed), digits, change=False),
                      fmt_with_seeds(paired_change(both, base[key]), seed_cell(changes), digits)]
        per_seed = ", ".join(f"{_overall(data[r.name]['correct'])[0]:.3f}" for r in done)
        out.append(f"| {c.name} | {len(done)} | {' | '.join(cells)} | {per_seed} |")
    return out + [""] if len(out) > 2 else []


def caption(exp: PhyxExperiment, run: Run) -> str:
    """How the evaluation of ``run`` decided correctness (:func:`lit_grpo.tasks.table.protocol_caption`), read from the
    configuration the evaluation saved (``runs/<run>/config.yaml``); empty before it has run."""
    path = exp.path("runs", run.name, "config.yaml")
    if not path.is_file():
        return ""
    init = (yaml.safe_load(path.read_text()) or {}).get("model", {}).get("init_args", {})
    ev = init.get("evaluation") or {}
    configured = [(r.get("alias") or r["name"], r.get("kwargs") or {}) for r in [*init.get("rewards", []),
                                                                                 *(ev.get("metrics") or [])]]
    return protocol_caption(ev.get("scorer"), ev.get("pass_threshold"), ev.get("judge"), ev.get("scorer_kwargs"),
                            configured)


def _steps(exp: PhyxExperiment, run: Run) -> str:
    """``trained/planned`` optimizer steps of a fit (``trainer.max_steps`` of its configs and arguments), flagged
    with ``(stopped early)`` when ``max_time`` or an error ended it first; empty before it has finished."""
    done = _spread(exp, run).get("global_step")
    if done is None or run.fit_args is None:
        return ""
    planned = config_value(run.configs, ("trainer", "max_steps"), run.fit_args)
    return f"{done}/{planned}" + (" (stopped early)" if isinstance(planned, int) and 0 < done < planned else "")


def _signal_section(exp: PhyxExperiment, runs: list[Run], first: int | None) -> list[str]:
    out = ["### Reward signal during training", "",
           "Mean over training steps of each term's within-group standard deviation (and the share of groups "
           "where the term differs between completions): a term with no spread gives GRPO nothing.", "",
           "| Run | steps | total reward, first → last 10 steps | " + " | ".join(SIGNAL_TERMS) + " |",
           "|---|---|---|" + "---|" * len(SIGNAL_TERMS)]
    for r in runs:
        spread = _spread(exp, r)
        if r.fit_args is None or not spread:
            continue
        terms = spread.get("terms", {})
        cells = [f"{terms[t]['mean_group_std']:.3f} ({terms[t]['frac_groups_with_spread']:.2f})" if t in terms else ""
                 for t in SIGNAL_TERMS]
        total = terms.get("total", {})
        curve = f"{total['first']:.3f} → {total['last']:.3f}" if "first" in total else ""
        out.append(f"| {r.name} | {spread.get('global_step', '')} | {curve} | " + " | ".join(cells) + " |")
    return out + [""]


def _runs_section(exp: PhyxExperiment, runs: list[Run], statuses: list[dict], sft: dict | None, wall_s: float,
                  failed: list[str], load: list[float]) -> list[str]:
    spent = sum((s.get(k) or {}).get("wall_s", 0) for s in statuses for k in ("fit", "eval"))
    out = ["### Runs", "", f"Wall time of this invocation: {wall_s / 60:.1f} min (reused runs cost nothing). The "
           f"runs' own fit and evaluation times, as each run's record gives them (a reused run's from the invocation "
           f"that made it), add up to {spent / 60:.1f} min ({exp.jobs} at a time)."]
    if sft:
        out.append(f"Warm start trained here in {sft['wall_s'] / 60:.1f} min: `{sft['command']}`.")
    if load:
        out.append(f"Machine load (1-minute load average, sampled every {LOAD_EVERY_S:g} s while it ran): mean "
                   f"{sum(load) / len(load):.1f}, min {min(load):.1f}, max {max(load):.1f}, on {os.cpu_count()} cores.")
    other = sorted({s["name"] for s in statuses for k in ("fit", "eval") if s.get(k) and s[k].get("code") != exp.code})
    if other:
        out.append(f"Made by other code than this checkout's (lit_grpo sources {exp.code}; or recorded before runs "
                   f"kept it), reused as they are: {len(other)} of {len(statuses)} runs ({', '.join(other)}). "
                   f"`--force true` redoes them.")
    by_name = {r.name: r for r in runs}
    short = [s["name"] for s in statuses if "stopped early" in _steps(exp, by_name[s["name"]])]
    if short:
        out.append(f"Stopped before their last step ({len(short)}; `max_time` or an error): {', '.join(short)}; their "
                   "figures are those of fewer updates.")
    out += ["", "| Run | steps | fit (min) | eval (min) | status |", "|---|---|---|---|---|"]
    for s in statuses:
        fit, ev = s.get("fit") or {}, s.get("eval") or {}
        state = "not run yet" if s.get("not_run") else "failed, see runs/" + s["name"] if s["name"] in failed else "ok"
        out.append(f"| {s['name']} | {_steps(exp, by_name[s['name']])} | {fit.get('wall_s', 0) / 60:.1f} | "
                   f"{ev.get('wall_s', 0) / 60:.1f} | {state} |")
    return out + ["", f"TensorBoard: `tensorboard --logdir {exp.path('tb')}`", ""]
