"""TRL 1.16's own ``GRPOTrainer`` code run on given tensors: the oracle the objectives are pinned to.

TRL computes its loss in ``GRPOTrainer._compute_loss`` and its advantages and sampler correction in
``_generate_and_score_completions``; both are methods of a trainer that normally owns a model, a dataset and an
accelerator. :func:`trl_trainer` builds the smallest object those two methods run on (``object.__new__`` plus the
attributes they read: one process, no accumulation unless asked), and :func:`trl_loss` / :func:`trl_generation`
call them with the model's forward replaced by given per-token log-probs and entropies, so lit_grpo's functions
and TRL's meet on the same tensors: :data:`CASES` (every option, in config names), :func:`make_batch` (log-probs of
sequences of different lengths, truncated and all-masked rows, extreme ratios, any dtype), :func:`ours` /
:func:`theirs` (the two losses) and :func:`differences`. Used by ``tests/test_objectives_trl.py`` and
``benchmarks/objectives_vs_trl.py`` (``pip install -e ".[dev]"`` brings ``trl==1.16.0``).
"""

from __future__ import annotations

import contextlib
import math
import types
from collections import defaultdict, deque

import torch
from torch import Tensor

from lit_grpo.config import GRPOConfig
from lit_grpo.grpo import grpo_loss
from lit_grpo.objectives import AGGREGATION_ALIASES
from lit_grpo.passes import PolicyPasses

ARGS = dict(use_bias_correction_kl=False, delta=None, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
            vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0, steps_per_generation=1,
            entropy_target=0.2, entropy_coef_delta=0.005, entropy_coef_min=0.0, entropy_coef_max=1.0,
            gradient_accumulation_steps=1, per_device_train_batch_size=8, gradient_checkpointing_kwargs=None)
"""``trainer.args`` fields the two methods read, at TRL's defaults (``use_bias_correction_kl`` at ours, off)."""
ATTRS = dict(top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token", beta=0.0,
             loss_type="dapo", epsilon_low=0.2, epsilon_high=0.2, use_vllm=False,
             vllm_importance_sampling_correction=False, vllm_importance_sampling_mode="sequence_mask",
             vllm_importance_sampling_clip_min=None, vllm_importance_sampling_clip_max=3.0, max_completion_length=8,
             current_gradient_accumulation_steps=1, aux_loss_enabled=False, entropy_coef=0.0,
             use_adaptive_entropy=False, multi_objective_aggregation="sum_then_normalize", scale_rewards="group",
             num_iterations=1)
"""Trainer attributes the two methods read, at TRL's defaults."""

# ----------------------------------------------------------------- the same tensors for both
N, T = 6, 7
LENGTHS = [7, 3, 0, 5, 1, 7]
"""Rows 0 and 5 fill T (truncated: no stop token), row 2 is all masked (a masked-out truncated completion)."""
ADV = torch.tensor([1.3, -0.7, 0.9, -1.6, 0.0, 0.4])

CASES = {
    "grpo": {"loss_type": "grpo"}, "bnpo": {"loss_type": "bnpo"}, "dr_grpo": {"loss_type": "dr_grpo"},
    "dapo": {"loss_type": "dapo"}, "token-mean": {"loss_type": "token-mean"},
    "seq-mean-token-mean": {"loss_type": "seq-mean-token-mean"},
    "seq-mean-token-sum-norm": {"loss_type": "seq-mean-token-sum-norm"},
    "micro-batch-token-mean": {"loss_type": "micro-batch-token-mean"},
    "luspo": {"loss_type": "luspo", "importance_sampling_level": "sequence"},
    "luspo-token": {"loss_type": "luspo"},
    "cispo": {"loss_type": "cispo", "epsilon_high": 5.0},
    "sapo": {"loss_type": "sapo"},
    "sapo-temperatures": {"loss_type": "sapo", "sapo_temperature_pos": 0.5, "sapo_temperature_neg": 2.0},
    "vespo": {"loss_type": "vespo"},
    "vespo-shape": {"loss_type": "vespo", "vespo_k_pos": 1.0, "vespo_lambda_pos": 1.5, "vespo_k_neg": 2.0,
                    "vespo_lambda_neg": 4.0},
    "gspo": {"loss_type": "grpo", "importance_sampling_level": "sequence"},
    "gspo-dapo": {"loss_type": "dapo", "importance_sampling_level": "sequence"},
    "clip-higher": {"epsilon_high": 0.28},
    "delta": {"delta": 4.0},
    "delta-grpo": {"loss_type": "grpo", "delta": 1.5, "epsilon_high": 0.28},
    "kl": {"beta": 0.04},
    "kl-grpo": {"loss_type": "grpo", "beta": 0.04},
    "bias-corrected-kl": {"beta": 0.04, "use_bias_correction_kl": True},
    "bias-corrected-kl-gspo": {"loss_type": "grpo", "beta": 0.04, "use_bias_correction_kl": True,
                               "importance_sampling_level": "sequence"},
    "cispo-kl": {"loss_type": "cispo", "epsilon_high": 5.0, "beta": 0.04},
    "sapo-kl": {"loss_type": "sapo", "beta": 0.04},
    "vespo-kl": {"loss_type": "vespo", "beta": 0.04},
    "off-policy-mask": {"off_policy_mask_threshold": 0.05},
    "off-policy-mask-gspo": {"loss_type": "grpo", "off_policy_mask_threshold": 0.02,
                             "importance_sampling_level": "sequence"},
    "top-entropy": {"top_entropy_quantile": 0.2},
    "top-entropy-0": {"top_entropy_quantile": 0.0},
    "top-entropy-grpo": {"loss_type": "grpo", "top_entropy_quantile": 0.5},
    "entropy-bonus": {"entropy_coef": 0.01},
    "entropy-bonus-top": {"entropy_coef": 0.05, "top_entropy_quantile": 0.5, "loss_type": "grpo"},
}


def make_batch(seed: int = 0, dtype=torch.float32, extreme: bool = False) -> dict:
    """Per-token tensors ``[N, T]``: leaves ``logps`` and ``entropy`` (grad), ``old``, ``ref``, ``sampling`` (the
    sampler's), ``mask`` (bool, :data:`LENGTHS`); masked positions hold finite values as padding does."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(T)[None] < torch.tensor(LENGTHS)[:, None]
    logps = -torch.rand(N, T, generator=g) * 4 - 0.05
    old = logps + 0.3 * torch.randn(N, T, generator=g)
    ref = logps + 0.2 * torch.randn(N, T, generator=g)
    sampling = old + 0.25 * torch.randn(N, T, generator=g)
    entropy = torch.rand(N, T, generator=g) * 3
    if extreme:  # ratios exp(+-15), exp(-12), exp(9), exp(-14), exp(10) with A < 0, an old log-prob of -16
        old[0, :3] = logps[0, :3] - torch.tensor([15.0, -12.0, 9.0])
        old[3, 1], old[5, 6], old[1, 1] = logps[3, 1] + 14.0, -16.0, logps[1, 1] - 10.0
        sampling[1, :2] = old[1, :2] - 6.0
    out = {k: v.to(dtype) for k, v in dict(logps=logps, old=old, ref=ref, sampling=sampling, entropy=entropy).items()}
    out["logps"].requires_grad_(True), out["entropy"].requires_grad_(True)
    return {**out, "mask": mask, "adv": ADV.clone()}


def trl_side(options: dict) -> tuple[dict, dict]:
    """lit_grpo's options as TRL's trainer attributes and config fields (a formula name as its paper alias)."""
    paper = {formula: alias for alias, formula in AGGREGATION_ALIASES.items()}
    options = {**options, "loss_type": paper.get(options.get("loss_type", "dapo"), options.get("loss_type", "dapo"))}
    args = {k: v for k, v in options.items() if k in ARGS}
    return args, {k: v for k, v in options.items() if k not in ARGS}


def ours(b: dict, options: dict, **inputs) -> torch.Tensor:
    """lit_grpo's loss on batch ``b`` (one micro-batch, one rank) with ``options`` (config names)."""
    cfg = GRPOConfig(**{k: v for k, v in options.items() if k != "max_completion_length"})
    top = PolicyPasses(None, cfg, T).entropy_mask(b["entropy"].detach(), b["mask"])
    loss, _ = grpo_loss(b["logps"], b["old"], b["adv"], b["mask"], ref_logps=b["ref"], max_completion_length=T,
                        entropy=b["entropy"], entropy_mask=top, entropy_coef=cfg.entropy_coef,
                        **cfg.loss_options(), **inputs)
    return loss


def theirs(b: dict, options: dict, trainer=None, **inputs) -> torch.Tensor:
    """TRL's loss on the float32 copies of batch ``b`` (gradients flow back to the same leaves)."""
    args, attrs = trl_side(options)
    trainer = trainer or trl_trainer(args, max_completion_length=T, **attrs)
    f = {k: b[k].float() for k in ("logps", "old", "ref", "entropy")}
    return trl_loss(trainer, f["logps"], b["mask"], b["adv"], f["entropy"], old_per_token_logps=f["old"],
                               ref_per_token_logps=f["ref"], **inputs)


def differences(b: dict, loss_a: torch.Tensor, loss_b: torch.Tensor) -> tuple[float, float]:
    """Largest relative differences of the two losses and of their gradients w.r.t. the log-probs and entropies."""
    leaves = [b["logps"], b["entropy"]]
    ga = torch.autograd.grad(loss_a, leaves, allow_unused=True, retain_graph=True)
    gb = torch.autograd.grad(loss_b, leaves, allow_unused=True, retain_graph=True)
    rel = lambda x, y: ((x.float() - y.float()).abs().max() / max(1.0, y.float().abs().max().item())).item()  # noqa
    grads = [rel(x if x is not None else torch.zeros_like(l), y if y is not None else torch.zeros_like(l))
             for x, y, l in zip(ga, gb, leaves)]
    return rel(loss_a, loss_b), max(grads)



def trl_trainer(args: dict | None = None, **attrs):
    """A ``trl.GRPOTrainer`` holding only what ``_compute_loss`` and ``_generate_and_score_completions`` read:
    ``attrs`` set trainer attributes (``loss_type``, ``beta``, ``epsilon_high``...), ``args`` fields of its config
    (``delta``, ``use_bias_correction_kl``...); one process, in training mode."""
    from trl import GRPOTrainer

    trainer = object.__new__(GRPOTrainer)
    trainer.args = types.SimpleNamespace(**{**ARGS, **(args or {})})
    trainer.accelerator = types.SimpleNamespace(
        num_processes=1, process_index=0, sync_gradients=True, device=torch.device("cpu"), gather=lambda x: x,
        reduce=lambda x, reduction="sum": x, pad_across_processes=lambda x, dim=0, pad_index=0: x,
        autocast=contextlib.nullcontext, gather_for_metrics=lambda x: x)
    trainer.model = types.SimpleNamespace(training=True, is_gradient_checkpointing=False)
    values = {**ATTRS, **attrs}
    values["_entropy_bonus_enabled"] = values["entropy_coef"] != 0.0 or values["use_adaptive_entropy"]
    values.setdefault("_last_world_entropy", math.inf)
    values.setdefault("_entropy_window_stats", None)
    for key, value in values.items():
        setattr(trainer, key, value)
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return trainer


def trl_loss(trainer, logps: Tensor, mask: Tensor, advantages: Tensor, entropy: Tensor | None = None,
             **inputs) -> Tensor:
    """TRL's ``_compute_loss`` with the model's per-token log-probs ``[N, T]`` (and entropies) given. ``mask``
    ``[N, T]`` (TRL's ``completion_mask``, as long), ``advantages`` ``[N]``; ``inputs``: its other keys
    (``old_per_token_logps``, ``ref_per_token_logps``, ``sampling_per_token_logps``, ``importance_sampling_ratio``,
    ``num_items_in_batch``, default the mask's token count)."""
    n, t = logps.shape
    entropy = torch.zeros_like(logps) if entropy is None else entropy
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, entropy, None)
    batch = dict(prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1, dtype=torch.long),
                 completion_ids=torch.zeros(n, t, dtype=torch.long), completion_mask=mask.long(),
                 advantages=advantages, num_items_in_batch=mask.sum())
    return trainer._compute_loss(None, {**batch, **inputs})


def trl_generation(trainer, rewards: Tensor, weights: list[float], group_size: int, lengths: list[int],
                   old_logps: Tensor | None = None, sampling_logps: Tensor | None = None) -> dict:
    """TRL's ``_generate_and_score_completions`` on given rewards ``[N, K]`` (NaN = None) with ``weights`` ``[K]``,
    completions of ``lengths`` tokens (at least 1 each), the policy's log-probs ``old_logps`` ``[N, T]`` and the
    sampler's ``sampling_logps`` ``[N, T]`` (with ``trainer.use_vllm``): its output dict (``advantages`` ``[N]``,
    ``importance_sampling_ratio``, ``completion_mask``...)."""
    n = rewards.shape[0]
    trainer.reward_funcs = [None] * rewards.shape[1]
    trainer.reward_func_names = [f"r{k}" for k in range(rewards.shape[1])]
    trainer.reward_weights = torch.tensor(weights, dtype=torch.float32)
    trainer.num_generations = group_size
    trainer.environment_factories, trainer.tools, trainer.environments = None, [], None
    trainer._tokenizer = types.SimpleNamespace(pad_token_id=0)
    trainer.pad_to_multiple_of, trainer.mask_truncated_completions = None, False
    trainer.eos_token_ids, trainer.log_multimodal = [1], False
    trainer._logs = {"prompt": deque(), "completion": deque(), "rewards": defaultdict(deque), "advantages": deque(),
                     "extra": defaultdict(deque)}
    trainer._pending_extra_logs, trainer._pending_metrics = {}, {}
    sampled = None if sampling_logps is None else [sampling_logps[i, :k].tolist() for i, k in enumerate(lengths)]
    completions = [[5] * k for k in lengths]
    trainer._generate = lambda prompts: ([[7, 7]] * n, completions, None, ["x"] * n, sampled, {}, None, [])
    trainer._calculate_rewards = lambda *a: rewards.float()
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (old_logps, None, None)
    return trainer._generate_and_score_completions([{"prompt": "p"}] * n)
