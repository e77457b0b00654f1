"""Shared prompt prefix and image features once per rollout: equal to the plain path on every family."""

import pytest
import torch
from conftest import FAMILIES
from PIL import Image, ImageDraw
from transformers.generation.logits_process import (LogitsProcessorList, SuppressTokensLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

from lit_grpo.families import row_layout
from lit_grpo.policy import LoRAConfig, PolicyConfig, image_token_ids, load_policy, stop_token_ids
from lit_grpo.grpo import warp
from lit_grpo.rollout import (PlainEngine, Rollout, SamplingConfig, SharedPrefixEngine, completion_logps,
                              encode_prompts, sample_completions)
from lit_grpo.rollout.shared import frozen_outside_lm

G, T = 3, 6


def _prompts(processor):
    a = Image.new("RGB", (132, 88), "white")
    ImageDraw.Draw(a).rectangle([10, 10, 40, 40], fill=(200, 0, 0))
    b = Image.new("RGB", (60, 100), (250, 250, 250))
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]}]
                for t in ("Which option? A B", "count the shapes in the panel please now")]
    return encode_prompts(processor, messages, [[a], [b]])  # two prompts of different lengths: left padding


def _rollout(model, processor, cache_features=True):
    """G completions of 2 prompts with fixed random tokens; one row stops early, one row is all padding after 1."""
    family = row_layout(model, processor)
    enc = _prompts(processor)
    index = torch.arange(2).repeat_interleave(G)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(20, 200, (2 * G, T), generator=gen)
    mask = torch.ones(2 * G, T, dtype=torch.bool)
    mask[1, 3:] = False
    mask[4, 1:] = False
    return Rollout(enc, ids, mask, torch.zeros(2 * G, dtype=torch.bool), [""] * (2 * G), layout=family,
                   prompt_index=index)


def _engine(family, shared=True, cache_features=True, suppress=(), processor=None, stop=(0,)):
    """An engine at temperature 1, top-k/top-p off: the shared-prefix one or the plain one."""
    cfg = SamplingConfig(temperature=1.0)
    if shared:
        return SharedPrefixEngine(processor, family, cfg, list(stop), list(suppress), cache_features)
    return PlainEngine(processor, family, cfg, list(stop), list(suppress))


def rollout_logps(model, ro, rows, shared=True, suppress=()):
    """Log-probs of rows ``rows`` at temperature 1 (with grad) from the shared-prefix or the plain engine."""
    return _engine(ro.layout, shared, suppress=suppress).logps(model, ro, rows, grad=True)


def _logps_and_grads(model, ro, rows, weights, shared=True):
    model.zero_grad()
    logps, _ = rollout_logps(model, ro, rows, shared)
    (logps * weights[rows] * ro.completion_mask[rows]).sum().backward()
    return logps.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
@pytest.mark.parametrize("family", FAMILIES)
def test_shared_prefix_equals_plain_path(family, lora, zoo_dir):
    """Log-probs to 1e-5 and every trainable gradient to 1e-4 (float32), for the whole rollout and for a
    micro-batch that splits a group, with image features reused (LoRA: vision frozen) or re-encoded (full
    fine-tuning: the projector trains, except Qwen's), left-padded prompts of different lengths, Qwen's M-RoPE
    included."""
    cfg = PolicyConfig(name_or_path=zoo_dir(family), lora=LoRAConfig(r=4, alpha=8) if lora else None)
    model, processor = load_policy(cfg)
    # full fine-tuning trains the projector, except Qwen's, which sits in the (frozen) vision tower
    assert frozen_outside_lm(model, row_layout(model, processor)) == (lora or family.startswith("qwen"))
    weights = torch.linspace(-1.0, 1.0, 2 * G * T).view(2 * G, T)
    ro = _rollout(model, processor)
    for rows in (slice(0, 2 * G), slice(1, 4)):
        want, want_grads = _logps_and_grads(model, ro, rows, weights, shared=False)
        got, got_grads = _logps_and_grads(model, ro, rows, weights)
        valid = ro.completion_mask[rows]
        assert (got - want)[valid].abs().max() < 1e-5
        assert set(got_grads) == set(want_grads) and want_grads
        for name, grad in want_grads.items():
            torch.testing.assert_close(got_grads[name], grad, atol=1e-4, rtol=1e-4, msg=name)
        assert max(g.abs().max() for g in want_grads.values()) > 0


def test_image_features_are_encoded_once_per_rollout_when_frozen(zoo_dir):
    """With LoRA the vision tower runs once (on the B prompts) for any number of passes; in full fine-tuning
    (trainable projector) every pass encodes its prompts again."""
    for lora, calls_expected in ((True, 1), (False, 3)):
        model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next"),
                                                    lora=LoRAConfig(r=4, alpha=8) if lora else None))
        ro = _rollout(model, processor)
        engine = _engine(ro.layout)
        tower = next(m for n, m in model.named_modules() if n.endswith("vision_tower"))
        seen = []
        handle = tower.register_forward_hook(lambda m, a, o: seen.append(a[0].shape[0]))
        try:
            for _ in range(3):
                engine.logps(model, ro, slice(0, 2 * G), grad=True)
        finally:
            handle.remove()
        assert len(seen) == calls_expected
        assert all(n == seen[0] for n in seen)  # the B prompts' tiles, never the N rows'


def test_warp_equals_generate_logits_processors():
    """Suppression, temperature, top-k and top-p as transformers' processors apply them during sampling."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 40, generator=gen) * 3
    suppress = torch.tensor([3, 7])
    for temperature, top_k, top_p in ((1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (0.9, 0, 0.8), (1.0, 12, 0.6)):
        procs = LogitsProcessorList([SuppressTokensLogitsProcessor(suppress.tolist()),
                                     TemperatureLogitsWarper(temperature)])
        if top_k:
            procs.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            procs.append(TopPLogitsWarper(top_p))
        want = procs(torch.zeros(5, 1, dtype=torch.long), logits.clone())
        got = warp(logits, temperature, top_k, top_p, suppress)
        assert torch.equal(torch.isinf(got), torch.isinf(want))
        torch.testing.assert_close(got[~torch.isinf(got)], want[~torch.isinf(want)])
    assert torch.isinf(warp(logits, 1.0, 0, 1.0, suppress)[:, [3, 7]]).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_shared_sampling_greedy_equals_generate(family, zoo_dir):
    """Prefill once per prompt + expanded cache decodes the same greedy completions as ``generate`` on G
    copies, and the rollout's prompt rows are the plain path's (its log-probs agree too)."""
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family)))
    family_layout = row_layout(model, processor)
    enc = _prompts(processor)
    stop, suppress = stop_token_ids(model, processor), image_token_ids(model, processor)
    cfg = SamplingConfig(num_generations=2, max_completion_length=8)
    index = torch.arange(2).repeat_interleave(2)
    plain = sample_completions(model, processor, family_layout.select(enc, index, 2), cfg, stop, suppress,
                               greedy=True, layout=family_layout)
    engine = SharedPrefixEngine(processor, family_layout, cfg, stop, suppress)
    shared = engine.sample(model, enc, 2, greedy=True)
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    assert torch.equal(shared.completion_mask, plain.completion_mask)
    assert shared.completions == plain.completions
    for key, value in plain.prompt.items():
        assert torch.equal(shared.prompt[key], value), key
    with torch.no_grad():
        want, _ = completion_logps(model, plain, 1.0, torch.tensor(suppress))
        got, _ = rollout_logps(model, shared, slice(0, 4), suppress=suppress)
    assert (got - want)[plain.completion_mask].abs().max() < 1e-5


def _module(path, lora, **perf):
    from lit_grpo import GRPOConfig, GRPOModule
    from lit_grpo.config import PerfConfig
    from lit_grpo.rewards import RewardSpec

    return GRPOModule(policy=PolicyConfig(name_or_path=path, lora=LoRAConfig(r=4, alpha=8) if lora else None),
                      rewards=[RewardSpec("binary")],
                      grpo=GRPOConfig(beta=0.04, num_iterations=2, micro_batch_size=3),
                      sampling=SamplingConfig(num_generations=4, max_completion_length=6), perf=PerfConfig(**perf))


@pytest.mark.slow
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_module_passes_equal_plain_path(lora, tiny_model_dir, puzzle_samples):
    """The trainer's scoring (sampling policy), reference and update passes on one rollout, micro-batches of 3
    splitting groups of 4: shared prefix against the plain path (reference = adapter off with LoRA, a frozen
    copy in full fine-tuning)."""
    from lit_grpo.data.datamodule import PromptBatch
    from lit_grpo.data.sample import render_messages

    module = _module(tiny_model_dir, lora)
    assert isinstance(module.passes.engine, SharedPrefixEngine)
    plain_engine = PlainEngine(module.processor, module.layout, module.sampling, module.stop_ids,
                               module.suppress_ids.tolist())
    samples = puzzle_samples[:2]
    batch = PromptBatch(samples, [render_messages(s, "visualsphinx_seed") for s in samples])
    torch.manual_seed(0)
    ro = module.rollout(batch, 4)
    assert ro.memo and ro.num_completions == 8 and ro.num_prompts == 2
    ro.completion_mask[:, 4:] &= torch.arange(8)[:, None] % 3 != 0  # different lengths per row
    engines = (module.passes.engine, plain_engine)
    got = module.passes.logprob_pass(module.policy, ro, [s.images for s in batch.samples])
    module.passes.engine = plain_engine
    want = module.passes.logprob_pass(module.policy, ro, [s.images for s in batch.samples])
    valid = ro.completion_mask
    for a, b in ((got.old_logps, want.old_logps), (got.ref_logps, want.ref_logps)):
        assert (a - b)[valid].abs().max() < 1e-5
    adv = torch.linspace(-1.0, 1.0, 8)
    grads = []
    for engine in engines:
        module.passes.engine = engine
        module.policy.zero_grad()
        module.passes.accumulate_gradients(module.policy, ro, adv, want.old_logps, want.ref_logps)
        grads.append({n: p.grad.clone() for n, p in module.policy.named_parameters() if p.requires_grad})
    assert max(g.abs().max() for g in grads[1].values()) > 0
    for name, grad in grads[1].items():
        torch.testing.assert_close(grads[0][name], grad, atol=1e-4, rtol=1e-4, msg=name)


def test_plain_path_when_off(tiny_model_dir):
    assert isinstance(_module(tiny_model_dir, True, engine="plain").passes.engine, PlainEngine)


def test_perf_options_are_config_parameters(capsys):
    """docs/performance.md's override picks the plain engine; the default is the shared-prefix one."""
    import yaml

    from lit_grpo.cli import main

    for extra, expected in (([], {"engine": "shared", "cache_image_features": True}),
                            (["--model.init_args.perf.engine", "plain"],
                             {"engine": "plain", "cache_image_features": True})):
        with pytest.raises(SystemExit):
            main(["fit", "--config", "configs/demo.yaml", *extra, "--print_config"])
        perf = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["perf"]
        assert {k: perf[k] for k in expected} == expected


def test_reused_features_follow_a_trained_text_embedding(zoo_dir):
    """Full fine-tuning of a Qwen-VL model reuses its image features (its projector sits in the frozen vision
    tower) while the text embedding trains: after an update of the embedding (a second iteration on the same
    rollout), the shared path still equals the plain path."""
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("qwen2_vl")))
    ro = _rollout(model, processor)
    rows = slice(0, 2 * G)
    engine = _engine(ro.layout)
    engine.logps(model, ro, rows)  # the first pass captures the prompts' inputs
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.add_(torch.randn(emb.shape, generator=torch.Generator().manual_seed(1)) * 0.5)  # an optimizer step
    want, _ = rollout_logps(model, ro, rows, shared=False)
    got, _ = engine.logps(model, ro, rows)
    valid = ro.completion_mask[rows]
    assert (got - want)[valid].abs().max() < 1e-5
