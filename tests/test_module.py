"""GRPOModule: gradient accumulation invariance, and update behaviour on a fixed rollout."""

import pytest
import torch

from lit_grpo import GRPOConfig, GRPOModule
from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.data.sample import render_messages
from lit_grpo.grpo import group_advantages
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec
from lit_grpo.rollout import SamplingConfig


def _module(tiny_model_dir, **grpo):
    return GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir), rewards=[RewardSpec("binary")],
                      grpo=GRPOConfig(**grpo), sampling=SamplingConfig(num_generations=4, max_completion_length=12))


def _fixed_rollout(module, samples):
    batch = PromptBatch(samples, [render_messages(s, "visualsphinx_seed") for s in samples])
    torch.manual_seed(0)
    ro = module.rollout(batch, 4)
    # lengths differ between completions so that micro-batches hold different token counts
    ro.completion_mask[:, 5:] &= torch.arange(ro.num_completions)[:, None] % 3 != 0
    return ro


def _grads(module, ro, adv, micro):
    module.cfg.micro_batch_size = micro
    module.policy.zero_grad()
    stats = module.passes.accumulate_gradients(module.policy, ro, adv, None, None)
    return {n: p.grad.clone() for n, p in module.policy.named_parameters() if p.requires_grad}, stats


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_accumulation_does_not_change_the_gradient(loss_type, tiny_model_dir, puzzle_samples):
    module = _module(tiny_model_dir, loss_type=loss_type)
    ro = _fixed_rollout(module, puzzle_samples[:2])  # N = 8
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, 0.0, -2.0, 0.3])
    g_full, s_full = _grads(module, ro, adv, None)
    g_acc, s_acc = _grads(module, ro, adv, 2)  # 4 micro-batches of 2
    for n in g_full:
        torch.testing.assert_close(g_acc[n], g_full[n], atol=1e-6, rtol=1e-4)
    assert s_acc["loss"] == pytest.approx(s_full["loss"], abs=1e-6)
    assert max(g.abs().max().item() for g in g_full.values()) > 0


def test_bnpo_is_mean_of_micro_batch_token_means(tiny_model_dir, puzzle_samples):
    module = _module(tiny_model_dir, loss_type="bnpo")
    ro = _fixed_rollout(module, puzzle_samples[:2])
    adv = torch.linspace(-1, 1, 8)
    _, stats = _grads(module, ro, adv, 4)
    m = ro.completion_mask
    # on-policy per-token loss is -A, so each micro-batch's token mean is -(sum_i A_i * T_i) / sum_i T_i
    expected = 0.0
    for s in (slice(0, 4), slice(4, 8)):
        t = m[s].sum(1).float()
        expected += -(adv[s] * t).sum().item() / t.sum().item() / 2
    assert stats["loss"] == pytest.approx(expected, abs=1e-6)


def test_dapo_step_loss_is_token_mean_of_minus_advantage(tiny_model_dir, puzzle_samples):
    module = _module(tiny_model_dir)
    ro = _fixed_rollout(module, puzzle_samples[:2])
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]), 4)
    _, stats = _grads(module, ro, adv, 3)
    t = ro.completion_mask.sum(1).float()
    assert stats["loss"] == pytest.approx(-(adv * t).sum().item() / t.sum().item(), abs=1e-6)
    assert stats["kl"] == 0.0 and stats["clip_ratio"] == 0.0


def test_mask_truncated_completions_removes_them_from_the_loss(tiny_model_dir, puzzle_samples):
    module = _module(tiny_model_dir, mask_truncated_completions=True)
    ro = _fixed_rollout(module, puzzle_samples[:2])
    ro.truncated[:] = True
    ro.truncated[0] = False
    adv = torch.ones(8)
    grads, stats = _grads(module, ro, adv, None)
    t0 = ro.completion_mask[0].sum().item()
    assert stats["loss"] == pytest.approx(-1.0 * t0 / t0)
    # only completion 0 contributes: the same gradient as a rollout of that completion alone
    single = ro.rows(slice(0, 1))
    module.cfg.mask_truncated_completions = False
    g_single, _ = _grads(module, single, adv[:1], None)
    for n in grads:
        torch.testing.assert_close(grads[n], g_single[n], atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("grpo,sampling,message", [
    ({"loss_type": "dapoo"}, {}, "GRPOConfig.loss_type: unknown loss type 'dapoo' (did you mean dapo?); registered: "
     "bnpo, cispo, dapo, dr_grpo, grpo, luspo, micro-batch-token-mean, sapo, seq-mean-token-mean, seq-mean-token-sum, "
     "seq-mean-token-sum-norm, token-mean, vespo"),
    ({"scale_rewards": "grup"}, {}, "GRPOConfig.scale_rewards: unknown advantage scaling 'grup' (did you mean group?); "
     "registered: batch, batch-std, dr_grpo, group, group-std, grpo, no-std, none, reinforce++"),
    ({"importance_sampling_level": "seq"}, {}, "GRPOConfig.importance_sampling_level: must be one of token, sequence (got seq)"),
    ({"delta": 1.1}, {}, "grpo.delta must be null or above 1 + epsilon_high (the cap of the ratio; INTELLECT-2 uses "
     "4), got 1.1"),
    ({"loss_type": "sapo", "delta": 4.0}, {}, "grpo.delta must be null with loss_type sapo (it caps the ratio of "
     "the clipped surrogate, which sapo does not use), got 4.0"),
    ({"loss_type": "cispo", "epsilon_high": 5.0, "delta": 10.0}, {}, "grpo.delta must be null with loss_type cispo"),
    ({"loss_type": "vespo", "delta": 4.0}, {}, "grpo.delta must be null with loss_type vespo"),
    ({"loss_type": "cispo"}, {}, "grpo.epsilon_high must be >= 1 with loss_type cispo, where it caps the importance "
     "ratio itself (ScaleRL's eps_max, e.g. 5.0), got 0.2"),
    ({"entropy_coef_min": 0.5, "entropy_coef_max": 0.1}, {}, "grpo.entropy_coef_max must be >= entropy_coef_min"),
    ({"multi_objective_aggregation": "gdpo"}, {}, "GRPOConfig.multi_objective_aggregation: must be one of "
     "sum_then_normalize, normalize_then_sum (got gdpo)"),
    ({"multi_objective_aggregation": "normalize_then_sum", "scale_rewards": "none"}, {},
     "grpo.scale_rewards must be group with multi_objective_aggregation normalize_then_sum"),
    ({"sampler_correction_mode": "token_clip"}, {}, "GRPOConfig.sampler_correction_mode: must be one of token_truncate, "
     "token_mask, sequence_truncate, sequence_mask (got token_clip)"),
    ({"sampler_correction_min": 5.0}, {}, "grpo.sampler_correction_min must be null or below sampler_correction_max, "
     "got 5.0"),
    ({"steps_per_generation": 0}, {}, "GRPOConfig.steps_per_generation: must be >= 1 (got 0)"),
    ({"top_entropy_quantile": 1.5}, {}, "GRPOConfig.top_entropy_quantile: must be in [0, 1] (got 1.5)"),
    ({"entropy_coef": -0.01}, {}, "GRPOConfig.entropy_coef: must be >= 0 (got -0.01)"),
    ({"sapo_temperature_neg": 0.0}, {}, "GRPOConfig.sapo_temperature_neg: must be > 0 (got 0.0)"),
    ({"off_policy_mask_threshold": -1.0}, {}, "GRPOConfig.off_policy_mask_threshold: must be >= 0 or null (got -1.0)"),
    ({"sampler_correction_max": 0.0}, {}, "GRPOConfig.sampler_correction_max: must be > 0 (got 0.0)"),
    ({}, {"num_generations": 1}, "SamplingConfig.num_generations: must be >= 2 (got 1)"),
    ({}, {"num_generations": 0}, "SamplingConfig.num_generations: must be >= 2"),
    ({}, {"max_completion_length": 0}, "SamplingConfig.max_completion_length: must be >= 1 (got 0)"),
    ({}, {"temperature": 0.0}, "SamplingConfig.temperature: must be > 0 (got 0.0)"),
    ({"micro_batch_size": 0}, {}, "GRPOConfig.micro_batch_size: must be >= 1 or null (got 0)"),
    ({"num_iterations": 0}, {}, "GRPOConfig.num_iterations: must be >= 1 (got 0)"),
    ({}, {"top_p": 1.5}, "SamplingConfig.top_p: must be in (0, 1] (got 1.5)"),
    ({}, {"top_p": 0.0}, "SamplingConfig.top_p: must be in (0, 1] (got 0.0)"),
    ({}, {"top_k": -3}, "SamplingConfig.top_k: must be >= 0 (got -3)"),
    ({"beta": -0.04}, {}, "GRPOConfig.beta: must be >= 0 (got -0.04)"),
    ({"epsilon_high": -0.2}, {}, "GRPOConfig.epsilon_high: must be >= 0 (got -0.2)"),
    ({"max_grad_norm": 0.0}, {}, "GRPOConfig.max_grad_norm: must be > 0 or null (got 0.0)"),
])
def test_settings_that_cannot_train_are_refused_by_name(grpo, sampling, message):
    from lit_grpo.config import check_settings
    with pytest.raises(ValueError) as err:
        check_settings(GRPOConfig(**grpo), SamplingConfig(**sampling))
    assert message in str(err.value)
    check_settings(GRPOConfig(), SamplingConfig())  # the defaults pass


def test_a_run_without_reward_spread_is_warned_about_once():
    """Ten steps in a row with every group's rewards equal (zero advantages) give one warning; a step with
    spread resets the count."""
    import types
    import warnings
    obj = types.SimpleNamespace()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for frac in [1.0] * 9 + [0.5] + [1.0] * 9:
            GRPOModule._warn_if_no_signal(obj, frac)
        assert not caught
        GRPOModule._warn_if_no_signal(obj, 1.0)  # the 10th in a row
        for _ in range(5):
            GRPOModule._warn_if_no_signal(obj, 1.0)
    assert len(caught) == 1 and "frac_reward_zero_std = 1" in str(caught[0].message)
