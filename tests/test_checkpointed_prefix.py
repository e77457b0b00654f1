"""The shared prefix under gradient checkpointing: one checkpoint per decoder layer, equal to the plain path."""

import pytest
import torch
from conftest import FAMILIES
from PIL import Image, ImageDraw

import lit_grpo.rollout.shared as cp
from lit_grpo.families import row_layout
from lit_grpo.policy import LoRAConfig, PolicyConfig, load_policy
from lit_grpo.rollout import PlainEngine, Rollout, SamplingConfig, SharedPrefixEngine, encode_prompts

G, T = 3, 6


def _rollout(model, processor):
    """G completions of 2 prompts of different lengths (left padding), fixed random tokens; one row stops early,
    one row is all padding after its first token."""
    a = Image.new("RGB", (132, 88), "white")
    ImageDraw.Draw(a).rectangle([10, 10, 40, 40], fill=(200, 0, 0))
    b = Image.new("RGB", (60, 100), (250, 250, 250))
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]}]
                for t in ("Which option? A B", "count the shapes in the panel please now")]
    enc = encode_prompts(processor, messages, [[a], [b]])
    family = row_layout(model, processor)
    index = torch.arange(2).repeat_interleave(G)
    ids = torch.randint(20, 200, (2 * G, T), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2 * G, T, dtype=torch.bool)
    mask[1, 3:] = False
    mask[4, 1:] = False
    return Rollout(enc, ids, mask, torch.zeros(2 * G, dtype=torch.bool), [""] * (2 * G), layout=family,
                   prompt_index=index)


def _engine(processor, ro, shared: bool):
    """The shared-prefix or the plain engine at temperature 1 (no top-k / top-p)."""
    cfg = SamplingConfig(temperature=1.0)
    return (SharedPrefixEngine(processor, ro.layout, cfg, [], []) if shared
            else PlainEngine(processor, ro.layout, cfg, [], []))


def rollout_logps(model, processor, ro, rows, shared: bool = True):
    return _engine(processor, ro, shared).logps(model, ro, rows, grad=True)  # grad as the caller set it


def _logps_and_grads(model, processor, ro, rows, weights, shared: bool):
    model.zero_grad()
    logps, _ = rollout_logps(model, processor, ro, rows, shared)
    (logps * weights[rows] * ro.completion_mask[rows]).sum().backward()
    return logps.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture
def region_calls(monkeypatch):
    """Counts the checkpointed per-layer regions run (forward and backward replays)."""
    calls = []
    inner = cp._prefix_and_suffix

    def counting(*args, **kwargs):
        calls.append(torch.is_grad_enabled())
        return inner(*args, **kwargs)

    monkeypatch.setattr(cp, "_prefix_and_suffix", counting)
    return calls


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
@pytest.mark.parametrize("family", FAMILIES)
def test_checkpointed_shared_prefix_equals_plain_path(family, lora, zoo_dir, region_calls):
    """Under gradient checkpointing, the shared prefix (one checkpoint per decoder layer) against the plain path
    (transformers' own checkpointing): log-probs to 1e-5, every trainable gradient to 1e-4 (float32), for the
    whole rollout and for a micro-batch that splits a group; each layer's region runs once forward and is replayed
    once in backward; the layers' checkpointing flags are back on afterwards."""
    cfg = PolicyConfig(name_or_path=zoo_dir(family), gradient_checkpointing=True,
                       lora=LoRAConfig(r=4, alpha=8) if lora else None)
    model, processor = load_policy(cfg)
    ro = _rollout(model, processor)
    lm = ro.layout.language_model(model)
    weights = torch.linspace(-1.0, 1.0, 2 * G * T).view(2 * G, T)
    for rows in (slice(0, 2 * G), slice(1, 4)):
        want, want_grads = _logps_and_grads(model, processor, ro, rows, weights, shared=False)
        region_calls.clear()
        got, got_grads = _logps_and_grads(model, processor, ro, rows, weights, shared=True)
        assert len(region_calls) == 2 * len(lm.layers)  # forward + the backward's replay, per layer
        assert all(layer.gradient_checkpointing for layer in lm.layers)
        valid = ro.completion_mask[rows]
        assert (got - want)[valid].abs().max() < 1e-5
        assert set(got_grads) == set(want_grads) and want_grads
        for name, grad in want_grads.items():
            torch.testing.assert_close(got_grads[name], grad, atol=1e-4, rtol=1e-4, msg=name)
        assert max(g.abs().max() for g in want_grads.values()) > 0


def test_checkpointed_path_only_with_grad_in_training(zoo_dir, region_calls):
    """No-grad passes (scoring, reference) and evaluation keep the KV-cache path, which transformers leaves alone
    without grad; the values agree with the checkpointed path's."""
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next"), gradient_checkpointing=True))
    ro, rows = _rollout(model, processor), slice(0, 2 * G)
    with torch.no_grad():
        cached, _ = rollout_logps(model, processor, ro, rows)
    assert region_calls == []
    model.eval()
    rollout_logps(model, processor, ro, rows)
    assert region_calls == []
    model.train()
    checkpointed, _ = rollout_logps(model, processor, ro, rows)
    assert region_calls == [True, True]
    assert (checkpointed.detach() - cached)[ro.completion_mask].abs().max() < 1e-5


def test_module_shares_the_prefix_under_gradient_checkpointing(tiny_model_dir):
    """``policy.gradient_checkpointing: true`` (every paper-scale config) keeps the shared prefix on."""
    from lit_grpo import GRPOModule
    from lit_grpo.config import PerfConfig
    from lit_grpo.rewards import RewardSpec
    from lit_grpo.rollout import PlainEngine, SharedPrefixEngine

    for perf, shared in ((PerfConfig(), True), (PerfConfig(engine="plain"), False)):
        module = GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir, gradient_checkpointing=True),
                            rewards=[RewardSpec("binary")], perf=perf)
        assert isinstance(module.passes.engine, SharedPrefixEngine if shared else PlainEngine)


@pytest.mark.parametrize("family", ["llava_next", "qwen2_vl", "idefics3"])
def test_bf16_shared_prefix_agrees_with_plain_path(family, zoo_dir):
    """bf16 as users run it: ``policy.dtype: bfloat16`` weights, and float32 weights under ``bf16-mixed`` (CPU
    autocast, what Lightning's precision plugin wraps a step in), with and without gradient checkpointing: the
    shared path's log-probs are float32 (the log-softmax and the loss reduce in float32) and agree with the plain
    path's to bf16 tolerance (rtol 1.6e-2, torch's bf16 default; atol 2e-2 for log-probs near 0), and both with
    float32 log-probs to the same tolerance; gradients reach the adapter."""
    path = zoo_dir(family)
    exact, processor = load_policy(PolicyConfig(name_or_path=path))
    rows = slice(0, 2 * G)
    with torch.no_grad():
        want, _ = rollout_logps(exact, processor, _rollout(exact, processor), rows, shared=False)
    for dtype, mixed in (("bfloat16", False), ("float32", True)):
        for ckpt in (False, True):
            model, processor = load_policy(PolicyConfig(name_or_path=path, dtype=dtype, gradient_checkpointing=ckpt,
                                                        lora=LoRAConfig(r=4, alpha=8)))
            ro = _rollout(model, processor)
            autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed)
            with autocast:
                plain, _ = rollout_logps(model, processor, ro, rows, shared=False)
                shared, _ = rollout_logps(model, processor, ro, rows)
            assert shared.dtype == plain.dtype == torch.float32
            valid = ro.completion_mask
            for got, ref in ((shared, plain), (shared, want), (plain, want)):
                torch.testing.assert_close(got[valid].detach(), ref[valid], rtol=1.6e-2, atol=2e-2)
            (shared * valid).sum().backward()
            assert any(p.grad is not None and p.grad.abs().max() > 0 for n, p in model.named_parameters()
                       if "lora_" in n)
