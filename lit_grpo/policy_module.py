"""PolicyModule: what GRPO and SFT share: the policy and its processor, the rollout engine, the rewards, the
evaluation (validation / test / predict), the optimizer and the checkpoint hooks.

:class:`lit_grpo.module.GRPOModule` adds GRPO's training step, :class:`lit_grpo.sft.SFTModule` the supervised one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor

from lit_grpo import distributed as D
from lit_grpo.attention import AttentionConfig, AttentionScorer
from lit_grpo.config import EvalConfig, GRPOConfig, PerfConfig, check_settings
from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.evaluation import Evaluator
from lit_grpo.families import row_layout
from lit_grpo.hparams import flatten_hparams, log_flat_hparams
from lit_grpo.metrics import PromptStats
from lit_grpo.passes import PolicyPasses, ScoringPass
from lit_grpo.policy import PolicyConfig, disable_dropout, image_token_ids, load_policy, stop_token_ids
from lit_grpo.rewards import RewardSpec, build_rewards, required_columns, score_completions
from lit_grpo.rng import gather_rank_rng_states, restore_rank_rng_states, seed_rank_stream
from lit_grpo.rollout import Rollout, SamplingConfig, build_engine, encode_prompts
from lit_grpo.runs import check_trainable_weights


class PolicyModule(L.LightningModule):
    """A policy trained by a subclass's ``training_step``; sampling, rewards, evaluation and checkpoints here."""

    dropout_free: ClassVar[bool] = True
    """The policy runs without dropout (:func:`lit_grpo.policy.disable_dropout`): first importance ratio exactly 1."""

    def __init__(self, policy: PolicyConfig, rewards: list[RewardSpec], grpo: GRPOConfig = GRPOConfig(),
                 sampling: SamplingConfig = SamplingConfig(), evaluation: EvalConfig = EvalConfig(),
                 attention: AttentionConfig = AttentionConfig(), perf: PerfConfig = PerfConfig(),
                 optimizer: OptimizerCallable = torch.optim.AdamW, lr_scheduler: LRSchedulerCallable | None = None):
        """Arguments as documented on :class:`lit_grpo.module.GRPOModule`."""
        super().__init__()
        self.save_hyperparameters(logger=False)
        check_settings(grpo, sampling)
        self.cfg, self.sampling, self.evaluation, self.perf = grpo, sampling, evaluation, perf
        self.optimizer_factory, self.scheduler_factory = optimizer, lr_scheduler
        self.reward_specs = list(rewards)
        self.reward_fns = build_rewards(self.reward_specs, training=True)
        self.reward_weights = {s.label: s.weight for s in self.reward_specs}
        self.eval_stats = PromptStats()
        self.evaluator = Evaluator(evaluation, self.reward_specs, self.reward_fns, self.eval_stats)
        self.policy, self.processor = load_policy(policy)
        if self.dropout_free:
            disable_dropout(self.policy, policy)
        self.layout = row_layout(self.policy, self.processor)
        self.wants_asm = "asm" in required_columns(self.reward_specs + list(evaluation.metrics))
        scorer = AttentionScorer(self.policy, self.processor, attention) \
            if (attention.enabled if attention.enabled is not None else self.wants_asm) else None
        if self.wants_asm and scorer is None:
            raise ValueError("the attention reward needs attention.enabled true (or unset)")
        self.stop_ids = stop_token_ids(self.policy, self.processor, policy.extra_stop_tokens)
        suppress = image_token_ids(self.policy, self.processor)
        self.register_buffer("suppress_ids", torch.tensor(suppress), persistent=False)
        engine = build_engine(self.processor, self.layout, sampling, self.stop_ids, suppress, perf.share_prefix,
                              perf.cache_image_features)
        self.passes = PolicyPasses(engine, grpo, sampling.max_completion_length,
                                   attention_scorer=scorer)
        self.strict_loading = False  # checkpoints hold only trainable weights; on_load_checkpoint checks them

    @property
    def engine(self):
        return self.passes.engine

    @property
    def attention_scorer(self) -> AttentionScorer | None:
        return self.passes.attention_scorer

    # ----------------------------------------------------------------- rollout, scoring, rewards
    def prompt_length(self, messages: list[dict], sample) -> int:
        """Prompt tokens of one sample, image tokens included (used to filter over-long samples)."""
        return encode_prompts(self.processor, [messages], [sample.images])["input_ids"].shape[1]

    def rollout(self, batch: PromptBatch, group_size: int, greedy: bool = False,
                temperature: float | None = None) -> Rollout:
        """``group_size`` completions of every prompt of ``batch`` from the engine."""
        self.layout.check_images({s.id: len(s.images) for s in batch.samples})
        enc = encode_prompts(self.processor, batch.messages, [s.images for s in batch.samples])
        enc = {k: v.to(self.device) if isinstance(v, Tensor) else v for k, v in enc.items()}
        return self.engine.sample(self.policy, enc, group_size, greedy=greedy, temperature=temperature)

    def scoring_pass(self, batch: PromptBatch, rollout: Rollout, group_size: int, train: bool = True) -> ScoringPass:
        """The no-grad scoring pass (:meth:`lit_grpo.passes.PolicyPasses.scoring_pass`)."""
        images = [s.images for s in batch.samples for _ in range(group_size)]
        return self.passes.scoring_pass(self.policy, rollout, images, train)

    def columns(self, batch: PromptBatch, rollout: Rollout, group_size: int,
                extra: dict[str, list] | None = None) -> dict[str, list]:
        """Reward columns: every Sample field repeated ``group_size`` times, plus ``truncated``,
        ``completion_length`` (tokens) and the scoring pass's ``extra`` columns (``asm``)."""
        per_sample = [s.columns() for s in batch.samples]
        columns = {k: [c[k] for c in per_sample for _ in range(group_size)] for k in per_sample[0]}
        columns["truncated"] = rollout.truncated.tolist()
        columns["completion_length"] = rollout.completion_mask.sum(1).tolist()
        columns.update(extra or {})
        return columns

    def rewards(self, batch: PromptBatch, rollout: Rollout, group_size: int, fns: dict | None = None,
                metrics: dict[str, float] | None = None,
                extra: dict[str, list] | None = None) -> tuple[dict[str, Tensor], Tensor]:
        """Per-reward values (components of composite rewards included) and the weighted total of every
        reward (or of ``fns``: evaluation-only metrics weigh 0); reward metrics (e.g. judge latency) go into
        ``metrics``; ``extra`` holds the scoring pass's columns. A reward that raises (a judge that is down)
        stops the step on every rank at once, so no rank waits forever in a collective."""
        fns = fns or self.reward_fns
        weights = {k: self.reward_weights.get(k, 0.0) for k in fns}
        error = None
        try:
            out = score_completions(fns, weights, rollout.completions,
                                    self.columns(batch, rollout, group_size, extra), metrics)
        except Exception as exc:  # re-raised below, after every rank knows
            error = exc
        if D.all_reduce_sum(torch.tensor(float(error is not None), device=self.device)).item() > 0:
            raise error if error is not None else RuntimeError("a reward failed on another rank; see its log")
        return out

    # ----------------------------------------------------------------- evaluation
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

    # ----------------------------------------------------------------- optimisation and checkpoints
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.policy.parameters() if p.requires_grad]

    def configure_optimizers(self):
        opt = self.optimizer_factory(self.trainable_parameters())
        if self.scheduler_factory is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self.scheduler_factory(opt), "interval": "step"}}

    def setup(self, stage: str) -> None:
        if stage == "fit":  # after the model is built: each rank samples from its own stream (seed + rank)
            seed_rank_stream()

    def on_fit_start(self) -> None:
        if self.logger is not None:
            log_flat_hparams(self.logger, flatten_hparams(self.hparams),
                             [f"val/{mode}/reward" for mode, *_ in self.evaluator.modes()] + ["train/reward"])

    def _trainable_names(self) -> set[str]:
        return {f"policy.{n}" for n, p in self.policy.named_parameters() if p.requires_grad}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep only trainable policy weights (just the adapter with LoRA; frozen weights are rebuilt from
        ``name_or_path``) and save every rank's RNG states for resuming."""
        keep = self._trainable_names()
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items()
                                    if not k.startswith("policy.") or k in keep}
        checkpoint["rng_states"] = gather_rank_rng_states()  # every rank's own stream

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse policy weights that are not exactly this run's trainable ones (loading is not strict); restore
        the RNG states."""
        check_trainable_weights(checkpoint["state_dict"], self._trainable_names(), prefix="policy.")
        if "rng_states" in checkpoint:
            restore_rank_rng_states(checkpoint["rng_states"])
