"""Final-layer attention from hooks, and the attention reward's score (ASM).

Source: the physics reward-design paper (Granite Vision on PhyX), "attention-weight reward": hooks on
the final decoder layer's query/key projections and rotary embedding; the attention rows rebuilt by
hand (rotary, grouped KV heads expanded by ``repeat_interleave``, the model's own scale, causal mask,
softmax, mean over heads); each generated token's attention over image tokens laid on the patch grid,
normalised, resized bilinearly to the image and scored as the fraction on foreground pixels (a pixel
is background when all RGB channels are >= 230); the mean over the completion's tokens is the ASM.

Shapes: ``N`` rows (completions), ``L`` = prompt + completion tokens, ``T`` completion tokens, ``H``
query heads, ``Hk`` key/value heads, ``D`` head dim, ``(h, w)`` a patch grid, ``(Y, X)`` image pixels.

Which rows (``AttentionConfig.row``): by default the attention rows *of the completion tokens' own positions*
(the token as query), valid where the completion mask is true, each scored and averaged over the completion
("we average Equation 7 across all T generated tokens"); ``final`` reads the paper's "the final token's attention
row is extracted": one row, that of the completion's last valid token, scores the completion. Memory: the reconstruction holds at most ``chunk_scores`` scores at
a time (a chunk of query rows x heads x keys) and keeps ``T x L`` per sequence (only ``T x I`` image
columns in the trainer), for the last layer only, never the ``L x L`` matrix of any layer.
"""

import dataclasses
import functools
import typing
from typing import Annotated, ClassVar, Literal

from annotated_types import Ge, Le

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor, nn

from lit_grpo.columns import COLUMNS
from lit_grpo.families import AttentionParts, Family, ImageGrid, family_for
from lit_grpo.settings import Checked
from lit_grpo.registry import OPTION_GROUPS

BACKGROUND = 230
"""A pixel is background when all three RGB channels are >= this value."""
Row = Literal["own", "final"]
ROWS = typing.get_args(Row)
"""Which attention rows score a completion (:attr:`AttentionConfig.row`)."""


@OPTION_GROUPS.register("attention")
@dataclasses.dataclass
class AttentionConfig(Checked):
    """Attention capture in the no-grad log-prob pass: the ``asm`` reward column and the attention overlays."""

    # The options of the ``asm`` column's provider (lit_grpo.columns), registered as the module's ``attention``
    # option group (lit_grpo.registry.option_group), so configs and the command line keep their keys.
    column: ClassVar[str] = "asm"

    enabled: bool | None = None
    """Capture even when no reward reads ``asm`` (for the overlay callback); None = only when one does."""
    grid: Literal["base", "tiles", "all"] | None = None
    """Patch grid(s) the ASM uses: ``base`` (LLaVA-NeXT's base grid, Idefics3's global image), ``tiles``
    (high-resolution tiles), ``all``; None = the family's default (``base``; ``all`` for Idefics3/SmolVLM). The
    paper reads one grid per image: "Attention over image tokens is reshaped into a 2D grid (H_img/p x W_img/p),
    then normalized and resized to the original image resolution"; for a multi-crop (LLaVA-NeXT anyres) image
    that is the base grid (the whole image at one tile's resolution, the default), or the tiles (the image at
    its own resolution, H_img/p x W_img/p patches), or both (each grid's fraction counted with its share of the
    image attention: :func:`grid_fractions`)."""
    row: Row = "own"
    """Which attention row scores a completion: ``own`` = each generated token's own row (the token as query),
    scored and averaged over the completion ("we average Equation 7 across all T generated tokens [...] the
    Attention Score Mask"); ``final`` = the row of the completion's last valid token alone ("the resulting
    attention tensor is averaged across all heads, and the final token's attention row is extracted, yielding a
    per-token attention vector over the full input sequence for each rollout"). Both sentences are the paper's;
    they disagree, so the choice is visible (:func:`token_weights`)."""
    background_threshold: Annotated[int, Ge(0), Le(256)] = BACKGROUND
    """A pixel is background when all RGB channels are >= this (256 = no pixel is background)."""
    chunk_scores: Annotated[int, Ge(1)] = 2 ** 22
    """Attention scores (rows x heads x queries x keys) the reconstruction makes per step (16 MiB in
    float32, twice that with their softmax); it sets how many query rows each step covers."""


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
    >>> rows = captured_rows(cap, inputs["attention_mask"])  # (N, T, L)
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
    """Rotary embedding as the models apply it. Shape: x ``[N, H, L, D]``, cos/sin ``[N or 1, L, D]`` -> x's shape."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def attention_rows(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, attention_mask: Tensor, scale: float,
                   head_dim: int, chunk_scores: int = 2 ** 22, columns: Tensor | None = None) -> Tensor:
    """Head-averaged attention of the last ``Tq`` positions of each sequence, computed in query chunks.

    Shape: q ``[N, Tq, H*D]`` (projected queries of the last ``Tq`` positions), k ``[N, L, Hk*D]``,
    cos/sin ``[N or 1, L, D]``, attention_mask ``[N, L]`` (1 = real token) -> ``[N, Tq, L]`` float32,
    rows summing to 1; with ``columns`` ``[N, I]`` only those keys are kept: ``[N, Tq, I]``.
    Query ``i`` sits at position ``L - Tq + i`` and sees keys ``<=`` its position that are real tokens:
    ``(scale q) k^T``, masked, softmax over all ``L`` keys, as eager attention does (which scales after
    the product: equal up to float rounding, ~1e-7 in float32). GQA: query head ``h`` uses KV head
    ``h // G`` (``G = H / Hk``), i.e. the KV heads ``repeat_interleave``-d ``G`` times; the grouped
    matmul below does exactly that without materialising the copies. Scores are made ``chunk_scores`` at a
    time (``N x H x chunk x L``; twice that in memory with their softmax).
    """
    with torch.autocast(q.device.type, enabled=False):  # float32 throughout, also under bf16-mixed autocast
        return _attention_rows(q, k, cos, sin, attention_mask, scale, head_dim, chunk_scores, columns)


def _attention_rows(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, attention_mask: Tensor, scale: float,
                    head_dim: int, chunk_scores: int, columns: Tensor | None) -> Tensor:
    n, tq, L = q.shape[0], q.shape[1], k.shape[1]
    cos, sin = cos.float(), sin.float()
    kh = apply_rotary(k.float().view(n, L, -1, head_dim).transpose(1, 2), cos, sin)  # (N, Hk, L, D)
    qh = q.float().view(n, tq, -1, head_dim).transpose(1, 2)  # (N, H, Tq, D)
    qh = apply_rotary(qh, cos[:, L - tq:], sin[:, L - tq:]) * scale
    heads, kv = qh.shape[1], kh.shape[1]
    qg = qh.view(n, kv, heads // kv, tq, head_dim)  # (N, Hk, G, Tq, D): heads j*G .. j*G+G-1 share KV head j
    kt = kh.transpose(2, 3)  # (N, Hk, D, L)
    positions = torch.arange(L - tq, L, device=q.device)
    blocked = (torch.arange(L, device=q.device)[None, :] > positions[:, None]) | (attention_mask[:, None, :] == 0)
    out = torch.empty(n, tq, L if columns is None else columns.shape[1], dtype=torch.float32, device=q.device)
    step = max(1, chunk_scores // max(1, n * heads * L))
    for s in range(0, tq, step):
        e = min(s + step, tq)
        qc = qg[:, :, :, s:e].reshape(n, kv, -1, head_dim)  # (N, Hk, G*C, D)
        scores = torch.matmul(qc, kt).view(n, heads, e - s, L)  # (N, H, C, L)
        scores.masked_fill_(blocked[:, None, s:e], torch.finfo(torch.float32).min)  # causal + padding
        probs = scores.softmax(-1)  # over all L keys (torch's fused kernel: the fastest pass on CPU)
        del scores
        if columns is not None:  # only the kept keys are needed from here on
            probs = probs.gather(3, columns[:, None, None, :].expand(n, heads, e - s, -1))  # (N, H, C, I)
        out[:, s:e] = probs.mean(1)  # mean over heads
    return out


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


def grid_fractions(mass: Tensor, foreground: Tensor, total: Tensor) -> Tensor:
    """Per-token fraction of image attention on foreground pixels, from per-grid sums.

    Shape: ``[..., G]`` each -> ``[...]`` in [0, 1]. For grid ``g``: ``mass`` = attention on its tokens,
    ``foreground`` / ``total`` = its map resized to its box and summed over the foreground / all pixels.
    The grids keep their masses, so a grid's fraction counts with its share of the image attention:
    ``sum_g mass_g * (fg_g / total_g) / sum_g mass_g``. No attention on the image scores 0.
    """
    frac = torch.where(total > 0, foreground / total.clamp_min(1e-30), torch.zeros_like(total))
    share = mass.sum(-1)
    return torch.where(share > 0, (mass * frac).sum(-1) / share.clamp_min(1e-30), torch.zeros_like(share)).clamp(0, 1)


def token_scores(maps: list[Tensor], weights: list[GridWeights]) -> Tensor:
    """:func:`grid_fractions` of per-grid maps. Shape: ``maps[g]`` ``[T, h_g, w_g]`` -> ``[T]`` in [0, 1]."""
    mass = torch.stack([m.sum((1, 2)) for m in maps], -1)  # (T, G)
    fg = torch.stack([(m * w.foreground.to(m)).sum((1, 2)) for m, w in zip(maps, weights)], -1)
    total = torch.stack([(m * w.total.to(m)).sum((1, 2)) for m, w in zip(maps, weights)], -1)
    return grid_fractions(mass, fg, total)


def cell_table(grids: list[ImageGrid], weights: list[GridWeights], num_grids: int) -> tuple[Tensor, Tensor]:
    """One row's grid cells as a gather index and a weight table, so that per-grid sums are one matmul.

    Shape: -> index ``[I]`` (each cell's token position, grids in order) and table ``[I, 3 G]`` whose
    columns ``g``, ``G + g``, ``2 G + g`` hold 1, the foreground weight and the total weight of grid
    ``g``'s cells (``G = num_grids``): ``attention[:, index] @ table`` = (mass, foreground, total) per grid.
    """
    index = torch.cat([g.positions.flatten() for g in grids])
    table = torch.zeros(len(index), 3 * num_grids)
    start = 0
    for k, (g, w) in enumerate(zip(grids, weights)):
        end = start + g.positions.numel()
        table[start:end, k] = 1.0
        table[start:end, num_grids + k] = w.foreground.flatten()
        table[start:end, 2 * num_grids + k] = w.total.flatten()
        start = end
    return index, table


def token_weights(valid: Tensor, row: str = "own") -> Tensor:
    """How much each completion token's attention row counts in its completion's ASM: ``own`` = every valid token
    equally (``1 / T_valid``), ``final`` = the last valid token alone (1); a row without valid tokens is all 0.

    Shape: ``[N, T]`` bool -> ``[N, T]`` float, rows summing to 1 (or 0).

    >>> token_weights(torch.tensor([[True, True, False, False]]), "final").tolist()
    [[0.0, 1.0, 0.0, 0.0]]
    """
    if row not in ROWS:
        raise ValueError(f"row must be one of {ROWS}, got {row!r}")
    v = valid.float()
    if row == "own":
        return v / v.sum(-1, keepdim=True).clamp_min(1)
    last = (v * torch.arange(1, v.shape[-1] + 1, device=v.device)).argmax(-1)  # the last True (0 when none)
    return F.one_hot(last, v.shape[-1]).float() * v


def completion_asm(scores: Tensor, valid: Tensor, row: str = "own") -> Tensor:
    """Each completion's ASM from its tokens' scores: ``own`` = the mean over its valid tokens, ``final`` = its last
    valid token's score (:func:`token_weights`); NaN ("cannot score") for a completion without valid tokens.

    ``own`` divides the sum by the count (:func:`row_token_mean`) rather than summing ``1 / count``-weighted
    scores: three tokens scoring 0.1 give 0.1 exactly in float32, not 0.10000000894. The two differ only in the
    last bit, but through 120 GRPO steps at attention weight 100 that bit trains another policy (the paper table's
    cells in docs/paper_table.md are reproduced with this order; ``benchmarks/reproduce_demo_phyx_oe_asm_norm1.py``
    checks the shipped ASM policy bit for bit).

    Shape: ``[N, T]``, ``[N, T]`` bool -> ``[N]``.

    Raises:
        ValueError: an unknown ``row``.
    """
    if row == "own":
        return row_token_mean(scores, valid)
    counts = token_weights(valid, row)
    return torch.where(counts.sum(-1) > 0, (scores * counts).sum(-1), torch.full_like(scores[:, 0], float("nan")))


def row_token_mean(values: Tensor, mask: Tensor) -> Tensor:
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
    up = F.interpolate(grid_map[None, None].float(), size=(y1 - y0, x1 - x0), mode="bilinear",
                       align_corners=False)[0, 0]
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


def captured_rows(capture: AttentionCapture, attention_mask: Tensor, chunk_scores: int = 2 ** 22,
                  columns: Tensor | None = None) -> Tensor:
    """:func:`attention_rows` of a capture. Shape: attention_mask ``[N, L]`` -> ``[N, Tq, L]`` (or ``[N, Tq, I]``)."""
    c = capture
    return attention_rows(c.q, c.k, c.cos, c.sin, attention_mask, c.parts.scale, c.parts.head_dim, chunk_scores,
                          columns)


# ----------------------------------------------------------------------------------------- in the trainer
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

    def columns(self) -> dict[str, list]:
        """The reward column it gives: ``asm``."""
        return {"asm": self.asm.tolist()}

    @classmethod
    def cat(cls, parts: list["AttentionScores"]) -> "AttentionScores":
        keep = all(p.token_asm is not None for p in parts)
        return cls(torch.cat([p.asm for p in parts]), [m for p in parts for m in p.maps],
                   [g for p in parts for g in p.grids],
                   [t for p in parts for t in p.token_asm] if keep else None,
                   [t for p in parts for t in p.token_maps] if keep else None)


@COLUMNS.register("asm")
class AttentionMeter:
    """Measures each completion's ASM from a capture made during the log-prob pass's forward (no second forward): the
    provider of the ``asm`` column (:mod:`lit_grpo.columns`), built from the module's ``attention`` options.

    >>> with meter.capture(policy, rollout) as cap:            # doctest: +SKIP
    ...     logps, _ = completion_logps(policy, rollout, temperature)
    >>> scores = meter.score(cap, rollout, images)              # ``images[n]``: row n's PIL images
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
        prompt_mask = rollout.prompt["attention_mask"]
        mask = torch.cat([prompt_mask, rollout.completion_mask.to(prompt_mask)], 1)  # (N, L)
        grids = self.family.image_grids(rollout.prompt, [[im.size for im in ims] for ims in images])
        index, table = self.tables(grids, images, mask.device)  # (N, I), (N, I, 3G)
        cells = captured_rows(capture, mask, self.cfg.chunk_scores, index)  # (N, T, I): attention on each grid cell
        n, g = cells.shape[0], table.shape[-1] // 3
        mass, fg, total = torch.bmm(cells, table).split(g, -1)  # (N, T, G) each
        valid = rollout.completion_mask.to(cells.device)
        scores = grid_fractions(mass, fg, total)  # (N, T)
        asm = completion_asm(scores, valid, self.cfg.row)  # (N,)
        w = token_weights(valid, self.cfg.row) / mass.sum(-1).clamp_min(1e-30)  # (N, T): the rows the maps average
        mean_cells = torch.bmm(w[:, None, :], cells)[:, 0].cpu()  # (N, I): each token normalised, then averaged
        maps = [self.split(mean_cells[k], grids[k]) for k in range(n)]
        tokens = [self.split(cells[k][valid[k]].cpu(), grids[k]) for k in range(n)] if keep_tokens else None
        return AttentionScores(asm.cpu(), maps, grids,
                               [scores[k][valid[k]].cpu() for k in range(n)] if keep_tokens else None, tokens)

    @staticmethod
    def split(cells: Tensor, grids: list[ImageGrid]) -> list[Tensor]:
        """``[..., I]`` cell values -> one ``[..., h, w]`` map per grid."""
        sizes = [g.positions.numel() for g in grids]
        parts = cells[..., :sum(sizes)].split(sizes, -1)
        return [c.reshape(*c.shape[:-1], *g.positions.shape) for c, g in zip(parts, grids)]

    def tables(self, grids: list[list[ImageGrid]], images: list[list[Image.Image]], device) -> tuple[Tensor, Tensor]:
        """:func:`cell_table` of every row, zero-padded to a common size. Shape: -> ``[N, I]``, ``[N, I, 3 G]``."""
        weights = self.weights(grids, images)
        num_grids = max(len(g) for g in grids)
        rows = [cell_table(g, w, num_grids) for g, w in zip(grids, weights)]
        size = max(len(i) for i, _ in rows)
        index = torch.zeros(len(rows), size, dtype=torch.long)
        table = torch.zeros(len(rows), size, 3 * num_grids)
        for k, (i, tab) in enumerate(rows):
            index[k, :len(i)], table[k, :len(i)] = i, tab
        return index.to(device), table.to(device)

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
