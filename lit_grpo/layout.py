"""How a processor's tensors map to prompt rows: select rows, count images per row.

The default layout (:class:`RowLayout`) fits models whose tensors are all per row; a model family whose
tensors differ (Qwen-VL's flattened ``pixel_values``, LLaVA-NeXT's per-image ``image_sizes``) overrides it in
:mod:`lit_grpo.families`.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor


class RowLayout:
    """How a processor's tensors map to prompt rows; the default for models whose tensors are all per row.

    Default: every tensor whose first dim is the number of rows is per row (batch dim first), the rest
    pass through, and nothing but ``input_ids``/``attention_mask`` covers the completion. Families whose
    tensors differ (Qwen-VL's flattened ``pixel_values``, its ``mm_token_type_ids``) override
    :meth:`select` and :meth:`extend` (see :mod:`lit_grpo.families`).
    """

    def __init__(self, model_type: str | None = None):
        self.model_type = model_type

    def select(self, inputs: dict[str, Any], idx: Tensor, num_rows: int) -> dict[str, Any]:
        """Rows ``idx`` of ``inputs`` (``num_rows`` rows)."""
        return select_rows(inputs, idx, num_rows)

    def check_images(self, images_per_prompt: dict[str, int]) -> None:
        """Refuse prompts whose images this layout cannot give to the right rows: per-row indexing gives every row
        its own images only when every prompt has exactly one (or none has any). ``images_per_prompt``: sample
        id -> number of images. Families that split per-image tensors by row take any number.

        Raises:
            ValueError: naming the sample, its image count and the model type.
        """
        counts = set(images_per_prompt.values())
        if counts <= {1} or counts <= {0}:
            return
        sample, n = next((k, v) for k, v in images_per_prompt.items() if v != 1)
        raise ValueError(f"sample {sample!r} has {n} image(s) in a batch of prompts with one: model type "
                         f"{self.model_type!r} is outside the supported families, whose images can be split by row "
                         "only with exactly one image per prompt; use one image per prompt or a supported family")

    def extend(self, inputs: dict[str, Any], completion_mask: Tensor) -> dict[str, Any]:
        """Forward inputs other than ids/mask, extended over a completion with mask ``[N, T]``."""
        return inputs


def select_rows(inputs: dict[str, Any], idx: Tensor, num_rows: int) -> dict[str, Any]:
    """Rows ``idx`` of every per-row tensor (first dim == ``num_rows``); other entries pass through."""
    return {k: (v[idx.to(v.device)] if isinstance(v, Tensor) and v.dim() and v.shape[0] == num_rows else v)
            for k, v in inputs.items()}


def images_by_tokens(tokens_per_row: list[int], tokens_per_image: list[int]) -> list[int]:
    """Images per row, when the images (in row order) fill the rows' image tokens one after another.

    Raises:
        ValueError: the counts do not line up (names the row).
    """
    out, k = [], 0
    for row, want in enumerate(tokens_per_row):
        start, got = k, 0
        while got < want and k < len(tokens_per_image):
            got, k = got + tokens_per_image[k], k + 1
        if got != want:
            raise ValueError(f"row {row}: {want} image tokens, but its images (from image {start} on) make {got}")
        out.append(k - start)
    if k != len(tokens_per_image):
        raise ValueError(f"{len(tokens_per_image)} images for {k} images' worth of image tokens")
    return out
