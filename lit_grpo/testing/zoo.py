"""Tiny offline models of every supported VLM family, for tests, benchmarks and the notebook.

One builder per family (``llava_next`` = the embedded Granite Vision model, ``qwen2_vl``,
``qwen2_5_vl``, ``idefics3``, ``smolvlm``, ``llava``), registered in :data:`BUILDERS`. Each builds a
randomly initialised model (seeded) and its processor: a byte-level BPE tokenizer trained locally
with the family's special tokens and a small chat template, and the family's PIL image processor
(no torchvision here). :func:`save_vlm` writes both with ``save_pretrained``; the folder reloads by
path with :func:`lit_grpo.policy.load_policy` (Qwen and SmolVLM processors are rebuilt from the saved
tokenizer and image processor, see :func:`lit_grpo.families.load_processor`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import torch
from transformers import PreTrainedTokenizerFast

from lit_grpo.tasks.demo.embedded import EmbeddedModelConfig, build_embedded_vlm, train_bpe
from lit_grpo.registry import Registry


@dataclasses.dataclass
class ZooConfig:
    """Size and seed shared by every family's tiny model."""

    seed: int = 0
    """Weights are ``torch.manual_seed(seed)`` initialised."""
    hidden_size: int = 64
    """Language model width."""
    num_hidden_layers: int = 2
    """Language model depth."""
    num_attention_heads: int = 4
    """Query heads."""
    num_key_value_heads: int = 2
    """Key/value heads (fewer than query heads: grouped-query attention)."""
    intermediate_size: int = 128
    """Language model MLP width."""
    vision_hidden_size: int = 32
    """Vision encoder width."""
    vision_layers: int = 2
    """Vision encoder depth."""
    vocab_size: int = 512
    """Target BPE vocabulary size (special tokens included)."""


Builder = Callable[[ZooConfig], tuple[torch.nn.Module, object]]
BUILDERS: Registry[Builder] = Registry("model family builder")
"""``model_type`` -> builder returning ``(model, processor)``."""


def _tokenizer(special: list[str], template: str, **tokens) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=train_bpe(special, ZooConfig.vocab_size), padding_side="left",
                                   chat_template=template, **tokens)


def _text_kwargs(cfg: ZooConfig, tok: PreTrainedTokenizerFast) -> dict:
    return dict(vocab_size=len(tok), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
                num_key_value_heads=cfg.num_key_value_heads, max_position_embeddings=4096,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id)


def _instantiate(model_class, config, cfg: ZooConfig, tok: PreTrainedTokenizerFast):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = model_class(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model.eval()


def _parts_template(start: str, end: str, image: str, generation: str) -> str:
    """A chat template over ``{"type": "image"|"text"}`` content parts; ``start``/``end`` wrap each turn."""
    return (
        "{%- for message in messages -%}" + start +
        "{%- if message['content'] is string -%}{{ message['content'] }}"
        "{%- else -%}{%- for part in message['content'] -%}"
        "{%- if part['type'] == 'image' -%}{{ '" + image + "' }}"
        "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
        "{%- endfor -%}{%- endif -%}" + end +
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '" + generation + "' }}{%- endif -%}"
    )


# ----------------------------------------------------------------------------------------- LLaVA-NeXT
@BUILDERS.register("llava_next")
def build_llava_next(cfg: ZooConfig):
    """The embedded Granite Vision model (LLaVA-NeXT + Granite + SigLIP) at this size, with Granite's
    ``attention_multiplier = 1 / head_dim`` (as in Granite 3.x), not ``1 / sqrt(head_dim)``."""
    return build_embedded_vlm(EmbeddedModelConfig(
        attention_multiplier=cfg.num_attention_heads / cfg.hidden_size,
        seed=cfg.seed, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
        intermediate_size=cfg.intermediate_size, vision_hidden_size=cfg.vision_hidden_size,
        vision_layers=cfg.vision_layers))


# ----------------------------------------------------------------------------------------- Qwen2-VL / 2.5
QWEN_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
               "<|image_pad|>", "<|video_pad|>"]
QWEN_TEMPLATE = _parts_template(
    "{{ '<|im_start|>' + message['role'] + '\n' }}", "{{ '<|im_end|>' + '\n' }}",
    "<|vision_start|><|image_pad|><|vision_end|>", "<|im_start|>assistant\n")
QWEN_PATCH = 7
"""Vision patch size of the tiny Qwen models: one language token per 14 x 14 pixels (2 x 2 merge)."""


def _qwen_processor(tok: PreTrainedTokenizerFast):
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from lit_grpo.families import ImageOnlyQwenProcessor

    token = 2 * QWEN_PATCH  # pixels per language token after the 2 x 2 merge
    image_processor = Qwen2VLImageProcessorPil(patch_size=QWEN_PATCH, merge_size=2, temporal_patch_size=2,
                                               min_pixels=4 * token ** 2, max_pixels=256 * token ** 2)
    return ImageOnlyQwenProcessor(image_processor=image_processor, tokenizer=tok, chat_template=QWEN_TEMPLATE)


def _qwen_tokens(tok) -> dict:
    ids = tok.convert_tokens_to_ids
    return dict(image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))


def _qwen_rope(cfg: ZooConfig) -> dict:
    half = cfg.hidden_size // cfg.num_attention_heads // 2  # mrope_section must sum to head_dim / 2
    t = half // 4
    h = (half - t) // 2
    return {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [t, h, half - t - h]}


@BUILDERS.register("qwen2_vl")
def build_qwen2_vl(cfg: ZooConfig):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tok = _tokenizer(QWEN_TOKENS, QWEN_TEMPLATE, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    text = dict(_text_kwargs(cfg, tok), rope_parameters=_qwen_rope(cfg))
    vision = dict(depth=cfg.vision_layers, embed_dim=cfg.vision_hidden_size, hidden_size=cfg.hidden_size,
                  num_heads=2, mlp_ratio=2, patch_size=QWEN_PATCH, spatial_merge_size=2, temporal_patch_size=2)
    config = Qwen2VLConfig(text_config=text, vision_config=vision, **_qwen_tokens(tok))
    return _instantiate(Qwen2VLForConditionalGeneration, config, cfg, tok), _qwen_processor(tok)


@BUILDERS.register("qwen2_5_vl")
def build_qwen2_5_vl(cfg: ZooConfig):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok = _tokenizer(QWEN_TOKENS, QWEN_TEMPLATE, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    text = dict(_text_kwargs(cfg, tok), rope_parameters=_qwen_rope(cfg))
    vision = dict(depth=cfg.vision_layers, hidden_size=cfg.vision_hidden_size, out_hidden_size=cfg.hidden_size,
                  intermediate_size=2 * cfg.vision_hidden_size, num_heads=2, patch_size=QWEN_PATCH,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=4 * 2 * QWEN_PATCH,
                  fullatt_block_indexes=[cfg.vision_layers - 1])
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **_qwen_tokens(tok))
    return _instantiate(Qwen2_5_VLForConditionalGeneration, config, cfg, tok), _qwen_processor(tok)


# ----------------------------------------------------------------------------------------- Idefics3 / SmolVLM
IDEFICS_TILE = 56
"""Tile side in pixels of the tiny Idefics3/SmolVLM models (images up to 2 x 2 tiles plus the global image)."""
IDEFICS_PATCH = 7
IDEFICS_TOKENS = (["<|endoftext|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>", "<global-img>"]
                  + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)])
IDEFICS_TEMPLATE = _parts_template(
    "{{ message['role'] | capitalize + ':' }}", "{{ '<end_of_utterance>' + '\n' }}", "<image>", "Assistant:")


def _idefics_parts(cfg: ZooConfig, smol: bool):
    from transformers.models.idefics3 import Idefics3ImageProcessorPil
    from transformers.models.smolvlm import SmolVLMImageProcessorPil

    tok = _tokenizer(IDEFICS_TOKENS, IDEFICS_TEMPLATE, eos_token="<end_of_utterance>", pad_token="<|endoftext|>",
                     bos_token="<|endoftext|>", extra_special_tokens={"image_token": "<image>"})
    image_class = SmolVLMImageProcessorPil if smol else Idefics3ImageProcessorPil
    image_processor = image_class(size={"longest_edge": 2 * IDEFICS_TILE},
                                  max_image_size={"longest_edge": IDEFICS_TILE}, do_image_splitting=True,
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3)
    seq_len = (IDEFICS_TILE // IDEFICS_PATCH) ** 2 // 4
    vision = dict(hidden_size=cfg.vision_hidden_size, intermediate_size=2 * cfg.vision_hidden_size,
                  num_hidden_layers=cfg.vision_layers, num_attention_heads=2, image_size=IDEFICS_TILE,
                  patch_size=IDEFICS_PATCH)
    text = dict(_text_kwargs(cfg, tok), model_type="llama")
    return tok, image_processor, seq_len, dict(text_config=text, vision_config=vision, scale_factor=2,
                                               image_token_id=tok.convert_tokens_to_ids("<image>"))


@BUILDERS.register("idefics3")
def build_idefics3(cfg: ZooConfig):
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor

    tok, image_processor, seq_len, kw = _idefics_parts(cfg, smol=False)
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tok, image_seq_len=seq_len,
                                  chat_template=IDEFICS_TEMPLATE)
    return _instantiate(Idefics3ForConditionalGeneration, Idefics3Config(**kw), cfg, tok), processor


@BUILDERS.register("smolvlm")
def build_smolvlm(cfg: ZooConfig):
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

    from lit_grpo.families import ImageOnlySmolVLMProcessor

    tok, image_processor, seq_len, kw = _idefics_parts(cfg, smol=True)
    processor = ImageOnlySmolVLMProcessor(image_processor=image_processor, tokenizer=tok, image_seq_len=seq_len,
                                          chat_template=IDEFICS_TEMPLATE)
    return _instantiate(SmolVLMForConditionalGeneration, SmolVLMConfig(**kw), cfg, tok), processor


# ----------------------------------------------------------------------------------------- LLaVA (1.5)
LLAVA_TOKENS = ["</s>", "<s>", "<image>"]
LLAVA_TEMPLATE = _parts_template("{{ message['role'] | upper + ': ' }}", "{{ ' ' }}", "<image>\n", "ASSISTANT:")
LLAVA_CROP, LLAVA_PATCH = 56, 7


@BUILDERS.register("llava")
def build_llava(cfg: ZooConfig):
    """LLaVA-1.5 shape: CLIP vision tower (CLS dropped), resize shortest edge then centre crop, Llama text."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.llava import LlavaImageProcessorPil

    tok = _tokenizer(LLAVA_TOKENS, LLAVA_TEMPLATE, eos_token="</s>", pad_token="</s>", bos_token="<s>",
                     extra_special_tokens={"image_token": "<image>"})
    image_processor = LlavaImageProcessorPil(size={"shortest_edge": LLAVA_CROP},
                                             crop_size={"height": LLAVA_CROP, "width": LLAVA_CROP})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=LLAVA_PATCH,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               chat_template=LLAVA_TEMPLATE)
    vision = dict(model_type="clip_vision_model", hidden_size=cfg.vision_hidden_size,
                  intermediate_size=2 * cfg.vision_hidden_size, num_hidden_layers=cfg.vision_layers,
                  num_attention_heads=2, image_size=LLAVA_CROP, patch_size=LLAVA_PATCH, projection_dim=cfg.hidden_size)
    config = LlavaConfig(text_config=dict(_text_kwargs(cfg, tok), model_type="llama"), vision_config=vision,
                         image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_layer=-1,
                         vision_feature_select_strategy="default")
    return _instantiate(LlavaForConditionalGeneration, config, cfg, tok), processor


# ----------------------------------------------------------------------------------------- entry points
def build_vlm(family: str, cfg: ZooConfig | None = None):
    """``(model, processor)`` of the tiny ``family`` model; same ``cfg`` gives identical weights.

    Raises:
        KeyError: unknown family (the message lists the registered ones).
    """
    return BUILDERS.get(family)(cfg or ZooConfig())


def save_vlm(path: str | Path, family: str, cfg: ZooConfig | None = None) -> Path:
    """Build the tiny ``family`` model and write model, tokenizer and processor with ``save_pretrained``."""
    path = Path(path)
    model, processor = build_vlm(family, cfg)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
