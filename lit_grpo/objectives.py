"""The registered variants of the policy-gradient objective that :func:`lit_grpo.grpo.grpo_loss` composes.

A loss is ``aggregate(policy_term(ratio, A) * masks * sampler_ratio + beta * KL)``. Each part is a registered
function named by what it computes, and each TRL ``loss_type`` is a (policy term, aggregation) pair:

- **policy terms** (:data:`POLICY_TERMS`), per token: ``clip`` (the PPO / GRPO clipped surrogate, with the
  optional two-sided cap ``delta``), ``cispo``, ``sapo``, ``vespo``;
- **aggregations** (:data:`LOSS_AGGREGATIONS`), per-token losses -> a scalar, named by formula as verl's
  ``agg_loss`` (``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum``, ``seq-mean-token-sum-norm``,
  ``micro-batch-token-mean``), the paper names (``dapo``, ``grpo``, ``luspo``, ``dr_grpo``, ``bnpo``) as aliases;
- **loss types** (:data:`LOSS_TYPES`): TRL 1.16's ``loss_type`` names and every aggregation name;
- **corrections**: the sampler's importance weight (:func:`sampler_correction`), DeepSeek-V3.2's off-policy
  sequence mask (:func:`off_policy_mask`), the high-entropy token mask (:func:`high_entropy_mask`), VESPO's gamma
  weights (:func:`gamma_weights`) and Skywork-OR1's adaptive entropy coefficient (:func:`adapt_entropy_coef`).

Shapes: ``N`` completions, ``T`` completion tokens; ``ratio`` is ``[N, T]`` (token level) or ``[N, 1]`` (sequence
level, GSPO), ``A`` ``[N, 1]``; a per-token loss is ``[N, T]`` or ``[N, 1]`` (broadcast against the ``[N, T]`` mask).
Every function here equals TRL 1.16's ``GRPOTrainer`` on the same tensors (``tests/test_objectives_trl.py``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
from torch import Tensor

from lit_grpo.registry import Registry

# ----------------------------------------------------------------- aggregations: per-token losses -> scalar

LOSS_AGGREGATIONS: Registry[Callable[..., Tensor]] = Registry("loss aggregation")
"""Formula name (and paper alias) -> ``fn(per_token, mask, *, num_items, num_sequences, max_completion_length,
num_micro_batches) -> scalar``; ``S_n = sum_t loss_nt * mask_nt``. The counts are those of the whole optimizer
update (every micro-batch and rank), so accumulation and world size do not change the objective, except for
``micro-batch-token-mean``, a mean per micro-batch by definition."""
AGGREGATION_ALIASES = LOSS_AGGREGATIONS.aliases
"""Paper name -> formula name."""
register_aggregation = LOSS_AGGREGATIONS.register
"""``@register_aggregation("formula-name", "paper_alias", ...)``."""


@register_aggregation("token-mean", "dapo")
def token_mean(per_token: Tensor, mask: Tensor, *, num_items: float, **_) -> Tensor:
    """``sum_n S_n / num_items``: every token of the step weighs the same (DAPO, Yu et al. 2025, eq. 8)."""
    return (per_token * mask).sum() / max(float(num_items), 1.0)  # an update with no valid token: 0, not NaN


@register_aggregation("seq-mean-token-mean", "grpo")
def seq_mean_token_mean(per_token: Tensor, mask: Tensor, *, num_sequences: float, **_) -> Tensor:
    """``sum_n (S_n / T_n) / num_sequences``: each sequence's token mean, averaged (GRPO, Shao et al. 2024, eq. 3)."""
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (N,); an all-masked row counts 0
    # a sum over this micro-batch / the update's sequences: summed over micro-batches it is the update's mean
    return per_seq.sum() / num_sequences


@register_aggregation("seq-mean-token-sum", "luspo")
def seq_mean_token_sum(per_token: Tensor, mask: Tensor, *, num_sequences: float, **_) -> Tensor:
    """``sum_n S_n / num_sequences``: each sequence weighs its length (LUSPO, arXiv 2602.05261)."""
    return (per_token * mask).sum(-1).sum() / num_sequences


@register_aggregation("seq-mean-token-sum-norm", "dr_grpo")
def seq_mean_token_sum_norm(per_token: Tensor, mask: Tensor, *, num_sequences: float, max_completion_length,
                            **_) -> Tensor:
    """``sum_n S_n / (num_sequences * max_completion_length)``: a constant normaliser (Dr. GRPO, Liu et al. 2025,
    sec. 3.1). Raises ``ValueError`` without ``max_completion_length``."""
    if max_completion_length is None:
        raise ValueError("loss_type='dr_grpo' needs max_completion_length")
    return (per_token * mask).sum() / (num_sequences * max_completion_length)


@register_aggregation("micro-batch-token-mean", "bnpo")
def micro_batch_token_mean(per_token: Tensor, mask: Tensor, *, num_micro_batches: int = 1, **_) -> Tensor:
    """This micro-batch's token mean over ``num_micro_batches`` (every rank's, so the step's objective is the mean
    of the micro-batch means; BNPO, Xiao et al. 2025)."""
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0) / num_micro_batches


# ----------------------------------------------------------------- policy terms: the per-token surrogate


@dataclasses.dataclass(frozen=True)
class PolicyTerm:
    """A registered per-token policy loss. ``fn(ratio, adv, *, logps, log_ratio, mask, sampler_ratio, **options)
    -> per_token``; ``absorbs_sampler_ratio``: it uses the sampler's weight itself (else the loss multiplies by
    it); ``clip_bounds(epsilon_low, epsilon_high)``: the ratios below / above which a token with ``A < 0`` / ``A > 0``
    counts as clipped (``clip_ratio_low`` / ``_high``; None: the term clips nothing)."""

    fn: Callable[..., Tensor]
    absorbs_sampler_ratio: bool = False
    clip_bounds: Callable[[float, float], tuple[float, float]] | None = None


POLICY_TERMS: Registry[PolicyTerm] = Registry("policy loss")


def register_policy_term(name: str, absorbs_sampler_ratio: bool = False, clip_bounds=None):
    """Register a per-token policy loss (as verl's ``register_policy_loss``)."""

    def deco(fn):
        POLICY_TERMS.register(name)(PolicyTerm(fn, absorbs_sampler_ratio, clip_bounds))
        return fn

    return deco


@register_policy_term("clip", clip_bounds=lambda low, high: (1 - low, 1 + high))
def clipped_surrogate(ratio: Tensor, adv: Tensor, *, epsilon_low: float, epsilon_high: float,
                      delta: float | None = None, **_) -> Tensor:
    """``-min(min(rho, delta) * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)`` (PPO, Schulman et al. 2017; GRPO;
    the cap ``delta`` of two-sided clipping, INTELLECT-2, arXiv 2505.07291: a negative-advantage token's ratio
    cannot weigh more than ``delta``)."""
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    if delta is not None:  # the cap applies to the unclipped branch only: the clipped one is at most 1 + eps_high
        ratio = ratio.clamp(max=delta)
    # the min takes the pessimistic branch: a token whose ratio left the clip range in the advantage's direction
    # gets the clipped (constant) value and no gradient; one that moved against it keeps its gradient
    return -torch.min(ratio * adv, clipped * adv)


@register_policy_term("cispo", clip_bounds=lambda low, high: (-math.inf, high))
def cispo(ratio: Tensor, adv: Tensor, *, logps: Tensor, epsilon_high: float, **_) -> Tensor:
    """``-sg(min(rho, eps_high)) * A * log pi``: the importance weight clipped and detached, every token keeps a
    gradient (CISPO, MiniMax-M1, arXiv 2506.13585; ``epsilon_high`` is ScaleRL's ``eps_max``, e.g. 5)."""
    # detached weight times log pi: the gradient is the REINFORCE one scaled by the capped ratio, never zeroed
    return -ratio.clamp(max=epsilon_high).detach() * adv * logps


@register_policy_term("sapo")
def sapo(ratio: Tensor, adv: Tensor, *, sapo_temperature_pos: float, sapo_temperature_neg: float, **_) -> Tensor:
    """``-sigmoid(tau (rho - 1)) * 4 / tau * A`` with ``tau`` = ``sapo_temperature_pos`` where ``A > 0``, else
    ``_neg``: a soft gate instead of the hard clip, gradient ``rho``-weighted 1 at ``rho = 1`` (SAPO,
    arXiv 2511.20347)."""
    tau = torch.where(adv > 0, sapo_temperature_pos, sapo_temperature_neg)  # (N, 1)
    # 4 / tau: sigmoid's slope at 0 is 1/4, so d soft / d rho = 1 at rho = 1, the plain surrogate's gradient there
    soft = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    return -soft * adv


@register_policy_term("vespo", absorbs_sampler_ratio=True)
def vespo(ratio: Tensor, adv: Tensor, *, logps: Tensor, log_ratio: Tensor, mask: Tensor,
          sampler_ratio: Tensor | None = None, vespo_k_pos: float = 2.0, vespo_lambda_pos: float = 3.0,
          vespo_k_neg: float = 3.0, vespo_lambda_neg: float = 2.0, **_) -> Tensor:
    """``-phi(w) * A * log pi`` with the detached gamma weight of the sequence ratio (:func:`gamma_weights`)
    (VESPO, arXiv 2602.10693)."""
    phi = gamma_weights(adv, log_ratio, mask, sampler_ratio, vespo_k_pos, vespo_lambda_pos, vespo_k_neg,
                        vespo_lambda_neg)  # (N, 1)
    return -phi * adv * logps


@torch.no_grad()
def gamma_weights(adv: Tensor, log_ratio: Tensor, mask: Tensor, sampler_ratio: Tensor | None, k_pos: float,
                  lambda_pos: float, k_neg: float, lambda_neg: float) -> Tensor:
    """VESPO's weight ``phi(w) = exp(lambda + k log w - lambda w)`` (``phi(1) = 1``) of the sequence ratio
    ``log w = sum_t log(pi / pi_old) (+ sum_t log sampler_ratio)``, ``(k, lambda)`` by the sign of ``A``; ``log w``
    clamped to ``[log 1e-8, 20]``, non-finite ``phi`` -> 0. Shape: adv ``[N, 1]``, log_ratio / mask / sampler_ratio
    ``[N, T]`` -> ``[N, 1]``."""
    low = math.log(1e-8)
    seq = (log_ratio.clamp(-20.0, 20.0) * mask).sum(-1, keepdim=True)  # (N, 1)
    if sampler_ratio is not None:  # pi_old / mu joins the sequence ratio: the weight is of pi / mu
        seq = seq + torch.log(sampler_ratio).clamp(low, 20.0).sum(-1, keepdim=True)
    log_w = seq.clamp(low, 20.0)  # a long sequence's sum can be huge: exp(log_w) below must stay finite
    positive = adv >= 0
    k = torch.where(positive, k_pos, k_neg)
    lam = torch.where(positive, lambda_pos, lambda_neg).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


# ----------------------------------------------------------------- loss types: TRL's names


@dataclasses.dataclass(frozen=True)
class LossType:
    """A ``loss_type``: the policy term and the aggregation it combines (both registered names)."""

    policy: str
    aggregation: str


LOSS_TYPES: Registry[LossType] = Registry("loss type")


def register_loss_type(name: str, policy: str, aggregation: str) -> LossType:
    """Register ``name`` as the pair (``policy`` term, ``aggregation``); both must be registered."""
    POLICY_TERMS.get(policy), LOSS_AGGREGATIONS.get(aggregation)
    return LOSS_TYPES.register(name)(LossType(policy, aggregation))


for _name in LOSS_AGGREGATIONS.names():  # every aggregation name (paper aliases included) with the clipped surrogate
    register_loss_type(_name, "clip", _name)
register_loss_type("cispo", "cispo", "token-mean")
register_loss_type("sapo", "sapo", "seq-mean-token-mean")
register_loss_type("vespo", "vespo", "token-mean")
# luspo (clipped surrogate, seq-mean-token-sum) is registered above as the aggregation's alias

# ----------------------------------------------------------------- corrections and masks

SAMPLER_CORRECTION_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@torch.no_grad()
def sampler_correction(old_logps: Tensor, sampling_logps: Tensor, mask: Tensor, mode: str = "sequence_mask",
                       ratio_min: float | None = None, ratio_max: float | None = 3.0) -> Tensor:
    """The importance weight ``pi_old / mu`` of a rollout drawn from a sampler ``mu`` that is not the policy
    whose log-probs the log-prob pass computed (other weights, another engine): per token (``token_*``) or the
    product over the sequence (``sequence_*``), then ``*_truncate`` clamps it to ``[ratio_min, ratio_max]`` (TIS,
    Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training") and ``*_mask``
    zeroes it outside (MIS). A NaN sampler log-prob (the sampler could not score the token) gives weight 1.

    Shape: old / sampling ``[N, T]`` float, mask ``[N, T]`` -> ``[N, T]`` (token) or ``[N, 1]`` (sequence), 1
    where the two log-probs agree. Raises ``ValueError`` on an unknown mode.
    """
    if mode not in SAMPLER_CORRECTION_MODES:
        raise ValueError(f"sampler correction mode must be one of {', '.join(SAMPLER_CORRECTION_MODES)}, got {mode!r}")
    ratio = _sampler_weight(old_logps, sampling_logps, mask, mode.startswith("sequence"))
    if mode.endswith("truncate"):  # TIS: an extreme weight is capped, the token keeps some signal
        return torch.clamp(ratio, min=ratio_min, max=ratio_max)
    # MIS: an extreme weight means sampler and policy disagree there: weight 0 rather than a capped guess
    low = -math.inf if ratio_min is None else ratio_min
    high = math.inf if ratio_max is None else ratio_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def _sampler_weight(old_logps: Tensor, sampling_logps: Tensor, mask: Tensor, sequence: bool) -> Tensor:
    """``pi_old / mu`` before any bound: per token ``[N, T]``, or the product over the completion ``[N, 1]``."""
    diff = torch.nan_to_num((old_logps - sampling_logps) * mask, nan=0.0)  # (N, T); NaN (unscored) -> weight 1
    # a sequence's weight is the product of its tokens': the exp of the sum of their log-ratios
    return torch.exp(diff.sum(-1, keepdim=True) if sequence else diff)


@torch.no_grad()
def corrected(old_logps: Tensor, sampling_logps: Tensor, mask: Tensor, mode: str = "sequence_mask",
              ratio_min: float | None = None, ratio_max: float | None = 3.0) -> tuple[Tensor, Tensor]:
    """Which weights :func:`sampler_correction` (same arguments) changed: zeroed (``*_mask``) or clamped
    (``*_truncate``) because the uncorrected weight fell outside ``[ratio_min, ratio_max]``. Returns the valid
    tokens so touched ``[N, T]`` bool (at the sequence level: every token of a touched completion) and the
    completions with at least one ``[N]`` bool.

    At the sequence level the weight is a product over the completion: a per-token log-ratio ``d`` over ``L`` tokens
    gives ``exp(L d)``, so 1e-3 over 2,000 tokens is e^2 = 7.4, over the default cap of 3."""
    raw = _sampler_weight(old_logps, sampling_logps, mask, mode.startswith("sequence"))
    low = -math.inf if ratio_min is None else ratio_min
    high = math.inf if ratio_max is None else ratio_max
    outside = (raw < low) | (raw > high)  # (N, T) or (N, 1)
    tokens = outside.expand_as(mask) & mask.bool()
    return tokens, tokens.any(-1)


@torch.no_grad()
def off_policy_mask(adv: Tensor, logps: Tensor, sampling_logps: Tensor, mask: Tensor, threshold: float) -> Tensor:
    """DeepSeek-V3.2's off-policy sequence mask (arXiv 2512.02556, eq. 9): drop a sequence with ``A < 0`` whose mean
    ``log mu - log pi`` (the sampler's log-prob minus the current one, NaN counted as 0) over its tokens exceeds
    ``threshold``. Shape: adv ``[N, 1]``, logps / sampling_logps / mask ``[N, T]`` -> ``[N, 1]`` (1 keep, 0 drop)."""
    kl = torch.nan_to_num(sampling_logps - logps, nan=0.0)  # (N, T): a one-sample estimate of KL(mu || pi)
    mean_kl = (kl * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1.0)  # (N, 1)
    # only negative advantages are dropped: pushing down a sequence the policy already moved away from is the
    # off-policy update that destabilises training; positive ones still teach
    return ((adv >= 0) | (mean_kl <= threshold)).to(logps.dtype)


def entropy_threshold(entropies: Tensor, quantile: float) -> Tensor | None:
    """The entropy above which a token is in the top ``quantile`` (``torch.quantile`` at ``1 - quantile``, linear
    interpolation) of ``entropies`` (every valid token of the micro-batch on every rank, ``[M]``); None when empty
    (Wang et al. 2025, "Beyond the 80/20 rule", arXiv 2506.01939)."""
    return torch.quantile(entropies.float(), 1 - quantile) if entropies.numel() else None


def high_entropy_mask(entropy: Tensor, mask: Tensor, threshold: Tensor | None) -> Tensor:
    """Valid tokens whose entropy is at least ``threshold`` (none when it is None). Shape: ``[N, T]`` -> ``[N, T]``
    bool."""
    if threshold is None:
        return torch.zeros_like(mask, dtype=torch.bool)
    return ((entropy * mask.float()) >= threshold) & mask.bool()  # padding's entropy is no token's: never picked


def adapt_entropy_coef(coef: float, entropy: float, target: float, step: float, low: float, high: float) -> float:
    """Skywork-OR1's adaptive entropy control (arXiv 2505.22312): after each optimizer update the
    coefficient rises by ``step`` when the update's mean entropy (over the tokens the bonus acts on, every rank) is
    at most ``target`` and falls by ``step`` otherwise, within ``[low, high]``. The next update applies it only
    while that entropy is at most ``target`` (see :func:`applied_entropy_coef`)."""
    return min(coef + step, high) if entropy <= target else max(coef - step, low)


def applied_entropy_coef(coef: float, last_entropy: float, target: float) -> float:
    """The bonus weight an adaptive update applies: ``coef`` while the last update's entropy was at most ``target``,
    else 0 (``last_entropy`` starts at ``inf``: no bonus before the first measurement)."""
    return coef if last_entropy <= target else 0.0
