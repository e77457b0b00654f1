"""Final-layer attention from hooks, and the attention reward's score (ASM).

Source: the physics reward-design paper (Granite Vision on PhyX), "attention-weight reward": hooks on
the final decoder layer's query/key projections and rotary embedding; the attention rows rebuilt by
hand (rotary, grouped KV heads expanded by ``repeat_interleave``, the model's own scale, causal mask,
softmax, mean over heads); each generated token's attention over image tokens laid on the patch grid,
normalised, resized bilinearly to the image and scored as the fraction on foreground pixels (a pixel
is background when all RGB channels are >= 230); the mean over the completion's tokens is the ASM.

Shapes: ``N`` rows (completions), ``L`` = prompt + completion tokens, ``T`` completion tokens, ``H``
query heads, ``Hk`` key/value heads, ``D`` head dim, ``(h, w)`` a patch grid, ``(Y, X)`` image pixels.

Which rows: the attention rows *of the completion tokens' own positions* (the token as query), valid
where the completion mask is true. Memory: the reconstruction runs one row and ``chunk_size`` queries
at a time, so it holds ``H x chunk_size x L`` scores and keeps ``T x L`` per row, for the last layer only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor, nn

from lit_grpo.families import AttentionParts, Family, ImageGrid, family_for

BACKGROUND = 230
"""A pixel is background when all three RGB channels are >= this value."""


class AttentionCapture:
    """Context manager hooking the final decoder layer's ``q_proj``/``k_proj`` outputs and the rotary
    module's ``(cos, sin)`` on a full-sequence forward; the hooks are removed on exit, also on errors.

    After the forward: ``q`` ``[N, Tq, H*D]`` (the last ``keep_queries`` positions, or all), ``k``
    ``[N, L, Hk*D]``, ``cos``/``sin`` ``[N or 1, L, D]`` (Qwen's M-RoPE positions already merged in),
    plus ``parts`` (scale, head dim). ``calls`` counts each hook's firings: with gradient checkpointing
    the projections fire again in the backward recomputation with the same values (the last one is kept).
    Hook the LoRA wrapper, never ``base_layer``: the wrapper's output includes the adapter.

    >>> with AttentionCapture(model, keep_queries=T) as cap:   # doctest: +SKIP
    ...     model(**inputs)
    >>> rows = attention_rows(cap.q, cap.k, cap.cos, cap.sin, inputs["attention_mask"], cap.parts.scale, cap.parts.head_dim)
    """

    def __init__(self, model: nn.Module, family: Family | None = None, keep_queries: int | None = None):
        self.parts: AttentionParts = (family or family_for(model)).attention_parts(model)
        self.keep_queries = keep_queries
        self.q = self.k = self.cos = self.sin = None
        self.calls = {"q": 0, "k": 0, "rotary": 0}
        self._handles: list = []

    def _store(self, name: str):
        def hook(module, args, output):
            self.calls[name] += 1
            if name == "rotary":
                self.cos, self.sin = (t.detach() for t in output[:2])
            elif name == "q" and self.keep_queries is not None:
                self.q = output.detach()[:, -self.keep_queries:].clone()  # only the completion rows are needed
            else:
                setattr(self, name, output.detach())
        return hook

    def __enter__(self) -> "AttentionCapture":
        try:
            for name, module in (("q", self.parts.q_proj), ("k", self.parts.k_proj), ("rotary", self.parts.rotary)):
                self._handles.append(module.register_forward_hook(self._store(name)))
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc) -> bool:
        self.remove()
        return False

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    @property
    def captured(self) -> bool:
        return self.q is not None and self.k is not None and self.cos is not None


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding as the models apply it. Shape: x ``[H, L, D]``, cos/sin ``[L, D]`` -> ``[H, L, D]``."""
    return x * cos[None] + rotate_half(x) * sin[None]


def row_attention(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, key_mask: Tensor, scale: float, head_dim: int,
                  chunk_size: int = 128) -> Tensor:
    """Head-averaged attention of the last ``Tq`` positions of one sequence, computed in query chunks.

    Shape: q ``[Tq, H*D]``, k ``[L, Hk*D]``, cos/sin ``[L, D]``, key_mask ``[L]`` (true = real token)
    -> ``[Tq, L]`` float32 whose rows sum to 1. Query ``i`` sits at position ``L - Tq + i`` and sees keys
    ``<=`` its position that are real tokens (``scores * scale``, masked, softmax over all ``L``, as eager
    attention does). GQA: key head ``j`` serves query heads ``j*G .. j*G+G-1`` (``repeat_interleave``).
    """
    L, tq = k.shape[0], q.shape[0]
    kh = k.float().view(L, -1, head_dim).transpose(0, 1)  # (Hk, L, D)
    kh = apply_rotary(kh, cos.float(), sin.float())
    qh = q.float().view(tq, -1, head_dim).transpose(0, 1)  # (H, Tq, D)
    kh = kh.repeat_interleave(qh.shape[0] // kh.shape[0], dim=0)  # (H, L, D)
    out = torch.empty(tq, L, dtype=torch.float32, device=q.device)
    keys = torch.arange(L, device=q.device)
    for s in range(0, tq, chunk_size):
        e = min(s + chunk_size, tq)
        pos = torch.arange(L - tq + s, L - tq + e, device=q.device)
        qc = apply_rotary(qh[:, s:e], cos[pos].float(), sin[pos].float())  # (H, C, D)
        scores = torch.matmul(qc, kh.transpose(1, 2)) * scale  # (H, C, L)
        allowed = (keys[None, :] <= pos[:, None]) & key_mask.bool()[None, :]  # (C, L)
        scores = scores.masked_fill(~allowed[None], torch.finfo(torch.float32).min)
        out[s:e] = scores.softmax(-1).mean(0)
    return out


def attention_rows(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, attention_mask: Tensor, scale: float,
                   head_dim: int, chunk_size: int = 128) -> Tensor:
    """:func:`row_attention` for every row. Shape: q ``[N, Tq, H*D]``, k ``[N, L, Hk*D]``, cos/sin
    ``[N or 1, L, D]``, attention_mask ``[N, L]`` -> ``[N, Tq, L]`` float32."""
    return torch.stack([row_attention(q[n], k[n], cos[min(n, cos.shape[0] - 1)], sin[min(n, sin.shape[0] - 1)],
                                      attention_mask[n], scale, head_dim, chunk_size) for n in range(q.shape[0])])


# ----------------------------------------------------------------------------------------- foreground score
def foreground_mask(image: Image.Image | np.ndarray | Tensor, threshold: int = BACKGROUND) -> Tensor:
    """True where a pixel is foreground: some RGB channel below ``threshold`` (background: all ``>=``).

    Shape: PIL RGB image, or uint8 array ``[Y, X, 3]`` -> ``[Y, X]`` bool.
    """
    arr = torch.from_numpy(np.array(image.convert("RGB") if isinstance(image, Image.Image) else image))
    return (arr[..., :3] < threshold).any(-1)


@functools.lru_cache(maxsize=256)
def resize_matrix(n_in: int, n_out: int) -> Tensor:
    """1-D weights of ``F.interpolate(mode="bilinear", align_corners=False)`` along one axis.

    Shape: -> ``[n_out, n_in]``; bilinear resizing of a map ``A`` ``[h, w]`` to ``[Y, X]`` is
    ``resize_matrix(h, Y) @ A @ resize_matrix(w, X).T``.
    """
    eye = torch.eye(n_in)[:, None, :]  # (n_in, 1, n_in): each unit vector as a signal
    return F.interpolate(eye, size=n_out, mode="linear", align_corners=False)[:, 0, :].T.contiguous()


def box_pixels(box: tuple[float, float, float, float], height: int, width: int) -> tuple[int, int, int, int]:
    """Integer ``(x0, y0, x1, y1)`` of a fractional box in a ``width`` x ``height`` image (at least 1 pixel)."""
    x0, y0 = round(box[0] * width), round(box[1] * height)
    return x0, y0, max(x0 + 1, round(box[2] * width)), max(y0 + 1, round(box[3] * height))


@dataclasses.dataclass
class GridWeights:
    """What a grid cell's attention is worth after the bilinear resize to its box.

    ``foreground`` and ``total`` ``[h, w]``: the resized map of a one-hot cell summed over the box's
    foreground pixels, and over all of its pixels. For a map ``A``:
    ``sum(resize(A) * mask) = sum(A * foreground)`` and ``sum(resize(A)) = sum(A * total)``.
    """

    foreground: Tensor
    total: Tensor

    @classmethod
    def of(cls, shape: tuple[int, int], box: tuple[float, float, float, float], mask: Tensor) -> "GridWeights":
        """Weights of an ``[h, w]`` grid covering ``box`` of the image whose foreground is ``mask`` ``[Y, X]``."""
        x0, y0, x1, y1 = box_pixels(box, *mask.shape)
        rh, rw = resize_matrix(shape[0], y1 - y0), resize_matrix(shape[1], x1 - x0)
        region = mask[y0:y1, x0:x1].float()
        return cls(rh.T @ region @ rw, torch.outer(rh.sum(0), rw.sum(0)))


def token_scores(maps: list[Tensor], weights: list[GridWeights]) -> Tensor:
    """Per-token fraction of image attention on foreground pixels.

    Shape: ``maps[g]`` ``[T, h_g, w_g]`` (attention on grid ``g``'s tokens) -> ``[T]`` in [0, 1].
    Each grid's map is resized to its box; the grids' masses are kept as they were, so a grid's
    fraction counts with its share of the image attention:
    ``sum_g mass_g * (fg_g / total_g) / sum_g mass_g``. A token with no attention on the image scores 0.
    """
    mass = torch.stack([m.sum((1, 2)) for m in maps])  # (G, T)
    fg = torch.stack([(m * w.foreground.to(m)).sum((1, 2)) for m, w in zip(maps, weights)])
    total = torch.stack([(m * w.total.to(m)).sum((1, 2)) for m, w in zip(maps, weights)])
    frac = torch.where(total > 0, fg / total.clamp_min(1e-30), torch.zeros_like(fg))
    share = mass.sum(0)
    return torch.where(share > 0, (mass * frac).sum(0) / share.clamp_min(1e-30), torch.zeros_like(share)).clamp(0, 1)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over the valid tokens of each row; NaN ("cannot score") for a row with none.

    Shape: ``[N, T]``, ``[N, T]`` bool -> ``[N]``.
    """
    count = mask.sum(-1)
    mean = (values * mask).sum(-1) / count.clamp_min(1)
    return torch.where(count > 0, mean, torch.full_like(mean, float("nan")))


def grid_maps(rows: Tensor, grids: list[ImageGrid]) -> list[Tensor]:
    """Attention on each grid's tokens. Shape: rows ``[T, L]`` -> ``[T, h_g, w_g]`` per grid."""
    return [rows[:, g.positions.to(rows.device).flatten()].view(rows.shape[0], *g.positions.shape) for g in grids]


def upsample(grid_map: Tensor, box: tuple[float, float, float, float], height: int, width: int) -> Tensor:
    """A grid's map resized bilinearly onto its box of a ``height`` x ``width`` image, mass kept.

    Shape: ``[h, w]`` -> ``[height, width]`` (zero outside the box; sums to ``grid_map.sum()``).
    """
    x0, y0, x1, y1 = box_pixels(box, height, width)
    up = F.interpolate(grid_map[None, None].float(), size=(y1 - y0, x1 - x0), mode="bilinear", align_corners=False)[0, 0]
    out = torch.zeros(height, width)
    out[y0:y1, x0:x1] = up * (grid_map.sum() / up.sum().clamp_min(1e-30))
    return out


def image_heatmap(maps: list[Tensor], grids: list[ImageGrid], image: int, height: int, width: int) -> Tensor:
    """One image's attention at its resolution, normalised to sum 1 (the explicit form of :func:`token_scores`).

    Shape: ``maps[g]`` ``[h_g, w_g]`` (one token, or a mean over tokens) -> ``[height, width]``.
    """
    heat = sum((upsample(m, g.box, height, width) for m, g in zip(maps, grids) if g.image == image),
               torch.zeros(height, width))
    return heat / heat.sum().clamp_min(1e-30)


def iter_rows(capture: AttentionCapture, attention_mask: Tensor, chunk_size: int = 128) -> Iterator[Tensor]:
    """The captured rows' attention, one sequence at a time: ``[Tq, L]`` for each of the ``N`` rows."""
    c = capture
    for n in range(c.q.shape[0]):
        yield row_attention(c.q[n], c.k[n], c.cos[min(n, c.cos.shape[0] - 1)], c.sin[min(n, c.sin.shape[0] - 1)],
                            attention_mask[n], c.parts.scale, c.parts.head_dim, chunk_size)


# ----------------------------------------------------------------------------------------- in the trainer
@dataclasses.dataclass
class AttentionConfig:
    """Attention capture in the no-grad scoring pass: the ``asm`` reward column and the attention overlays."""

    enabled: bool | None = None
    """Capture even when no reward reads ``asm`` (for the overlay callback); None = only when one does."""
    grid: str | None = None
    """Patch grid(s) the ASM uses: ``base`` (LLaVA-NeXT's base grid, Idefics3's global image), ``tiles``
    (high-resolution tiles), ``all``; None = the family's default (``base``; ``all`` for Idefics3/SmolVLM)."""
    background_threshold: int = BACKGROUND
    """A pixel is background when all RGB channels are >= this."""
    chunk_size: int = 128
    """Query rows per reconstruction step (memory ``heads x chunk_size x sequence length``)."""


@dataclasses.dataclass
class AttentionScores:
    """ASM of ``N`` completions, and what the overlays need: each completion's grids and its attention on
    them averaged over its valid tokens (each token's image attention normalised to sum 1 first)."""

    asm: Tensor
    """``[N]`` in [0, 1]; NaN for a completion without valid tokens."""
    maps: list[list[Tensor]]
    """``maps[n][g]`` ``[h, w]``: completion ``n``'s mean attention on grid ``g``."""
    grids: list[list[ImageGrid]]
    token_asm: list[Tensor] | None = None
    """With ``keep_tokens``: ``[T_n]`` per completion, each valid token's score."""
    token_maps: list[list[Tensor]] | None = None
    """With ``keep_tokens``: ``token_maps[n][g]`` ``[T_n, h, w]``, each valid token's attention on grid ``g``."""

    @classmethod
    def cat(cls, parts: list["AttentionScores"]) -> "AttentionScores":
        keep = all(p.token_asm is not None for p in parts)
        return cls(torch.cat([p.asm for p in parts]), [m for p in parts for m in p.maps],
                   [g for p in parts for g in p.grids],
                   [t for p in parts for t in p.token_asm] if keep else None,
                   [t for p in parts for t in p.token_maps] if keep else None)


class AttentionScorer:
    """Scores completions from a capture made during the scoring pass's forward (no second forward).

    >>> with scorer.capture(policy, rollout) as cap:            # doctest: +SKIP
    ...     logps, _ = completion_logps(policy, rollout, temperature)
    >>> scores = scorer.score(cap, rollout, images)              # ``images[n]``: row n's PIL images
    """

    def __init__(self, model: nn.Module, processor, cfg: AttentionConfig | None = None):
        self.cfg = cfg or AttentionConfig()
        self.family = family_for(model, processor, self.cfg.grid)
        self.family.attention_parts(model)  # fail at construction on an unsupported layer

    def capture(self, model: nn.Module, rollout) -> AttentionCapture:
        return AttentionCapture(model, self.family, keep_queries=rollout.completion_ids.shape[1])

    def score(self, capture: AttentionCapture, rollout, images: list[list[Image.Image]],
              keep_tokens: bool = False) -> AttentionScores:
        """ASM and mean maps of ``rollout``'s rows; ``images[n]`` are row ``n``'s images (original pixels);
        ``keep_tokens`` also keeps every valid token's score and maps (for analysis).

        Raises:
            RuntimeError: the capture saw no forward.
        """
        if not capture.captured:
            raise RuntimeError("the attention capture saw no forward pass; run the model inside it")
        mask = torch.cat([rollout.prompt["attention_mask"], rollout.completion_mask.to(rollout.prompt["attention_mask"])], 1)
        grids = self.family.image_grids(rollout.prompt, [[im.size for im in ims] for ims in images])
        weights = self.weights(grids, images)
        asm, maps, token_asm, token_maps = [], [], [], []
        for n, rows in enumerate(iter_rows(capture, mask, self.cfg.chunk_size)):
            per_grid = grid_maps(rows, grids[n])
            valid = rollout.completion_mask[n].to(rows.device)
            scores = token_scores(per_grid, weights[n])  # (T,)
            asm.append(masked_mean(scores[None], valid[None])[0])
            mass = sum(m.sum((1, 2)) for m in per_grid).clamp_min(1e-30)  # (T,)
            w = valid.float() / mass / valid.sum().clamp_min(1)
            maps.append([(m * w[:, None, None]).sum(0).cpu() for m in per_grid])
            if keep_tokens:
                token_asm.append(scores[valid].cpu())
                token_maps.append([m[valid].cpu() for m in per_grid])
        return AttentionScores(torch.stack(asm).cpu(), maps, grids, token_asm if keep_tokens else None,
                               token_maps if keep_tokens else None)

    def weights(self, grids: list[list[ImageGrid]], images: list[list[Image.Image]]) -> list[list[GridWeights]]:
        """Grid weights of every row; rows that share an image object (a group) share the work."""
        masks: dict[int, Tensor] = {}
        cache: dict[tuple, GridWeights] = {}
        out = []
        for row_grids, row_images in zip(grids, images):
            row = []
            for g in row_grids:
                img = row_images[g.image]
                if id(img) not in masks:
                    masks[id(img)] = foreground_mask(img, self.cfg.background_threshold)
                key = (id(img), tuple(g.positions.shape), g.box)
                if key not in cache:
                    cache[key] = GridWeights.of(tuple(g.positions.shape), g.box, masks[id(img)])
                row.append(cache[key])
            out.append(row)
        return out
