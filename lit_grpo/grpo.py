"""GRPO maths as pure functions on tensors: token log-probs, group advantages, clipped surrogate, KL.

Shapes: ``B`` prompts, ``G`` completions per prompt (a group), ``N = B * G`` completions with the
``G`` completions of one prompt contiguous, ``T`` completion tokens, ``V`` vocabulary.

Sources: GRPO (Shao et al. 2024, DeepSeekMath, eq. 3 with the k3 KL estimator of Schulman 2020);
clip-higher and token-level aggregation ``dapo`` (Yu et al. 2025, DAPO, eq. 8); ``dr_grpo``
(Liu et al. 2025, "Understanding R1-Zero-like training", sec. 3.1: constant normaliser);
``bnpo`` (Xiao et al. 2025, batch-normalised policy optimisation: token mean of the micro-batch).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to ``[-20, 20]`` before ``exp`` so a stale or masked token cannot overflow."""


def scale_logits(logits: Tensor, temperature: float, suppress_ids: Tensor | None = None) -> Tensor:
    """Next-token logits before truncation: ``suppress_ids`` (tokens the sampler never emits, e.g. image
    placeholders) set to ``-inf``, then divided by ``temperature``. Shape: ``[n, V]`` -> ``[n, V]`` float32."""
    logits = logits.float()
    if suppress_ids is not None and suppress_ids.numel():
        logits = logits.index_fill(-1, suppress_ids.to(logits.device), float("-inf"))
    return logits / temperature


def truncate_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Top-k, then top-p (nucleus) truncation of scaled logits: tokens outside the kept set get ``-inf``.

    As transformers' ``TopKLogitsWarper`` and ``TopPLogitsWarper`` (one token always kept); ``top_k`` 0 and
    ``top_p`` 1 keep every token. Shape: ``[n, V]`` -> ``[n, V]``.
    """
    if top_k and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -1:] = False  # keep at least one token
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
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
    with_entropy: bool = False,
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
        with ``with_entropy``, the entropy ``[N, T]`` float32 of the warped distribution (nats, computed
        without grad).
    Raises:
        ValueError: when ``temperature <= 0``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")
    n, t, v = logits.shape
    flat_logits, flat_index = logits.reshape(n * t, v), index.reshape(n * t)
    truncating = bool(top_k and top_k > 0) or top_p < 1.0
    logps, entropies = [], []
    for start in range(0, n * t, chunk_rows):
        scaled = scale_logits(flat_logits[start : start + chunk_rows], temperature, suppress_ids)  # (c, V)
        idx = flat_index[start : start + chunk_rows, None]  # (c, 1)
        picked = scaled.gather(1, idx).squeeze(1)  # (c,)
        chunk = truncate_logits(scaled, top_k, top_p) if truncating else scaled
        lse = torch.logsumexp(chunk, dim=-1)  # (c,)
        if truncating:  # a token outside the kept set joins it: finite and continuous at the boundary
            outside = torch.isinf(chunk.gather(1, idx).squeeze(1))
            lse = torch.logaddexp(lse, torch.where(outside, picked, torch.full_like(picked, float("-inf"))))
        logps.append(picked - lse)
        if with_entropy:
            with torch.no_grad():
                p = torch.softmax(chunk, dim=-1)
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
    filled = torch.where(valid, x, torch.zeros_like(x))
    mean = filled.sum(-1) / count.clamp(min=1)
    sq = torch.where(valid, (x - mean.unsqueeze(-1)) ** 2, torch.zeros_like(x)).sum(-1)
    flat = torch.where(valid, x, -math.inf).amax(-1) == torch.where(valid, x, math.inf).amin(-1)
    std = torch.where((count > 1) & ~flat, (sq / (count - 1).clamp(min=1)).sqrt(), torch.zeros_like(mean))
    return mean, std, count


ADVANTAGE_SCALES = ("group", "batch", "none")
"""``scale`` options of :func:`group_advantages`."""


def group_advantages(rewards: Tensor, group_size: int, scale: str = "group", eps: float = 1e-4) -> Tensor:
    """Group-relative advantages ``(r - mean_group) / (std + eps)``.

    ``scale``: ``"group"`` divides by the group's std (GRPO), ``"batch"`` by the std of every valid
    reward in ``rewards`` (Hu et al. 2025, REINFORCE++ baseline; TRL ``scale_rewards="batch"``),
    ``"none"`` does not divide (Dr. GRPO). Statistics skip NaN ("cannot score") rewards and use the
    unbiased std. A NaN reward gets advantage 0; a group whose valid rewards are all equal gets
    exactly 0 (not a rounding residue).

    Shape:
        rewards ``[N]`` float, groups contiguous -> advantages ``[N]`` float32.
    Raises:
        ValueError: when ``N`` is not a multiple of ``group_size`` or ``scale`` is unknown.
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale must be one of 'group', 'batch', 'none', got {scale!r}")
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.float().reshape(-1, group_size)  # (B, G)
    mean, std, _ = nan_group_stats(r)  # (B,)
    centred = r - mean.unsqueeze(1)  # (B, G)
    if scale == "group":
        centred = centred / (std.unsqueeze(1) + eps)
    elif scale == "batch":
        centred = centred / (nan_group_stats(r.reshape(-1))[1] + eps)
    valid = ~torch.isnan(r)
    big, small = torch.where(valid, r, -math.inf).amax(1), torch.where(valid, r, math.inf).amin(1)
    flat_group = (big == small).unsqueeze(1)  # (B, 1) all valid rewards equal
    adv = torch.where(valid & ~flat_group, centred, torch.zeros_like(centred))
    return adv.reshape(-1)


_K3_SERIES = [1.0 / math.factorial(k) for k in range(2, 17)]
"""Taylor coefficients of ``exp(d) - d - 1 = sum_{k >= 2} d^k / k!`` (to d^16: below 2e-16 relative at |d| = 0.5)."""
K3_SERIES_BELOW = 0.5
"""``|d|`` up to which :func:`k3_kl` sums the series; above it ``expm1(d) - d`` loses under one digit."""


def k3_kl(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(policy || reference): ``exp(d) - d - 1`` with ``d = ref - logp``.

    Unbiased (Schulman 2020, "Approximating KL divergence") and never negative: written as it reads, the
    difference cancels for small ``d`` (``d = 1e-6`` in float32 gives -5.96e-08 instead of 5.0e-13), so for
    ``|d| <= 0.5`` it is the Taylor series ``d^2/2! + d^3/3! + ... + d^16/16!`` (Horner; every term's sum positive
    there), and above ``expm1(d) - d``; both exact to the dtype's precision. ``d`` is clamped to ``[-20, 20]``.
    Shape: ``[N, T]`` -> ``[N, T]``.
    """
    d = (ref_logps - logps).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    small = d.abs() <= K3_SERIES_BELOW
    x = torch.where(small, d, torch.zeros_like(d))  # the series only where it converges fast (no overflow elsewhere)
    series = torch.full_like(x, _K3_SERIES[-1])
    for c in reversed(_K3_SERIES[:-1]):
        series = series * x + c
    return torch.where(small, series * x * x, torch.expm1(d) - d)


def _agg_grpo(per_token: Tensor, mask: Tensor, *, num_sequences: float, **_) -> Tensor:
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (N,)
    return per_seq.sum() / num_sequences


def _agg_bnpo(per_token: Tensor, mask: Tensor, **_) -> Tensor:
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def _agg_dr_grpo(per_token: Tensor, mask: Tensor, *, num_sequences: float, max_completion_length, **_) -> Tensor:
    if max_completion_length is None:
        raise ValueError("loss_type='dr_grpo' needs max_completion_length")
    return (per_token * mask).sum() / (num_sequences * max_completion_length)


def _agg_dapo(per_token: Tensor, mask: Tensor, *, num_items: float, **_) -> Tensor:
    return (per_token * mask).sum() / max(float(num_items), 1.0)


LOSS_AGGREGATIONS: dict[str, Callable[..., Tensor]] = {
    "grpo": _agg_grpo,
    "bnpo": _agg_bnpo,
    "dr_grpo": _agg_dr_grpo,
    "dapo": _agg_dapo,
}
"""``loss_type`` -> aggregation of per-token losses ``[N, T]`` into a scalar (see :func:`grpo_loss`)."""


def grpo_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor, *, ref_logps: Tensor | None = None,
              beta: float = 0.0, epsilon_low: float = 0.2, epsilon_high: float = 0.2, loss_type: str = "dapo",
              max_completion_length: int | None = None, num_items: float | None = None,
              num_sequences: float | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate plus ``beta`` times k3 KL, aggregated by ``loss_type``.

    Per token: ``-min(rho * A, clip(rho, 1 - epsilon_low, 1 + epsilon_high) * A) + beta * KL`` with
    importance ratio ``rho = exp(logp - old_logp)`` (log-ratio clamped to ``[-20, 20]`` and zeroed on
    masked positions before ``exp``). Aggregation, ``S`` = sum of masked per-token losses:

    - ``grpo``: mean over each sequence's tokens, summed, divided by ``num_sequences``.
    - ``bnpo``: ``S / mask.sum()`` (token mean over this micro-batch).
    - ``dr_grpo``: ``S / (num_sequences * max_completion_length)``.
    - ``dapo``: ``S / num_items``.

    ``num_items`` (tokens) and ``num_sequences`` default to this call's own counts; pass the counts
    of the whole optimizer step (every micro-batch and rank) so accumulation does not change the
    objective.

    Shape:
        logps, old_logps, ref_logps, mask ``[N, T]``; advantages ``[N]`` -> loss scalar; ``stats``
        holds detached scalars ``kl``, ``clip_ratio_low``, ``clip_ratio_high``, ``clip_ratio``
        (token means over ``mask``).
    Raises:
        ValueError: unknown ``loss_type``, ``beta > 0`` without ``ref_logps``, ``dr_grpo`` without
        ``max_completion_length``.
    """
    if loss_type not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss_type must be one of {sorted(LOSS_AGGREGATIONS)}, got {loss_type!r}")
    if beta > 0 and ref_logps is None:
        raise ValueError("beta > 0 needs ref_logps")
    m = mask.to(logps.dtype)  # (N, T)
    keep = m > 0
    log_ratio = torch.where(keep, logps - old_logps, torch.zeros_like(logps))
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # (N, T)
    adv = advantages.to(logps.dtype).unsqueeze(1)  # (N, 1)
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.min(ratio * adv, clipped * adv)  # (N, T)
    kl = None
    if ref_logps is not None:
        kl = k3_kl(logps, torch.where(keep, ref_logps, logps))
        if beta > 0:
            per_token = per_token + beta * kl
    loss = LOSS_AGGREGATIONS[loss_type](
        per_token,
        m,
        num_items=m.sum().item() if num_items is None else num_items,
        num_sequences=logps.shape[0] if num_sequences is None else num_sequences,
        max_completion_length=max_completion_length,
    )
    return loss, _loss_stats(ratio, adv, m, kl, epsilon_low, epsilon_high)


@torch.no_grad()
def _loss_stats(ratio: Tensor, adv: Tensor, m: Tensor, kl: Tensor | None, epsilon_low: float,
                epsilon_high: float) -> dict[str, Tensor]:
    """Token means over ``m`` of the KL and of the clipped fractions (low: ratio below ``1 - eps`` with A < 0)."""
    low = ((ratio < 1 - epsilon_low) & (adv < 0)).to(m.dtype)
    high = ((ratio > 1 + epsilon_high) & (adv > 0)).to(m.dtype)
    return {
        "kl": masked_mean(kl, m) if kl is not None else torch.zeros((), device=ratio.device),
        "clip_ratio_low": masked_mean(low, m),
        "clip_ratio_high": masked_mean(high, m),
        "clip_ratio": masked_mean(low + high, m),
    }


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is nonzero (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)
