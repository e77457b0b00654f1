"""Embedded policy: a tiny, randomly initialised VLM of the Granite Vision architecture, built offline.

Granite Vision 3.3 is a LLaVA-NeXT model: a SigLIP vision tower, a two-layer MLP projector and a
Granite language model (``attention_multiplier``, ``embedding_multiplier``, ``residual_multiplier``,
``logits_scaling``), with ``vision_feature_select_strategy="full"`` and negative
``vision_feature_layer`` indices. :func:`build_embedded_vlm` reproduces that shape at toy size with a
byte-level BPE tokenizer trained locally, so nothing is downloaded. The result is saved with
``save_pretrained`` and reloaded by path like any real checkpoint.
"""


import dataclasses
import string
from pathlib import Path
from typing import Annotated

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GraniteConfig,
    LlavaNextConfig,
    LlavaNextForConditionalGeneration,
    LlavaNextProcessor,
    PreTrainedTokenizerFast,
    SiglipVisionConfig,
)
from transformers.models.llava_next import LlavaNextImageProcessorPil
from annotated_types import Ge, Gt

from lit_grpo.registry import OPTION_GROUPS
from lit_grpo.settings import Checked, Finite

SPECIAL_TOKENS = ["<|end_of_text|>", "<|system|>", "<|user|>", "<|assistant|>", "<image>"]

# Granite Vision's chat template, reduced to what the embedded model needs: a system turn, user turns
# whose content lists hold {"type": "image"} and {"type": "text"} parts, assistant turns.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>' + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{ '<image>' + '\n' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}{{ '<|end_of_text|>' }}{%- endif -%}"
    "{{ '\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>' + '\n' }}{%- endif -%}"
)

# Text the tokenizer is trained on: the vocabulary of the embedded tasks (puzzle and physics prompts,
# tag and box formats), so that answers are a few tokens long.
_CORPUS = """You are a helpful assistant. Which option fills the question mark? Look at the panels.
The choices are: A B C D E F G H I J. Let's think step by step and output the final answer within
\\boxed{}. <think> </think> <answer> </answer> <unit> </unit> <principle> </principle>
The rule: the number of shapes increases by one in each panel. The colour alternates between red,
green, blue and yellow. The size grows. The shape rotates by 45 degrees. The dot moves one position to
the right. circle square triangle star count colour color size rotation position so the answer is
Mechanics Electromagnetism Thermodynamics Waves Acoustics Optics Modern Physics Kinematics Dynamics
force mass acceleration velocity energy momentum charge current voltage resistance field lens
focal length wavelength frequency temperature heat pressure volume photon electron nucleus decay
Newton's second law conservation of energy Ohm's law Snell's law m/s m/s^2 kg N J W V A K Hz nm eV
Each panel has 0 red shapes, so the missing panel has 0. Each panel has 1 red shape, so the missing panel
has 1. Each panel has 2 red shapes, so the missing panel has 2. Each panel has 3 red shapes, so the
missing panel has 3. The answer is \\boxed{A}. The answer is \\boxed{B}. The answer is \\boxed{C}.
0 1 2 3 4 5 6 7 8 9 10 100 0.5 1.5 2.5 3.14 9.8 the a an of to in is and with for on at by from
"""


@OPTION_GROUPS.register("embedded")
@dataclasses.dataclass
class EmbeddedModelConfig(Checked):
    """Size and seed of the embedded Granite-Vision-shaped VLM: the option group ``embedded`` of the policy
    (:attr:`lit_grpo.policy.PolicyConfig.embedded`)."""

    seed: int = 0
    """Seed of the tokenizer-free parts: weights are ``torch.manual_seed(seed)`` initialised."""
    hidden_size: Annotated[int, Ge(1)] = 64
    """Language model width."""
    num_hidden_layers: Annotated[int, Ge(1)] = 2
    """Language model depth."""
    num_attention_heads: Annotated[int, Ge(1)] = 4
    """Query heads of the language model."""
    num_key_value_heads: Annotated[int, Ge(1)] = 2
    """Key/value heads (grouped-query attention when fewer than the query heads)."""
    intermediate_size: Annotated[int, Ge(1)] = 128
    """MLP width of the language model."""
    vision_hidden_size: Annotated[int, Ge(1)] = 32
    """SigLIP width."""
    vision_layers: Annotated[int, Ge(1)] = 2
    """SigLIP depth (``vision_feature_layer`` takes the last layers by negative index)."""
    image_size: Annotated[int, Ge(1)] = 56
    """SigLIP input resolution (one tile); with ``patch_size`` 14 the base grid is 4 x 4."""
    patch_size: Annotated[int, Ge(1)] = 14
    """SigLIP patch size in pixels."""
    attention_multiplier: Annotated[float, Gt(0), Finite] | None = None
    """Granite's attention scale (replaces ``1/sqrt(head_dim)``); None = ``1/sqrt(head_dim)``."""
    logits_scaling: Annotated[float, Gt(0), Finite] = 8.0
    """Granite's ``logits_scaling``; the LLaVA-NeXT class never applies it (as in the real model)."""
    vocab_size: Annotated[int, Ge(1)] = 448
    """Target size of the trained BPE vocabulary (special tokens included)."""
    grid_pinpoints: list[list[Annotated[int, Ge(1)]]] | None = None
    """LLaVA-NeXT ``image_grid_pinpoints`` (height, width) for the high-resolution tiles; None = 1-3 tiles
    of ``image_size`` in each direction. ``[[image_size, image_size]]`` gives one tile."""

    def save(self, path: str | Path) -> Path:
        """Build this model into the folder ``path`` (:func:`save_embedded_vlm`): what the policy's loader calls."""
        return save_embedded_vlm(path, self)


def train_bpe(special_tokens: list[str], vocab_size: int = 448) -> Tokenizer:
    """A byte-level BPE trained on :data:`_CORPUS` plus printable ASCII, ``special_tokens`` one id each
    (ids ``0..len(special_tokens)-1`` in order); deterministic, offline."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS, string.printable], trainer=trainer)
    return tok


def build_tokenizer(vocab_size: int = 448) -> PreTrainedTokenizerFast:
    """The embedded model's tokenizer: :func:`train_bpe` with Granite's special tokens and chat template."""
    return PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(SPECIAL_TOKENS, vocab_size),
        eos_token="<|end_of_text|>",
        pad_token="<|end_of_text|>",
        bos_token="<|end_of_text|>",
        extra_special_tokens={"image_token": "<image>"},
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
    )


def _pinpoints(cfg: EmbeddedModelConfig) -> list[list[int]]:
    s = cfg.image_size
    return cfg.grid_pinpoints or [[s, 2 * s], [2 * s, s], [2 * s, 2 * s], [s, 3 * s], [3 * s, s]]


def build_processor(cfg: EmbeddedModelConfig, tokenizer: PreTrainedTokenizerFast) -> LlavaNextProcessor:
    """LLaVA-NeXT processor around the PIL image processor (no centre crop, Granite's ``full``)."""
    s = cfg.image_size
    image_processor = LlavaNextImageProcessorPil(
        size={"height": s, "width": s},
        crop_size={"height": s, "width": s},
        do_center_crop=False,
        image_grid_pinpoints=_pinpoints(cfg),
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    return LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=cfg.patch_size,
        vision_feature_select_strategy="full",
        chat_template=CHAT_TEMPLATE,
    )


def build_config(cfg: EmbeddedModelConfig, tokenizer: PreTrainedTokenizerFast) -> LlavaNextConfig:
    """The LLaVA-NeXT + Granite + SigLIP config, vocabulary sized to the tokenizer."""
    s = cfg.image_size
    text = GraniteConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=4096,
        attention_multiplier=cfg.attention_multiplier or (cfg.hidden_size // cfg.num_attention_heads) ** -0.5,
        embedding_multiplier=2.0,
        residual_multiplier=0.5,
        logits_scaling=cfg.logits_scaling,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    vision = SiglipVisionConfig(
        hidden_size=cfg.vision_hidden_size,
        intermediate_size=2 * cfg.vision_hidden_size,
        num_hidden_layers=cfg.vision_layers,
        num_attention_heads=2,
        image_size=s,
        patch_size=cfg.patch_size,
    )
    return LlavaNextConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=[-cfg.vision_layers, -1],
        image_grid_pinpoints=_pinpoints(cfg),
        tie_word_embeddings=True,
    )


def build_embedded_vlm(cfg: EmbeddedModelConfig | None = None):
    """Build ``(model, processor)``; same ``cfg`` gives bit-identical weights and vocabulary."""
    cfg = cfg or EmbeddedModelConfig()
    tokenizer = build_tokenizer(cfg.vocab_size)
    processor = build_processor(cfg, tokenizer)
    config = build_config(cfg, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = LlavaNextForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), processor


def save_embedded_vlm(path: str | Path, cfg: EmbeddedModelConfig | None = None) -> Path:
    """Build the embedded model and write it with ``save_pretrained`` (weights, tokenizer, processor)."""
    path = Path(path)
    model, processor = build_embedded_vlm(cfg)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
