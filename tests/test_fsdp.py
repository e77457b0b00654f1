"""The FSDP overlay config: it composes with a paper config, wraps each family's transformer layers, and is
refused on a CPU for the reason Lightning gives."""

import pytest
import torch
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


def test_gradients_are_clipped_by_the_fsdp_root_when_there_is_one():
    """Under FSDP each rank holds gradient shards: the norm is the root module's ``clip_grad_norm_`` (over every
    shard), not torch's over this rank's shards. Without such a root (one device, DDP) torch's exact norm:
    gradients (3, 4) have norm 5, clipped to norm 1 -> (0.6, 0.8)."""
    from lit_grpo.distributed import clip_grad_norm

    class Root(torch.nn.Module):
        def clip_grad_norm_(self, max_norm):
            self.called_with = max_norm
            return torch.tensor(7.0)

    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])
    root = Root()
    assert float(clip_grad_norm(root, [p], 1.0)) == 7.0 and root.called_with == 1.0
    assert p.grad.tolist() == [3.0, 4.0]  # the root clips its own shards; nothing done here
    ddp_like = torch.nn.Linear(1, 1)  # a wrapper without clip_grad_norm_
    assert float(clip_grad_norm(ddp_like, [p], 1.0)) == 5.0
    torch.testing.assert_close(p.grad, torch.tensor([0.6, 0.8]))
