"""Embedded model, loading by path, LoRA placement, reference policy (KL 0 at step 0)."""

import re

import pytest
import torch

from lit_grpo.data.sample import render_messages
from lit_grpo.tasks.demo.embedded import EmbeddedModelConfig, build_embedded_vlm
from lit_grpo.grpo import k3_kl
from lit_grpo.policy import (LoRAConfig, PolicyConfig, ReferencePolicy, image_token_ids, is_vision_parameter,
                             load_policy, stop_token_ids)
from lit_grpo.rollout import SamplingConfig, completion_logps, encode_prompts, repeat_rows, sample_completions


def test_embedded_model_is_deterministic_by_seed():
    a, pa = build_embedded_vlm(EmbeddedModelConfig(seed=3))
    b, pb = build_embedded_vlm(EmbeddedModelConfig(seed=3))
    c, _ = build_embedded_vlm(EmbeddedModelConfig(seed=4))
    assert pa.tokenizer.get_vocab() == pb.tokenizer.get_vocab()
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_embedded_model_has_granite_vision_shape():
    model, processor = build_embedded_vlm()
    cfg = model.config
    assert type(model).__name__ == "LlavaNextForConditionalGeneration"
    assert cfg.text_config.model_type == "granite" and cfg.vision_config.model_type == "siglip_vision_model"
    assert cfg.vision_feature_select_strategy == "full" and all(i < 0 for i in cfg.vision_feature_layer)
    assert cfg.text_config.logits_scaling == 8.0
    assert cfg.text_config.vocab_size == len(processor.tokenizer)
    assert processor.tokenizer.convert_tokens_to_ids("<image>") == cfg.image_token_index


def test_reload_by_path_gives_identical_logits(tiny_model_dir, puzzle_samples):
    model, processor = build_embedded_vlm()  # same default config and seed as the saved one
    loaded, loaded_proc = load_policy(PolicyConfig(name_or_path=tiny_model_dir, local_files_only=True))
    assert loaded_proc.tokenizer.padding_side == "left"
    s = puzzle_samples[0]
    enc = encode_prompts(loaded_proc, [render_messages(s, "visualsphinx_seed")], [s.images])
    with torch.no_grad():
        torch.testing.assert_close(loaded(**enc).logits, model.eval()(**enc).logits, rtol=0, atol=0)


def test_stop_and_image_tokens(tiny_model_dir):
    model, processor = load_policy(PolicyConfig(name_or_path=tiny_model_dir))
    tok = processor.tokenizer
    assert stop_token_ids(model, processor) == [tok.convert_tokens_to_ids("<|end_of_text|>")]
    assert stop_token_ids(model, processor, ["<|user|>"]) == sorted(
        [tok.convert_tokens_to_ids("<|end_of_text|>"), tok.convert_tokens_to_ids("<|user|>")])
    assert image_token_ids(model, processor) == [tok.convert_tokens_to_ids("<image>")]


def test_lora_targets_language_model_only(tiny_model_dir):
    model, _ = load_policy(PolicyConfig(name_or_path=tiny_model_dir, lora=LoRAConfig(r=4, alpha=8)))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and "language_model" in n for n in trainable)
    # 2 layers x 4 projections x (A, B)
    assert len(trainable) == 16
    assert not any(is_vision_parameter(n) for n in trainable)


def test_full_finetune_freezes_vision_tower(tiny_model_dir):
    model, _ = load_policy(PolicyConfig(name_or_path=tiny_model_dir))
    for n, p in model.named_parameters():
        assert p.requires_grad == (not is_vision_parameter(n)), n


def _rollout(model, processor, samples, g=2, length=6):
    msgs = [render_messages(s, "visualsphinx_seed") for s in samples]
    enc = repeat_rows(encode_prompts(processor, msgs, [s.images for s in samples]), g)
    torch.manual_seed(0)
    return sample_completions(model, processor, enc, SamplingConfig(num_generations=g, max_completion_length=length),
                              stop_token_ids(model, processor), image_token_ids(model, processor))


@pytest.mark.parametrize("setup", ["fresh_lora", "existing_adapter", "full"])
def test_reference_kl_is_zero_at_step_zero(setup, tiny_model_dir, puzzle_samples, tmp_path):
    lora = None
    if setup != "full":
        lora = LoRAConfig(r=4, alpha=8)
    if setup == "existing_adapter":
        m, _ = load_policy(PolicyConfig(name_or_path=tiny_model_dir, lora=lora))
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.5)  # a trained adapter: not the identity
        m.save_pretrained(tmp_path / "adapter")
        lora = LoRAConfig(adapter_path=str(tmp_path / "adapter"))
    model, processor = load_policy(PolicyConfig(name_or_path=tiny_model_dir, lora=lora))
    ref = ReferencePolicy(model, from_existing_adapter=setup == "existing_adapter")
    assert ref.mode == ("adapter_off" if setup == "fresh_lora" else "copy")
    trainable_before = {n for n, p in model.named_parameters() if p.requires_grad}
    ro = _rollout(model, processor, puzzle_samples[:2])
    with torch.no_grad():
        logps, _ = completion_logps(model, ro, 1.0)
        with ref.model_context(model) as ref_model:
            ref_logps, _ = completion_logps(ref_model, ro, 1.0)
    assert k3_kl(logps, ref_logps)[ro.completion_mask].abs().max().item() < 1e-6
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable_before


def test_adapter_off_reference_is_the_base_model(tiny_model_dir, puzzle_samples):
    """After the adapter moves, the adapter-off reference still gives the base model's log-probs."""
    model, processor = load_policy(PolicyConfig(name_or_path=tiny_model_dir, lora=LoRAConfig(r=4, alpha=8)))
    base, _ = load_policy(PolicyConfig(name_or_path=tiny_model_dir))
    ref = ReferencePolicy(model, from_existing_adapter=False)
    ro = _rollout(model, processor, puzzle_samples[:2])
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.5)
        moved, _ = completion_logps(model, ro, 1.0)
        with ref.model_context(model) as ref_model:
            ref_logps, _ = completion_logps(ref_model, ro, 1.0)
        base_logps, _ = completion_logps(base, ro, 1.0)
    torch.testing.assert_close(ref_logps, base_logps)
    assert (moved - base_logps)[ro.completion_mask].abs().max() > 1e-3


def test_bad_dtype_is_rejected(tiny_model_dir):
    with pytest.raises(ValueError, match="bfloat16"):
        load_policy(PolicyConfig(name_or_path=tiny_model_dir, dtype="fp8"))


@pytest.mark.parametrize("name", ["{tmp}/dmeo", "./no_such_model_folder", "{tmp}/sub/dir"])
def test_a_missing_local_model_folder_is_named_not_tried_on_the_hub(name, tmp_path):
    path = name.format(tmp=tmp_path)
    with pytest.raises(FileNotFoundError, match=f"model folder '{re.escape(path)}' does not exist"):
        load_policy(PolicyConfig(name_or_path=path))
