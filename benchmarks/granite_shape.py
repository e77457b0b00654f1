"""A Granite-Vision-3.3-2B-shaped model with random weights, built from a config (nothing downloaded).

The shape is Granite Vision 3.3 2B's (LLaVA-NeXT, a SigLIP so400m vision tower at 384 px with 14 px patches,
a Granite 3.1 2B language model): language model width 2048, MLP 8192, 32 query / 8 key-value heads, 40
decoder layers, vocabulary 49,156 (Granite's 49,155 plus the image token), Granite's multipliers (attention
1/64, embedding 12, residual 0.22, logits 8); SigLIP width 1152, MLP 4304, 16 heads, 27 layers, features
taken from 4 layers (``full`` strategy, no CLS), anyres tiles of 384 px with Granite Vision's pinpoints (1-10
tiles in a row or column, up to 3 x 3). A 384 x 384 image gives 729 base + 756 high-resolution tokens.
``text_layers`` / ``vision_layers`` shrink the depth for a CPU (the width, heads, vocabulary and image tokens
stay). The tokenizer is the embedded model's small byte-level BPE (its ids are a subset of the vocabulary), so
text prompts are shorter than Granite's tokenizer would make them; the image tokens are exact.
"""

from __future__ import annotations

from transformers import GraniteConfig, LlavaNextConfig, LlavaNextForConditionalGeneration, SiglipVisionConfig

from lit_grpo.tasks.demo.embedded import EmbeddedModelConfig, build_processor, build_tokenizer

TEXT = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=40, num_attention_heads=32,
            num_key_value_heads=8, vocab_size=49156, attention_multiplier=0.015625, embedding_multiplier=12.0,
            residual_multiplier=0.22, logits_scaling=8.0, rope_theta=300000.0, max_position_embeddings=131072,
            rms_norm_eps=1e-5, tie_word_embeddings=True)
VISION = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
              image_size=384, patch_size=14)
FEATURE_LAYERS = [-24, -20, -12, -1]
PINPOINTS = ([[384, 384 * k] for k in range(1, 11)] + [[768, 384 * k] for k in range(1, 6)]
             + [[1152, 384 * k] for k in range(1, 4)] + [[384 * k, 768] for k in range(3, 6)]
             + [[384 * k, 384] for k in range(2, 11)])


def granite_vision_config(text_layers: int = 40, vision_layers: int = 27, tokenizer=None) -> LlavaNextConfig:
    """Granite Vision 3.3 2B's config with ``text_layers`` decoder layers and ``vision_layers`` SigLIP layers
    (features from the last 4 when fewer than 24)."""
    feature_layers = FEATURE_LAYERS if vision_layers >= 24 else list(range(-min(4, vision_layers), 0))
    special = {}
    if tokenizer is not None:
        special = dict(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id)
    text = GraniteConfig(**{**TEXT, "num_hidden_layers": text_layers}, **special)
    vision = SiglipVisionConfig(**{**VISION, "num_hidden_layers": vision_layers})
    image_token = tokenizer.convert_tokens_to_ids("<image>") if tokenizer is not None else 49155
    return LlavaNextConfig(text_config=text, vision_config=vision, image_token_index=image_token,
                           vision_feature_select_strategy="full", vision_feature_layer=feature_layers,
                           image_grid_pinpoints=PINPOINTS, tie_word_embeddings=True)


def build_granite_vision(text_layers: int = 40, vision_layers: int = 27, attn_implementation: str = "sdpa"):
    """``(model, processor)``: random weights in float32 on the CPU (move and cast them yourself)."""
    tokenizer = build_tokenizer()
    processor = build_processor(EmbeddedModelConfig(image_size=384, patch_size=14, grid_pinpoints=PINPOINTS),
                                tokenizer)
    config = granite_vision_config(text_layers, vision_layers, tokenizer)
    config._attn_implementation = attn_implementation
    model = LlavaNextForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, processor


def parameter_counts(text_layers: int = 40, vision_layers: int = 27) -> dict[str, int]:
    """Parameters of the language model (with its tied head), projector and vision tower, counted on the meta
    device (no memory)."""
    import torch

    with torch.device("meta"):
        model = LlavaNextForConditionalGeneration(granite_vision_config(text_layers, vision_layers))
    counts = {"language_model": 0, "projector": 0, "vision_tower": 0}
    for name, p in model.named_parameters():
        key = ("vision_tower" if "vision_tower" in name else
               "language_model" if "language_model" in name or "lm_head" in name else "projector")
        counts[key] += p.numel()
    return counts
