"""The attention overlays in TensorBoard: a callback that draws, every few training steps, where the policy's final
layer looked (the ``asm`` column's measurement, which the training step returns under ``measured``). A run names it
by its class path: ``--trainer.callbacks+=lit_grpo.tasks.attention.overlays.AttentionOverlays``."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only

from lit_grpo.loggers import log_histogram, log_images
from lit_grpo.tasks.attention.analysis import foreground_share, image_panel
from lit_grpo.tasks.attention.heatmap import HeatScale


class AttentionOverlays(L.Callback):
    """At every ``every_n_steps``-th training step, log attention overlays of a few completions and the ASM histogram.

    Each overlay is one labelled image per completion (and per image of its prompt): the prompt image, the
    final layer's attention on it (the completion's mean over its tokens, resized to the image), the
    attention blended over the image, and the foreground mask (black = foreground, i.e. some RGB channel
    < 230), drawn ``side`` pixels along the longer side, with a colour bar on the right and the
    completion's ASM and the ASM of uniform attention (the image's foreground share) on top, in two rows of two
    tiles with letters ``side / 16`` px high, so that a TensorBoard card (about 400 px wide) shows the labels at
    about 11 px. Attention is drawn in multiples of uniform attention on a log scale: ``scale="fixed"``
    (default) from ``vmin`` to ``vmax`` for every image and step, so colours compare across images and checkpoints;
    ``scale="image"`` stretches each map over its own range (the colour bar then shows that range). Tags:
    ``train/rollout/attention/overlay/<j>`` (``<j>_<k>`` for a prompt's k-th image) and the histogram
    ``train/rollout/attention/asm``. Needs the attention capture (the ``attention`` reward, or
    ``model.attention.enabled: true``); logs nothing otherwise.
    """

    def __init__(self, every_n_steps: int = 10, num_completions: int = 4, side: int = 384, scale: str = "fixed",
                 vmin: float = 0.125, vmax: float = 8.0):
        self.every_n_steps, self.num_completions, self.side = every_n_steps, num_completions, side
        self.scale = HeatScale(scale, vmin, vmax)

    @rank_zero_only
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        scores = outputs.get("measured", {}).get("asm") if isinstance(outputs, dict) else None
        if scores is None or trainer.global_step % self.every_n_steps:
            return
        self.log_attention(trainer, scores, batch.samples, outputs["group_size"], trainer.global_step)

    def log_attention(self, trainer: L.Trainer, scores, samples, group_size: int, step: int) -> None:
        """Write the overlays and the histogram of ``scores`` (:class:`~lit_grpo.tasks.attention.meter.AttentionScores`)
        to the trainer's loggers."""
        asm = scores.asm[~torch.isnan(scores.asm)]
        if asm.numel():
            log_histogram(trainer, "train/rollout/attention/asm", asm, step)
        images, titles = {}, {}
        for j in range(min(self.num_completions, len(scores.maps))):
            pictures = samples[j // group_size].images
            for k, image in enumerate(pictures):
                tag = f"train/rollout/attention/overlay/{j}" + (f"_{k}" if len(pictures) > 1 else "")
                titles[tag] = (f"step {step}, completion {j}" + (f", image {k}" if len(pictures) > 1 else "")
                               + f": ASM {float(scores.asm[j]):.3f} (uniform attention: {foreground_share(image):.3f})")
                images[tag] = image_panel(image, scores.maps[j], scores.grids[j], k, self.side, scale=self.scale,
                                          title=titles[tag], columns=2, font_px=max(12, self.side // 16))
        log_images(trainer, images, step, captions=titles)
