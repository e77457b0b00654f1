"""The FSDP overlay config: it composes with a paper config, wraps each family's transformer layers, and is
refused on a CPU for the reason Lightning gives."""

import pytest
import yaml
from conftest import FAMILIES

from lit_grpo.fsdp import LayerFSDPStrategy, layer_classes
from lit_grpo.policy import PolicyConfig, load_policy

LAYERS = {"llava_next": {"GraniteDecoderLayer", "SiglipEncoderLayer"},
          "qwen2_vl": {"Qwen2VLDecoderLayer", "Qwen2VLVisionBlock"},
          "idefics3": {"LlamaDecoderLayer", "Idefics3EncoderLayer"},
          "llava": {"LlamaDecoderLayer", "CLIPEncoderLayer"}}


@pytest.mark.parametrize("family", sorted(LAYERS))
def test_wrap_unit_is_every_transformer_layer(family, zoo_dir):
    model, _ = load_policy(PolicyConfig(name_or_path=zoo_dir(family)))
    assert {c.__name__ for c in layer_classes(model)} == LAYERS[family]


def test_a_model_without_layers_is_refused_by_name():
    import torch

    with pytest.raises(ValueError, match="Linear has no transformers layers"):
        layer_classes(torch.nn.Linear(2, 2))


def test_overlay_composes_with_the_paper_config(capsys):
    from lit_grpo.cli import main

    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/granite_vision_visualsphinx.yaml", "--config", "configs/fsdp.yaml",
              "--print_config"])
    cfg = yaml.safe_load(capsys.readouterr().out)
    strategy = cfg["trainer"]["strategy"]
    assert strategy["class_path"] == "lit_grpo.fsdp.LayerFSDPStrategy"
    assert strategy["init_args"]["state_dict_type"] == "sharded"
    assert cfg["trainer"]["devices"] == 4 and cfg["data"]["batch_size"] * 4 * 8 == 128
    assert cfg["model"]["init_args"]["policy"]["gradient_checkpointing"] is True  # the paper config's, kept


def test_fsdp_is_refused_on_a_cpu():
    """Why FSDP is not tested on CPU processes here: Lightning refuses ``strategy="fsdp"`` without a CUDA
    accelerator, and torch's FullyShardedDataParallel itself raises "FSDP needs a non-CPU accelerator device"
    when that check is bypassed (a subclass instance, as ``LayerFSDPStrategy``)."""
    import lightning as L

    with pytest.raises(ValueError, match="requires a GPU accelerator"):
        L.Trainer(accelerator="cpu", strategy="fsdp", devices=2)
    assert issubclass(LayerFSDPStrategy, L.pytorch.strategies.FSDPStrategy)
