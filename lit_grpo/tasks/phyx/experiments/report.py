"""The paper's comparison table from evaluation predictions (pure functions; the runner writes the files).

Input: the records :class:`~lit_grpo.callbacks.PredictionsJSONL` writes, one per completion (``id``,
``mode``, ``domain``, ``rewards``, ``correct``). Every figure is a mean over held-out problems of the
per-problem mean over its completions, with the standard error over problems
(:func:`lit_grpo.metrics.mean_and_se`), as the training logs report them. A change against the SFT row
is the mean of the per-problem differences with its standard error (paired: the same problems).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from lit_grpo.tasks.phyx.reader import DOMAINS
from lit_grpo.metrics import mean_and_se

COLUMNS = ("Overall", *DOMAINS)
"""The paper's table columns: overall accuracy, then the six PhyX domains."""
Cell = tuple[float, float, int]
"""``(mean, standard error, problems)``."""


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of one predictions JSONL file (``null`` read back as NaN)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


def correct_of(record: dict[str, Any]) -> float:
    """The scorer's 0/1 verdict of a record (NaN: could not be scored)."""
    return _nan(record.get("correct"))


def reward_of(name: str) -> Callable[[dict[str, Any]], float]:
    """A value function reading reward ``name`` of a record (NaN when absent), e.g. ``attention`` = the ASM."""
    return lambda r: _nan(r.get("rewards", {}).get(name))


def per_problem(records: Iterable[dict[str, Any]], value: Callable[[dict[str, Any]], float] = correct_of,
                mode: str = "sampled") -> dict[str, tuple[str, float]]:
    """``id -> (domain, mean of value over the problem's completions in mode)``; NaN values left out, a problem
    with none scorable is dropped."""
    sums: dict[str, list] = {}
    for r in records:
        if r.get("mode") != mode:
            continue
        v = value(r)
        entry = sums.setdefault(str(r["id"]), [r.get("domain"), 0.0, 0])
        if not math.isnan(v):
            entry[1], entry[2] = entry[1] + v, entry[2] + 1
    return {k: (d, s / n) for k, (d, s, n) in sums.items() if n}


def pooled(maps: list[dict[str, tuple[str, float]]]) -> dict[str, tuple[str, float]]:
    """Per problem, the mean of its values over several runs (e.g. training seeds); only problems every run
    scored. ``[{"0": ("Optics", 1.0)}, {"0": ("Optics", 0.5), "1": ...}] -> {"0": ("Optics", 0.75)}``."""
    if not maps:
        return {}
    shared = set(maps[0]).intersection(*maps[1:])
    return {k: (maps[0][k][0], sum(m[k][1] for m in maps) / len(maps)) for k in maps[0] if k in shared}


def cell(values: list[float]) -> Cell:
    """Mean, SE over problems and count of per-problem values."""
    if not values:
        return math.nan, math.nan, 0
    return mean_and_se(torch.tensor(values, dtype=torch.float64))


def row_cells(problems: dict[str, tuple[str, float]]) -> dict[str, Cell]:
    """The table row of one model: ``Overall`` and each domain -> ``(mean, SE, problems)``."""
    out = {"Overall": cell([v for _, v in problems.values()])}
    for d in DOMAINS:
        out[d] = cell([v for dom, v in problems.values() if dom == d])
    return out


def paired_change(after: dict[str, tuple[str, float]], before: dict[str, tuple[str, float]]) -> Cell:
    """Mean per-problem difference ``after - before`` over the problems both have, its SE and count."""
    shared = sorted(set(after) & set(before))
    return cell([after[k][1] - before[k][1] for k in shared])


def fmt_cell(c: Cell, digits: int = 3) -> str:
    """``0.512 ± 0.020``; ``–`` for an empty cell."""
    mean, se, n = c
    if n == 0 or math.isnan(mean):
        return "–"
    return f"{mean:.{digits}f} ± {se:.{digits}f}"


def fmt_change(c: Cell, digits: int = 3) -> str:
    """``+0.081 ± 0.018 (4.5 SE)``."""
    mean, se, n = c
    if n == 0 or math.isnan(mean):
        return "–"
    z = mean / se if se > 0 else math.inf if mean else 0.0
    return f"{mean:+.{digits}f} ± {se:.{digits}f} ({z:+.1f} SE)"


def seed_cell(values: list[float]) -> Cell:
    """Mean, SE over training seeds and seed count of per-seed figures (one number per trained policy).

    The seed is the unit here: the SE says how far another training seed could move the figure, where
    :func:`cell`'s SE over problems says how precisely each fixed policy was evaluated. With one seed the SE is
    NaN (unknown), not 0. ``[0.5, 0.8333] -> (0.6667, 0.1667, 2)`` (SE = sample SD / sqrt(seeds))."""
    mean, se, n = cell(values)
    return mean, (se if n > 1 else math.nan), n


def fmt_with_seeds(evaluation: Cell, seeds: Cell, digits: int = 3, change: bool = True) -> str:
    """An evaluation-level cell followed by its seed-level SE: ``+0.333 ± 0.083 (+4.0 SE); seeds ± 0.167
    (+2.0 SE, 2)``; ``...; 1 seed`` when there is no seed-level SE."""
    text = fmt_change(evaluation, digits) if change else fmt_cell(evaluation, digits)
    mean, se, n = seeds
    if text == "–" or n == 0:
        return text
    if n < 2 or math.isnan(se):
        return f"{text}; 1 seed"
    z = f"{mean / se:+.1f} SE, " if change and se > 0 else ""
    return f"{text}; seeds ± {se:.{digits}f} ({z}{n})"


def table_markdown(title: str, rows: dict[str, dict[str, Cell]], changes: dict[str, Cell] | None = None) -> str:
    """The paper's layout: one row per model (SFT first), columns Overall and the six domains, ``mean ± SE``;
    ``changes`` adds a last column, the paired change of Overall against the SFT row."""
    heads = ["Model", *COLUMNS] + (["Δ Overall vs SFT"] if changes is not None else [])
    out = [f"### {title}", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for name, cells in rows.items():
        line = [name, *(fmt_cell(cells[c]) for c in COLUMNS)]
        if changes is not None:
            line.append(fmt_change(changes[name]) if name in changes else "")
        out.append("| " + " | ".join(line) + " |")
    n = max((cells["Overall"][2] for cells in rows.values()), default=0)
    per = {d: max((cells[d][2] for cells in rows.values()), default=0) for d in DOMAINS}
    out.append("")
    out.append(f"Problems: {n} overall; " + ", ".join(f"{d} {per[d]}" for d in DOMAINS) + ".")
    return "\n".join(out) + "\n"


def table_csv(tables: dict[str, dict[str, dict[str, Cell]]], seed_of: dict[str, int] | None = None) -> str:
    """Long-form CSV of several tables: ``format,model,seed,column,mean,se,problems`` (mean/se empty when NaN)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["format", "model", "seed", "column", "mean", "se", "problems"])
    for fmt, rows in tables.items():
        for name, cells in rows.items():
            for col in COLUMNS:
                mean, se, n = cells[col]
                seed = "" if seed_of is None or name not in seed_of else seed_of[name]
                w.writerow([fmt, name, seed, col, "" if math.isnan(mean) else f"{mean:.6f}",
                            "" if math.isnan(se) else f"{se:.6f}", n])
    return buf.getvalue()


RESULT_FIELDS = ("run", "problem", "domain", "correct", "asm", "format")
"""Columns of the raw per-run results (:func:`results_csv`)."""


def results_csv(data: dict[str, dict[str, dict[str, tuple[str, float]]]]) -> str:
    """The raw results behind every table: one row per run and held-out problem, its per-problem means over the
    sampled completions (``correct``, ``asm`` = the attention reward, ``format``), empty when not scored. Every
    cell of the report is a function of these rows and the run names (:func:`read_results` reads them back)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(RESULT_FIELDS)
    for run, figures in data.items():
        for problem, (domain, _) in figures["correct"].items():
            w.writerow([run, problem, domain or "", *(
                "" if problem not in figures[k] else f"{figures[k][problem][1]:.6g}" for k in ("correct", "asm", "format"))])
    return buf.getvalue()


def read_results(path: str | Path) -> dict[str, dict[str, dict[str, tuple[str, float]]]]:
    """The ``data`` of :func:`results_csv` read back (``run -> {"correct"|"asm"|"format" -> {problem -> (domain,
    value)}}``), as the report functions take it."""
    data: dict[str, dict[str, dict[str, tuple[str, float]]]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            figures = data.setdefault(row["run"], {"correct": {}, "asm": {}, "format": {}})
            for key in figures:
                if row[key] != "":
                    figures[key][row["problem"]] = (row["domain"], float(row[key]))
    return data


def within_se(now: dict[str, tuple[str, float]], then: dict[str, tuple[str, float]], z: float = 2.0
               ) -> tuple[bool, Cell]:
    """Whether two evaluations of policies meant to be the same agree within ``z`` standard errors: the paired
    change ``now - then`` over the problems both scored (per-problem means), ``|mean| <= z * SE``. Used where bits
    cannot match (another machine or library build trains another last bit): the tolerance is the evaluation's own
    precision. A change with SE 0 agrees only when it is exactly 0. Returns ``(agrees, change)``."""
    change = paired_change(now, then)
    mean, se, n = change
    return n > 0 and abs(mean) <= z * se, change


def ranking(overall: dict[str, float]) -> list[str]:
    """Model names from the highest to the lowest overall figure (ties keep the given order)."""
    return [k for k, _ in sorted(overall.items(), key=lambda kv: -kv[1])]


def seed_table(by_seed: dict[int, dict[str, Cell]]) -> tuple[str, bool]:
    """Markdown of each condition's overall figure per training seed with its rank, the spread (max - min)
    across seeds, and whether the ranking is the same for every seed; ``(markdown, same ranking)``."""
    seeds = sorted(by_seed)
    names = list(dict.fromkeys(k for s in seeds for k in by_seed[s]))  # a seed may lack a condition (not run yet)
    ranks = {s: ranking({k: c[0] for k, c in by_seed[s].items()}) for s in seeds}
    heads = ["Condition", *(f"seed {s}" for s in seeds), "spread (max − min)"]
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for name in names:
        means = [by_seed[s][name][0] for s in seeds if name in by_seed[s]]
        cells = [f"{fmt_cell(by_seed[s][name])} (#{ranks[s].index(name) + 1})" if name in by_seed[s] else "–"
                 for s in seeds]
        ok = [m for m in means if not math.isnan(m)]
        spread = f"{max(ok) - min(ok):.3f}" if len(ok) > 1 else "–"
        out.append("| " + " | ".join([name, *cells, spread]) + " |")
    common = set(names).intersection(*(by_seed[s] for s in seeds))  # rankings compared on what every seed has
    same = len({tuple(k for k in r if k in common) for r in ranks.values()}) <= 1
    return "\n".join(out) + "\n", same


def bar_chart(tables: dict[str, dict[str, dict[str, Cell]]], path: str | Path, titles: dict[str, str]) -> Path:
    """Grouped bars (one group per column, one bar per model, SE as error bars), one panel per format, as PNG.

    Raises:
        ImportError: matplotlib missing, with the install command.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - the notebook extra is installed in dev
        raise ImportError("the bar chart needs matplotlib: pip install -e '.[notebook]' (or pass --chart false)") from exc
    fig, axes = plt.subplots(len(tables), 1, figsize=(11, 3.6 * len(tables)), squeeze=False)
    for ax, (fmt, rows) in zip(axes[:, 0], tables.items()):
        width = 0.8 / max(len(rows), 1)
        for i, (name, cells) in enumerate(rows.items()):
            xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(COLUMNS))]
            means = [0.0 if math.isnan(cells[c][0]) else cells[c][0] for c in COLUMNS]
            errs = [0.0 if math.isnan(cells[c][1]) else cells[c][1] for c in COLUMNS]
            ax.bar(xs, means, width, yerr=errs, capsize=2, label=name)
        ax.set_xticks(range(len(COLUMNS)), COLUMNS, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_ylabel("accuracy")
        ax.set_title(titles.get(fmt, fmt))
        ax.legend(fontsize=7, ncol=len(rows), loc="upper left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
