"""Attention-map analysis for notebooks and callbacks: maps of one sample, overlays, ASM over a dataset
grouped by domain / reasoning type / rule, and two checkpoints compared.

Everything here runs the same capture and meter (AttentionMeter) as the trainer (:mod:`lit_grpo.tasks.attention.meter`): a
completion is generated (greedy by default), then one full forward over prompt + completion with the
hooks on gives each token's final-layer attention on the image.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable, Iterable

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn

from lit_grpo.tasks.attention.meter import AttentionConfig, AttentionMeter, foreground_mask, image_heatmap
from lit_grpo.data.sample import Sample
from lit_grpo.data.sample import render_messages
from lit_grpo.families import ImageGrid, row_layout
from lit_grpo.tasks.attention.heatmap import (HeatScale, colorize, overlay, panel, to_float,  # noqa: F401 (re-exported)
                              uniform_multiples)
from lit_grpo.policy import image_token_ids, stop_token_ids
from lit_grpo.rollout import (Rollout, SamplingConfig, completion_mask, encode_prompts, model_inputs, repeat_rows,
                              sample_completions)


# ----------------------------------------------------------------------------------------- pictures
def foreground_share(image: Image.Image, threshold: int = 230) -> float:
    """Fraction of the image's pixels that are foreground: the ASM that uniform attention would get."""
    return float(foreground_mask(image, threshold).float().mean())


def display_size(size: tuple[int, int], side: int) -> tuple[int, int]:
    """``(width, height)`` scaled so the longer side is ``side`` (up or down)."""
    scale = side / max(size)
    return max(1, round(size[0] * scale)), max(1, round(size[1] * scale))


def image_panel(image: Image.Image, maps: list[Tensor], grids: list[ImageGrid], index: int = 0, side: int = 256,
                threshold: int = 230, scale: HeatScale = HeatScale(), title: str | None = None, columns: int = 4,
                font_px: int = 12) -> np.ndarray:
    """The labelled :func:`~lit_grpo.tasks.attention.heatmap.panel` (with its colour bar) of image ``index`` for grid maps
    (e.g. ``AttentionScores.maps[n]``), tiles drawn with the longer side ``side`` px. The heat map is
    computed at that size (grid boxes are fractions of the image); the mask is the scored one (from the
    original pixels), resized with nearest neighbours. ``scale``: fixed (default, comparable across images
    and checkpoints) or per image (:class:`~lit_grpo.tasks.attention.heatmap.HeatScale`); ``columns`` (4 or 2 tiles a row) and
    ``font_px`` as :func:`~lit_grpo.tasks.attention.heatmap.panel`."""
    w, h = display_size(image.size, side)
    heat = image_heatmap(maps, grids, index, h, w).numpy()
    mask = Image.fromarray(foreground_mask(image, threshold).numpy()).resize((w, h), Image.NEAREST)
    return panel(image.convert("RGB").resize((w, h), Image.BICUBIC), heat, np.asarray(mask), scale, title=title,
                 columns=columns, font_px=font_px)


# ----------------------------------------------------------------------------------------- one sample
@dataclasses.dataclass
class SampleAttention:
    """One completion of one sample and where its tokens looked."""

    sample: Sample
    completion: str
    tokens: list[str]
    """The completion's valid tokens, decoded one by one."""
    token_asm: Tensor
    """``[T]`` each valid token's fraction of image attention on foreground pixels."""
    asm: float
    maps: list[Tensor]
    """Mean attention per grid over the valid tokens (each token normalised to 1)."""
    token_maps: list[Tensor]
    """``[T, h, w]`` per grid: each valid token's own attention on the grid."""
    grids: list[ImageGrid]

    def grid_maps(self, token: int | None = None) -> list[Tensor]:
        """Per grid: the completion's mean map, or token ``token``'s own."""
        return self.maps if token is None else [m[token] for m in self.token_maps]

    def heatmap(self, image: int = 0, token: int | None = None, size: tuple[int, int] | None = None) -> Tensor:
        """Attention on image ``image`` at ``size`` ``(width, height)`` (default: the image's), summing to 1."""
        w, h = size or self.sample.images[image].size
        return image_heatmap(self.grid_maps(token), self.grids, image, h, w)

    def panel(self, image: int = 0, token: int | None = None, side: int = 256, scale: HeatScale = HeatScale(),
              title: str | None = None) -> np.ndarray:
        """:func:`image_panel` of the completion's mean map, or of token ``token``'s own (fixed colour scale by
        default, so panels of different samples, tokens and checkpoints compare)."""
        return image_panel(self.sample.images[image], self.grid_maps(token), self.grids, image, side,
                           scale=scale, title=title)


@torch.no_grad()
def sample_attention(model: nn.Module, processor, sample: Sample, template: str = "visualsphinx_seed",
                     completion: str | None = None, max_new_tokens: int = 32, grid: str | None = None,
                     seed: int = 0, row: str = "own") -> SampleAttention:
    """Generate a greedy completion for ``sample`` (or score the given ``completion`` text) and return its maps
    (``grid``, ``row``: :class:`~lit_grpo.tasks.attention.meter.AttentionConfig`)."""
    return batch_attention(model, processor, [sample], template, [completion] if completion is not None else None,
                           max_new_tokens, grid, seed, row)[0]


@torch.no_grad()
def batch_attention(model: nn.Module, processor, samples: list[Sample], template: str = "visualsphinx_seed",
                    completions: list[str] | None = None, max_new_tokens: int = 32, grid: str | None = None,
                    seed: int = 0, row: str = "own") -> list[SampleAttention]:
    """:func:`sample_attention` for several samples in one batch (left-padded, one forward)."""
    layout = row_layout(model, processor)
    enc = repeat_rows(encode_prompts(processor, [render_messages(s, template) for s in samples],
                                     [s.images for s in samples]), 1, layout)
    stop = stop_token_ids(model, processor)
    if completions is None:
        torch.manual_seed(seed)
        rollout = sample_completions(model, processor, enc, SamplingConfig(max_completion_length=max_new_tokens),
                                     stop, image_token_ids(model, processor), greedy=True, layout=layout)
    else:
        rollout = given_rollout(enc, processor, completions, stop, layout)
    meter = AttentionMeter(model, processor, AttentionConfig(grid=grid, row=row))
    was_training = model.training
    model.eval()
    try:
        with meter.capture(model, rollout) as cap:
            model(**model_inputs(rollout), use_cache=False)
    finally:
        model.train(was_training)
    scores = meter.score(cap, rollout, [s.images for s in samples], keep_tokens=True)
    tok = getattr(processor, "tokenizer", processor)
    out = []
    for n, s in enumerate(samples):
        ids = rollout.completion_ids[n][rollout.completion_mask[n]].tolist()
        out.append(SampleAttention(s, rollout.completions[n], [tok.decode([i]) for i in ids], scores.token_asm[n],
                                   float(scores.asm[n]), scores.maps[n], scores.token_maps[n], scores.grids[n]))
    return out


def given_rollout(prompt: dict, processor, completions: list[str], stop: list[int], layout) -> Rollout:
    """A rollout of ``prompt`` (one row per completion) with the given completion texts, each ended by the
    first stop token and right-padded."""
    tok = getattr(processor, "tokenizer", processor)
    ids = [tok(c, add_special_tokens=False)["input_ids"] + [stop[0]] for c in completions]
    t = max(len(i) for i in ids)
    padded = torch.tensor([i + [tok.pad_token_id] * (t - len(i)) for i in ids])
    mask, truncated = completion_mask(padded, stop)
    return Rollout(prompt, padded, mask, truncated, list(completions), layout=layout)


# ----------------------------------------------------------------------------------------- datasets
def group_values(sample: Sample, group_by: str | Callable[[Sample], str]) -> list[str]:
    """The groups of ``sample``: a callable's result, a :class:`Sample` field (``domain``, ``principle``) or
    ``meta.<key>`` (e.g. ``meta.reasoning_type``); a list-valued field gives one group per element."""
    if callable(group_by):
        return [str(group_by(sample))]
    value = sample.meta.get(group_by[5:]) if group_by.startswith("meta.") else sample.columns().get(group_by)
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def group_key(group_by: str | Callable[[Sample], str]) -> Callable[[Sample], str]:
    """A sample -> one group name function (:func:`group_values` joined with ``+``)."""
    return lambda s: "+".join(group_values(s, group_by))


def regroup(records: list[dict], samples: list[Sample], group_by: str | Callable[[Sample], str]) -> list[dict]:
    """``records`` (of :func:`dataset_asm`) grouped by another key; a sample with several values of a
    list-valued key (two reasoning types) appears once in each of their groups."""
    by_id = {s.id: s for s in samples}
    return [dict(r, group=g) for r in records for g in group_values(by_id[r["id"]], group_by)]


_RULES = {"count": "number of", "colour": "colour repeats", "size": "grows", "rotation": "arrow turns",
          "position": "moves one corner"}


def puzzle_rule(sample: Sample) -> str:
    """The rule of an embedded puzzle, read from its explanation (``count``, ``colour``, ``size``, ...)."""
    text = str(sample.meta.get("explanation", ""))
    return next((rule for rule, words in _RULES.items() if re.search(words, text)), "other")


def dataset_asm(model: nn.Module, processor, samples: Iterable[Sample], group_by: str | Callable = "domain",
                template: str = "visualsphinx_seed", batch_size: int = 8, **kwargs) -> list[dict]:
    """One record per sample: ``{"id", "group", "asm", "foreground", "completion"}`` (greedy completions);
    ``foreground`` is the mean foreground share of the sample's images, the ASM uniform attention would get."""
    key, samples, records = group_key(group_by), list(samples), []
    for i in range(0, len(samples), batch_size):
        chunk = samples[i:i + batch_size]
        for s, a in zip(chunk, batch_attention(model, processor, chunk, template, **kwargs)):
            fg = float(np.mean([foreground_share(im) for im in s.images])) if s.images else math.nan
            records.append({"id": s.id, "group": key(s), "asm": a.asm, "foreground": fg, "completion": a.completion})
    return records


def summarize(records: list[dict], key: str = "asm") -> dict[str, dict[str, float]]:
    """Per group: the mean of ``key`` (the ASM, or e.g. ``foreground``), its standard error and the count (NaN
    skipped); ``"all"`` last, over the distinct samples (by ``id``)."""
    groups: dict[str, list[float]] = {}
    for r in records:
        if not math.isnan(r[key]):
            groups.setdefault(r["group"], []).append(r[key])
    groups = dict(sorted(groups.items()))
    once = {r.get("id", k): r[key] for k, r in enumerate(records)}  # a regrouped sample counts once in "all"
    groups["all"] = [v for v in once.values() if not math.isnan(v)]
    out = {}
    for g, vs in groups.items():
        a = np.asarray(vs, dtype=np.float64)
        out[g] = {"mean": float(a.mean()) if a.size else math.nan, "sem": float(a.std(ddof=1) / math.sqrt(a.size))
                  if a.size > 1 else 0.0, "n": int(a.size)}
    return out


def compare_checkpoints(checkpoints: dict[str, tuple[nn.Module, object]], samples: list[Sample],
                        group_by: str | Callable = "domain", **kwargs) -> dict[str, dict[str, float]]:
    """``{name: (model, processor)}`` -> :func:`checkpoint_table` of their :func:`dataset_asm` records on the same
    samples (greedy completions of each checkpoint)."""
    return checkpoint_table({name: dataset_asm(m, p, samples, group_by, **kwargs)
                             for name, (m, p) in checkpoints.items()})


def asm_choices(model: nn.Module, processor, samples: list[Sample], template: str = "visualsphinx_seed",
                max_new_tokens: int = 32, grids: tuple[str, ...] = ("base", "tiles", "all"),
                rows: tuple[str, ...] = ("own", "final"), batch_size: int = 8) -> dict[tuple[str, str], dict[str, float]]:
    """How much the ASM's choices move it: each sample's greedy completion (generated once) scored with every
    ``(grid, row)`` (:class:`~lit_grpo.tasks.attention.meter.AttentionConfig`), then per choice the mean ASM over samples, its
    standard error, and the paired change against the first choice (``grids[0]``, ``rows[0]``), its SE and count.

    Returns: ``{(grid, row): {"mean", "sem", "diff", "diff_sem", "n"}}`` in the order of the choices.
    """
    samples, completions = list(samples), []
    for i in range(0, len(samples), batch_size):
        chunk = samples[i:i + batch_size]
        completions += [a.completion for a in batch_attention(model, processor, chunk, template, None,
                                                              max_new_tokens, grids[0], row=rows[0])]
    values: dict[tuple[str, str], np.ndarray] = {}
    for g in grids:
        for r in rows:
            got = []
            for i in range(0, len(samples), batch_size):
                got += [a.asm for a in batch_attention(model, processor, samples[i:i + batch_size], template,
                                                       completions[i:i + batch_size], max_new_tokens, g, row=r)]
            values[(g, r)] = np.asarray(got, dtype=np.float64)
    first = values[(grids[0], rows[0])]

    def mean_se(a: np.ndarray) -> tuple[float, float, int]:
        a = a[~np.isnan(a)]
        return (float(a.mean()) if a.size else math.nan,
                float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0, int(a.size))

    out = {}
    for key, v in values.items():
        (m, se, _), (d, dse, n) = mean_se(v), mean_se(v - first)
        out[key] = {"mean": m, "sem": se, "diff": d, "diff_sem": dse, "n": n}
    return out


def checkpoint_table(records: dict[str, list[dict]], key: str = "asm") -> dict[str, dict[str, float]]:
    """Per group (``"all"`` last, as :func:`summarize`): ``{name: mean, "<name>_sem": its standard error, ...,
    "diff": mean over samples of last - first, "diff_sem": that paired difference's standard error, "n": samples
    with both}``. The difference is paired (each sample's value under the last checkpoint minus under the first),
    so what a sample's images contribute to both cancels; its SE is the one to read a change by."""
    names = list(records)
    summaries = {name: summarize(rs, key) for name, rs in records.items()}
    first = {r["id"]: r[key] for r in records[names[0]]}
    diffs = summarize([{"id": r["id"], "group": r["group"], "diff": r[key] - first.get(r["id"], math.nan)}
                       for r in records[names[-1]]], key="diff")
    table = {}
    for g in summaries[names[0]]:
        row: dict[str, float] = {}
        for n in names:
            s = summaries[n].get(g, {"mean": math.nan, "sem": math.nan})
            row[n], row[f"{n}_sem"] = s["mean"], s["sem"]
        d = diffs.get(g, {"mean": math.nan, "sem": math.nan, "n": 0})
        row.update(diff=d["mean"], diff_sem=d["sem"], n=d["n"])
        table[g] = row
    return table
