"""FSDP2 on CPU processes (gloo): a 2-rank sharded fit equals the 1-process fit on every zoo family, in LoRA and in
full fine-tuning, gradient checkpointing off and on (each pair on three families); each rank holds half the parameters; a rollout all-gathers each unit
once. Also: the wrap unit of every family, the overlay config, sharded checkpoints written atomically."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import FAMILIES
from launch import ROOT, free_port, run_together, torchrun

from lit_grpo.fsdp import layer_classes
from lit_grpo.policy import PolicyConfig, load_policy

LAYERS = {"llava_next": {"GraniteDecoderLayer", "SiglipEncoderLayer"},
          "qwen2_vl": {"Qwen2VLDecoderLayer", "Qwen2VLVisionBlock"},
          "qwen2_5_vl": {"Qwen2_5_VLDecoderLayer", "Qwen2_5_VLVisionBlock"},
          "idefics3": {"LlamaDecoderLayer", "Idefics3EncoderLayer"},
          "smolvlm": {"LlamaDecoderLayer", "SmolVLMEncoderLayer"},
          "llava": {"LlamaDecoderLayer", "CLIPEncoderLayer"}}


@pytest.mark.parametrize("family", sorted(LAYERS))
def test_wrap_unit_is_every_transformer_layer(family, zoo_dir):
    model, _ = load_policy(PolicyConfig(name_or_path=zoo_dir(family)))
    assert {c.__name__ for c in layer_classes(model)} == LAYERS[family]


def test_a_model_without_layers_is_refused_by_name():
    with pytest.raises(ValueError, match="Linear has no transformers layers"):
        layer_classes(torch.nn.Linear(2, 2))


def test_overlay_composes_with_the_paper_config(capsys):
    from lit_grpo.cli import main

    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/granite_vision_visualsphinx.yaml", "--config", "configs/fsdp.yaml",
              "--print_config"])
    cfg = yaml.safe_load(capsys.readouterr().out)
    strategy = cfg["trainer"]["strategy"]
    assert strategy["class_path"] == "lit_grpo.strategy.FSDP2Strategy"
    assert strategy["init_args"]["gather_rollout"] is True
    assert cfg["trainer"]["devices"] == 4 and cfg["data"]["batch_size"] * 4 * 8 == 128
    assert cfg["model"]["init_args"]["policy"]["gradient_checkpointing"] is True  # the paper config's, kept


def test_a_module_that_calls_the_policy_outside_the_engine_is_refused_under_sharding(tiny_model_dir):
    """SFT's step runs the policy's forward itself: under a device mesh (FSDP2Strategy) its ``configure_model``
    refuses in one line; without one (one device, DDP) it does nothing, for SFT and GRPO alike."""
    from lit_grpo import GRPOModule
    from lit_grpo.errors import UserError
    from lit_grpo.rewards import RewardSpec
    from lit_grpo.sft import SFTModule

    policy, rewards = PolicyConfig(name_or_path=tiny_model_dir), [RewardSpec("binary")]
    for module in (SFTModule(policy=policy, rewards=rewards), GRPOModule(policy=policy, rewards=rewards)):
        engine = module.passes.engine
        module.configure_model()
        assert module.passes.engine is engine
    module = SFTModule(policy=policy, rewards=rewards)
    module._device_mesh = object()  # what ModelParallelStrategy sets before configure_model
    with pytest.raises(UserError, match=r"^SFTModule does not run under a sharded strategy \(FSDP2\); train it on one "
                                        r"device or with DDP \(--trainer.strategy ddp\)$"):
        module.configure_model()


# ----------------------------------------------------------------- one process vs two sharded ranks


@pytest.fixture(scope="module")
def equivalence(tmp_path_factory, zoo_dir, puzzles_path):
    """tests/fsdp_equivalence.py on one process and on 2 ranks (torchrun, loopback), at the same time."""
    root = tmp_path_factory.mktemp("fsdp")
    zoo = Path(zoo_dir(FAMILIES[0])).parent
    for family in FAMILIES:
        zoo_dir(family)
    outs = {1: root / "w1", 2: root / "w2"}
    script = [str(ROOT / "tests" / "fsdp_equivalence.py")]
    commands = []
    for world, out in outs.items():
        out.mkdir()
        command = [sys.executable, *script] if world == 1 else torchrun(world, free_port(), *script)
        commands.append([*command, str(out), str(zoo), puzzles_path])
    run_together(commands, timeout=540)
    return outs


def _records(out: Path, config: str, world: int) -> list[dict]:
    return [json.loads((out / f"{config}.rank{r}.json").read_text()) for r in range(world)]


CONFIGS = [f"{f}-{t}-{'gc' if (t == 'lora') == (i % 2 == 1) else 'nogc'}" for i, f in enumerate(FAMILIES)
           for t in ("lora", "full")]
"""Every family in LoRA and in full fine-tuning, gradient checkpointing on in one and off in the other, alternating
by family (tests/fsdp_equivalence.py's list, asserted below)."""
BF16 = ["llava_next-full-gc-bf16", "qwen2_vl-lora-nogc-bf16"]
"""trainer.precision bf16-mixed (the rest float32)."""
PLAIN = ["qwen2_5_vl-full-gc-plain", "idefics3-lora-nogc-plain"]
"""The plain engine (``generate``, full forwards; the rest the shared-prefix engine)."""


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS + BF16 + PLAIN)
def test_two_sharded_ranks_equal_one_process(equivalence, config):
    """3 steps (2 updates each, clipped at 0.05, AdamW at lr 1e-2, beta 0.1): every logged figure of every step and
    every trainable weight after them. float32: figures to 1e-4 (relative; measured at most 5e-6), weights to 1e-4
    (measured at most 9e-6, on full fine-tuning, where AdamW's normalised step moves weights with near-zero
    gradients, e.g. a vision key bias, by the rounding of the reduction either way; 4e-6 with LoRA). bf16-mixed:
    bf16's own precision (its epsilon is 7.8e-3; the two layouts multiply matrices of other shapes, rounded
    otherwise), figures and weights to 1e-2 (measured: 6e-3 on the loss, 8e-3 on a vision key bias)."""
    tol = 1e-2 if config in BF16 else 1e-4
    one, two = _records(equivalence[1], config, 1)[0], _records(equivalence[2], config, 2)
    assert len(one["steps"]) == 3 and sorted(p.name for p in equivalence[1].glob("*.pt")) == sorted(
        f"{c}.pt" for c in CONFIGS + BF16 + PLAIN)
    for rank in two:
        assert [s["ids"] for s in rank["steps"]] != [s["ids"] for s in one["steps"]]  # each rank: half the prompts
        for a, b in zip(one["steps"], rank["steps"]):
            assert set(a["logged"]) == set(b["logged"])
            for key, value in a["logged"].items():
                assert math.isfinite(value) and b["logged"][key] == pytest.approx(value, rel=tol, abs=tol / 10), key
    assert sorted(i for r in two for i in r["steps"][0]["ids"]) == sorted(one["steps"][0]["ids"])
    assert max(s["logged"]["train/update/grad_norm"] for s in one["steps"]) > 0.05  # the clip was active
    w1, w2 = torch.load(equivalence[1] / f"{config}.pt"), torch.load(equivalence[2] / f"{config}.pt")
    assert set(w1) == set(w2) and len(w1) >= 16
    for name, value in w1.items():
        torch.testing.assert_close(w2[name], value, atol=tol, rtol=tol, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("config", [c for c in CONFIGS if c.endswith("-nogc")] + PLAIN)
def test_each_rank_holds_half_and_a_rollout_gathers_each_unit_once(equivalence, config):
    """The zoo models have 2 decoder and 2 vision layers: 5 FSDP units with the root. A rollout of T tokens
    all-gathers each unit once when gathered for it; without, the root and the vision layers once and each decoder
    layer once per forward (the prefill and T - 1 decoding steps; ``generate`` on the plain engine: T forwards, the
    image encoded in the first): 1 + 2 + 2 T. Sampled tokens are the same either way, and the same as the unsharded
    policy's from the same seed."""
    one, two = _records(equivalence[1], config, 1)[0], _records(equivalence[2], config, 2)
    whole = one["start"]["bytes"][1]
    assert one["start"]["bytes"] == [whole, whole]
    held = [r["start"]["bytes"][0] for r in two]
    assert sum(held) == whole and all(0.45 < h / whole < 0.55 for h in held)
    for rank in two:
        start = rank["start"]
        assert start["bytes"][1] == whole and start["gathered_bytes"] == [whole, whole]
        if "reference_bytes" in start:  # full fine-tuning with beta > 0: the frozen copy is sharded too
            assert 0.45 < start["reference_bytes"][0] / start["reference_bytes"][1] < 0.55
        assert start["units"] == 5 and start["decoder_units"] == 2
        tokens = len(start["gather=True"]["tokens"][0])
        assert start["gather=True"]["all_gathers"] == 5
        assert start["gather=False"]["all_gathers"] == 1 + 2 + 2 * tokens
        unsharded = one["start"]["gather=True"]["tokens"]
        assert start["gather=True"]["tokens"] == start["gather=False"]["tokens"] == unsharded
    assert ("reference_bytes" in two[0]["start"]) == ("-full-" in config)
