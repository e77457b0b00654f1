"""The LightningModules: :class:`PolicyModule` (what GRPO and SFT share: the policy, the rollout engine, rewards,
evaluation, checkpoints; the policy side of a GRPO step, the log-prob and update passes, is
:class:`lit_grpo.passes.PolicyPasses`) and :class:`GRPOModule`: one training step = rollout -> log-probs -> rewards ->
advantages -> policy update -> log.

The no-grad log-prob pass is one forward per micro-batch over prompt + completion; when a reward reads a column
that only the policy's forward can give (the attention reward's ``asm``), it runs even with ``num_iterations == 1``
and ``beta == 0``, under that column's registered provider (:mod:`lit_grpo.columns`), whose hooks turn the same
forward into the column (no second forward).

Manual optimisation: every training step samples G completions for each of its B prompts and then makes
``num_iterations * steps_per_generation`` optimizer updates on them (``num_iterations`` passes, like PPO epochs, each
over the rollout's ``steps_per_generation`` (near) equal parts in order, one update per part). One counter, the training
step = one rollout, drives everything: ``trainer.global_step``, ``max_steps``, the TensorBoard x-axis,
``log_every_n_steps``, ``val_check_interval``, ``ModelCheckpoint(every_n_train_steps)``, checkpoint names
and the lr scheduler (stepped once per rollout). Lightning counts every ``LightningOptimizer.step()``, so
only a step's last update goes through it; the inner ones go through ``trainer.strategy.optimizer_step``
on the raw optimizer (same precision plugin and hooks, no count). Every figure of step s is logged at
x = s (``train/lr``: the lr its updates used), validation after step s at s, before training at 0. Rollout
data lives in local variables of the step; callbacks see a small summary through the step's return value.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.core.optimizer import LightningOptimizer, do_nothing_closure
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from lit_grpo import distributed as D
from lit_grpo.columns import build_providers
from lit_grpo.config import EvalConfig, GRPOConfig, PerfConfig, check_settings
from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.data.sample import (RECORD_COLUMNS, check_prompt_lengths, dataset_columns, encode_samples,
                                  prompt_limit)
from lit_grpo.evaluation import EvaluationHooks, Evaluator
from lit_grpo.families import row_layout
from lit_grpo.fsdp import ShardingHooks
from lit_grpo.grpo import ADVANTAGE_SCALES, decoupled_advantages, decoupled_sum, group_advantages
from lit_grpo.hparams import flatten_hparams, log_flat_hparams
from lit_grpo.metrics import SAMPLER_WARN_SHARE, PromptStats, advantage_shares, sampler_metrics, train_metrics
from lit_grpo.objectives import adapt_entropy_coef, applied_entropy_coef
from lit_grpo.passes import LogprobPass, PolicyPasses
from lit_grpo.registry import option_group
from lit_grpo.policy import (PolicyConfig, ReferencePolicy, disable_dropout, image_token_ids, load_policy,
                             stop_token_ids)
from lit_grpo.errors import InputError
from lit_grpo.rewards import RewardSpec, build_rewards, required_columns, score_completions, unmet_columns
from lit_grpo.rng import gather_rank_rng_states, restore_rank_rng_states, seed_rank_stream
from lit_grpo.rollout import Rollout, SamplingConfig, build_engine, encode_prompts
from lit_grpo.runs import check_same_optimizer, check_trainable_weights

__all__ = ["EvalConfig", "GRPOConfig", "GRPOModule", "PolicyModule", "PolicyPasses", "LogprobPass"]


class PolicyModule(ShardingHooks, EvaluationHooks, L.LightningModule):
    """A policy trained by a subclass's ``training_step``; sampling, rewards, evaluation and checkpoints here."""

    dropout_free: ClassVar[bool] = True
    """The policy runs without dropout (:func:`lit_grpo.policy.disable_dropout`): first importance ratio exactly 1."""

    def __init__(self, policy: PolicyConfig, rewards: list[RewardSpec], grpo: GRPOConfig = GRPOConfig(),
                 sampling: SamplingConfig = SamplingConfig(), evaluation: EvalConfig = EvalConfig(),
                 attention: option_group("attention") = {}, perf: PerfConfig = PerfConfig(),
                 optimizer: OptimizerCallable = torch.optim.AdamW, lr_scheduler: LRSchedulerCallable | None = None):
        """Arguments as documented on :class:`GRPOModule`."""
        super().__init__()
        self.save_hyperparameters(logger=False)  # logger=False: on_fit_start logs them flattened
        # checked before load_policy: a refused option combination costs seconds, not a model load
        check_settings(grpo, sampling)
        self.cfg, self.sampling, self.evaluation, self.perf = grpo, sampling, evaluation, perf
        self.optimizer_factory, self.scheduler_factory = optimizer, lr_scheduler
        self.reward_specs = list(rewards)
        self.reward_fns = build_rewards(self.reward_specs, training=True)  # warns of a gameable reward
        self.reward_weights = {s.label: s.weight for s in self.reward_specs}
        self.eval_stats = PromptStats()
        self.evaluator = Evaluator(evaluation, self.reward_specs, self.reward_fns, self.eval_stats)
        self.policy, self.processor = load_policy(policy)
        # dropout would make the update's forward differ from the log-prob pass's, so no ratio would start at 1
        if self.dropout_free:
            disable_dropout(self.policy, policy)
        self.layout = row_layout(self.policy, self.processor)
        read = required_columns(self.reward_specs + list(evaluation.metrics))  # task fields, log-prob-pass columns
        providers = build_providers(self.policy, self.processor, read, {"attention": attention})
        self.pass_columns = sorted(read & providers.keys())  # what the rewards read from the log-prob pass
        self.read_columns = read - providers.keys()  # the samples' task fields the rewards read
        # a sampled image placeholder would make the next forward expect image features no prompt gave: never emit one
        suppress = image_token_ids(self.policy, self.processor)
        self.stop_ids = stop_token_ids(self.policy, self.processor, policy.extra_stop_tokens, set(suppress))
        self.register_buffer("suppress_ids", torch.tensor(suppress), persistent=False)  # rebuilt from the processor
        engine = build_engine(self.processor, self.layout, sampling, self.stop_ids, suppress, perf)
        self.passes = PolicyPasses(engine, grpo, sampling.max_completion_length, providers=providers)
        self.strict_loading = False  # checkpoints hold only trainable weights; on_load_checkpoint checks them

    # ----------------------------------------------------------------- rollout, log-probs, rewards
    def prompt_length(self, messages: list[dict], sample) -> int:
        """Prompt tokens of one sample, image tokens included (used to filter over-long samples)."""
        return self.encode(messages=[messages], samples=[sample])["input_ids"].shape[1]

    def encode(self, messages: list, samples: list) -> Any:
        """The prompts of ``samples`` encoded by the processor; one it refuses is a bad row naming the sample
        (:func:`lit_grpo.data.sample.encode_samples`)."""
        return encode_samples(lambda m, i: encode_prompts(self.processor, m, i), messages, samples)

    def rollout(self, batch: PromptBatch, group_size: int, greedy: bool = False,
                temperature: float | None = None) -> Rollout:
        """``group_size`` completions of every prompt of ``batch`` from the engine."""
        # checked before encoding: a family's image limit is a clear error here, a shape mismatch in the model later
        self.layout.check_images({s.id: len(s.images) for s in batch.samples})
        enc = self.encode(batch.messages, batch.samples)
        # an over-long prompt: a bad row naming its sample
        check_prompt_lengths(enc, batch.samples, prompt_limit(self.policy, self.sampling))
        enc = enc.to(self.device)
        return self.passes.engine.sample(self.policy, enc, group_size, greedy=greedy, temperature=temperature)

    def columns(self, batch: PromptBatch, rollout: Rollout, group_size: int,
                extra: dict[str, list] | None = None) -> dict[str, list]:
        """Reward columns: every sample column (:meth:`~lit_grpo.data.sample.Sample.columns`: the record's and its
        task fields) repeated ``group_size`` times, plus ``truncated``, ``completion_length`` (tokens) and the log-prob
        pass's ``extra`` columns (``asm``). A field that a sample lacks, or that a reward reads and no sample has, is
        None there (the reward's "does not apply")."""
        per_sample = [s.columns() for s in batch.samples]
        names = dict.fromkeys([k for c in per_sample for k in c] + sorted(self.read_columns))
        # a prompt's G completions are contiguous rows (the rollout's order): each sample column repeats G times
        columns = {k: [c.get(k) for c in per_sample for _ in range(group_size)] for k in names}
        columns["truncated"] = rollout.truncated.tolist()
        columns["completion_length"] = rollout.completion_mask.sum(1).tolist()
        columns.update(extra or {})
        return columns

    def rewards(self, batch: PromptBatch, rollout: Rollout, group_size: int, fns: dict | None = None,
                metrics: dict[str, float] | None = None,
                extra: dict[str, list] | None = None) -> tuple[dict[str, Tensor], Tensor]:
        """Per-reward values (components of composite rewards included) and the weighted total of every
        reward (or of ``fns``: evaluation-only metrics weigh 0); reward metrics (e.g. judge latency) go into
        ``metrics``; ``extra`` holds the log-prob pass's columns. A reward that raises (a judge that is down)
        stops the step on every rank at once, so no rank waits forever in a collective."""
        fns = fns or self.reward_fns
        weights = {k: self.reward_weights.get(k, 0.0) for k in fns}
        error = None
        try:
            out = score_completions(fns, weights, rollout.completions,
                                    self.columns(batch, rollout, group_size, extra), metrics)
        except Exception as exc:  # re-raised below, after every rank knows
            error = exc
        # every rank joins this collective, failed or not: raising first would leave the others in the next one forever
        if D.all_reduce_sum(torch.tensor(float(error is not None), device=self.device)).item() > 0:
            raise error if error is not None else RuntimeError("a reward failed on another rank; see its log")
        return out

    # ----------------------------------------------------------------- optimisation and checkpoints
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.policy.parameters() if p.requires_grad]

    def configure_optimizers(self):
        # only trainable weights: under LoRA the frozen base gets no optimizer state (AdamW keeps 2 moments a weight)
        opt = self.optimizer_factory(self.trainable_parameters())
        if self.scheduler_factory is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self.scheduler_factory(opt), "interval": "step"}}

    def setup(self, stage: str) -> None:
        if stage == "fit":  # after the model is built: each rank samples from its own stream (seed + rank)
            seed_rank_stream()
        # self.trainer raises when none is attached
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        self.check_reward_columns(getattr(datamodule, "datasets", {}).values())

    def check_reward_columns(self, datasets) -> None:
        """Refuse a reward (or evaluation metric) with a parameter (no default) that no column gives: the samples'
        columns of ``datasets``, the rollout's and the log-prob pass's (:func:`~lit_grpo.rewards.unmet_columns`).
        Raises:
            InputError: one line per such reward, naming the parameter and the columns there are.
        """
        found = [dataset_columns(ds) for ds in datasets]
        # checked when a Trainer holds data; a module built alone (tests, notebooks) cannot know its columns yet
        if not found or any(f is None for f in found):  # no data yet, or items that are not samples: nothing to say
            return
        given = {*RECORD_COLUMNS, "truncated", "completion_length", *self.pass_columns, *set().union(*found)}
        lines = unmet_columns({**self.reward_fns, **self.evaluator.fns}, given)
        if lines:
            raise InputError("; ".join(lines))

    def on_fit_start(self) -> None:
        if self.logger is not None:
            log_flat_hparams(self.logger, flatten_hparams(self.hparams),
                             [f"val/{mode}/reward" for mode, *_ in self.evaluator.modes()] + ["train/reward"])

    def _trainable_names(self) -> dict[str, tuple[int, ...]]:
        return {f"policy.{n}": tuple(p.shape) for n, p in self.policy.named_parameters() if p.requires_grad}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep only trainable policy weights (just the adapter with LoRA; frozen weights are rebuilt from
        ``name_or_path``) and save every rank's RNG states for resuming."""
        keep = self._trainable_names()
        # frozen weights leave the checkpoint: reloaded from name_or_path, a LoRA checkpoint is the adapter only
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items()
                                    if not k.startswith("policy.") or k in keep}
        checkpoint["rng_states"] = gather_rank_rng_states()  # every rank's own stream

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse policy weights that are not exactly this run's trainable ones (loading is not strict) and, when
        resuming a fit, another optimizer; restore the RNG states."""
        check_trainable_weights(checkpoint["state_dict"], self._trainable_names(), prefix="policy.")
        # validate / test / predict from a checkpoint never step its optimizer: only a resumed fit must match it
        if getattr(getattr(self._trainer, "state", None), "fn", "fit") == "fit":  # a resumed fit updates with it
            check_same_optimizer(checkpoint, self.hparams.get("optimizer"), getattr(self._trainer, "ckpt_path", None))
        if "rng_states" in checkpoint:
            restore_rank_rng_states(checkpoint["rng_states"])



class GRPOModule(PolicyModule):
    """GRPO on an image-text-to-text policy; see the module docstring for what a step is."""

    def __init__(
        self,
        policy: PolicyConfig,
        rewards: list[RewardSpec],
        grpo: GRPOConfig = GRPOConfig(),
        sampling: SamplingConfig = SamplingConfig(),
        evaluation: EvalConfig = EvalConfig(),
        attention: option_group("attention") = {},  # the attention task's group; {}: its defaults
        perf: PerfConfig = PerfConfig(),
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
    ):
        """
        Args:
            policy: model to train (hub id or path, dtype, LoRA, ...).
            rewards: reward terms; the total is their weighted sum.
            grpo: objective (beta, clipping, loss aggregation, iterations, micro-batching).
            sampling: rollout sampling (G, temperature, top_p, top_k, max_completion_length).
            evaluation: validation/test completion modes.
            attention: final-layer attention capture in the log-prob pass (the ``attention`` reward's ASM;
                on whenever a reward reads ``asm``).
            perf: each prompt computed once per group (shared prompt prefix, image features once per
                rollout; one checkpoint per decoder layer under gradient checkpointing); the plain path when off
                or for a model outside the supported families.
            optimizer: optimizer class and arguments (``class_path``/``init_args``).
            lr_scheduler: optional scheduler, stepped once per training step (rollout).
        """
        super().__init__(policy, rewards, grpo, sampling, evaluation, attention, perf, optimizer, lr_scheduler)
        self.automatic_optimization = False  # a step makes several updates; Lightning's automatic loop makes one
        # beta 0: no reference at all (without a fresh LoRA it is a frozen copy: the policy's memory again)
        self.passes.reference = ReferencePolicy(self.policy, bool(policy.lora and policy.lora.adapter_path)) \
            if grpo.beta > 0 else None
        if grpo.use_adaptive_entropy:  # (coefficient, last update's entropy): a buffer, so checkpoints keep it
            self.register_buffer("entropy_control", torch.tensor([grpo.entropy_coef, math.inf], dtype=torch.float64))
        # names resolved once, not per step: the advantage scaling's function, and GDPO or the weighted total
        self.advantage_scale = ADVANTAGE_SCALES.get(grpo.scale_rewards)
        self.decoupled = grpo.multi_objective_aggregation == "normalize_then_sum"

    # ----------------------------------------------------------------- training
    def training_step(self, batch: PromptBatch, batch_idx: int) -> dict[str, Any]:
        """One GRPO step over ``B`` prompts, ``G`` completions each (``N = B * G`` rows on this rank, ``W`` ranks)."""
        start, g = time.perf_counter(), self.sampling.num_generations  # the wall time covers the whole step
        # 1. Rollout: G completions per prompt from the engine, a prompt's G rows contiguous.
        rollout = self.rollout(batch, g)  # completion_ids (N, T), completion_mask (N, T), truncated (N,)
        # 2. Log-prob pass, no grad: old log-probs only when the update is not the rollout's first and only one
        #    (num_iterations, steps_per_generation > 1, or a sampler that is not the policy), the reference's when
        #    beta > 0; extra columns (the ASM) from the same forward.
        logprobs = self.passes.logprob_pass(self.policy, rollout, [s.images for s in batch.samples])  # (N, T) each
        # 3. Rewards: every configured reward over the completions and their columns, and the weighted total
        #    (NaN: cannot score; such a completion gets advantage 0, never a 0 reward).
        reward_metrics: dict[str, float] = {}
        per_reward, total = self.rewards(batch, rollout, g, metrics=reward_metrics, extra=logprobs.columns())  # (N,)
        # 4. Advantages over every rank's groups (a group's statistics need all G of its completions, and the
        #    "batch" scaling every group); each rank keeps its own rows.
        rank, world = D.world()
        # gathered in rank order: rank r's rows are the r-th block of N, which the reshape below relies on
        all_total = D.all_gather_cat(total.to(self.device)).cpu()  # (W * N,)
        advantages, extra, signal = self.advantages(per_reward, all_total)  # (W * N,) over every rank's groups
        # every rank holds the same N = B * G rows
        local_adv = advantages.reshape(world, -1)[rank].to(self.device)  # (N,)
        # 5. Update: num_iterations * steps_per_generation optimizer updates over parts of the rollout, then the
        #    scheduler once; the engine hears of each update (a sampler holding its own weights copies them).
        lr = self._lr()  # the lr this step's updates use (the scheduler steps after them)
        stats = self.update(rollout, local_adv, logprobs)
        # 6. Log: train/ figures at x = this step; what the callbacks see is returned.
        if logprobs.old_logps is not None and rollout.sampling_logps is not None:  # how far the sampler is off
            extra.update(sampler_metrics(logprobs.old_logps, rollout.sampling_logps, logprobs.sampler_ratio,
                                         rollout.completion_mask, lambda x: D.all_gather_cat(x.to(self.device)),
                                         self.cfg.sampler_options()))
            self._warn_if_corrected(extra.get("train/rollout/sampler/corrected_completions", 0.0))
        elapsed = time.perf_counter() - start
        self.log_train(per_reward, all_total, advantages, rollout, stats, len(all_total) / elapsed, reward_metrics,
                       lr, extra, signal)
        return {"prompts": [m for m in batch.messages], "completions": rollout.completions,
                "rewards": {k: v.tolist() for k, v in per_reward.items()}, "total": total.tolist(),
                "advantages": local_adv.tolist(), "answers": [s.answer for s in batch.samples], "group_size": g,
                "measured": logprobs.measured}

    def advantages(self, per_reward: dict[str, Tensor],
                   all_total: Tensor) -> tuple[Tensor, dict[str, float], Tensor]:
        """Advantages ``[W * N]`` of every rank's completions: of the weighted total (``sum_then_normalize``), or
        GDPO's (``normalize_then_sum``: each reward term normalised in its group; its share of the advantage is
        logged as ``train/advantage/<reward>``); the figures logged; and the signal ``[W * N]`` the advantages are
        computed from (the total, or GDPO's sum of normalised terms): the no-signal figures are of it."""
        g, eps = self.sampling.num_generations, self.cfg.advantage_eps
        if not self.decoupled:
            return group_advantages(all_total, g, self.advantage_scale, eps), {}, all_total
        # the reward weights' (config) order: every rank stacks the same terms in the same order
        labels = [k for k in self.reward_weights if k in per_reward]  # the terms of the total
        values = torch.stack([D.all_gather_cat(per_reward[k].to(self.device)).cpu() for k in labels], 1)  # (W*N, K)
        weights = torch.tensor([self.reward_weights[k] for k in labels])
        unscorable = torch.isnan(all_total)  # NaN total: some weighted reward cannot score it
        adv, parts = decoupled_advantages(values, weights, g, eps, unscorable=unscorable)
        return adv, advantage_shares(labels, parts), decoupled_sum(values, weights, g, eps, unscorable)[0]

    def _backward_sync(self, last: bool):
        strategy = self._trainer.strategy if self._trainer is not None else None
        # micro-batches before the last skip DDP's gradient all-reduce: one all-reduce per update, not per micro-batch
        if last or not hasattr(strategy, "block_backward_sync"):
            return contextlib.nullcontext()
        return strategy.block_backward_sync()

    def update(self, rollout: Rollout, advantages: Tensor, logprobs: LogprobPass) -> dict[str, float]:
        """One training step's updates: ``num_iterations`` passes over the rollout, each an optimizer update per part
        of it (``steps_per_generation`` parts, in order), then one scheduler step. ``logprobs``: the log-prob pass's
        old and reference log-probs and an off-policy sampler's correction."""
        opt, sched = self.optimizers(), self.lr_schedulers()
        # every iteration goes over the same parts in the same order (as TRL): parts x num_iterations updates
        updates = self.passes.update_rows(rollout.num_completions) * self.cfg.num_iterations
        totals: dict[str, float] = {}
        self.passes.engine.release()  # no sampling until the next step's rollout
        for i, rows in enumerate(updates):
            opt.zero_grad()  # gradients accumulate over the update's micro-batches
            coef = self._entropy_coef()
            stats = self.passes.accumulate_gradients(
                self.policy, rollout, advantages, logprobs.old_logps, logprobs.ref_logps, self._backward,
                self._backward_sync, rows=rows, sampler=logprobs, entropy_coef=coef)
            # an infinite bound still measures the norm: grad_norm is logged with clipping off too
            clip = self.cfg.max_grad_norm if self.cfg.max_grad_norm is not None else math.inf
            # FSDP1 clips its own shards
            root = getattr(self._trainer.strategy, "model", None) if self._trainer is not None else None
            stats["grad_norm"] = float(D.clip_grad_norm(root, self.trainable_parameters(), clip))
            self._optimizer_step(opt, last=i == len(updates) - 1)
            self.passes.engine.update_weights(self.policy)  # the next rollout samples from these weights
            self._control_entropy(stats, coef)
            for k, v in stats.items():  # the step logs each figure's mean over its updates
                totals[k] = totals.get(k, 0.0) + v / len(updates)
        self.passes.engine.resume()
        if sched is not None:  # after all updates: stepped once per rollout
            sched.step()
        return totals

    def _entropy_coef(self) -> float:
        """The entropy bonus weight of the next update (adaptive: 0 while the last update's entropy is above target)."""
        if not self.cfg.use_adaptive_entropy:
            return self.cfg.entropy_coef
        coef, last = self.entropy_control.tolist()
        return applied_entropy_coef(coef, last, self.cfg.entropy_target)

    def _control_entropy(self, stats: dict[str, float], applied: float) -> None:
        """After an update: the adaptive coefficient moves on the update's entropy (over the tokens the bonus acts on,
        every rank); ``entropy_coef`` (the applied weight) joins the stats when a bonus is configured."""
        if self.cfg.entropy_coef or self.cfg.use_adaptive_entropy:
            stats["entropy_coef"] = applied
        if self.cfg.use_adaptive_entropy:
            cfg, acted = self.cfg, stats.pop("entropy_acted")
            coef = adapt_entropy_coef(self.entropy_control[0].item(), acted, cfg.entropy_target,
                                      cfg.entropy_coef_delta, cfg.entropy_coef_min, cfg.entropy_coef_max)
            self.entropy_control.copy_(torch.tensor([coef, acted], dtype=torch.float64))

    def _optimizer_step(self, opt, last: bool) -> None:
        """One update. Only a step's last update goes through the ``LightningOptimizer``, whose calls Lightning
        counts as ``global_step``; an inner one steps the raw optimizer through the strategy (precision plugin
        and ``on_before_optimizer_step`` hooks as usual)."""
        if last or not isinstance(opt, LightningOptimizer):
            opt.step()
        else:
            # do_nothing_closure: the gradients are already accumulated above; a closure would only recompute them
            self.trainer.strategy.optimizer_step(opt.optimizer, do_nothing_closure, model=self)

    def _backward(self, loss: Tensor) -> None:
        if self._trainer is None:  # used outside a Trainer (tests, notebooks)
            loss.backward()
        else:
            self.manual_backward(loss)

    def log_train(self, per_reward: dict[str, Tensor], total: Tensor, advantages: Tensor, rollout: Rollout,
                  stats: dict[str, float], completions_per_s: float,
                  reward_metrics: dict[str, float] | None = None, lr: float | None = None,
                  extra: dict[str, float] | None = None, signal: Tensor | None = None) -> None:
        """Log the ``train/`` figures over every rank's completions (``total``, ``advantages`` gathered, ``stats``
        reduced over ranks already; judge call statistics in ``reward_metrics`` are this rank's) at x = this step's
        number; ``lr`` is the learning rate the step's updates used; ``extra``: figures over every rank, logged as
        named; ``signal``: what the advantages were computed from (:meth:`advantages`; default ``total``)."""

        def gather(x: Tensor) -> Tensor:  # every rank's rows, in rank order
            return D.all_gather_cat(x.to(self.device)).cpu()

        log = train_metrics({k: gather(v) for k, v in per_reward.items()}, total, advantages,
                            self.sampling.num_generations, gather(rollout.completion_mask.sum(1)),
                            gather(rollout.truncated.float()), signal)
        log["train/update/lr"] = self._lr() if lr is None else lr
        log["train/rollout/completions_per_second"] = completions_per_s
        log.update({f"train/update/{k}": v for k, v in stats.items()})
        log.update({f"train/reward/{k}": v for k, v in (reward_metrics or {}).items()})
        log.update(extra or {})
        self.log_dict({k: v for k, v in log.items() if k != "train/reward"}, on_step=True, batch_size=len(total))
        self.log("train/reward", log["train/reward"], on_step=True, prog_bar=True, batch_size=len(total))
        if self._trainer is not None:  # the x-axis: this step's number (Lightning's default: the one before)
            self.log("step", float(self.trainer.global_step), on_step=True, batch_size=len(total))
        self._warn_if_no_signal(log["train/rollout/frac_reward_zero_std"])

    def _lr(self) -> float:
        return self.optimizers().param_groups[0]["lr"]

    def _warn_if_corrected(self, share: float) -> None:
        """Warn once when the sampler correction masked or clipped more than :data:`SAMPLER_WARN_SHARE` of a step's
        completions (docs/objectives.md#when-the-sampler-is-not-the-policy)."""
        if share > SAMPLER_WARN_SHARE and not getattr(self, "_warned_corrected", False):
            self._warned_corrected = True
            mode = self.cfg.sampler_correction_mode
            rank_zero_warn(f"the sampler correction ({mode}) masked or clipped {share:.0%} of this step's completions "
                           f"(train/rollout/sampler/corrected_completions; warned above {SAMPLER_WARN_SHARE:.0%}): "
                           "their weight in the loss is 0 or capped. With long completions a sequence-level weight "
                           "multiplies small per-token gaps; grpo.sampler_correction_mode: token_truncate (or "
                           "token_mask) weighs each token on its own (docs/objectives.md)")

    def _warn_if_no_signal(self, frac_zero_std: float, patience: int = 10) -> None:
        """Warn once when every group had equal rewards for ``patience`` steps in a row (zero advantages)."""
        self._no_signal = getattr(self, "_no_signal", 0) + 1 if frac_zero_std == 1.0 else 0
        if self._no_signal == patience:
            rank_zero_warn(f"for {patience} steps in a row every group's completions got equal rewards "
                           "(train/rollout/frac_reward_zero_std = 1): every advantage and the loss are 0 and the "
                           "policy does not change. Does the policy ever earn the reward (e.g. follow its answer format; "
                           "warm-start it), and can the reward tell completions apart?")
