"""Evaluation: records (pure functions; callbacks write them out), and the :class:`Evaluator` that a policy
module's validation / test / predict steps run.

A *record* is one completion of one evaluation prompt: ``id``, ``mode`` (``greedy`` | ``sampled``),
``prompt``, ``completion``, ``extracted`` (the answer the scorer reads), ``answer``, ``answer_format``,
the fields the accuracy table groups by (:func:`table_fields`; PhyX: ``domain``, ``reasoning_type``), ``rewards``
(each reward), ``total`` and ``correct`` (the scorer's 0/1,
NaN when it cannot score). The scorer is any registered reward (``accuracy`` for the paper's MCQ
protocol, ``open_accuracy`` with a pass threshold for its open-ended protocol, ``phyx_official`` for
PhyX's rule-mode scorer, ``binary`` for VisualSphinx); :func:`correctness` turns its values into 0/1.

A task registers the fields its records are grouped by (:data:`TABLE_GROUPS`: PhyX's domain and reasoning type);
the accuracy table over them and its caption are task-side (:mod:`lit_grpo.tasks.table`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable

import torch

from lit_grpo.data.sample import Sample
from lit_grpo.rewards.parsing import extract_answer, extract_option_letter
from lit_grpo.registry import Registry, built_group
from lit_grpo.rewards.registry import REWARDS, RewardFn, RewardSpec, build_reward, build_rewards, reward_info

if TYPE_CHECKING:
    from lit_grpo.data.datamodule import PromptBatch


def extracted_answer(scorer: str | None, text: str, answer_format: str) -> str | None:
    """The answer ``scorer`` reads from ``text`` (the extractor its registration names); other scorers: the final
    answer (``<answer>``, else the last box), as an option letter for MCQ."""
    # the scorer's own extractor, so the record shows the answer that was actually scored
    extractor = reward_info(scorer).extractor if scorer in REWARDS else None
    if extractor is not None:
        return extractor(text, answer_format)
    found = extract_answer(text)
    return extract_option_letter(found) if answer_format == "mcq" else found


def build_scorer(scorer: str | None, kwargs: dict[str, Any], configured: list[RewardSpec],
                 judge: Any = None) -> RewardFn | None:
    """The evaluation scorer ``scorer`` built with ``kwargs`` (and ``judge`` as its ``judge`` kwarg), or ``None``
    when there is no scorer or when a ``configured`` reward (or metric) with that label and the same kwargs (or
    none given) already computes it: its values are then reused, so a judge is not asked twice. Judge settings
    compare as the ``judge`` option group (a dict of the reward equals the typed judge holding the same values).

    Raises:
        ValueError: a judge given both in ``kwargs`` and as ``judge``.
    """
    if scorer is None:
        return None
    # the top-level judge option joins the kwargs only here: given in both places it would be ambiguous which applies
    if judge is not None:
        if "judge" in kwargs:
            raise ValueError("the scorer's judge is given twice: in evaluation.scorer_kwargs and evaluation.judge")
        kwargs = {**kwargs, "judge": judge}
    same = [s for s in configured if s.label == scorer]
    # reused only with equal settings: another judge or option would make the accuracy a different measurement
    if same and (kwargs == {} or _comparable(kwargs) == _comparable(same[0].kwargs)):
        return None
    return build_reward(RewardSpec(scorer, kwargs=kwargs))


def _comparable(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with a ``judge`` dict as the judge's option group (defaults filled in)."""
    # a judge given as a mapping and one as the typed group compare equal once both have their defaults
    return {**kwargs, "judge": built_group("judge", kwargs["judge"])} if "judge" in kwargs else dict(kwargs)


def correctness(scores: list[float | None], pass_threshold: float | None = None) -> list[float]:
    """A scorer's values as the correctness of each completion: ``None``, NaN and +-inf become NaN ("cannot
    score", never wrong); with ``pass_threshold`` a score counts as correct (1.0) when it is at least the threshold,
    else 0.0 (a graded scorer such as the jury's ``open_accuracy`` made 0/1); without, the score as is.

    >>> correctness([1.0, 5 / 6, 0.5, None], pass_threshold=1.0)
    [1.0, 0.0, 0.0, nan]
    """
    out = []
    for v in scores:
        # a judge that failed (None, NaN, inf) cannot score: never counted as wrong, which would bias accuracy down
        v = math.nan if v is None or not math.isfinite(float(v)) else float(v)
        # NaN stays NaN: no threshold turns "cannot score" into 0
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
        # lists copied: the record is JSON, never the sample's own object
        out[field] = list(value) if isinstance(value, (list, tuple)) else value
    return out


def build_records(samples: list[Sample], messages: list[list[dict]], completions: list[str],
                  rewards: dict[str, list[float]], total: list[float], correct: list[float] | None,
                  group_size: int, mode: str, scorer: str | None) -> list[dict[str, Any]]:
    """One record per completion; completion ``i`` belongs to sample ``i // group_size``."""
    records, groups = [], list(TABLE_GROUPS.entries())
    for i, text in enumerate(completions):
        s = samples[i // group_size]  # a sample's G completions are contiguous rows
        records.append({
            "id": s.id, "mode": mode, "prompt": prompt_text(messages[i // group_size]), "completion": text,
            "extracted": extracted_answer(scorer, text, s.answer_format), "answer": s.answer,
            "answer_format": s.answer_format, **table_fields(s, groups),
            "rewards": {k: float(v[i]) for k, v in rewards.items()}, "total": float(total[i]),
            "correct": float(correct[i]) if correct is not None else math.nan,
        })
    return records


TABLE_GROUPS: Registry[tuple[str, ...]] = Registry("accuracy-table field", tasks=True)
"""Record field -> its values in the order the accuracy table lists them; a task registers the fields its table
groups by (PhyX: ``domain``, ``reasoning_type``). A record's field holds one value or a list of them."""


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
        # the training rewards are reported in evaluation too, so train/ and val/ curves of a reward compare
        self.fns = {**fns, **build_rewards(list(cfg.metrics))}
        self.scorer_fn = build_scorer(cfg.scorer, cfg.scorer_kwargs, [*specs, *cfg.metrics], cfg.judge)

    def modes(self) -> list[tuple[str, int, bool, float | None]]:
        """``(prefix, completions per prompt, greedy, temperature)`` of each configured evaluation mode."""
        # greedy is deterministic: one completion per prompt says all it can
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
            # forked RNG: evaluation's reseeding must not move the training sampler's stream, or a run with validation
            # would sample other training completions than one without
            with torch.random.fork_rng(devices=[module.device] if module.device.type == "cuda" else []):
                if self.cfg.seed is not None:
                    # the same seed per batch at every validation: curves compare like with like
                    torch.manual_seed(self.cfg.seed + batch_idx)
                rollout = module.rollout(batch, n, greedy=greedy, temperature=temp)
            extra = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples],
                                               # the log-prob pass only when a reward or metric reads
                                               # its column (ASM): otherwise no forward is spent
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
            # call statistics are one value per batch, not per prompt
            self.stats.update(f"{prefix}/{key}", torch.tensor([float(value)]), 1)
        self.stats.update(f"{prefix}/reward", total, n)
        self.stats.update(f"{prefix}/completion_length", rollout.completion_mask.sum(1).float(), n)
        if correct is not None:
            # correctness is averaged per prompt first, so a prompt's
            # sampled completions weigh as one prompt (SE over prompts)
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
