"""Model families: where a VLM keeps what the attention reward needs, and how its inputs are laid out.

One small adapter per family, registered by ``config.model_type`` in :data:`FAMILIES`:

- where the final decoder layer, its ``q_proj``/``k_proj`` (LoRA wrappers included: the module found
  by attribute is the wrapper, whose output holds the adapter's delta), the rotary module and the
  attention scale (``self_attn.scaling``; Granite's ``attention_multiplier``) live. The language model
  is resolved by attribute (``model.language_model`` or ``model.text_model``), never by a name
  suffix, which would also hit the vision encoder;
- how one prompt's image tokens map to 2-D patch grids (:class:`ImageGrid`);
- how the processor's tensors are indexed by prompt row and extended over a completion
  (:class:`RowLayout`, the default for a model outside the families, which the rollout carries; Qwen's flattened
  ``pixel_values`` and its ``mm_token_type_ids``).

Grid choice (``grid``): ``"base"`` = one low-resolution grid covering the whole image (LLaVA-NeXT's
base grid, Idefics3's global image), ``"tiles"`` = the high-resolution tiles, ``"all"`` = both; ``None``
= the family's default. Qwen and LLaVA have a single grid.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from transformers import Qwen2VLProcessor, SmolVLMProcessor
from transformers.processing_utils import ProcessorMixin

from lit_grpo.registry import Registry


# ----------------------------------------------------------------- rows: how processor tensors map to prompt rows


class RowLayout:
    """How a processor's tensors map to prompt rows; the default for models whose tensors are all per row.

    Default: every tensor whose first dim is the number of rows is per row (batch dim first), the rest
    pass through, and nothing but ``input_ids``/``attention_mask`` covers the completion. Families whose
    tensors differ (Qwen-VL's flattened ``pixel_values``, its ``mm_token_type_ids``) override
    :meth:`select` and :meth:`extend` (the :class:`Family` subclasses below).
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
        # all-one or all-none only: the per-row default indexes pixel_values by row, which is right only when a batch's
        # image count equals its row count; a mixed batch would hand rows another prompt's image
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
    # judged per row by the first dim alone: a tensor of another kind whose length equals the row count would be
    # indexed as rows, which is why the default layout admits one image per prompt only
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
        # images fill the rows in order, so a row takes images until its image tokens are covered
        while got < want and k < len(tokens_per_image):
            got, k = got + tokens_per_image[k], k + 1
        if got != want:
            raise ValueError(f"row {row}: {want} image tokens, but its images (from image {start} on) make {got}")
        out.append(k - start)
    if k != len(tokens_per_image):
        raise ValueError(f"{len(tokens_per_image)} images for {k} images' worth of image tokens")
    return out


GRIDS = ("base", "tiles", "all")
Box = tuple[float, float, float, float]
FULL: Box = (0.0, 0.0, 1.0, 1.0)


# eq=False: a dataclass __eq__ would compare the tensor fields, whose truth value is ambiguous
@dataclasses.dataclass(frozen=True, eq=False)
class ImageGrid:
    """One image's tokens laid on a 2-D patch grid.

    ``positions`` ``[h, w]`` long: the sequence index of each cell's token (row-major, as the model reads
    them); ``image``: index of the image within its prompt; ``box``: ``(left, top, right, bottom)`` of the
    original image the grid covers, as fractions of its width and height.
    """

    positions: Tensor
    image: int
    box: Box = FULL


@dataclasses.dataclass
class AttentionParts:
    """The final decoder layer's modules the capture hooks, and its attention arithmetic."""

    q_proj: nn.Module
    k_proj: nn.Module
    rotary: nn.Module
    scale: float
    head_dim: int


class ImageOnlyQwenProcessor(Qwen2VLProcessor):
    """Qwen2-VL / Qwen2.5-VL processor without the video processor (which needs torchvision)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
                         chat_template=chat_template, **kwargs)


class ImageOnlySmolVLMProcessor(SmolVLMProcessor):
    """SmolVLM processor without the video processor (which needs torchvision)."""

    def __init__(self, image_processor=None, tokenizer=None, image_seq_len: int = 169, chat_template=None, **kwargs):
        super().__init__(image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
                         image_seq_len=image_seq_len, chat_template=chat_template, **kwargs)

    def apply_chat_template(self, conversation, chat_template=None, **kwargs):
        """The generic template rendering (SmolVLM's own reads video defaults from the video processor)."""
        return ProcessorMixin.apply_chat_template(self, conversation, chat_template, **kwargs)


def unwrap(model: nn.Module) -> nn.Module:
    """The transformers model inside a PEFT wrapper (LoRA layers stay injected), or ``model`` itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def runs(ids: Tensor, token_id: int) -> list[tuple[int, int]]:
    """``(start, length)`` of each maximal run of ``token_id`` in the 1-D ``ids``."""
    hit = (ids == token_id).long()
    # padded with 0 at both ends so a run touching either end still has a rising and a falling edge
    edges = torch.diff(torch.cat([hit.new_zeros(1), hit, hit.new_zeros(1)]))
    starts, ends = (edges == 1).nonzero().flatten(), (edges == -1).nonzero().flatten()
    return [(int(s), int(e - s)) for s, e in zip(starts, ends)]


def _square(start: int, side: int) -> Tensor:
    return start + torch.arange(side * side).view(side, side)


class Family(RowLayout):
    """Base adapter: per-row processor tensors, language model at ``model.<language_model_attr>``.

    ``processor`` (optional) supplies what a family's grids need (Idefics3's marker tokens, LLaVA's crop).
    """

    model_types: ClassVar[tuple[str, ...]] = ()
    language_model_attr: ClassVar[str] = "language_model"
    default_grid: ClassVar[str] = "base"
    processor_class: ClassVar[type | None] = None
    """Class that reloads a saved processor (``None``: ``AutoProcessor``)."""

    def __init__(self, config: Any, processor: Any = None, grid: str | None = None):
        self.config, self.processor = config, processor
        self.grid = grid or self.default_grid
        if self.grid not in GRIDS:
            raise ValueError(f"grid must be one of {GRIDS}, got {grid!r}")

    def language_model(self, model: nn.Module) -> nn.Module:
        # the ForConditionalGeneration class keeps its backbone at .model; resolving by attribute, never by a name
        # suffix, keeps the vision tower's layers out
        inner = getattr(unwrap(model), "model", None)
        lm = getattr(inner, self.language_model_attr, None)
        # the capture recomputes queries and keys with the rotary embedding, so both parts must be there
        if lm is None or not hasattr(lm, "layers") or not hasattr(lm, "rotary_emb"):
            raise AttributeError(f"{type(unwrap(model)).__name__} has no model.{self.language_model_attr} with "
                                 "layers and rotary_emb; is it a supported family?")
        return lm

    def attention_parts(self, model: nn.Module) -> AttentionParts:
        """The final decoder layer's ``q_proj``/``k_proj``, the rotary module and the scale.

        Raises:
            NotImplementedError: the final layer uses sliding-window attention.
        """
        lm = self.language_model(model)
        attn = lm.layers[-1].self_attn
        # a windowed final layer may not see image tokens far back: full-attention scores would not be the model's
        if getattr(attn, "sliding_window", None):
            raise NotImplementedError("the final layer uses sliding-window attention, which the ASM does not model")
        return AttentionParts(attn.q_proj, attn.k_proj, lm.rotary_emb, float(attn.scaling), int(attn.head_dim))

    per_image_keys: ClassVar[tuple[str, ...]] = ()
    """Processor tensors with one entry per image (images of all rows in row order), not one per row."""

    def images_per_row(self, inputs: dict[str, Any]) -> list[int]:
        """How many images each row of ``inputs`` holds (families with :attr:`per_image_keys`)."""
        raise NotImplementedError

    def select(self, inputs: dict[str, Any], idx: Tensor, num_rows: int) -> dict[str, Any]:
        """Rows ``idx`` of ``inputs``, each with exactly its own images (several per row included)."""
        per_image = [k for k in self.per_image_keys if k in inputs]
        out = select_rows({k: v for k, v in inputs.items() if k not in per_image}, idx, num_rows)
        if not per_image:
            return out
        # prefix sums of the images per row: row n's images are first[n]:first[n + 1] of the per-image tensors
        first = [0, *itertools.accumulate(self.images_per_row(inputs))]
        images = torch.tensor([i for n in idx.tolist() for i in range(first[n], first[n + 1])], dtype=torch.long)
        if len(images):  # rows without images: a text-only forward
            out.update(self.select_images({k: inputs[k] for k in per_image}, images))
        return out

    def select_images(self, per_image: dict[str, Tensor], images: Tensor) -> dict[str, Tensor]:
        """Images ``images`` (indices in row order) of the per-image tensors."""
        return {k: v[images.to(v.device)] for k, v in per_image.items()}

    def check_images(self, images_per_prompt: dict[str, int]) -> None:
        """Any number of images per prompt: :meth:`select` splits per-image tensors by row."""

    def image_grids(self, inputs: dict[str, Any], image_sizes: list[list[tuple[int, int]]]) -> list[list[ImageGrid]]:
        """The grids of every row of ``inputs``; ``image_sizes[n]`` holds row ``n``'s ``(width, height)``s.

        Raises:
            ValueError: a row's image tokens do not match its images (names the row).
        """
        ids = inputs["input_ids"].cpu()
        out = []
        for n in range(ids.shape[0]):
            grids = self.row_grids(ids[n], n, inputs, image_sizes[n])
            if {g.image for g in grids} != set(range(len(image_sizes[n]))):
                raise ValueError(f"row {n}: found grids for images {sorted({g.image for g in grids})}, "
                                 f"expected {len(image_sizes[n])} image(s)")
            out.append(grids)
        return out

    def row_grids(self, ids: Tensor, row: int, inputs: dict, sizes: list[tuple[int, int]]) -> list[ImageGrid]:
        """Grids of one row (``ids`` ``[L]``) whose images have ``sizes`` ``(width, height)``."""
        raise NotImplementedError

    def image_runs(self, ids: Tensor, row: int, sizes: list) -> list[tuple[int, int]]:
        """Runs of the image token in ``ids``, one per image (LLaVA-style families)."""
        found = runs(ids, self.config.image_token_index)
        if len(found) != len(sizes):
            raise ValueError(f"row {row}: {len(found)} image-token runs for {len(sizes)} image(s)")
        return found


FAMILIES: Registry[type[Family]] = Registry("model family")


def register(cls: type[Family]) -> type[Family]:
    for model_type in cls.model_types:
        FAMILIES.register(model_type)(cls)
    return cls


@register
class LlavaNextFamily(Family):
    """LLaVA-NeXT / Granite Vision: per image, the base grid (whole image resized to one tile) first,
    then the high-resolution tiles with a newline token ending each row (dropped here)."""

    model_types = ("llava_next",)
    per_image_keys = ("pixel_values", "image_sizes")

    def images_per_row(self, inputs):
        counts = [self.image_tokens(h, w) for h, w in inputs["image_sizes"].tolist()]
        return images_by_tokens((inputs["input_ids"] == self.config.image_token_index).sum(1).tolist(), counts)

    def image_tokens(self, height: int, width: int) -> int:
        """Image tokens of one image: the base grid, then the tiles with a newline ending each row."""
        side = self.config.vision_config.image_size // self.config.vision_config.patch_size
        th, tw = self.tile_shape(height, width)
        return side * side + th * (tw + 1)

    def row_grids(self, ids, row, inputs, sizes):
        cfg = self.config
        side = cfg.vision_config.image_size // cfg.vision_config.patch_size
        grids = []
        for k, ((start, length), (w, h)) in enumerate(zip(self.image_runs(ids, row, sizes), sizes)):
            th, tw = self.tile_shape(h, w)
            if length != self.image_tokens(h, w):
                raise ValueError(f"row {row}, image {k}: {length} image tokens, expected {side}x{side} base + "
                                 f"{th}x({tw}+1) tiles for a {w}x{h} image")
            if self.grid in ("base", "all"):
                grids.append(ImageGrid(_square(start, side), k))
            if self.grid in ("tiles", "all"):
                # a stride of tw + 1 skips the newline token that ends each tile row
                tiles = start + side * side + torch.arange(th)[:, None] * (tw + 1) + torch.arange(tw)[None, :]
                grids.append(ImageGrid(tiles, k))
        return grids

    def tile_shape(self, height: int, width: int) -> tuple[int, int]:
        """Rows and columns of the unpadded high-resolution feature grid, computed by the model's own code."""
        from transformers.models.llava_next.modeling_llava_next import get_anyres_image_grid_shape, unpad_image

        cfg = self.config
        side = cfg.vision_config.image_size // cfg.vision_config.patch_size
        nh, nw = get_anyres_image_grid_shape((height, width), cfg.image_grid_pinpoints, cfg.vision_config.image_size)
        # an empty tensor of the padded shape: unpad_image needs only its shape, so no pixels are made
        return tuple(unpad_image(torch.empty(0, nh * side, nw * side), (height, width)).shape[1:])


@register
class QwenVLFamily(Family):
    """Qwen2-VL / Qwen2.5-VL: an image is a run of ``(h/m) x (w/m)`` tokens (``image_grid_thw``, merge
    ``m``), row-major over the whole (resized) image. ``pixel_values`` are flattened over all images of
    the batch, so row selection splits them by ``image_grid_thw``; ``mm_token_type_ids`` (M-RoPE) are
    extended with zeros (text) over the completion."""

    model_types = ("qwen2_vl", "qwen2_5_vl")
    processor_class = ImageOnlyQwenProcessor
    per_image_keys = ("pixel_values", "image_grid_thw")

    def images_per_row(self, inputs):
        # one contiguous run of the image token per image, so the runs count the images
        return [len(runs(row.cpu(), self.config.image_token_id)) for row in inputs["input_ids"]]

    def row_grids(self, ids, row, inputs, sizes):
        # image_grid_thw is flattened over the batch: this row's images start after every earlier row's
        first = sum(self.images_per_row(inputs)[:row])
        merge = self.config.vision_config.spatial_merge_size
        grids = []
        for k, (start, length) in enumerate(runs(ids, self.config.image_token_id)):
            t, gh, gw = (int(v) for v in inputs["image_grid_thw"][first + k])
            h, w = gh // merge, gw // merge
            # t > 1 is a video's temporal axis; an image has t == 1 and h x w merged tokens
            if t != 1 or length != h * w:
                raise ValueError(f"row {row}, image {k}: {length} image tokens, image_grid_thw says {t}x{h}x{w}")
            grids.append(ImageGrid(start + torch.arange(h * w).view(h, w), k))
        return grids

    def select_images(self, per_image, images):
        thw, pixels = per_image["image_grid_thw"], per_image["pixel_values"]  # pixels: patches of every image
        # pixel_values has t * h * w patch rows per image (before the merge): the offsets split it by image
        offsets = [0] + thw.prod(-1).cumsum(0).tolist()
        return {"image_grid_thw": thw[images.to(thw.device)],
                "pixel_values": torch.cat([pixels[offsets[i]:offsets[i + 1]] for i in images.tolist()])}

    def extend(self, inputs: dict[str, Any], completion_mask: Tensor) -> dict[str, Any]:
        if "mm_token_type_ids" in inputs:
            tt = inputs["mm_token_type_ids"]
            # the model reads it beside input_ids, so it must cover the completion too; completion tokens are text (0)
            inputs = dict(inputs, mm_token_type_ids=torch.cat([tt, tt.new_zeros(completion_mask.shape)], 1))
        return inputs


@register
class Idefics3Family(Family):
    """Idefics3 / SmolVLM: per image, tiles each marked ``<row_i_col_j>`` then a global image marked
    ``<global-img>``, each followed by ``image_seq_len`` image tokens on a square grid (the pixel shuffle
    keeps row-major order). Tiles split the (resized) image evenly; the global image covers it all."""

    model_types = ("idefics3",)
    language_model_attr = "text_model"
    default_grid = "all"

    def markers(self) -> tuple[int, dict[int, tuple[int, int]]]:
        """Id of ``<global-img>`` and ``{id of <row_i_col_j>: (i, j)}``, from the processor's tokenizer."""
        tok = getattr(self.processor, "tokenizer", self.processor)
        if tok is None:
            raise ValueError("the Idefics3/SmolVLM adapter needs the processor (its tile markers are tokens)")
        vocab = tok.get_vocab()
        tiles = {vocab[f"<row_{i}_col_{j}>"]: (i, j) for i in range(1, 7) for j in range(1, 7)
                 if f"<row_{i}_col_{j}>" in vocab}
        return vocab["<global-img>"], tiles

    def row_grids(self, ids, row, inputs, sizes):
        global_id, tile_ids = self.markers()
        grids, tiles, image = [], [], 0
        for pos in ((ids == global_id) | torch.isin(ids, torch.tensor(list(tile_ids)))).nonzero().flatten().tolist():
            following = runs(ids[pos + 1:], self.config.image_token_id)
            # the image tokens must start right after the marker; a run further on belongs to another marker
            n = following[0][1] if following and following[0][0] == 0 else 0
            side = math.isqrt(n)
            if n == 0 or side * side != n:
                raise ValueError(f"row {row}: marker at {pos} is followed by {n} image tokens (not a square grid)")
            if int(ids[pos]) != global_id:
                tiles.append((tile_ids[int(ids[pos])], _square(pos + 1, side)))
                continue
            if tiles and self.grid in ("tiles", "all"):
                # the grid's shape is read from the largest row and column markers the tiles carried
                rows, cols = max(i for (i, _), _ in tiles), max(j for (_, j), _ in tiles)
                grids += [ImageGrid(p, image, ((j - 1) / cols, (i - 1) / rows, j / cols, i / rows))
                          for (i, j), p in tiles]
            # an image too small to be split has only the global image: taken whatever the grid choice
            if self.grid in ("base", "all") or not tiles:
                grids.append(ImageGrid(_square(pos + 1, side), image))
            tiles, image = [], image + 1
        return grids


@register
class SmolVLMFamily(Idefics3Family):
    """SmolVLM: the Idefics3 layout, with its own processor class."""

    model_types = ("smolvlm",)
    processor_class = ImageOnlySmolVLMProcessor


@register
class LlavaFamily(Family):
    """LLaVA (1.5): one square grid per image covering only the centre crop the image processor takes
    (shortest edge resized to ``size``, then ``crop_size`` cut from the centre)."""

    model_types = ("llava",)
    per_image_keys = ("pixel_values",)

    def images_per_row(self, inputs):
        tokens = (inputs["input_ids"] == self.config.image_token_index).sum(1).tolist()
        images = inputs["pixel_values"].shape[0]
        return images_by_tokens(tokens, [sum(tokens) // max(images, 1)] * images)  # every image: one crop's tokens

    def crop_box(self, width: int, height: int) -> Box:
        """Fractions of a ``width`` x ``height`` image that the resize + centre crop keeps."""
        ip = getattr(self.processor, "image_processor", None)
        # without the centre crop the grid covers the whole image
        if ip is None or not getattr(ip, "do_center_crop", False):
            return FULL
        short, crop = ip.size["shortest_edge"], ip.crop_size
        scale = short / min(width, height)
        rw, rh = width * scale, height * scale
        left, top = max(0.0, (rw - crop["width"]) / 2 / rw), max(0.0, (rh - crop["height"]) / 2 / rh)
        return (left, top, 1.0 - left, 1.0 - top)

    def row_grids(self, ids, row, inputs, sizes):
        grids = []
        for k, ((start, length), (w, h)) in enumerate(zip(self.image_runs(ids, row, sizes), sizes)):
            side = math.isqrt(length)
            if side * side != length:
                raise ValueError(f"row {row}, image {k}: {length} image tokens do not form a square grid")
            grids.append(ImageGrid(_square(start, side), k, self.crop_box(w, h)))
        return grids


def family_for(model: nn.Module, processor: Any = None, grid: str | None = None) -> Family:
    """The adapter of ``model``'s family (by ``config.model_type``; PEFT wrappers are looked through).

    Raises:
        ValueError: unsupported family; the message lists the supported ones.
    """
    config = unwrap(model).config
    # the class name when a config has no model_type: the error still names it
    model_type = getattr(config, "model_type", type(config).__name__)
    if model_type not in FAMILIES:
        raise ValueError(f"model type {model_type!r} is not supported by the attention capture; supported: "
                         f"{', '.join(FAMILIES.names())}")
    return FAMILIES.get(model_type)(config, processor, grid)


def row_layout(model: nn.Module, processor: Any = None) -> RowLayout:
    """How ``model``'s processor tensors are indexed by row: its family's layout, or the per-row default
    for a model outside the supported families (rollouts work for any model; only the ASM needs a family)."""
    model_type = getattr(unwrap(model).config, "model_type", None)
    # outside the families the rollout still works on the per-row default; only the ASM needs a family
    if model_type not in FAMILIES:
        return RowLayout(model_type)
    return FAMILIES.get(model_type)(unwrap(model).config, processor)


def load_processor(path: str, **kwargs: Any):
    """The processor saved at ``path``; Qwen-VL and SmolVLM ones are rebuilt image-only (no torchvision)."""
    from transformers import AutoConfig, AutoProcessor

    # the type is read first: AutoProcessor would build the video processor, which imports torchvision
    model_type = getattr(AutoConfig.from_pretrained(path, **kwargs), "model_type", None)
    cls = FAMILIES.get(model_type).processor_class if model_type in FAMILIES else None
    return (cls or AutoProcessor).from_pretrained(path, **kwargs)
