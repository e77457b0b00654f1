"""Evaluation: records and the paper's accuracy table (pure functions; callbacks write them out), and the
:class:`Evaluator` that a policy module's validation / test / predict steps run.

A *record* is one completion of one evaluation prompt: ``id``, ``mode`` (``greedy`` | ``sampled``),
``prompt``, ``completion``, ``extracted`` (the answer the scorer reads), ``answer``, ``answer_format``,
the fields the accuracy table groups by (:func:`table_fields`; PhyX: ``domain``, ``reasoning_type``), ``rewards``
(each reward), ``total`` and ``correct`` (the scorer's 0/1,
NaN when it cannot score). The scorer is any registered reward (``accuracy`` for the paper's MCQ
protocol, ``open_accuracy`` with a pass threshold for its open-ended protocol, ``phyx_official`` for
PhyX's rule-mode scorer, ``binary`` for VisualSphinx); :func:`correctness` turns its values into 0/1.

:func:`accuracy_table` gives accuracy overall and per value of each field a task groups its table by
(:data:`TABLE_GROUPS`: PhyX's domain and reasoning type, as in the reward-design paper's tables); :func:`table_markdown` and :func:`table_csv` render it.
"""

from __future__ import annotations

import csv
import io
import math
from typing import TYPE_CHECKING, Any, Iterable

import torch

from lit_grpo.data.sample import Sample
from lit_grpo.judge_config import JudgeConfig
from lit_grpo.rewards.parsing import extract_answer, extract_option_letter
from lit_grpo.registry import Registry
from lit_grpo.rewards.registry import (REWARDS, RewardFn, RewardSpec, build_reward, build_rewards, option_default,
                                       reward_info, reward_options)

if TYPE_CHECKING:
    from lit_grpo.data.datamodule import PromptBatch


def extracted_answer(scorer: str | None, text: str, answer_format: str) -> str | None:
    """The answer ``scorer`` reads from ``text`` (the extractor its registration names); other scorers: the final
    answer (``<answer>``, else the last box), as an option letter for MCQ."""
    extractor = reward_info(scorer).extractor if scorer in REWARDS else None
    if extractor is not None:
        return extractor(text, answer_format)
    found = extract_answer(text)
    return extract_option_letter(found) if answer_format == "mcq" else found


def build_scorer(scorer: str | None, kwargs: dict[str, Any], configured: list[RewardSpec],
                 judge: JudgeConfig | None = None) -> RewardFn | None:
    """The evaluation scorer ``scorer`` built with ``kwargs`` (and ``judge`` as its ``judge`` kwarg), or ``None``
    when there is no scorer or when a ``configured`` reward (or metric) with that label and the same kwargs (or
    none given) already computes it: its values are then reused, so a judge is not asked twice. Judge settings
    compare as :class:`JudgeConfig` (a dict of the reward equals the typed judge holding the same values).

    Raises:
        ValueError: a judge given both in ``kwargs`` and as ``judge``.
    """
    if scorer is None:
        return None
    if judge is not None:
        if "judge" in kwargs:
            raise ValueError("the scorer's judge is given twice: in evaluation.scorer_kwargs and evaluation.judge")
        kwargs = {**kwargs, "judge": judge}
    same = [s for s in configured if s.label == scorer]
    if same and (kwargs == {} or _comparable(kwargs) == _comparable(same[0].kwargs)):
        return None
    return build_reward(RewardSpec(scorer, kwargs=kwargs))


def _comparable(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with a ``judge`` dict as a :class:`JudgeConfig` (defaults filled in)."""
    judge = kwargs.get("judge")
    return {**kwargs, "judge": JudgeConfig.from_dict(judge)} if isinstance(judge, dict) else dict(kwargs)


def protocol_caption(scorer: str | None, pass_threshold: float | None = None, judge: JudgeConfig | dict | None = None,
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
        cfg = chosen if isinstance(chosen, JudgeConfig) else JudgeConfig.from_dict(chosen) \
            if isinstance(chosen, dict) or chosen is None else None
        if cfg is not None:
            who = f"{cfg.model} (served)" if cfg.base_url else "the offline rule-based judge"
            calls = cfg.num_judges
            if "num_judges" in reward_options(scorer):  # a scorer that sets its own number of calls
                own = (scorer_kwargs or {}).get("num_judges", option_default(scorer, "num_judges"))
                calls = calls if own is None else own
            text += f"; judge: {who}, {calls} call{'s' * (calls != 1)} per completion"
    if pass_threshold is not None:
        text += f"; correct = a score of at least {pass_threshold:g}"
    return text + "."


def correctness(scores: list[float | None], pass_threshold: float | None = None) -> list[float]:
    """A scorer's values as the correctness of each completion: ``None``, NaN and +-inf become NaN ("cannot
    score", never wrong); with ``pass_threshold`` a score counts as correct (1.0) when it is at least the threshold,
    else 0.0 (a graded scorer such as the jury's ``open_accuracy`` made 0/1); without, the score as is.

    >>> correctness([1.0, 5 / 6, 0.5, None], pass_threshold=1.0)
    [1.0, 0.0, 0.0, nan]
    """
    out = []
    for v in scores:
        v = math.nan if v is None or not math.isfinite(float(v)) else float(v)
        out.append(v if math.isnan(v) or pass_threshold is None else float(v >= pass_threshold))
    return out


def prompt_text(messages: list[dict]) -> str:
    """Chat messages as plain text: ``[role] text`` per turn, images as ``<image>``."""
    parts = []
    for m in messages:
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        body = " ".join("<image>" if c["type"] == "image" else c.get("text", "") for c in content)
        parts.append(f"[{m['role']}] {body}")
    return "\n".join(parts)


def table_fields(sample: Sample, fields: Iterable[str] | None = None) -> dict[str, Any]:
    """The sample's value of each field the accuracy table groups by (``fields``, default :data:`TABLE_GROUPS`; PhyX:
    ``domain``, one value, and ``reasoning_type``, a list), read from its task fields, then its metadata; None when
    it has none."""
    out = {}
    for field in TABLE_GROUPS.entries() if fields is None else fields:
        value = sample.fields.get(field, sample.meta.get(field))
        out[field] = list(value) if isinstance(value, (list, tuple)) else value
    return out


def build_records(samples: list[Sample], messages: list[list[dict]], completions: list[str],
                  rewards: dict[str, list[float]], total: list[float], correct: list[float] | None,
                  group_size: int, mode: str, scorer: str | None) -> list[dict[str, Any]]:
    """One record per completion; completion ``i`` belongs to sample ``i // group_size``."""
    records, groups = [], list(TABLE_GROUPS.entries())
    for i, text in enumerate(completions):
        s = samples[i // group_size]
        records.append({
            "id": s.id, "mode": mode, "prompt": prompt_text(messages[i // group_size]), "completion": text,
            "extracted": extracted_answer(scorer, text, s.answer_format), "answer": s.answer,
            "answer_format": s.answer_format, **table_fields(s, groups),
            "rewards": {k: float(v[i]) for k, v in rewards.items()}, "total": float(total[i]),
            "correct": float(correct[i]) if correct is not None else math.nan,
        })
    return records


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


TABLE_GROUPS: Registry[tuple[str, ...]] = Registry("accuracy-table field", tasks=True)
"""Record field -> its values in the order the accuracy table lists them; a task registers the fields its table
groups by (PhyX: ``domain``, ``reasoning_type``). A record's field holds one value or a list of them."""


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


class Evaluator:
    """Evaluation of a policy module (validation, test, predict): per configured mode, complete every prompt,
    compute rewards, metrics and the scorer's correctness, accumulate per-prompt values (mean +- SE over
    prompts in ``stats``) and return one record per completion.

    ``cfg``: the :class:`lit_grpo.config.EvalConfig`; ``specs``/``fns``: the training rewards (their values are
    reported too; evaluation-only ``cfg.metrics`` weigh 0); ``stats``: a :class:`lit_grpo.metrics.PromptStats`
    registered on the module (so it follows the module's device).
    """

    def __init__(self, cfg, specs: list[RewardSpec], fns: dict[str, RewardFn], stats):
        self.cfg, self.stats = cfg, stats
        self.fns = {**fns, **build_rewards(list(cfg.metrics))}
        self.scorer_fn = build_scorer(cfg.scorer, cfg.scorer_kwargs, [*specs, *cfg.metrics], cfg.judge)
        self.caption = protocol_caption(cfg.scorer, cfg.pass_threshold, cfg.judge, cfg.scorer_kwargs,
                                        [(s.label, s.kwargs) for s in [*specs, *cfg.metrics]])
        """How correctness is decided, in one sentence (:func:`protocol_caption`): the tables' caption."""

    def modes(self) -> list[tuple[str, int, bool, float | None]]:
        """``(prefix, completions per prompt, greedy, temperature)`` of each configured evaluation mode."""
        modes = [("greedy", 1, True, None)] if self.cfg.greedy else []
        if self.cfg.num_samples > 0:
            modes.append(("sampled", self.cfg.num_samples, False, self.cfg.temperature))
        return modes

    def correctness(self, completions: list[str], columns: dict[str, list], per_reward: dict[str, Any],
                    metrics: dict[str, float]):
        """The scorer's correctness per completion ``[N]`` (0/1 with ``pass_threshold``; NaN: cannot score), or
        None without a scorer. ``per_reward`` holds this rollout's reward values (reused when they include the
        scorer); a scorer of its own puts its call statistics (judge latency, failures) into ``metrics``."""
        if self.cfg.scorer is None:
            return None
        if self.scorer_fn is None:
            values = per_reward[self.cfg.scorer].tolist()
        else:
            values = self.scorer_fn(completions, **columns)
            metrics.update({f"accuracy/{k}": float(v) for k, v in getattr(values, "metrics", {}).items()})
        return torch.tensor(correctness(values, self.cfg.pass_threshold), dtype=torch.float32)

    def step(self, module, batch, stage: str, batch_idx: int = 0) -> list[dict[str, Any]]:
        """Complete every prompt of ``batch`` in each mode through ``module`` (its ``rollout``, its passes'
        ``logprob_pass`` and ``rewards``; a fixed sampling seed per batch), accumulate the statistics, return the records."""
        records = []
        for mode, n, greedy, temp in self.modes():
            with torch.random.fork_rng(devices=[module.device] if module.device.type == "cuda" else []):
                if self.cfg.seed is not None:
                    torch.manual_seed(self.cfg.seed + batch_idx)
                rollout = module.rollout(batch, n, greedy=greedy, temperature=temp)
            extra = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples],
                                               train=False).columns() if module.pass_columns else {}
            reward_metrics, call_metrics = {}, {}
            per_reward, total = module.rewards(batch, rollout, n, self.fns, metrics=reward_metrics, extra=extra)
            correct = self.correctness(rollout.completions, module.columns(batch, rollout, n, extra), per_reward,
                                       call_metrics)
            call_metrics.update({f"reward/{k}": v for k, v in reward_metrics.items()})
            self.accumulate(f"{stage}/{mode}", n, per_reward, total, call_metrics, rollout, correct)
            records += build_records(batch.samples, batch.messages, rollout.completions,
                                     {k: v.tolist() for k, v in per_reward.items()}, total.tolist(),
                                     None if correct is None else correct.tolist(), n, mode, self.cfg.scorer)
        return records

    def accumulate(self, prefix: str, n: int, per_reward: dict, total, call_metrics: dict[str, float], rollout,
                   correct) -> None:
        """Per-prompt values of one mode's rollout under ``prefix`` (``val/greedy``...)."""
        for label, values in per_reward.items():
            self.stats.update(f"{prefix}/reward/{label}", values, n)
        for key, value in call_metrics.items():
            self.stats.update(f"{prefix}/{key}", torch.tensor([float(value)]), 1)
        self.stats.update(f"{prefix}/reward", total, n)
        self.stats.update(f"{prefix}/completion_length", rollout.completion_mask.sum(1).float(), n)
        if correct is not None:
            self.stats.update(f"{prefix}/accuracy", correct, n)


class EvaluationHooks:
    """The LightningModule's evaluation hooks (validation / test / predict), mixed into
    :class:`lit_grpo.module.PolicyModule`: each step goes to its :class:`Evaluator` (``self.evaluator``), each epoch
    end logs ``self.eval_stats``' per-prompt means and standard errors."""

    def _log_eval(self, stage: str) -> None:
        """Log each key's mean over prompts and its standard error over prompts (``<key>_se``)."""
        for key, (mean, se, _) in self.eval_stats.compute(f"{stage}/").items():
            self.log(key, mean)
            self.log(f"{key}_se", se)
        if stage == "val":  # plotted at the step it evaluates (Lightning's default: the one before)
            self.log("step", float(self.trainer.global_step))

    def _eval_step(self, batch: PromptBatch, stage: str, batch_idx: int = 0) -> list[dict[str, Any]]:
        return self.evaluator.step(self, batch, stage, batch_idx)

    def validation_step(self, batch: PromptBatch, batch_idx: int) -> None:
        self._eval_step(batch, "val", batch_idx)

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")

    def test_step(self, batch: PromptBatch, batch_idx: int) -> list[dict[str, Any]]:
        return self._eval_step(batch, "test", batch_idx)

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")

    def predict_step(self, batch: PromptBatch, batch_idx: int) -> list[dict[str, Any]]:
        return self._eval_step(batch, "predict", batch_idx)
