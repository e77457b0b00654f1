"""GRPO maths as pure functions on tensors: token log-probs, group advantages, the policy-gradient loss, KL.

Shapes: ``B`` prompts, ``G`` completions per prompt (a group), ``N = B * G`` completions with the
``G`` completions of one prompt contiguous, ``T`` completion tokens, ``V`` vocabulary, ``K`` reward terms.

Sources: GRPO (Shao et al. 2024, DeepSeekMath, eq. 3 with the k3 KL estimator of Schulman 2020); the
advantage scalings (:data:`ADVANTAGE_SCALES`: GRPO's group std, REINFORCE++'s batch std, Dr. GRPO's none) and
GDPO's per-reward normalisation (:func:`decoupled_advantages`); :func:`grpo_loss` composes the registered policy
terms, aggregations and corrections of :mod:`lit_grpo.objectives` (clip-higher and token-level aggregation
``dapo``, Yu et al. 2025, eq. 8; ``dr_grpo``, Liu et al. 2025, sec. 3.1; ``bnpo``, Xiao et al. 2025; GSPO,
CISPO, SAPO, LUSPO, VESPO, INTELLECT-2's two-sided clip, DeepSeek-V3.2's off-policy mask and unbiased KL)."""

from __future__ import annotations

import contextlib
import inspect
import math
from typing import Callable

import torch
from torch import Tensor

from lit_grpo.objectives import LOSS_AGGREGATIONS, LOSS_TYPES, POLICY_TERMS, off_policy_mask
from lit_grpo.registry import Registry

LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to ``[-20, 20]`` before ``exp`` so a stale or masked token cannot overflow."""


def scale_logits(logits: Tensor, temperature: float, suppress_ids: Tensor | None = None) -> Tensor:
    """Next-token logits before truncation: ``suppress_ids`` (tokens the sampler never emits, e.g. image
    placeholders) set to ``-inf``, then divided by ``temperature``. Shape: ``[n, V]`` -> ``[n, V]`` float32."""
    logits = logits.float()  # a bfloat16 log-softmax is off by ~0.01 nats: enough to move a ratio across the clip
    if suppress_ids is not None and suppress_ids.numel():  # -inf before the temperature: exp gives exactly 0
        logits = logits.index_fill(-1, suppress_ids.to(logits.device), float("-inf"))
    return logits / temperature


def truncate_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Top-k, then top-p (nucleus) truncation of scaled logits: tokens outside the kept set get ``-inf``.

    As transformers' ``TopKLogitsWarper`` and ``TopPLogitsWarper`` (one token always kept); ``top_k`` 0 and
    ``top_p`` 1 keep every token. Shape: ``[n, V]`` -> ``[n, V]``.
    """
    if top_k and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[..., -1:]  # (n, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))  # ties with the k-th all stay, as transformers'
    if top_p < 1.0:
        # ascending, as transformers sorts: drop the low tail whose mass is at most 1 - top_p, so the kept set's
        # mass is at least top_p and the boundary falls where the sampler's does
        sorted_logits, order = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -1:] = False  # keep at least one token
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))  # back to vocabulary order
    return logits


def warp(logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
         suppress_ids: Tensor | None = None) -> Tensor:
    """The sampled distribution's scores: suppressed ids removed, divided by ``temperature``, then top-k, then
    top-p; nothing else. The sampler (both paths) draws from ``softmax`` of these, and
    :func:`selective_log_softmax` gives the log-probs of the same function, so the two cannot drift apart.

    Shape: ``[n, V]`` any float dtype -> ``[n, V]`` float32.
    """
    return truncate_logits(scale_logits(logits, temperature, suppress_ids), top_k, top_p)


def selective_log_softmax(
    logits: Tensor,
    index: Tensor,
    temperature: float = 1.0,
    suppress_ids: Tensor | None = None,
    chunk_rows: int = 1024,
    with_entropy: bool | str = False,
    *,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[Tensor, Tensor | None]:
    """Log-probability of ``index`` under ``softmax(warp(logits))`` (:func:`warp`: suppressed ids removed,
    temperature, top-k, top-p: the distribution that was sampled), row chunk by row chunk.

    Only ``chunk_rows x V`` float32 values exist at once, never the whole ``[N, T, V]`` in float32. A token
    outside the kept set (possible after an update moved the policy, or by rounding at the top-p boundary)
    gets the log-prob it would have with the kept set extended by it, ``s - log(sum_kept exp + exp s)``:
    finite, with a finite gradient, and continuous as the token crosses the boundary. With ``top_k`` 0 and
    ``top_p`` 1 this is ``log_softmax(logits / temperature)`` over the unsuppressed tokens.

    Shape:
        logits ``[N, T, V]`` (any float dtype), index ``[N, T]`` long -> logps ``[N, T]`` float32 and,
        with ``with_entropy``, the entropy ``[N, T]`` float32 of the warped distribution (nats; computed
        without grad, or with it when ``with_entropy="grad"``: the entropy bonus, which keeps every chunk's
        ``[chunk_rows, V]`` probabilities for the backward).
    Raises:
        ValueError: when ``temperature <= 0``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")
    n, t, v = logits.shape
    flat_logits, flat_index = logits.reshape(n * t, v), index.reshape(n * t)  # (N*T, V), (N*T,): a view, no copy
    truncating = bool(top_k and top_k > 0) or top_p < 1.0  # without truncation skip the sort (the common case)
    logps, entropies = [], []
    # row chunks bound the float32 copy: [N*T, V] at once would be e.g. 8 x 1024 x 150k x 4 bytes = 5 GB
    for start in range(0, n * t, chunk_rows):
        scaled = scale_logits(flat_logits[start : start + chunk_rows], temperature, suppress_ids)  # (c, V)
        idx = flat_index[start : start + chunk_rows, None]  # (c, 1)
        picked = scaled.gather(1, idx).squeeze(1)  # (c,) from the untruncated scores: finite even outside the set
        chunk = truncate_logits(scaled, top_k, top_p) if truncating else scaled
        lse = torch.logsumexp(chunk, dim=-1)  # (c,)
        if truncating:  # a token outside the kept set joins it: finite and continuous at the boundary
            outside = torch.isinf(chunk.gather(1, idx).squeeze(1))
            lse = torch.logaddexp(lse, torch.where(outside, picked, torch.full_like(picked, float("-inf"))))
        logps.append(picked - lse)  # log softmax at one index, without the (c, V) log_softmax tensor
        if with_entropy:
            with torch.no_grad() if with_entropy != "grad" else contextlib.nullcontext():
                p = torch.softmax(chunk, dim=-1)
                # a truncated token has p = 0 and log p = -inf: 0 * -inf is NaN, its term must be 0
                entropies.append(-(p * torch.log_softmax(chunk, -1).nan_to_num(neginf=0.0)).sum(-1))
    out = torch.cat(logps).reshape(n, t)
    ent = torch.cat(entropies).reshape(n, t) if with_entropy else None
    return out, ent


def nan_group_stats(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """NaN-aware mean, unbiased std and valid count along the last dim (NaN = cannot score, skipped): the one
    place group statistics are computed (advantages, ``train/`` figures, per-prompt evaluation means, the
    experiments' within-group spread). The std is exactly 0 with < 2 values
    or when every valid value is equal (no rounding residue). Shape: ``[..., G]`` -> three ``[...]``."""
    valid = ~torch.isnan(x)
    count = valid.sum(-1)
    filled = torch.where(valid, x, torch.zeros_like(x))  # NaN would poison the sums: 0 and left out of the count
    mean = filled.sum(-1) / count.clamp(min=1)
    sq = torch.where(valid, (x - mean.unsqueeze(-1)) ** 2, torch.zeros_like(x)).sum(-1)
    # equal values can leave a rounding residue in the std (then A = residue / eps): found by max == min, set to 0
    flat = torch.where(valid, x, -math.inf).amax(-1) == torch.where(valid, x, math.inf).amin(-1)
    std = torch.where((count > 1) & ~flat, (sq / (count - 1).clamp(min=1)).sqrt(), torch.zeros_like(mean))
    return mean, std, count


ADVANTAGE_SCALES: Registry[Callable[..., Tensor]] = Registry("advantage scaling")
"""``scale`` of :func:`group_advantages`, by formula (paper and TRL names as aliases): ``fn(centred [B, G],
rewards [B, G], group_std [B], eps) -> [B, G]``."""
SCALE_ALIASES = ADVANTAGE_SCALES.aliases
"""Paper / TRL name -> formula name."""
register_scale = ADVANTAGE_SCALES.register
"""``@register_scale("formula-name", "alias", ...)``."""


@register_scale("group-std", "group", "grpo")
def _group_std(centred: Tensor, r: Tensor, std: Tensor, eps: float) -> Tensor:
    """``(r - mean_group) / (std_group + eps)`` (GRPO, Shao et al. 2024)."""
    return centred / (std.unsqueeze(1) + eps)


@register_scale("batch-std", "batch", "reinforce++")
def _batch_std(centred: Tensor, r: Tensor, std: Tensor, eps: float) -> Tensor:
    """``(r - mean_group) / (std_batch + eps)`` (Hu et al. 2025, REINFORCE++ baseline; TRL ``"batch"``)."""
    return centred / (nan_group_stats(r.reshape(-1))[1] + eps)


@register_scale("no-std", "none", "dr_grpo")
def _no_std(centred: Tensor, r: Tensor, std: Tensor, eps: float) -> Tensor:
    """``r - mean_group`` (Dr. GRPO, Liu et al. 2025, sec. 3.1: no question-level difficulty bias)."""
    return centred


def group_advantages(rewards: Tensor, group_size: int, scale: str | Callable[..., Tensor] = "group",
                     eps: float = 1e-4) -> Tensor:
    """Group-relative advantages ``(r - mean_group) / scale``.

    ``scale`` (:data:`ADVANTAGE_SCALES`; a name or the function it names, as the module resolves it once):
    ``"group-std"`` (alias ``"group"``) divides by the group's std + eps
    (GRPO), ``"batch-std"`` (``"batch"``) by the std of every valid reward in ``rewards`` + eps, ``"no-std"``
    (``"none"``) does not divide (Dr. GRPO). Statistics skip NaN ("cannot score") rewards and use the
    unbiased std. A NaN reward gets advantage 0; a group whose valid rewards are all equal gets
    exactly 0 (not a rounding residue).

    Shape:
        rewards ``[N]`` float, groups contiguous -> advantages ``[N]`` float32.
    Raises:
        ValueError: when ``N`` is not a multiple of ``group_size`` or ``scale`` is unknown.
    """
    if isinstance(scale, str):
        scale = ADVANTAGE_SCALES.get(scale)  # an unknown name: UnknownName, a ValueError naming the closest
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.float().reshape(-1, group_size)  # (B, G): a prompt's G completions are contiguous rows
    mean, std, _ = nan_group_stats(r)  # (B,)
    centred = scale(r - mean.unsqueeze(1), r, std, eps)  # (B, G)
    valid = ~torch.isnan(r)
    # a NaN reward (cannot score) and a flat group carry no signal: exactly 0, not the residue of r - mean
    adv = torch.where(valid & ~_flat_groups(r), centred, torch.zeros_like(centred))
    return adv.reshape(-1)


_K3_SERIES = [1.0 / math.factorial(k) for k in range(2, 17)]
"""Taylor coefficients of ``exp(d) - d - 1 = sum_{k >= 2} d^k / k!`` (to d^16: below 2e-16 relative at |d| = 0.5)."""
K3_SERIES_BELOW = 0.5
"""``|d|`` up to which :func:`k3_kl` sums the series; above it ``expm1(d) - d`` loses under one digit."""


def _flat_groups(r: Tensor) -> Tensor:
    """``[B, G]`` -> ``[B, 1]`` bool: every valid value of the group is equal (or there is none)."""
    valid = ~torch.isnan(r)
    return (torch.where(valid, r, -math.inf).amax(1) == torch.where(valid, r, math.inf).amin(1)).unsqueeze(1)


def decoupled_sum(rewards: Tensor, weights: Tensor, group_size: int, eps: float = 1e-4,
                  unscorable: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """GDPO's per-completion sum ``S = sum_k w_k z_k`` of each reward normalised within its group (``z_k`` as in
    :func:`decoupled_advantages`), NaN on an unscorable row (default: every reward NaN), and the weighted terms
    ``w_k z_k``. ``S`` is what GDPO's advantages normalise: a group whose ``S`` values are all equal gives its
    completions no signal, whatever its rewards' weighted totals.

    Shape: rewards ``[N, K]``, weights ``[K]``, unscorable ``[N]`` -> ``S`` ``[N]`` and terms ``[N, K]`` float32.
    Raises:
        ValueError: ``N`` is not a multiple of ``group_size``.
    """
    n, k = rewards.shape
    if group_size < 1 or n % group_size:
        raise ValueError(f"{n} rewards do not split into groups of {group_size}")
    r = rewards.float().reshape(-1, group_size, k).transpose(1, 2)  # (B, K, G)
    mean, std, _ = nan_group_stats(r)  # (B, K)
    z = (r - mean.unsqueeze(-1)) / (std.unsqueeze(-1) + eps)
    z = torch.where(torch.isnan(r) | _flat_groups(r.reshape(-1, group_size)).reshape(r.shape[0], k, 1),
                    torch.zeros_like(z), z)
    z = z.transpose(1, 2).reshape(n, k) * weights.float()  # (N, K) weighted
    bad = torch.isnan(rewards).all(1) if unscorable is None else unscorable.bool()  # (N,)
    return torch.where(bad, torch.full_like(z[:, 0], math.nan), z.sum(1)), z  # (N,) NaN = unscorable


def decoupled_advantages(rewards: Tensor, weights: Tensor, group_size: int, eps: float = 1e-4,
                         unscorable: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """GDPO (arXiv 2601.05242; TRL ``multi_objective_aggregation="normalize_then_sum"``): each reward normalised
    within its group, ``z_k = (r_k - mean_group) / (std_group + eps)`` (0 where ``r_k`` is NaN or the group's
    values of ``r_k`` are all equal), the weighted sum ``S = sum_k w_k z_k``, then ``A = (S - mean S) /
    (std S + eps)`` over the whole batch; a row in ``unscorable`` (default: every reward NaN) gets ``A = 0``.

    Also returns each reward's contribution ``c_k = w_k (z_k - mean z_k) / (std S + eps)`` (means over the
    scorable rows; 0 on unscorable ones): ``A = sum_k c_k``, so ``c_k`` says how much reward ``k`` moves each
    completion's advantage.

    Shape: rewards ``[N, K]`` (NaN = cannot score), weights ``[K]``, unscorable ``[N]`` bool -> advantages
    ``[N]`` and contributions ``[N, K]`` float32.
    Raises:
        ValueError: ``N`` is not a multiple of ``group_size``.
    """
    total, z = decoupled_sum(rewards, weights, group_size, eps, unscorable)
    bad = torch.isnan(total)
    s_mean, s_std, _ = nan_group_stats(total)
    if _flat_groups(total[None]).item():  # every scorable total equal (or none): no signal, exactly 0
        return torch.zeros_like(total), torch.zeros_like(z)
    scale = s_std + eps
    adv = torch.where(bad, torch.zeros_like(total), (total - s_mean) / scale)
    parts = torch.where(bad.unsqueeze(1), torch.zeros_like(z), (z - z[~bad].mean(0)) / scale)
    return adv, parts


def k3_kl(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(policy || reference): ``exp(d) - d - 1`` with ``d = ref - logp``.

    Unbiased (Schulman 2020, "Approximating KL divergence") and never negative: written as it reads, the
    difference cancels for small ``d`` (``d = 1e-6`` in float32 gives -5.96e-08 instead of 5.0e-13), so for
    ``|d| <= 0.5`` it is the Taylor series ``d^2/2! + d^3/3! + ... + d^16/16!`` (Horner; every term's sum positive
    there), and above ``expm1(d) - d``; both exact to the dtype's precision. ``d`` is clamped to ``[-20, 20]``.
    Shape: ``[N, T]`` -> ``[N, T]``.
    """
    d = (ref_logps - logps).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (N, T); float32 exp overflows past ~88
    small = d.abs() <= K3_SERIES_BELOW
    x = torch.where(small, d, torch.zeros_like(d))  # the series only where it converges fast (no overflow elsewhere)
    series = torch.full_like(x, _K3_SERIES[-1])
    for c in reversed(_K3_SERIES[:-1]):  # Horner: one multiply-add a term, no power of d
        series = series * x + c
    return torch.where(small, series * x * x, torch.expm1(d) - d)


LOSS_OPTIONS = {"importance_sampling_level": "token", "delta": None, "sapo_temperature_pos": 1.0,
                "sapo_temperature_neg": 1.05, "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0,
                "vespo_lambda_neg": 2.0, "use_bias_correction_kl": False, "off_policy_mask_threshold": None}
"""The options of :class:`GRPOLoss` that select a variant, with their defaults (the plain clipped surrogate)."""


class GRPOLoss:
    """The policy-gradient loss of one micro-batch, its variant resolved once: ``loss_type``'s policy term
    (:mod:`lit_grpo.objectives`), masked and corrected, plus ``beta`` times k3 KL, aggregated, minus an entropy bonus.
    Per token, with the importance ratio ``rho`` of :func:`importance_ratio` (per token, or GSPO's per sequence with
    ``importance_sampling_level``):

        loss = term(rho, A) * opm * entropy_mask * sampler_ratio + beta * KL * (rho if use_bias_correction_kl)

    ``term``: ``clip`` (``-min(min(rho, delta) A, clip(rho, 1 - epsilon_low, 1 + epsilon_high) A)``) for ``grpo``,
    ``bnpo``, ``dr_grpo``, ``dapo``, ``luspo`` and the aggregation names; ``cispo``, ``sapo``, ``vespo`` their own.
    ``opm``: DeepSeek-V3.2's off-policy sequence mask (``off_policy_mask_threshold``; against ``sampling_logps``,
    default ``old_logps``). ``entropy_mask``: the high-entropy tokens ("Beyond the 80/20 rule"). ``sampler_ratio``:
    ``pi_old / mu`` of an off-policy sampler (VESPO folds it into its weight). KL: k3 to ``ref_logps``, times ``rho``
    with ``use_bias_correction_kl`` (DeepSeek-V3.2's unbiased KL gradient). The aggregation is ``loss_type``'s
    (``token-mean`` = ``dapo``: ``S / num_items``; ``seq-mean-token-mean`` = ``grpo``; ``seq-mean-token-sum-norm`` =
    ``dr_grpo``; ``seq-mean-token-sum`` = ``luspo``; ``micro-batch-token-mean`` = ``bnpo``), then ``entropy_coef``
    times :func:`entropy_bonus` is subtracted (``entropy`` must carry the gradient).

    Built once per run (:class:`lit_grpo.passes.PolicyPasses`) from the settings (``options``: :data:`LOSS_OPTIONS`);
    each call takes one micro-batch. ``num_items`` (tokens), ``num_sequences`` and ``num_micro_batches`` default to
    the call's; pass the whole update's (every micro-batch and rank) so accumulation does not change the objective.
    Inputs of any float dtype are computed in float32.

    Shape: logps, old_logps, ref_logps, sampling_logps, entropy, entropy_mask, mask ``[N, T]``; advantages ``[N]``;
    sampler_ratio ``[N, T]`` or ``[N, 1]`` -> loss scalar and detached scalar ``stats``: ``kl``, ``clip_ratio_low``,
    ``clip_ratio_high``, ``clip_ratio`` (token means; ``cispo``'s capped tokens count as high, ``sapo`` and
    ``vespo`` clip none) and ``off_policy_masked`` (with the mask: the fraction of tokens dropped).
    Raises:
        ValueError: unknown ``loss_type`` or option (when built); an unknown level, ``beta > 0`` without
        ``ref_logps``, ``dr_grpo`` without ``max_completion_length`` (when called).
    """

    def __init__(self, loss_type: str = "dapo", beta: float = 0.0, epsilon_low: float = 0.2, epsilon_high: float = 0.2,
                 max_completion_length: int | None = None, **options):
        unknown = set(options) - set(LOSS_OPTIONS)
        if unknown:
            raise ValueError(f"unknown loss option(s) {sorted(unknown)}; options: {', '.join(LOSS_OPTIONS)}")
        kind = LOSS_TYPES.get(loss_type)
        self.term, self.aggregate = POLICY_TERMS.get(kind.policy), LOSS_AGGREGATIONS.get(kind.aggregation)
        self.beta, self.epsilon_low, self.epsilon_high = beta, epsilon_low, epsilon_high
        self.max_completion_length, self.options = max_completion_length, {**LOSS_OPTIONS, **options}

    def __call__(self, logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor, *,
                 ref_logps: Tensor | None = None, num_items: float | None = None, num_sequences: float | None = None,
                 num_micro_batches: int = 1, entropy: Tensor | None = None, entropy_mask: Tensor | None = None,
                 entropy_coef: float = 0.0, sampler_ratio: Tensor | None = None,
                 sampling_logps: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        if self.beta > 0 and ref_logps is None:
            raise ValueError("beta > 0 needs ref_logps")
        term, opt, low, high = self.term, self.options, self.epsilon_low, self.epsilon_high
        # float32 whatever the caller's dtype (the kernel gives float32; a float64 test gets the loss training sees)
        logps, old_logps = logps.float(), old_logps.float()
        m = mask.float()  # (N, T)
        log_ratio, ratio = importance_ratio(logps, old_logps, m, opt["importance_sampling_level"])
        adv = advantages.float().unsqueeze(1)  # (N, 1): one advantage for every token of its completion
        per_token = term.fn(ratio, adv, logps=logps, log_ratio=log_ratio, mask=m, sampler_ratio=sampler_ratio,
                            epsilon_low=low, epsilon_high=high, **opt)  # (N, T) or (N, 1)
        # the off-policy mask compares against the sampler's log-probs when there is one (it drifted, not pi_old)
        behaviour = old_logps if sampling_logps is None else sampling_logps.float()
        per_token, stats = _masked(per_token, adv, logps, behaviour, m, opt["off_policy_mask_threshold"], entropy_mask,
                                   None if term.absorbs_sampler_ratio else sampler_ratio)
        kl = None
        if ref_logps is not None:  # computed (and logged) whenever a reference ran, added only with beta > 0
            kl = k3_kl(logps, torch.where(m > 0, ref_logps.float(), logps))  # 0 on masked tokens, not a stray value
            kl = kl * ratio if opt["use_bias_correction_kl"] else kl
            per_token = per_token + self.beta * kl if self.beta > 0 else per_token
        loss = self.aggregate(
            per_token, m, num_items=m.sum().item() if num_items is None else num_items,
            num_sequences=logps.shape[0] if num_sequences is None else num_sequences,
            max_completion_length=self.max_completion_length, num_micro_batches=num_micro_batches)
        if entropy_coef != 0 and entropy is not None:
            loss = loss - entropy_coef * entropy_bonus(entropy, m, entropy_mask, num_micro_batches)
        bounds = term.clip_bounds(low, high) if term.clip_bounds else (-math.inf, math.inf)
        stats.update(_loss_stats(ratio.detach().expand_as(m), adv, m, kl, *bounds))
        return loss, stats


_LOSS_INPUTS = [p.name for p in inspect.signature(GRPOLoss.__call__).parameters.values() if p.kind is p.KEYWORD_ONLY]


def grpo_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor,
              **kwargs) -> tuple[Tensor, dict[str, Tensor]]:
    """:class:`GRPOLoss` built and called at once, for a loss computed once (tests, the comparison with TRL):
    ``kwargs`` holds its settings (``loss_type``, ``beta``, ``epsilon_low``, ``epsilon_high``,
    ``max_completion_length``, :data:`LOSS_OPTIONS`) and its call's keyword inputs (``ref_logps``, ``num_items``...)."""
    inputs = {k: kwargs.pop(k) for k in _LOSS_INPUTS if k in kwargs}
    return GRPOLoss(**kwargs)(logps, old_logps, advantages, mask, **inputs)


def _masked(per_token: Tensor, adv: Tensor, logps: Tensor, behaviour: Tensor, m: Tensor, threshold: float | None,
            entropy_mask: Tensor | None, sampler_ratio: Tensor | None) -> tuple[Tensor, dict[str, Tensor]]:
    """The policy term times the off-policy mask (``threshold``; ``behaviour``: the sampler's log-probs), the entropy
    mask and the sampler weight, in TRL's order; ``stats`` gets ``off_policy_masked`` with the first."""
    stats = {}
    if threshold is not None:
        keep_seq = off_policy_mask(adv, logps, behaviour, m, threshold)  # (N, 1)
        per_token = per_token * keep_seq
        stats["off_policy_masked"] = masked_mean((1 - keep_seq).expand_as(m), m).detach()
    if entropy_mask is not None:
        per_token = per_token * entropy_mask
    if sampler_ratio is not None:
        per_token = per_token * sampler_ratio
    return per_token, stats


def importance_ratio(logps: Tensor, old_logps: Tensor, mask: Tensor, level: str = "token") -> tuple[Tensor, Tensor]:
    """``log(pi / pi_old)`` per token (0 on masked positions) and the importance ratio: per token (``"token"``) or
    the exp of the sequence's mean log-ratio (``"sequence"``: GSPO, Zheng et al. 2025, arXiv 2507.18071),
    the log clamped to ``[-20, 20]`` before ``exp``. Shape: ``[N, T]`` -> ``[N, T]`` and ``[N, T]`` or ``[N, 1]``.
    Raises ``ValueError`` on another level."""
    if level not in ("token", "sequence"):
        raise ValueError(f"importance_sampling_level must be 'token' or 'sequence', got {level!r}")
    # masked positions hold padding's log-probs: zero their log-ratio so a sequence mean and exp never see them
    log_ratio = torch.where(mask > 0, logps - old_logps, torch.zeros_like(logps))  # (N, T)
    log_w = log_ratio if level == "token" else ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    return log_ratio, torch.exp(log_w.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def entropy_bonus(entropy: Tensor, mask: Tensor, entropy_mask: Tensor | None = None,
                  num_micro_batches: int = 1) -> Tensor:
    """The mean token entropy over ``mask`` (and ``entropy_mask``) of a micro-batch, over ``num_micro_batches``:
    the bonus TRL subtracts times ``entropy_coef`` (a mean per micro-batch). Shape: ``[N, T]`` -> scalar."""
    acts_on = mask.float() if entropy_mask is None else mask.float() * entropy_mask
    # a mean per micro-batch (TRL's), over the micro-batches: not a token mean of the update, so it depends on them
    return (entropy.float() * acts_on).sum() / acts_on.sum().clamp(min=1.0) / num_micro_batches


@torch.no_grad()
def _loss_stats(ratio: Tensor, adv: Tensor, m: Tensor, kl: Tensor | None, low_bound: float,
                high_bound: float) -> dict[str, Tensor]:
    """Token means over ``m`` of the KL and of the clipped fractions (low: ratio below ``low_bound`` with A < 0;
    high: above ``high_bound`` with A > 0)."""
    low = ((ratio < low_bound) & (adv < 0)).to(m.dtype)
    high = ((ratio > high_bound) & (adv > 0)).to(m.dtype)
    return {
        "kl": masked_mean(kl, m) if kl is not None else torch.zeros((), device=ratio.device),
        "clip_ratio_low": masked_mean(low, m),
        "clip_ratio_high": masked_mean(high, m),
        "clip_ratio": masked_mean(low + high, m),
    }


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is nonzero (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)  # clamp: an all-masked micro-batch gives 0, not NaN
