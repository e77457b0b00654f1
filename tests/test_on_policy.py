"""On-policy: every completion trains on the distribution it was drawn from.

The sampler (plain ``generate`` and the shared-prefix decoder) draws from temperature, top-k and top-p of the
policy's logits and nothing else, whatever the checkpoint's ``generation_config`` carries, and the loss's
log-probs are those of the same distribution; the policy runs without dropout in GRPO, so the log-prob pass and
the first update see the same policy.
"""

import pytest
import torch
from conftest import FAMILIES
from PIL import Image, ImageDraw

import lit_grpo.rollout.shared as prefix
from lit_grpo.families import row_layout, unwrap
from lit_grpo.grpo import grpo_loss, selective_log_softmax
from lit_grpo.policy import PolicyConfig, image_token_ids, load_policy, stop_token_ids
from lit_grpo.rollout import (SamplingConfig, SharedPrefixEngine, completion_logps, encode_prompts, model_inputs,
                              sample_completions)

G = 2
EXTRAS = dict(repetition_penalty=1.05, min_p=0.2, no_repeat_ngram_size=2, typical_p=0.8, epsilon_cutoff=0.01,
              eta_cutoff=0.01, length_penalty=3.0, min_new_tokens=5, renormalize_logits=True,
              exponential_decay_length_penalty=(2, 1.5), do_sample=False, temperature=0.3, top_k=3, top_p=0.5)
"""What instruct checkpoints' ``generation_config`` carries (and more): none of it may reach the sampler."""
SETTINGS = [SamplingConfig(num_generations=G, max_completion_length=8),
            SamplingConfig(num_generations=G, max_completion_length=8, temperature=0.7, top_k=12, top_p=0.9)]


def _prompts(processor):
    a = Image.new("RGB", (132, 88), "white")
    ImageDraw.Draw(a).rectangle([10, 10, 40, 40], fill=(200, 0, 0))
    b = Image.new("RGB", (60, 100), (250, 250, 250))
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]}]
                for t in ("Which option? A B", "count the shapes in the panel please now")]
    return encode_prompts(processor, messages, [[a], [b]])


def _checkpoint_with_extras(path):
    """The tiny model with peaked logits (so a 5% repetition penalty moves log-probs by nats) and a
    ``generation_config`` carrying every extra of :data:`EXTRAS` plus bad words and forced / suppressed tokens."""
    model, processor = load_policy(PolicyConfig(name_or_path=path))
    head = unwrap(model).get_output_embeddings()
    with torch.no_grad():
        logits = model(**_prompts(processor)).logits
        head.weight.mul_(6.0 / (logits.amax(-1) - logits.mean(-1)).mean())  # the top logit ~6 above the mean
    special = stop_token_ids(model, processor) + image_token_ids(model, processor)
    bad = [t for t in range(20, 200) if t not in special][:4]
    gc = unwrap(model).generation_config
    for key, value in dict(EXTRAS, bad_words_ids=[[bad[0]]], begin_suppress_tokens=[bad[1]],
                           suppress_tokens=[bad[2]], forced_eos_token_id=bad[3],
                           sequence_bias={(bad[1],): 5.0}).items():
        setattr(gc, key, value)
    return model, processor


def _sampled_logps(scores, ids):
    """Log-prob of each sampled token under the sampler's own processed scores ``[N, T, V]``."""
    return scores.log_softmax(-1).gather(2, ids[..., None]).squeeze(2)


@pytest.mark.parametrize("family", FAMILIES)
def test_sampler_and_loss_share_one_distribution(family, zoo_dir, monkeypatch):
    """Per family, on the plain path (``generate``) and the shared-prefix path, with and without top-k / top-p:
    the sampler's own per-token log-probs (``generate``'s processed scores; the shared decoder's warped scores)
    equal the loss's log-probs to 1e-5 although the checkpoint's generation_config asks for a repetition
    penalty, min_p, typical_p, n-gram blocking, bad words, forced and suppressed tokens, a minimum length..."""
    model, processor = _checkpoint_with_extras(zoo_dir(family))
    layout = row_layout(model, processor)
    enc = _prompts(processor)
    stop, suppress = stop_token_ids(model, processor), image_token_ids(model, processor)
    index = torch.arange(2).repeat_interleave(G)
    generate, seen = model.generate, []

    def spy_generate(**kwargs):
        out = generate(**kwargs, output_scores=True, return_dict_in_generate=True)
        seen.append(torch.stack(out.scores, 1))
        return out.sequences

    monkeypatch.setattr(model, "generate", spy_generate)
    warp, steps = prefix.warp, []
    monkeypatch.setattr(prefix, "warp", lambda *a, **k: steps.append(warp(*a, **k)) or steps[-1])
    for k, cfg in enumerate(SETTINGS):
        torch.manual_seed(k)
        seen.clear(), steps.clear()
        plain = sample_completions(model, processor, layout.select(enc, index, 2), cfg, stop, suppress, layout=layout)
        engine = SharedPrefixEngine(processor, layout, cfg, stop, suppress)
        shared = engine.sample(model, enc, G)
        warped = dict(temperature=cfg.temperature, suppress_ids=torch.tensor(suppress), top_k=cfg.top_k,
                      top_p=cfg.top_p)
        with torch.no_grad():
            train_plain, _ = completion_logps(model, plain, **warped)
        train_shared, _ = engine.logps(model, shared, slice(0, 2 * G))
        for ro, sampler, train in ((plain, seen[0], train_plain), (shared, torch.stack(steps, 1), train_shared)):
            ids, m = ro.completion_ids, ro.completion_mask
            sampled = _sampled_logps(sampler[:, :ids.shape[1]], ids)
            gap = (sampled - train)[m].abs().max()
            assert gap < 1e-5, (family, cfg, float(gap))
            # the rollout records exactly the sampler's own log-probs (0 after the stop token)
            assert torch.equal(ro.sampling_logps[m], sampled[m]) and not ro.sampling_logps[~m].any()
            assert ro.sampler_is_policy


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_ignores_the_checkpoint_generation_config(family, zoo_dir):
    """Greedy decoding on both paths is the argmax of the policy's logits (image tokens suppressed): equal to each
    other and to a hand-rolled argmax decode, whatever the generation_config says."""
    model, processor = _checkpoint_with_extras(zoo_dir(family))
    layout = row_layout(model, processor)
    enc = _prompts(processor)
    stop, suppress = stop_token_ids(model, processor), image_token_ids(model, processor)
    cfg, index = SamplingConfig(num_generations=G, max_completion_length=6), torch.arange(2).repeat_interleave(G)
    plain = sample_completions(model, processor, layout.select(enc, index, 2), cfg, stop, suppress, greedy=True,
                               layout=layout)
    shared = SharedPrefixEngine(processor, layout, cfg, stop, suppress).sample(model, enc, G, greedy=True)
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    # each greedy token is the argmax of the suppressed logits: its log-prob is the row's largest
    with torch.no_grad():
        t = plain.completion_ids.shape[1]
        logits = model(**model_inputs(plain), use_cache=False).logits[:, -t - 1:-1].float()
    logits[..., suppress] = float("-inf")
    assert torch.equal(logits.argmax(-1)[plain.completion_mask], plain.completion_ids[plain.completion_mask])


def test_a_token_outside_the_kept_set_has_a_finite_log_prob_and_gradient():
    """After an update a sampled token can fall outside the current policy's top-k / top-p set: its log-prob is
    that of the kept set extended by it (hand-computed), and the loss and its gradient stay finite."""
    logits = torch.tensor([[[4.0, 3.0, 1.0, 0.0, -1.0]]], requires_grad=True)  # (1, 1, V=5)
    index = torch.tensor([[3]])  # outside top_k=2
    logps, ent = selective_log_softmax(logits, index, 1.0, top_k=2, with_entropy=True)
    want = 0.0 - torch.log(torch.exp(torch.tensor([4.0, 3.0, 0.0])).sum())
    assert logps.item() == pytest.approx(want.item(), abs=1e-6)
    inside = torch.tensor([[1]])  # the second most likely token: log-prob under the renormalised top-2
    kept, _ = selective_log_softmax(logits, inside, 1.0, top_k=2)
    assert kept.item() == pytest.approx(3.0 - torch.log(torch.exp(torch.tensor([4.0, 3.0])).sum()).item(), abs=1e-6)
    p = torch.softmax(torch.tensor([4.0, 3.0]), 0)
    assert ent.item() == pytest.approx(-(p * p.log()).sum().item(), abs=1e-6)
    # top-p 0.5 keeps only the first token (mass 0.64); token 1 is outside
    nucleus, _ = selective_log_softmax(logits, inside, 1.0, top_p=0.5)
    assert nucleus.item() == pytest.approx(3.0 - torch.log(torch.exp(torch.tensor([4.0, 3.0])).sum()).item(), abs=1e-6)
    for old in (torch.tensor([[-0.1]]), logps.detach()):  # a later iteration, and the first one
        loss, stats = grpo_loss(logps, old, torch.tensor([1.0]), torch.ones(1, 1, dtype=torch.bool), ref_logps=old,
                                beta=0.04)
        (grad,) = torch.autograd.grad(loss, logits, retain_graph=True)
        assert torch.isfinite(loss) and torch.isfinite(grad).all() and all(torch.isfinite(v) for v in stats.values())
    # with the defaults (no top-k / top-p) nothing changes: log_softmax of logits / temperature
    plain, _ = selective_log_softmax(logits, index, 0.7)
    assert torch.equal(plain, (logits / 0.7).log_softmax(-1).gather(2, index[..., None]).squeeze(2))


@pytest.mark.parametrize("args", [
    ["--model.init_args.sampling.repetition_penalty", "1.05"],
    ["--model.init_args.sampling.min_p=0.1"],
    ["--config", "{model: {init_args: {sampling: {no_repeat_ngram_size: 3}}}}"],
])
def test_an_unmodelled_sampling_option_is_refused_in_one_line(args, capsys):
    """A generation option the loss cannot model, on the command line or in a config, stops the run with one line
    naming it and why (not a parse dump); a misspelt option is named with the valid ones."""
    from lit_grpo.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", "configs/demo.yaml", *args, "--print_config"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    name = next(k for k in ("repetition_penalty", "min_p", "no_repeat_ngram_size") if k in " ".join(args))
    assert err.count("\n") == 0, err
    assert err.startswith(f"error: sampling.{name} is refused: the loss cannot model it")
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/demo.yaml", "--model.init_args.sampling.temprature", "0.5", "--print_config"])
    err = capsys.readouterr().err.strip()
    assert err == ("error: sampling.temprature is not an option (did you mean temperature?); sampling options: num_generations, temperature, "
                   "top_p, top_k, max_completion_length")


def _with_dropout(src, dst, p=0.3):
    """A copy of the checkpoint at ``src`` whose every config field named ``*dropout*`` is ``p``."""
    import json
    import shutil

    shutil.copytree(src, dst)

    def set_dropout(node):
        for key, value in node.items():
            if isinstance(value, dict):
                set_dropout(value)
            elif "dropout" in key and isinstance(value, float):
                node[key] = p

    config = json.loads((dst / "config.json").read_text())
    set_dropout(config)
    (dst / "config.json").write_text(json.dumps(config))
    return str(dst)


def _grpo(path, lora_dropout=0.1, module_class=None, **grpo):
    from lit_grpo import GRPOConfig, GRPOModule
    from lit_grpo.policy import LoRAConfig
    from lit_grpo.rewards import RewardSpec

    return (module_class or GRPOModule)(
        policy=PolicyConfig(name_or_path=path, lora=LoRAConfig(r=4, alpha=8, dropout=lora_dropout)),
        rewards=[RewardSpec("binary")], **({} if module_class else {"grpo": GRPOConfig(**grpo)}),
        sampling=SamplingConfig(num_generations=4, max_completion_length=12))


def _train_adapter(policy):
    """Non-zero LoRA ``B`` weights (a fresh adapter's are 0, so its dropout would change nothing), as after training."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def test_first_iteration_ratio_is_one_with_lora_dropout(tiny_model_dir, puzzle_samples):
    """policy.lora.dropout 0.1 and num_iterations 2: the log-prob pass's log-probs and the first update's are equal
    to float precision, so no token is clipped on the first iteration (the dropout is off, with a one-line
    warning)."""
    from lit_grpo.data.datamodule import PromptBatch
    from lit_grpo.data.sample import render_messages

    with pytest.warns(UserWarning, match=r"policy.lora.dropout 0.1 is not applied: GRPO runs the policy without"):
        module = _grpo(tiny_model_dir, num_iterations=2, micro_batch_size=4)
    _train_adapter(module.policy)
    samples = puzzle_samples[:2]
    batch = PromptBatch(samples, [render_messages(s, "visualsphinx_seed") for s in samples])
    torch.manual_seed(0)
    ro = module.rollout(batch, 4)
    assert module.policy.training
    old = module.passes.logprob_pass(module.policy, ro, [s.images for s in batch.samples]).old_logps
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.3, -0.3])
    stats = module.passes.accumulate_gradients(module.policy, ro, adv, old, None)
    assert stats["clip_ratio"] == 0.0
    new, _ = module.passes.engine.logps(module.policy, ro, slice(0, 8))
    assert (new - old)[ro.completion_mask].abs().max() < 1e-5


@pytest.mark.parametrize("family", FAMILIES)
def test_grpo_policy_runs_without_any_dropout(family, zoo_dir, tmp_path):
    """A checkpoint whose config asks for dropout everywhere (attention, hidden, vision) and LoRA dropout: in
    training mode two forwards of the GRPO policy are identical and equal the eval-mode forward; the SFT module
    keeps its dropout."""
    from lit_grpo.sft import SFTModule

    path = _with_dropout(zoo_dir(family), tmp_path / family)
    with pytest.warns(UserWarning, match="dropout"):
        module = _grpo(path)
    policy, enc = module.policy.train(), _prompts(module.processor)
    _train_adapter(policy)
    with torch.no_grad():
        first, second = policy(**enc).logits, policy(**enc).logits
        evaluated = policy.eval()(**enc).logits
    assert torch.equal(first, second)
    torch.testing.assert_close(first, evaluated, atol=1e-5, rtol=1e-5)
    sft = _grpo(path, module_class=SFTModule).policy.train()
    _train_adapter(sft)
    assert any(m.p > 0 for m in sft.modules() if isinstance(m, torch.nn.Dropout))
    with torch.no_grad():
        assert not torch.equal(sft(**enc).logits, sft(**enc).logits)
