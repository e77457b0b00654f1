"""SFTModule: supervised fine-tuning on reference responses (the paper's SFT baseline and GRPO's warm start).

The loss is the token-mean negative log-likelihood of the reference response; prompt tokens (image
tokens included) and padding are outside the loss because only response tokens are scored. A
reference response is built from the sample by a registered function (``REFERENCES``,
:mod:`lit_grpo.data.sample`). Evaluation, checkpointing (trainable weights only with LoRA) and the CLI are shared
with :class:`GRPOModule` (through their common base, :class:`lit_grpo.module.PolicyModule`).
"""

from __future__ import annotations


import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor

from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.data.sample import REFERENCES, Sample
from lit_grpo.config import EvalConfig, GRPOConfig
from lit_grpo.policy import PolicyConfig
from lit_grpo.module import PolicyModule
from lit_grpo.rewards import RewardSpec
from lit_grpo.rollout import Rollout, SamplingConfig, completion_logps, encode_prompts



@REFERENCES.register("boxed_explanation")
def boxed_explanation(sample: Sample) -> str:
    """Puzzles: the rule from ``meta["explanation"]``, then the gold label boxed (``\\boxed{C}``)."""
    rule = str(sample.meta.get("explanation", "")).strip()
    return f"{rule} The answer is \\boxed{{{sample.answer}}}.".strip()


class SFTModule(PolicyModule):
    """Supervised fine-tuning with the policy, evaluation and checkpoints GRPO uses (automatic optimisation)."""

    dropout_free = False
    """SFT keeps the policy's dropout (LoRA's ``policy.lora.dropout`` included)."""
    shardable = False
    """Its step calls the policy's forward itself, outside the rollout engine that runs a sharded policy."""

    def __init__(
        self,
        policy: PolicyConfig,
        rewards: list[RewardSpec],
        reference: str = "boxed_explanation",
        sampling: SamplingConfig = SamplingConfig(),
        evaluation: EvalConfig = EvalConfig(),
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
    ):
        """
        Args:
            policy: model to train.
            rewards: rewards reported in validation (not trained on).
            reference: registered reference-response builder (``boxed_explanation``, ``physics_tags``).
            sampling: evaluation sampling (temperature, ``max_completion_length``).
            evaluation: validation modes.
            optimizer, lr_scheduler: as in :class:`GRPOModule` (the scheduler steps every optimizer step).
        """
        super().__init__(policy=policy, rewards=rewards, grpo=GRPOConfig(), sampling=sampling,
                         evaluation=evaluation, optimizer=optimizer, lr_scheduler=lr_scheduler)
        self.reference_fn = REFERENCES.get(reference)

    def reference_rollout(self, batch: PromptBatch) -> Rollout:
        """Prompts (left-padded, with images) and reference responses + the stop token as the 'completion'."""
        tok = getattr(self.processor, "tokenizer", self.processor)
        self.layout.check_images({s.id: len(s.images) for s in batch.samples})
        prompt = encode_prompts(self.processor, batch.messages, [s.images for s in batch.samples])
        stop = tok.eos_token_id if tok.eos_token_id in self.stop_ids else self.stop_ids[0]
        responses = [tok(self.reference_fn(s), add_special_tokens=False)["input_ids"] + [stop]
                     for s in batch.samples]
        t = max(len(r) for r in responses)
        ids = torch.full((len(responses), t), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(responses), t, dtype=torch.bool)
        for i, r in enumerate(responses):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), True
        prompt = {k: v.to(self.device) if isinstance(v, Tensor) else v for k, v in prompt.items()}
        return Rollout(prompt, ids.to(self.device), mask.to(self.device),
                       torch.zeros(len(responses), dtype=torch.bool), [], layout=self.layout)

    def training_step(self, batch: PromptBatch, batch_idx: int) -> Tensor:
        ro = self.reference_rollout(batch)
        logps, _ = completion_logps(self.policy, ro, 1.0, self.suppress_ids)  # (B, T)
        mask = ro.completion_mask.float()
        loss = -(logps * mask).sum() / mask.sum()
        self.log("train/sft_loss", loss, prog_bar=True, batch_size=len(batch))
        self.log("train/response_tokens", mask.sum(1).mean(), batch_size=len(batch))
        return loss
