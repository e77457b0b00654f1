"""While ``freeze_vision_tower`` is true no vision weight trains, whatever LoRA targets, on every family; a fresh
adapter puts nothing on the vision tower and a loaded one's vision weights stay frozen."""

import pytest

from conftest import FAMILIES
from lit_grpo.policy import LoRAConfig, PolicyConfig, is_vision_parameter, load_policy

TARGETS = ["q_proj", "v_proj", "qkv"]
"""Module names found in the language model AND in the vision towers (SigLIP / CLIP ``q_proj``, ``v_proj``; Qwen's
vision ``qkv``)."""


def _trainable(model) -> tuple[list[str], list[str]]:
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return [n for n in names if is_vision_parameter(n)], [n for n in names if not is_vision_parameter(n)]


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_targets_in_the_vision_tower_train_nothing_there_while_it_is_frozen(family, zoo_dir):
    frozen, _ = load_policy(PolicyConfig(name_or_path=zoo_dir(family), lora=LoRAConfig(r=2, alpha=4,
                                                                                     target_modules=TARGETS)))
    vision, language = _trainable(frozen)
    assert vision == [] and language and all("lora_" in n for n in language)
    assert not any("lora_" in n for n, _ in frozen.named_parameters() if is_vision_parameter(n))  # no adapter there
    # the same targets with the tower not frozen: adapters on vision modules too (the check above can fail)
    free, _ = load_policy(PolicyConfig(name_or_path=zoo_dir(family), freeze_vision_tower=False,
                                       lora=LoRAConfig(r=2, alpha=4, target_modules=TARGETS)))
    vision_free, language_free = _trainable(free)
    assert vision_free and all("lora_" in n for n in vision_free) and sorted(language_free) == sorted(language)


def test_a_loaded_adapter_with_vision_weights_keeps_them_frozen(zoo_dir, tmp_path):
    free, _ = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next"), freeze_vision_tower=False,
                                       lora=LoRAConfig(r=2, alpha=4, target_modules=TARGETS)))
    free.save_pretrained(tmp_path / "adapter")
    loaded, _ = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next"),
                                         lora=LoRAConfig(adapter_path=str(tmp_path / "adapter"))))
    vision, language = _trainable(loaded)
    assert vision == [] and language
    assert any("lora_" in n for n, _ in loaded.named_parameters() if is_vision_parameter(n))  # there, but frozen


@pytest.mark.parametrize("family", ["llava_next", "qwen2_vl"])
def test_full_fine_tuning_with_the_tower_frozen(family, zoo_dir):
    model, _ = load_policy(PolicyConfig(name_or_path=zoo_dir(family)))
    vision, language = _trainable(model)
    assert vision == [] and language
