"""The papers' accuracy table: accuracy overall and per value of each field a task groups its records by
(:data:`lit_grpo.evaluation.TABLE_GROUPS`: PhyX's domain and reasoning type, as in the reward-design paper's
tables), each with its standard error over problems; :func:`table_markdown` and :func:`table_csv` render it, under a
caption saying how correctness was decided (:func:`protocol_caption`: the scorer, its judge, the pass threshold),
and the :class:`AccuracyTable` callback writes it at the end of ``test``.

Task-side code shared by the tasks (VisualSphinx's configs use it with the overall row alone), kept out of the core:
a module of :mod:`lit_grpo.tasks`, not a task package, so it needs no task's extra; a config names the callback as
``lit_grpo.tasks.table.AccuracyTable``.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from lit_grpo import distributed as D
from lit_grpo.callbacks import _run_dir
from lit_grpo.evaluation import TABLE_GROUPS
from lit_grpo.loggers import log_table, masked_text
from lit_grpo.registry import built_group
from lit_grpo.rewards.registry import REWARDS, option_default, reward_info, reward_options


def protocol_caption(scorer: str | None, pass_threshold: float | None = None, judge: Any = None,
                     scorer_kwargs: dict[str, Any] | None = None, configured: list[tuple[str, dict]] = ()) -> str:
    """How a table's correctness was decided, in one sentence: the scorer, how it decides (its registered
    ``protocol``), its judge (a judge-backed scorer) and the pass threshold. The judge is ``judge`` (the
    evaluation's), else ``scorer_kwargs["judge"]``, else that of the ``configured`` reward ``(label, kwargs)`` whose
    verdicts are reused, else the default (the offline judge); its calls per completion are the judge's
    ``num_judges``, or the scorer's own ``num_judges`` option when it has one.

    >>> protocol_caption("accuracy")
    "Scored by `accuracy`: the <answer> letter equals the gold option letter (the paper's evaluation of multiple choice)."
    """
    if scorer is None:
        return "No scorer: no correctness."
    info = reward_info(scorer) if scorer in REWARDS else None
    text = f"Scored by `{scorer}`" + (f": {info.protocol}" if info is not None and info.protocol else "")
    if info is not None and "judge" in reward_options(scorer):
        mine = [k.get("judge") for label, k in configured if label == scorer]
        chosen = next((j for j in (judge, (scorer_kwargs or {}).get("judge"), *mine) if j is not None), None)
        cfg = built_group("judge", chosen or {})  # a scorer with a judge: the task that owns the group is loaded
        if hasattr(cfg, "num_judges"):  # not a judge's settings (an unresolved interpolation read from a file)
            who = f"{cfg.model} (served)" if cfg.base_url else "the offline rule-based judge"
            calls = cfg.num_judges
            if "num_judges" in reward_options(scorer):  # a scorer that sets its own number of calls
                own = (scorer_kwargs or {}).get("num_judges", option_default(scorer, "num_judges"))
                calls = calls if own is None else own
            text += f"; judge: {who}, {calls} call{'s' * (calls != 1)} per completion"
    if pass_threshold is not None:
        text += f"; correct = a score of at least {pass_threshold:g}"
    return text + "."


def module_caption(module: Any) -> str | None:
    """The caption of the tables of ``module``'s evaluation (:func:`protocol_caption` of its ``evaluation`` options,
    its rewards and metrics); None for a module without evaluation options."""
    cfg = getattr(module, "evaluation", None)
    if cfg is None:
        return None
    return protocol_caption(cfg.scorer, cfg.pass_threshold, cfg.judge, cfg.scorer_kwargs,
                            [(s.label, s.kwargs) for s in [*getattr(module, "reward_specs", []), *cfg.metrics]])


CSV_COLUMNS = ("mode", "group", "name", "accuracy", "se", "problems", "completions", "correct", "unscorable")
"""The columns of :func:`table_csv` (and of the table the loggers get)."""


def _row(group: str, name: str, keyed: list[tuple[Any, float]]) -> dict[str, Any]:
    """One row from ``(problem id, correct)`` pairs: each problem's share of correct completions (its scorable
    ones), their mean and standard error over problems (:func:`~lit_grpo.metrics.mean_and_se`)."""
    from lit_grpo.metrics import mean_and_se

    by_problem: dict[Any, list[float]] = {}
    for pid, value in keyed:
        by_problem.setdefault(pid, []).append(value)
    shares = [sum(s) / len(s) if s else math.nan
              for s in ([v for v in vs if not math.isnan(v)] for vs in by_problem.values())]
    mean, se, scored = mean_and_se(torch.tensor(shares, dtype=torch.float64))
    values = [v for _, v in keyed]
    return {"group": group, "name": name, "accuracy": mean, "se": se, "problems": len(by_problem),
            "scored_problems": scored, "completions": len(values), "unscorable": sum(math.isnan(v) for v in values),
            "correct": sum(v for v in values if not math.isnan(v))}


def accuracy_table(records: list[dict[str, Any]],
                   groups: dict[str, tuple[str, ...]] | None = None) -> list[dict[str, Any]]:
    """Accuracy rows: ``overall``, then for each field of ``groups`` (default :data:`TABLE_GROUPS`) each of its
    values that has a problem (a record counts under every value its field holds), each ``{group, name, accuracy,
    se, problems, scored_problems, completions, unscorable, correct}``.

    A problem is a record ``id`` (each record its own problem when it has none); its accuracy is the share of its
    scorable completions that are correct (NaN excluded and counted in ``unscorable``). A row's accuracy is the
    mean of its problems' accuracies and ``se`` their standard error (over problems: completions of one problem are
    not independent), as the paper table of docs/paper_table.md; a row whose problems have no scorable completion has NaN
    accuracy. Group rows appear when some record has the first group's field (PhyX's domain), in the task's order,
    without the values that have no problem.
    """
    keyed = [(r.get("id", f"#{i}"), r) for i, r in enumerate(records)]
    rows = [_row("overall", "all", [(pid, r["correct"]) for pid, r in keyed])]
    groups = TABLE_GROUPS.entries() if groups is None else groups
    if groups and any(r.get(next(iter(groups))) for r in records):
        for field, values in groups.items():
            for name in values:
                chosen = [(pid, r["correct"]) for pid, r in keyed if _holds(r.get(field), name)]
                if chosen:
                    rows.append(_row(field, name, chosen))
    return rows


def _holds(value: Any, name: str) -> bool:
    """Whether a record field's ``value`` (one value or a list of them) holds ``name``."""
    return name in value if isinstance(value, (list, tuple)) else value == name


def _problems(n: int) -> str:
    return f"{n} problem{'s' * (n != 1)}"


def _cell(row: dict[str, Any]) -> str:
    return "–" if math.isnan(row["accuracy"]) else f"{row['accuracy']:.3f} ± {row['se']:.3f}"


def table_markdown(rows: list[dict[str, Any]], title: str, caption: str | None = None) -> str:
    """The paper's layout: one line of accuracies (Overall + the values of the first table group that have
    problems; PhyX: the domains) with their standard errors and a line of problem counts, then one table per other
    group (PhyX: the reasoning types); what the figures are is said under the title,
    then ``caption`` (how correctness was decided: :func:`protocol_caption`)."""
    overall = next(r for r in rows if r["group"] == "overall")
    groups = list(dict.fromkeys(r["group"] for r in rows if r["group"] != "overall"))  # in the table's order
    cells = [overall] + [r for r in rows if groups and r["group"] == groups[0]]
    per = sorted({r["completions"] // max(r["problems"], 1) for r in cells})
    each = f"{per[0]} completion{'s' * (per[0] != 1)} each" if len(per) == 1 else "completions per problem vary"
    out = [f"### {title}", "",
           f"Accuracy: mean ± standard error over problems of each problem's share of correct completions "
           f"({_problems(overall['problems'])}, {each})." + (f" {caption}" if caption else ""), "",
           "| " + " | ".join(["Overall"] + [r["name"] for r in cells[1:]]) + " |", "|" + "---|" * len(cells),
           "| " + " | ".join(_cell(c) for c in cells) + " |",
           "| " + " | ".join(_problems(c["problems"]) for c in cells) + " |"]
    for group in groups[1:]:
        out += ["", f"| {group.replace('_', ' ').capitalize()} | Accuracy | Problems |", "|---|---|---|"]
        out += [f"| {r['name']} | {_cell(r)} | {r['problems']} |" for r in rows if r["group"] == group]
    if overall["unscorable"]:
        lost = overall["problems"] - overall["scored_problems"]
        out += ["", f"{overall['unscorable']} of {overall['completions']} completions could not be scored (NaN)"
                + (f"; {lost} problem{'s' * (lost != 1)} had none that could." if lost else ".")]
    return "\n".join(out) + "\n"


def table_rows(rows: list[dict[str, Any]], mode: str) -> list[list[Any]]:
    """The rows as lists in :data:`CSV_COLUMNS` order (NaN accuracy and SE as ``None``)."""
    def number(x: float) -> float | None:
        return None if math.isnan(x) else x

    return [[mode, r["group"], r["name"], number(r["accuracy"]), number(r["se"]), r["problems"], r["completions"],
             r["correct"], r["unscorable"]] for r in rows]


def table_csv(rows: list[dict[str, Any]], mode: str) -> str:
    """Long-form CSV with :data:`CSV_COLUMNS`: accuracy and SE over problems (empty when NaN), problems,
    completions, correct completions, unscorable completions."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for row in table_rows(rows, mode):
        w.writerow(["" if v is None else f"{v:.6f}" if isinstance(v, float) and i in (3, 4) else
                    f"{v:g}" if isinstance(v, float) else v for i, v in enumerate(row)])
    return buf.getvalue()


def scalar_name(row: dict[str, Any]) -> str:
    """A TensorBoard-safe tag suffix: ``overall``, ``domain/Wave_Acoustics``, ``reasoning_type/Numerical_Reasoning``."""
    if row["group"] == "overall":
        return "overall"
    return f"{row['group']}/" + row["name"].replace("/", "_").replace(" ", "_").replace("&", "and")


class AccuracyTable(L.Callback):
    """At the end of ``test``: the paper's accuracy table, overall and per value of each field a task groups it by
    (PhyX: per domain and per reasoning type), each accuracy with its standard error over problems
    (:func:`accuracy_table`).

    Reads the ``id`` and ``correct`` fields of the records ``test_step`` returns (the module's
    ``evaluation.scorer``). For each evaluation mode (``greedy``, ``sampled``) it writes
    ``<run folder>/<prefix>_<mode>.md`` and ``.csv``, the scalars
    ``test/<mode>/accuracy/{overall,domain/<name>,reasoning_type/<name>}`` with their SE (TensorBoard: bands)
    and the table (TensorBoard: Markdown text; W&B: a table), and prints the table. Records of every rank are
    gathered; rank zero writes.
    """

    def __init__(self, prefix: str = "test_accuracy"):
        self.prefix = prefix
        self.records: list[dict[str, Any]] = []

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.records = []

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        if isinstance(outputs, list):
            keep = ("id", "mode", "correct", *TABLE_GROUPS.entries())  # the fields the table groups by
            self.records += [{k: r[k] for k in keep if k in r} for r in outputs]

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        records = D.gather_objects(self.records)
        if trainer.is_global_zero and records:
            self.write(trainer, records)

    def write(self, trainer: L.Trainer, records: list[dict[str, Any]]) -> list[Path]:
        """Write the table of each mode; returns the files written."""
        out, written = _run_dir(trainer), []
        out.mkdir(parents=True, exist_ok=True)
        caption = module_caption(trainer.lightning_module)  # how it was scored
        for mode in sorted({r["mode"] for r in records}):
            rows = accuracy_table([r for r in records if r["mode"] == mode])
            md = table_markdown(rows, f"test accuracy ({mode})", caption)
            for suffix, text in ((".md", md), (".csv", table_csv(rows, mode))):
                path = out / f"{self.prefix}_{mode}{suffix}"
                path.write_text(masked_text(text), encoding="utf-8")  # API keys masked as in every log
                written.append(path)
            scalars = {f"test/{mode}/accuracy/{scalar_name(r)}{suffix}": r[field] for r in rows
                       if not math.isnan(r["accuracy"]) for suffix, field in (("", "accuracy"), ("_se", "se"))}
            if trainer.logger is not None and scalars:
                trainer.logger.log_metrics(scalars, step=trainer.global_step)
            log_table(trainer, f"test/{mode}/accuracy_table", list(CSV_COLUMNS), table_rows(rows, mode),
                      trainer.global_step, markdown=md)
            rank_zero_info(f"\n{md}(written to {out / self.prefix}_{mode}.md and .csv)")
        return written
