"""Off-policy rollouts: a sampler that is not the trained policy (here: the policy's weights of k updates before)
gives a rollout with its own log-probs and ``sampler_is_policy`` false; the update weighs each completion by
``pi_old / mu`` (hand-computed from two full forwards), and a sampler holding the current weights gets weights of
exactly 1; the built-in engines (the policy itself) compute no correction. ``steps_per_generation`` splits one
rollout into updates, in order."""

import copy
import dataclasses
import math

import pytest
import torch

from lit_grpo import GRPOConfig, GRPOModule
from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.data.sample import render_messages
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec
from lit_grpo.rollout import RolloutEngine, SamplingConfig, completion_logps

G = 4
CAP = 1.5


class LaggingSampler(RolloutEngine):
    """An external sampler: draws with its own copy of the weights (``stale``) through the trained policy's engine,
    and reports the log-probs it sampled with (one full forward of its copy, as the engine computes them)."""

    def __init__(self, inner: RolloutEngine, stale):
        self.__dict__.update(inner.__dict__)
        self.inner, self.stale = inner, stale

    def sample(self, model, prompts, group_size, **kwargs):
        rollout = self.inner.sample(self.stale, prompts, group_size, **kwargs)
        sampled, _ = self.inner.logps(self.stale, rollout)
        return dataclasses.replace(rollout, sampling_logps=sampled, sampler_is_policy=False)

    def logps(self, model, rollout, rows=slice(None), **kwargs):
        return self.inner.logps(model, rollout, rows, **kwargs)


def _module(tiny_model_dir, **grpo):
    return GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir), rewards=[RewardSpec("binary")],
                      grpo=GRPOConfig(micro_batch_size=4, **grpo),
                      sampling=SamplingConfig(num_generations=G, max_completion_length=10))


def _batch(samples):
    return PromptBatch(samples, [render_messages(s, "visualsphinx_seed") for s in samples])


def _train(module, batch, steps: int, lr: float = 0.5) -> None:
    """``steps`` plain SGD updates of the policy on its own rollouts (advantages fixed, non-zero)."""
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5] * 2)
    for _ in range(steps):
        ro = module.rollout(batch, G)
        module.policy.zero_grad()
        module.passes.accumulate_gradients(module.policy, ro, adv, None, None)
        with torch.no_grad():
            for p in module.trainable_parameters():
                p -= lr * p.grad


@pytest.fixture(scope="module")
def lagging(tiny_model_dir, puzzle_samples):
    """A module whose sampler holds the weights of 2 updates before, its rollout and the log-prob pass."""
    module = _module(tiny_model_dir, sampler_correction_mode="sequence_truncate", sampler_correction_max=CAP)
    batch = _batch(puzzle_samples[:2])
    stale = copy.deepcopy(module.policy)
    torch.manual_seed(0)
    _train(module, batch, 2)
    module.passes.engine = LaggingSampler(module.passes.engine, stale)
    torch.manual_seed(1)
    rollout = module.rollout(batch, G)
    lp = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    return module, stale, batch, rollout, lp


def _hand_logps(module, model, rollout):
    with torch.no_grad():
        return completion_logps(model, rollout, **module.passes.engine.warped())[0].double()


def test_stale_sampler_correction_equals_hand_computed(lagging):
    """Sequence-level truncated weights ``min(exp(sum_t log pi_old - log mu), 1.5)`` from two independent full
    forwards (current and stale weights), and the first update's loss ``sum_n -A_n w_n T_n / sum_n T_n`` (the ratio
    to the old policy is 1 there)."""
    module, stale, batch, rollout, lp = lagging
    assert not rollout.sampler_is_policy and lp.old_logps is not None  # the pass ran for the correction
    m = rollout.completion_mask.double()
    log_w = ((_hand_logps(module, module.policy, rollout) - _hand_logps(module, stale, rollout)) * m).sum(1)
    want = log_w.exp().clamp(max=CAP)  # (N,)
    assert log_w.abs().max() > 0.1 and (want == CAP).any() and (want < 1).any()  # truly off-policy, cap reached
    torch.testing.assert_close(lp.sampler_ratio.squeeze(1).double(), want, rtol=1e-5, atol=0)
    adv = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.5, -0.25, 2.0, -2.0])
    stats = module.passes.accumulate_gradients(module.policy, rollout, adv, lp.old_logps, None, sampler=lp)
    tokens = m.sum(1)
    assert stats["loss"] == pytest.approx((-(adv.double() * want * tokens).sum() / tokens.sum()).item(), rel=1e-5)
    uncorrected = module.passes.accumulate_gradients(module.policy, rollout, adv, lp.old_logps, None)
    assert uncorrected["loss"] == pytest.approx((-(adv.double() * tokens).sum() / tokens.sum()).item(), rel=1e-5)


def test_token_level_correction_equals_hand_computed(lagging):
    """``token_mask``: each token's weight ``exp(log pi_old - log mu)``, zeroed outside ``[0.8, 1.25]``."""
    module, stale, batch, rollout, lp = lagging
    module.cfg.sampler_correction_mode, module.cfg.sampler_correction_min = "token_mask", 0.8
    module.cfg.sampler_correction_max = 1.25
    try:
        _, ratio = module.passes.sampler_weights(lp.old_logps, rollout)
    finally:
        module.cfg.sampler_correction_mode, module.cfg.sampler_correction_min = "sequence_truncate", None
        module.cfg.sampler_correction_max = CAP
    m = rollout.completion_mask
    w = (_hand_logps(module, module.policy, rollout) - _hand_logps(module, stale, rollout)).exp()
    want = torch.where((w < 0.8) | (w > 1.25), 0.0, w)
    torch.testing.assert_close(ratio.double()[m], want[m], rtol=1e-5, atol=1e-6)
    assert (want[m] == 0).any() and (want[m] > 0).any()


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_a_sampler_with_the_current_weights_gets_weights_of_exactly_one(mode, tiny_model_dir, puzzle_samples):
    """The same external sampler holding the current weights (k = 0): every weight is exactly 1.0, and the update's
    loss is exactly the one without the correction."""
    module = _module(tiny_model_dir, sampler_correction_mode=mode, sampler_correction_min=0.5)
    module.passes.engine = LaggingSampler(module.passes.engine, copy.deepcopy(module.policy))
    batch = _batch(puzzle_samples[2:4])
    torch.manual_seed(2)
    rollout = module.rollout(batch, G)
    lp = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    assert torch.equal(lp.sampler_ratio, torch.ones_like(lp.sampler_ratio))
    adv = torch.linspace(-1, 1, 2 * G)
    corrected = module.passes.accumulate_gradients(module.policy, rollout, adv, lp.old_logps, None,
                                                   sampler=lp)
    plain = module.passes.accumulate_gradients(module.policy, rollout, adv, lp.old_logps, None)
    assert corrected["loss"] == plain["loss"]


def test_built_in_engines_sample_from_the_policy_and_compute_no_correction(tiny_model_dir, puzzle_samples):
    """The built-in engine's rollout records its sampler's log-probs, which agree with the log-prob pass to float
    rounding; it is the policy (``sampler_is_policy``), so no correction is computed and the log-prob pass runs
    only when ``num_iterations`` or ``steps_per_generation`` asks for it."""
    module = _module(tiny_model_dir)
    batch = _batch(puzzle_samples[4:6])
    torch.manual_seed(3)
    rollout = module.rollout(batch, G)
    assert rollout.sampler_is_policy and rollout.sampling_logps.shape == rollout.completion_ids.shape
    images = [s.images for s in batch.samples]
    assert module.passes.logprob_pass(module.policy, rollout, images).old_logps is None
    module.cfg.steps_per_generation = 2
    lp = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    assert lp.sampler_ratio is None and lp.sampling_logps is None
    gap = (lp.old_logps - rollout.sampling_logps)[rollout.completion_mask].abs().max()
    assert gap < 1e-5


def test_an_off_policy_rollout_without_sampler_logps_is_refused(tiny_model_dir, puzzle_samples):
    module = _module(tiny_model_dir)
    batch = _batch(puzzle_samples[:1])
    rollout = dataclasses.replace(module.rollout(batch, G), sampling_logps=None, sampler_is_policy=False)
    with pytest.raises(ValueError, match="has no sampling_logps: an engine that samples from anything else must"):
        module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    module.cfg.loss_type = "vespo"
    rollout = dataclasses.replace(rollout, sampling_logps=torch.zeros(rollout.completion_ids.shape))
    with pytest.raises(ValueError, match="vespo folds the sampler weight"):
        module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])


def test_steps_per_generation_updates_each_part_in_order(tiny_model_dir, puzzle_samples, monkeypatch):
    """2 passes x 4 parts of an 8-completion rollout: 8 optimizer updates, on rows 0-1, 2-3, 4-5, 6-7 twice, each
    the update of that part alone (its tokens normalised by the rollout's tokens / 4)."""
    module = _module(tiny_model_dir, steps_per_generation=4, num_iterations=2)
    opt = torch.optim.SGD(module.trainable_parameters(), lr=0.0)
    monkeypatch.setattr(module, "optimizers", lambda: opt)
    monkeypatch.setattr(module, "lr_schedulers", lambda: None)
    seen, steps = [], []
    accumulate = module.passes.accumulate_gradients
    monkeypatch.setattr(module.passes, "accumulate_gradients",
                        lambda *a, **k: seen.append(k["rows"]) or accumulate(*a, **k))
    monkeypatch.setattr(opt, "step", lambda *a, **k: steps.append(1))
    batch = _batch(puzzle_samples[:2])
    torch.manual_seed(4)
    rollout = module.rollout(batch, G)
    lp = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.25, -0.25])
    stats = module.update(rollout, adv, lp)
    assert [(s.start, s.stop) for s in seen] == [(0, 2), (2, 4), (4, 6), (6, 8)] * 2 and len(steps) == 8
    tokens = rollout.completion_mask.sum(1).double()
    # the ratio stays 1 (lr 0): each part's loss is -sum A T over the rollout's tokens / 4; the stats average them
    want = sum((-(adv[i:i + 2] * tokens[i:i + 2]).sum() / (tokens.sum() / 4)).item() for i in (0, 2, 4, 6)) / 4
    assert stats["loss"] == pytest.approx(want, rel=1e-5)
    # a rollout S does not divide (an epoch's partial last batch) splits into parts one row apart, in order
    module.cfg.steps_per_generation = 3
    assert [(s.start, s.stop) for s in module.passes.update_rows(8)] == [(0, 2), (2, 5), (5, 8)]
    assert [(s.start, s.stop) for s in module.passes.update_rows(3)] == [(0, 1), (1, 2), (2, 3)]
    module.cfg.steps_per_generation = 2
    assert [(s.start, s.stop) for s in module.passes.update_rows(3)] == [(0, 1), (1, 3)]
    with pytest.raises(ValueError, match="grpo.steps_per_generation 4 exceeds the 3 completions"):
        module.cfg.steps_per_generation = 4
        module.passes.update_rows(3)


def test_gdpo_advantages_and_their_shares(tiny_model_dir):
    """``normalize_then_sum`` through the module: two reward terms of a group of 4, hand-computed; each term's share
    is logged as ``train/advantage/<reward>`` (mean |c_k|) and the shares add up to the advantage."""
    module = GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir),
                        rewards=[RewardSpec("binary", weight=1.0), RewardSpec("boxed_format", weight=0.5)],
                        grpo=GRPOConfig(multi_objective_aggregation="normalize_then_sum"),
                        sampling=SamplingConfig(num_generations=4, max_completion_length=8))
    binary, fmt = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([1.0, 1.0, 0.0, 1.0])
    adv, shares, _ = module.advantages({"binary": binary, "boxed_format": fmt}, binary + 0.5 * fmt)
    s = math.sqrt(0.25)  # unbiased std of both columns: [1,0,0,0] and [1,1,0,1] -> 0.5
    z_b, z_f = (binary - 0.25) / (s + 1e-4), 0.5 * (fmt - 0.75) / (s + 1e-4)
    total = z_b + z_f
    want = (total - total.mean()) / (total.std() + 1e-4)
    torch.testing.assert_close(adv, want, rtol=1e-6, atol=1e-6)
    scale = total.std() + 1e-4
    assert shares == pytest.approx({"train/advantage/binary": (z_b.abs() / scale).mean().item(),
                                    "train/advantage/boxed_format": (z_f.abs() / scale).mean().item()}, rel=1e-5)


def test_the_adaptive_entropy_coefficient_is_checkpointed(tiny_model_dir):
    """With ``use_adaptive_entropy`` the coefficient and the last update's entropy are a buffer: the checkpoint keeps
    them (with the trainable weights) and a resumed module reads them back; without it there is no such entry."""
    module = _module(tiny_model_dir, use_adaptive_entropy=True, entropy_coef=0.01)
    assert module.entropy_control.tolist() == [0.01, math.inf]
    module.entropy_control.copy_(torch.tensor([0.035, 0.18], dtype=torch.float64))
    checkpoint = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(checkpoint)
    assert "entropy_control" in checkpoint["state_dict"]
    resumed = _module(tiny_model_dir, use_adaptive_entropy=True, entropy_coef=0.01)
    resumed.load_state_dict(checkpoint["state_dict"], strict=False)
    assert resumed.entropy_control.tolist() == [0.035, 0.18]
    assert resumed._entropy_coef() == 0.035  # 0.18 <= the 0.2 target: applied
    assert "entropy_control" not in _module(tiny_model_dir).state_dict()


def test_no_signal_figures_describe_what_the_advantages_are_computed_from(tiny_model_dir):
    """Two groups of 4, rewards ``binary`` (weight 1) and ``boxed_format`` (weight 0.5). Group 0: binary [1,0,0,0],
    format [0,2,2,2], so every weighted total is 1 while the terms differ; group 1: the same with format [0,0,0,0]
    and binary [1,1,1,1] (flat in every term). Summed then normalised, group 0's totals are flat: no signal, half
    the groups. Normalised then summed (GDPO), group 0's sum of normalised terms is about [0.75, -0.25, -0.25, -0.25]
    (binary's z [1.5, -0.5, -0.5, -0.5] plus 0.5 x format's z [-1.5, 0.5, 0.5, 0.5]): it trains, and only group 1
    counts as having no signal."""
    from lit_grpo.metrics import train_metrics

    binary = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    fmt = torch.tensor([0.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0])
    total = binary + 0.5 * fmt
    figures = {}
    for aggregation in ("sum_then_normalize", "normalize_then_sum"):
        module = GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir),
                            rewards=[RewardSpec("binary", weight=1.0), RewardSpec("boxed_format", weight=0.5)],
                            grpo=GRPOConfig(multi_objective_aggregation=aggregation),
                            sampling=SamplingConfig(num_generations=4, max_completion_length=8))
        adv, _, signal = module.advantages({"binary": binary, "boxed_format": fmt}, total)
        log = train_metrics({}, total, adv, 4, torch.ones(8), torch.zeros(8), signal)
        figures[aggregation] = (adv, log["train/rollout/frac_reward_zero_std"], log["train/reward_std"])
    adv, zero_std, std = figures["sum_then_normalize"]
    assert adv.eq(0).all() and zero_std == 1.0 and std == 0.0
    adv, zero_std, std = figures["normalize_then_sum"]
    assert adv[:4].abs().min() > 0.1 and adv[4:].eq(0).all()  # group 0 trains, group 1 does not
    z_b = (binary[:4] - 0.25) / (0.5 + 1e-4)
    z_f = 0.5 * (fmt[:4] - 1.5) / (1.0 + 1e-4)
    assert zero_std == 0.5 and std == pytest.approx((z_b + z_f).std().item() / 2, rel=1e-5)


@pytest.mark.parametrize("mode, completions, tokens", [("sequence_mask", 0.5, 2000 / 2010),
                                                       ("sequence_truncate", 0.5, 2000 / 2010),
                                                       ("token_truncate", 0.0, 0.0), ("token_mask", 0.0, 0.0)])
def test_a_long_completion_whose_tokens_agree_is_corrected_only_at_the_sequence_level(mode, completions, tokens):
    """Two completions, 2,000 and 10 tokens, each token's log pi_old - log mu = 1e-3 (0.1%): the long one's sequence
    weight is exp(2) = 7.39, over the cap of 3 (masked or clipped with its 2,000 tokens); the short one's exp(0.01);
    per token every weight is exp(1e-3), inside the bounds."""
    from lit_grpo.metrics import sampler_metrics
    from lit_grpo.objectives import sampler_correction

    mask = torch.zeros(2, 2000)
    mask[0], mask[1, :10] = 1, 1
    old, sampling = torch.full((2, 2000), -1.0 + 1e-3), torch.full((2, 2000), -1.0)
    options = dict(mode=mode, ratio_min=None, ratio_max=3.0)
    ratio = sampler_correction(old, sampling, mask, **options)
    out = sampler_metrics(old, sampling, ratio, mask, options=options)
    assert out["train/rollout/sampler/corrected_completions"] == completions
    assert out["train/rollout/sampler/corrected_tokens"] == pytest.approx(tokens)
    if mode.startswith("sequence"):
        assert ratio[0, 0].item() == (0.0 if mode == "sequence_mask" else 3.0)
        assert ratio[1, 0].item() == pytest.approx(math.exp(0.01), rel=1e-4)


def test_a_step_whose_correction_drops_many_completions_is_warned_about_once(tiny_model_dir):
    module = _module(tiny_model_dir)
    with pytest.warns(UserWarning, match=r"the sampler correction \(sequence_mask\) masked or clipped 25% of this "
                                         r"step's completions .* grpo.sampler_correction_mode: token_truncate"):
        module._warn_if_corrected(0.25)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module._warn_if_corrected(0.9)  # once per run
        _module(tiny_model_dir)._warn_if_corrected(0.2)  # at the share itself: no warning
