"""A sweep axis of the physics experiment: one condition trained at several settings of one reward term.

A setting is how the reward terms become advantages (``grpo.multi_objective_aggregation``: the weighted sum
normalised in its group, ``sum_then_normalize``, or each term normalised in its group before the weighted sum,
GDPO's ``normalize_then_sum``) and the swept term's weight. Each setting is compared, on the same held-out
problems, with the SFT warm start and with a reference condition (GRPO (Fmt + Acc)) trained with the *same*
aggregation, so the table isolates the swept term. The setting with the condition's own aggregation and weight
(``weight: null``) is the condition itself (the same run as the paper table's row): the baseline row.

:func:`sweep_runs` expands a sweep into runs (training arguments only: the condition's config files are
unchanged); :func:`sweep_sections` writes its tables from the evaluations' per-problem figures.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Callable

import yaml

from lit_grpo.settings.args import config_with_bases
from lit_grpo.tasks.phyx.experiments.report import (Cell, cell, fmt_cell, fmt_change, fmt_with_seeds, paired_change,
                                                    pooled, seed_cell)

# The runner's Format, Condition, Run and PhyxExperiment (lit_grpo.tasks.phyx.experiments.phyx, which imports this module)
# appear below as ``Any``.

AGGREGATIONS = {"sum_then_normalize": "sum", "normalize_then_sum": "norm"}
"""The aggregations a setting can name, and their short form in run names."""
Z = 2.0
"""A change counts as a rise (or a loss) when it is more than ``Z`` standard errors from 0."""


@dataclasses.dataclass
class Setting:
    """One point of a sweep."""

    aggregation: str = "sum_then_normalize"
    """``grpo.multi_objective_aggregation`` of the run: ``sum_then_normalize`` or ``normalize_then_sum`` (GDPO)."""
    weight: float | None = None
    """Weight of the swept reward; ``null`` = the condition's own weight (its config)."""


@dataclasses.dataclass
class Sweep:
    """A condition trained at several settings of one reward term, each against SFT and the reference condition."""

    condition: str
    """Key of the condition swept (e.g. ``asm``): its configs, with the reward's weight and the aggregation set per
    setting."""
    settings: list[Setting]
    """The points of the sweep, in table order."""
    reward: str = "attention"
    """Name (or alias) of the reward term whose weight is swept."""
    reference: str = "fmt_acc"
    """Key of the condition each setting is compared with, trained once per aggregation the settings use."""
    title: str = "Attention reward sweep"
    """Title of the sweep's tables."""

    def __post_init__(self):
        if self.reference == self.condition:
            raise ValueError(f"sweep {self.condition}: the reference must be another condition than the one swept "
                             f"(e.g. reference: fmt_acc), got {self.reference!r}")
        if not self.settings:
            raise ValueError(f"sweep {self.condition}: settings is empty; give at least one, e.g. "
                             f"[{{aggregation: normalize_then_sum, weight: 1.0}}]")
        for s in self.settings:
            if s.aggregation not in AGGREGATIONS:
                raise ValueError(f"sweep {self.condition}: aggregation must be one of {list(AGGREGATIONS)}, "
                                 f"got {s.aggregation!r}")
            if s.weight is not None and not (math.isfinite(s.weight) and s.weight >= 0):
                raise ValueError(f"sweep {self.condition}: a weight must be finite and >= 0, got {s.weight}")


def config_value(files: list[str], keys: tuple[str, ...], args: list[str] = (), default: Any = None) -> Any:
    """The value the last of ``files`` (YAML, given in this order, each after the files it extends: ``_base_``) or of
    ``args`` (``--a.b=value``) sets at ``keys``.

    >>> config_value([], ("trainer", "max_steps"), ["--trainer.max_steps=30"])
    30
    """
    value = default
    for f in [f for path in files for f in config_with_bases(path)]:
        node = yaml.safe_load(Path(f).read_text()) if Path(f).is_file() else None
        for k in keys:
            node = node.get(k) if isinstance(node, dict) else None
        if node is not None:
            value = node
    flag = "--" + ".".join(keys) + "="
    for a in args:
        if a.startswith(flag):
            value = yaml.safe_load(a[len(flag):])
    return value


def reward_list(files: list[str], reward: str, weight: float) -> list[dict[str, Any]]:
    """The reward list the config files end with, the term named ``reward`` (name or alias) at ``weight``.

    Raises:
        ValueError: no such term in the list.
    """
    rewards = [dict(r) for r in config_value(files, ("model", "init_args", "rewards"), default=[])]
    hits = [r for r in rewards if (r.get("alias") or r.get("name")) == reward]
    if not hits:
        raise ValueError(f"sweep: no reward {reward!r} in the rewards of {files} "
                         f"(they hold {[r.get('alias') or r.get('name') for r in rewards]})")
    for r in hits:
        r["weight"] = float(weight)
    return rewards


def _aggregation_of(files: list[str]) -> str:
    return config_value(files, ("model", "init_args", "grpo", "multi_objective_aggregation"),
                        default="sum_then_normalize")


def sweep_runs(sweep: Sweep, fmt: Any, conditions: dict[str, Any], seed: int, fit_args: list[str],
               make: Callable[..., Any]) -> list[Any]:
    """The runs of one sweep for one format and seed: the reference condition once per aggregation the settings
    use, then each setting. A setting equal to the condition as configured is named as the condition's own run (so
    the two are one run); the others are ``<format>_<condition>_<sum|norm>_w<weight>_s<seed>``.

    Raises:
        ValueError: an unknown condition or reference, or a swept reward the condition does not have.
    """
    for key in (sweep.condition, sweep.reference):
        if key not in conditions:
            raise ValueError(f"sweep: unknown condition {key!r} (conditions {sorted(conditions)})")
    out = []
    for agg in dict.fromkeys(s.aggregation for s in sweep.settings):
        out.append(_run(sweep, fmt, conditions[sweep.reference], Setting(agg), seed, fit_args, make, "reference"))
    for s in sweep.settings:
        out.append(_run(sweep, fmt, conditions[sweep.condition], s, seed, fit_args, make, "setting"))
    return out


def _run(sweep: Sweep, fmt: Any, cond: Any, setting: Setting, seed: int, fit_args: list[str],
         make: Callable[..., Any], role: str) -> Any:
    configs = [fmt.config, *cond.overlays.get(fmt.key, []), *fmt.overlays]
    own_agg = _aggregation_of(configs)
    args, parts = [], []
    if setting.aggregation != own_agg:
        args.append(f"--model.init_args.grpo.multi_objective_aggregation={setting.aggregation}")
        parts.append(AGGREGATIONS[setting.aggregation])
    weight = setting.weight
    if role == "setting":
        own = [r["weight"] for r in config_value(configs, ("model", "init_args", "rewards"), default=[])
               if (r.get("alias") or r.get("name")) == sweep.reward]
        if weight is not None and [float(weight)] != [float(w) for w in own]:
            args.append("--model.init_args.rewards=" + json.dumps(reward_list(configs, sweep.reward, weight)))
            parts += [] if parts else [AGGREGATIONS[setting.aggregation]]
            parts.append(f"w{weight:g}")
        weight = float(own[0]) if weight is None and own else weight
        if not own:
            reward_list(configs, sweep.reward, 0.0)  # raises naming the rewards the condition has
    name = "_".join([fmt.key, cond.key, *parts, f"s{seed}"])
    label = cond.name if not parts else f"{cond.name}, {setting.aggregation}" + (
        f", {sweep.reward} × {weight:g}" if role == "setting" else "")
    tags = {"sweep": sweep.title, "role": role, "aggregation": setting.aggregation,
            "weight": weight if role == "setting" else None}
    return make(name, fmt.key, label, seed, configs, [*fit_args, *args], tags)


# ----------------------------------------------------------------------------------------------------- report
def _pooled_change(after: list[dict], before: list[dict]) -> Cell:
    """Paired change of the per-problem means over seeds (``after`` and ``before`` pooled separately)."""
    if not after or not before:
        return math.nan, math.nan, 0
    return paired_change(pooled(after), pooled(before))


def _overall(problems: dict) -> Cell:
    return cell([v for _, v in problems.values()])


def _verdict(asm: Cell, vs_sft: Cell, vs_ref: Cell) -> str:
    """``ASM up / accuracy kept vs SFT / vs reference``, each yes or no at :data:`Z` standard errors.

    The cells are seed-level (:func:`~lit_grpo.tasks.phyx.experiments.report.seed_cell`: one change per training
    seed, SE over seeds), so a verdict says what another training seed would likely repeat; with fewer than two
    seeds there is no such SE and no verdict."""
    if asm[2] < 2:
        return f"– ({asm[2]} seed)"
    def up(c: Cell) -> bool:
        return c[2] > 0 and c[0] > Z * c[1]

    def kept(c: Cell) -> bool:
        return c[2] > 0 and c[0] >= -Z * c[1]

    return " / ".join("yes" if ok else "no" for ok in (up(asm), kept(vs_sft), kept(vs_ref)))


def sweep_sections(exp: Any, runs: list[Any], data: dict[str, dict[str, Any]],
                   steps: Callable[[Any], str], caption: Callable[[Any], str]) -> list[str]:
    """Each sweep's tables, per format: the settings pooled over the seeds (accuracy and held-out ASM, their paired
    changes against SFT and against the reference trained with the same aggregation, the seeds' spread, whether the
    ASM rises and accuracy holds), then every run per seed (with the steps it trained), then the controls.
    ``steps(run)``: the steps a fit trained; ``caption(run)``: how its evaluation decided correctness."""
    out = []
    for sw in exp.sweeps:
        out += [f"## {sw.title}", "",
                f"{_name(exp, sw.condition)} at each setting of `{sw.reward}` against SFT and against "
                f"{_name(exp, sw.reference)} trained "
                f"with the same aggregation. Cells: mean ± standard error over problems (per problem: the mean over "
                f"its sampled completions, then over the seeds; how precisely these policies were evaluated); Δ: "
                f"paired change on the same problems; then `seeds ±`: the standard error over training seeds (each "
                f"seed's own figure or change, the seed as the unit; how far another seed could move it) and the "
                f"seed count. Last column, from the seed-level SE: held-out ASM up (> +{Z:g} SE vs SFT) / accuracy "
                f"kept vs SFT / vs the reference (> −{Z:g} SE).", ""]
        for f in exp.formats:
            out += _format_tables(exp, sw, f, runs, data, steps, caption)
    return out


def _name(exp: Any, key: str) -> str:
    """A condition's name as the tables print it (its key when no condition has it)."""
    return next((c.name for c in exp.conditions if c.key == key), key)


def _format_tables(exp, sw: Sweep, f, runs, data, steps, caption) -> list[str]:
    ref_name = _name(exp, sw.reference)
    mine = [r for r in runs if r.format == f.key and r.tags.get("sweep") == sw.title]
    sft = next(r for r in runs if r.format == f.key and r.fit_args is None)
    if not mine or sft.name not in data:
        return []
    base = data[sft.name]
    by_seed_ref = {(r.tags["aggregation"], r.seed): r for r in mine if r.tags["role"] == "reference" and r.name in data}
    rows = list(dict.fromkeys((r.label, r.tags["role"], r.tags["aggregation"], r.tags["weight"]) for r in mine))
    head = ["Run", "aggregation", f"{sw.reward} weight", "seeds", "accuracy", "Δ vs SFT", f"Δ vs {ref_name}",
            "ASM", "ASM Δ vs SFT", f"ASM Δ vs {ref_name}", "accuracy per seed (spread)", "ASM up / kept / kept"]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
             f"| SFT | | | | {fmt_cell(_overall(base['correct']))} | | | {fmt_cell(_overall(base['asm']), 4)} | | | | |"]
    for label, role, agg, weight in rows:
        done = [r for r in mine if r.label == label and r.name in data]
        if not done:
            table.append(f"| {label} | {agg} | {'' if weight is None else f'{weight:g}'} | 0 | not run yet |"
                         + " |" * (len(head) - 5))
            continue
        cells = _pooled_row(data, base, done, by_seed_ref, label, role, agg, weight)
        table.append("| " + " | ".join(cells) + " |")
    out = [f"### {sw.title}: {f.title}", "", caption(sft), "", *table, "", f"**Per seed** ({f.title})", ""]
    head = ["Run", "seed", "steps", "accuracy", "Δ vs SFT", f"Δ vs {ref_name}", "ASM", "ASM Δ vs SFT",
            f"ASM Δ vs {ref_name}", "format reward"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    controls = [r for r in runs if r.format == f.key and r.fit_args is not None and not r.tags
                and r.label not in {c.name for c in exp.conditions}]
    for r in sorted(mine, key=lambda r: (rows.index((r.label, r.tags["role"], r.tags["aggregation"],
                                                      r.tags["weight"])), r.seed)) + controls:
        if r.name not in data:
            out.append(f"| `{r.name}` | {r.seed} | | not run yet |" + " |" * (len(head) - 4))
            continue
        ref = by_seed_ref.get((r.tags.get("aggregation"), r.seed))
        d = data[r.name]
        against = ref is not None and ref is not r and r.tags.get("role") == "setting"
        out.append("| " + " | ".join([
            f"`{r.name}`", str(r.seed), steps(r), fmt_cell(_overall(d["correct"])),
            fmt_change(paired_change(d["correct"], base["correct"])),
            fmt_change(paired_change(d["correct"], data[ref.name]["correct"])) if against else "",
            fmt_cell(_overall(d["asm"]), 4), fmt_change(paired_change(d["asm"], base["asm"]), 4),
            fmt_change(paired_change(d["asm"], data[ref.name]["asm"]), 4) if against else "",
            fmt_cell(_overall(d["format"]))]) + " |")
    return out + [""]


def _pooled_row(data: dict, base: dict, done: list, by_seed_ref: dict, label: str, role: str, agg: str,
                weight: float | None) -> list[str]:
    """One setting's cells in the pooled table: figures and changes at the evaluation level, each with its
    seed-level SE, the accuracy per seed and the seed-level verdict."""
    ref = [by_seed_ref[(agg, r.seed)] for r in done if (agg, r.seed) in by_seed_ref]
    acc = pooled([data[r.name]["correct"] for r in done])
    asm = pooled([data[r.name]["asm"] for r in done])
    vs_sft, asm_sft = paired_change(acc, base["correct"]), paired_change(asm, base["asm"])
    same = role == "reference" or len(ref) != len(done)
    vs_ref = (math.nan, math.nan, 0) if same else _pooled_change([data[r.name]["correct"] for r in done],
                                                                 [data[r.name]["correct"] for r in ref])
    asm_ref = (math.nan, math.nan, 0) if same else _pooled_change([data[r.name]["asm"] for r in done],
                                                                  [data[r.name]["asm"] for r in ref])
    per_seed = [_overall(data[r.name]["correct"])[0] for r in done]
    spread = f" ({max(per_seed) - min(per_seed):.3f})" if len(per_seed) > 1 else ""
    # The seed-level cells: one figure per trained policy (its own change against SFT, or against the reference
    # of its own seed), then mean and SE over those; the mean equals the pooled one, the SE is over seeds.
    s_acc = seed_cell(per_seed)
    s_asm = seed_cell([_overall(data[r.name]["asm"])[0] for r in done])
    s_sft = seed_cell([paired_change(data[r.name]["correct"], base["correct"])[0] for r in done])
    s_asm_sft = seed_cell([paired_change(data[r.name]["asm"], base["asm"])[0] for r in done])
    pairs = [(r, by_seed_ref[(agg, r.seed)]) for r in done if (agg, r.seed) in by_seed_ref]
    s_ref = seed_cell([paired_change(data[r.name]["correct"], data[q.name]["correct"])[0] for r, q in pairs])
    s_asm_ref = seed_cell([paired_change(data[r.name]["asm"], data[q.name]["asm"])[0] for r, q in pairs])
    cells = [label, agg, "" if weight is None else f"{weight:g}", str(len(done)),
             fmt_with_seeds(_overall(acc), s_acc, change=False), fmt_with_seeds(vs_sft, s_sft),
             "" if same else fmt_with_seeds(vs_ref, s_ref),
             fmt_with_seeds(_overall(asm), s_asm, 4, change=False), fmt_with_seeds(asm_sft, s_asm_sft, 4),
             "" if same else fmt_with_seeds(asm_ref, s_asm_ref, 4),
             ", ".join(f"{v:.3f}" for v in per_seed) + spread,
             "" if role == "reference" else _verdict(s_asm_sft, s_sft, s_ref)]
    return cells
