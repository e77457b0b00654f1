"""The registered objective variants against hand-computed values on tensors of one to four tokens (each
expected value is worked out in the comment next to it), and the registries' names and aliases."""

import math

import pytest
import torch

from lit_grpo.grpo import (ADVANTAGE_SCALES, decoupled_advantages, entropy_bonus, group_advantages, grpo_loss,
                           importance_ratio, register_scale)
from lit_grpo.objectives import (AGGREGATION_ALIASES, LOSS_AGGREGATIONS, LOSS_TYPES, POLICY_TERMS,
                                 adapt_entropy_coef, applied_entropy_coef, entropy_threshold, gamma_weights,
                                 high_entropy_mask, off_policy_mask, register_aggregation, register_loss_type,
                                 sampler_correction)

ONE = torch.ones(1, 1, dtype=torch.bool)


def _loss_and_grad(log_ratio: float, adv: float, logp: float = -1.0, **kw):
    """One token: loss and d loss / d logp, the old log-prob ``logp - log_ratio``."""
    lp = torch.tensor([[logp]], requires_grad=True)
    loss, stats = grpo_loss(lp, torch.tensor([[logp - log_ratio]]), torch.tensor([adv]), ONE, **kw)
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.item(), grad.item(), stats


# ------------------------------------------------------------------ names
def test_aggregations_by_formula_with_paper_aliases():
    assert AGGREGATION_ALIASES == {"dapo": "token-mean", "grpo": "seq-mean-token-mean", "luspo": "seq-mean-token-sum",
                                   "dr_grpo": "seq-mean-token-sum-norm", "bnpo": "micro-batch-token-mean"}
    for alias, name in AGGREGATION_ALIASES.items():
        assert LOSS_AGGREGATIONS.get(alias) is LOSS_AGGREGATIONS.get(name)
    # S = [1 + 2, 4] over lengths [2, 1]
    per_token, mask = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), torch.tensor([[1.0, 1.0, 0.0], [1.0, 0, 0]])
    kw = dict(num_items=3, num_sequences=2, max_completion_length=3, num_micro_batches=2)
    expected = {"token-mean": 7 / 3, "seq-mean-token-mean": (3 / 2 + 4 / 1) / 2, "seq-mean-token-sum": 7 / 2,
                "seq-mean-token-sum-norm": 7 / (2 * 3), "micro-batch-token-mean": 7 / 3 / 2}
    for name, value in expected.items():
        assert LOSS_AGGREGATIONS.get(name)(per_token, mask, **kw).item() == pytest.approx(value)


def test_loss_types_are_policy_term_and_aggregation_pairs():
    pairs = {n: (LOSS_TYPES.get(n).policy, LOSS_TYPES.get(n).aggregation) for n in LOSS_TYPES.names()}
    assert pairs["cispo"] == ("cispo", "token-mean") and pairs["vespo"] == ("vespo", "token-mean")
    assert pairs["sapo"] == ("sapo", "seq-mean-token-mean") and pairs["luspo"] == ("clip", "luspo")
    assert pairs["dapo"] == ("clip", "dapo") and pairs["token-mean"] == ("clip", "token-mean")
    assert POLICY_TERMS.names() == ["cispo", "clip", "sapo", "vespo"]


def test_registries_refuse_duplicates_and_name_the_valid_ones():
    with pytest.raises(ValueError, match="loss aggregation 'token-mean' is already registered"):
        register_aggregation("token-mean")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="loss aggregation 'grpo' is already registered"):
        register_aggregation("my-mean", "grpo")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="loss type 'cispo' is already registered"):
        register_loss_type("cispo", "clip", "token-mean")
    with pytest.raises(KeyError, match="unknown policy loss 'ppo'; registered: cispo, clip, sapo, vespo"):
        register_loss_type("my-loss", "ppo", "token-mean")
    with pytest.raises(ValueError, match="advantage scaling 'group' is already registered"):
        register_scale("group")(lambda *a: None)
    with pytest.raises(ValueError, match=r"^unknown loss type 'ppo'; registered: bnpo, cispo, dapo, "):
        grpo_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), ONE, loss_type="ppo")
    with pytest.raises(ValueError, match=r"unknown loss option\(s\) \['dleta'\]"):
        grpo_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), ONE, dleta=2.0)


def test_advantage_scalings_by_formula_equal_their_aliases():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.5, 1.0])
    for formula, alias in [("group-std", "group"), ("batch-std", "batch"), ("no-std", "none"),
                           ("group-std", "grpo"), ("batch-std", "reinforce++"), ("no-std", "dr_grpo")]:
        assert torch.equal(group_advantages(r, 4, formula), group_advantages(r, 4, alias))
    assert ADVANTAGE_SCALES.names() == ["batch", "batch-std", "dr_grpo", "group", "group-std", "grpo", "no-std",
                                        "none", "reinforce++"]


# ------------------------------------------------------------------ policy terms
def test_gspo_sequence_ratio_is_the_geometric_mean():
    logps = torch.tensor([[-1.0, -2.0, -3.0]])
    old = logps - torch.tensor([[0.2, -0.4, 9.0]])  # log-ratios 0.2, -0.4 and a masked 9
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    _, ratio = importance_ratio(logps, old, mask, "sequence")
    assert ratio.shape == (1, 1) and ratio.item() == pytest.approx(math.exp(-0.1))  # mean(0.2, -0.4) = -0.1
    # inside the clip range: every token's loss is -ratio * A = -e^-0.1; outside (mean 0.5): -1.2 A, no gradient
    loss, _ = grpo_loss(logps, old, torch.tensor([1.0]), mask.bool(), importance_sampling_level="sequence")
    assert loss.item() == pytest.approx(-math.exp(-0.1))
    loss, grad, _ = _loss_and_grad(0.5, 1.0, importance_sampling_level="sequence")
    assert loss == pytest.approx(-1.2) and grad == 0.0


def test_cispo_keeps_the_gradient_with_a_capped_detached_weight():
    # ratio 2 > eps_high 1.5: weight 1.5, loss -1.5 * A * logp = -1.5 * 1 * (-1) = 1.5, d/dlogp = -1.5
    assert _loss_and_grad(math.log(2.0), 1.0, loss_type="cispo", epsilon_high=1.5)[:2] == pytest.approx((1.5, -1.5))
    # ratio 0.5 (no lower clip): weight 0.5, A = -2: loss -0.5 * -2 * -1 = -1, d/dlogp = 1
    assert _loss_and_grad(math.log(0.5), -2.0, loss_type="cispo", epsilon_high=1.5)[:2] == pytest.approx((-1.0, 1.0))
    # the capped token counts as clipped high; the uncapped one is not clipped low (no lower bound)
    assert _loss_and_grad(math.log(2.0), 1.0, loss_type="cispo", epsilon_high=1.5)[2]["clip_ratio_high"] == 1.0
    assert _loss_and_grad(math.log(0.5), -2.0, loss_type="cispo", epsilon_high=1.5)[2]["clip_ratio"] == 0.0


def test_sapo_soft_gate():
    # ratio 1: -sigmoid(0) * 4 / tau * A = -2 A / tau (tau_pos 1); gradient -sigmoid'(0) * 4 * A = -A
    assert _loss_and_grad(0.0, 1.0, loss_type="sapo")[:2] == pytest.approx((-2.0, -1.0))
    assert _loss_and_grad(0.0, -1.0, loss_type="sapo")[:2] == pytest.approx((2 / 1.05, 1.0))  # tau_neg 1.05
    # ratio e: -sigmoid(e - 1) * 4 = -3.39163; gradient -4 s (1 - s) e = -1.40220
    assert _loss_and_grad(1.0, 1.0, loss_type="sapo")[:2] == pytest.approx((-3.3916296, -1.4022033))
    assert _loss_and_grad(1.0, 1.0, loss_type="sapo")[2]["clip_ratio"] == 0.0  # a soft gate clips nothing
    assert _loss_and_grad(1.0, 1.0)[2]["clip_ratio_high"] == 1.0  # the hard clip at 1.2 does


def test_vespo_gamma_weight():
    # phi(1) = 1; log w = ln 2, A >= 0 (k 2, lambda 3): phi = exp(3 + 2 ln 2 - 3 * 2) = 4 e^-3 = 0.199148
    adv, mask = torch.tensor([[1.0], [-1.0]]), torch.ones(2, 1)
    phi = gamma_weights(adv, torch.tensor([[0.0], [0.0]]), mask, None, 2.0, 3.0, 3.0, 2.0)
    assert phi.flatten().tolist() == pytest.approx([1.0, 1.0])
    phi = gamma_weights(adv, torch.tensor([[math.log(2)], [math.log(2)]]), mask, None, 2.0, 3.0, 3.0, 2.0)
    # A < 0 (k 3, lambda 2): exp(2 + 3 ln 2 - 4) = 8 e^-2 = 1.082682
    assert phi.flatten().tolist() == pytest.approx([4 * math.exp(-3), 8 * math.exp(-2)])
    # the loss -phi * A * logp: 0.199148 * 1 * 1 with logp -1, gradient -phi * A
    assert _loss_and_grad(math.log(2), 1.0, loss_type="vespo")[:2] == pytest.approx((0.1991483, -0.1991483))


def test_two_sided_clipping_caps_a_negative_advantage_ratio():
    # A = -1, ratio 5: without delta -min(-5, -1.2) = 5 (gradient -5: the ratio's own); with delta 3: 3, no gradient
    assert _loss_and_grad(math.log(5.0), -1.0)[:2] == pytest.approx((5.0, 5.0))
    assert _loss_and_grad(math.log(5.0), -1.0, delta=3.0)[:2] == pytest.approx((3.0, 0.0))


def test_bias_corrected_kl_weighs_k3_by_the_ratio():
    # logp -1, old -1.5 (ratio e^0.5), ref -1.2: k3 = e^-0.2 + 0.2 - 1 = 0.0187308; times e^0.5 = 0.0308818
    lp, old, ref = torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), torch.tensor([[-1.2]])
    plain, _ = grpo_loss(lp, old, torch.zeros(1), ONE, ref_logps=ref, beta=1.0)
    corrected, _ = grpo_loss(lp, old, torch.zeros(1), ONE, ref_logps=ref, beta=1.0, use_bias_correction_kl=True)
    assert (plain.item(), corrected.item()) == pytest.approx((0.0187308, 0.0308818), rel=1e-5)


# ------------------------------------------------------------------ masks and corrections
def test_off_policy_mask_drops_negative_advantage_sequences_that_drifted():
    # mean (sampler - current) log-prob over each row's valid tokens: 0.5, 0.05, 0.9 (row 3: A >= 0 keeps it)
    logps = torch.zeros(3, 2)
    sampling = torch.tensor([[0.4, 0.6], [0.05, 7.0], [0.9, 0.9]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    keep = off_policy_mask(torch.tensor([[-1.0], [-1.0], [1.0]]), logps, sampling, mask, 0.1)
    assert keep.flatten().tolist() == [0.0, 1.0, 1.0]
    loss, stats = grpo_loss(logps, logps, torch.tensor([-1.0, -1.0, 1.0]), mask.bool(), sampling_logps=sampling,
                            off_policy_mask_threshold=0.1)
    assert loss.item() == pytest.approx((0 + 1 - 2) / 5) and stats["off_policy_masked"].item() == pytest.approx(2 / 5)


def test_sampler_correction_modes_hand_table():
    # log pi_old - log mu: [[0.5, -0.2], [1.5, (masked) 9]]; a NaN sampler log-prob counts as agreement (weight 1)
    old, mask = torch.zeros(2, 2), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    sampling = torch.tensor([[-0.5, 0.2], [-1.5, -9.0]])
    e = math.exp
    table = {("token_truncate", None, 3.0): [[e(0.5), e(-0.2)], [3.0, 1.0]],
             ("token_mask", 0.9, 3.0): [[e(0.5), 0.0], [0.0, 1.0]],
             ("sequence_truncate", None, 3.0): [[e(0.3)], [3.0]],  # sums 0.3 and 1.5
             ("sequence_mask", None, 3.0): [[e(0.3)], [0.0]],
             ("sequence_mask", 1.4, 5.0): [[0.0], [e(1.5)]]}
    for (mode, low, high), want in table.items():
        got = sampler_correction(old, sampling, mask, mode, low, high)
        torch.testing.assert_close(got, torch.tensor(want), rtol=1e-6, atol=0)
    with_nan = sampler_correction(old, torch.tensor([[math.nan, 0.0], [0.0, 0.0]]), mask, "token_truncate")
    assert with_nan[0, 0].item() == 1.0
    with pytest.raises(ValueError, match="sampler correction mode must be one of token_truncate"):
        sampler_correction(old, sampling, mask, "token")


def test_sampler_weight_multiplies_the_policy_term_not_the_kl():
    # A = 1 on-policy: term -1 per token, weights [2, 0.5]; KL 0 (ref = logp): dapo mean of -2 and -0.5
    lp = torch.zeros(1, 2)
    loss, _ = grpo_loss(lp, lp, torch.ones(1), torch.ones(1, 2, dtype=torch.bool), sampler_ratio=torch.tensor([[2.0,
                        0.5]]), ref_logps=lp - 0.3, beta=0.0)
    assert loss.item() == pytest.approx(-1.25)


def test_high_entropy_tokens_by_quantile():
    entropy, mask = torch.tensor([[0.1, 0.5, 0.9, 0.3, 7.0]]), torch.tensor([[1, 1, 1, 1, 0]]).bool()
    values = entropy[mask]
    # top half: torch.quantile at 0.5 of [0.1, 0.3, 0.5, 0.9] = (0.3 + 0.5) / 2 = 0.4
    assert entropy_threshold(values, 0.5).item() == pytest.approx(0.4)
    assert high_entropy_mask(entropy, mask, entropy_threshold(values, 0.5)).int().tolist() == [[0, 1, 1, 0, 0]]
    assert high_entropy_mask(entropy, mask, entropy_threshold(values, 0.0)).int().tolist() == [[0, 0, 1, 0, 0]]
    assert high_entropy_mask(entropy, mask, entropy_threshold(values, 1.0)).int().tolist() == [[1, 1, 1, 1, 0]]
    assert entropy_threshold(values[:0], 0.2) is None and not high_entropy_mask(entropy, mask, None).any()


def test_entropy_bonus_and_adaptive_coefficient():
    entropy = torch.tensor([[1.0, 2.0, 6.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    bonus = entropy_bonus(entropy, mask, num_micro_batches=2)  # (1 + 2) / 2 tokens / 2 micro-batches = 0.75
    (grad,) = torch.autograd.grad(bonus, entropy)
    assert bonus.item() == 0.75 and grad.tolist() == [[0.25, 0.25, 0.0]]
    lp = torch.zeros(1, 3)
    loss, _ = grpo_loss(lp, lp, torch.zeros(1), mask.bool(), entropy=entropy, entropy_coef=0.1)
    assert loss.item() == pytest.approx(-0.1 * 1.5)
    # Skywork-OR1: up by delta when the entropy is at or below the target, down otherwise, within [low, high]
    assert adapt_entropy_coef(0.05, 0.1, 0.2, 0.02, 0.0, 0.06) == 0.06
    assert adapt_entropy_coef(0.05, 0.3, 0.2, 0.02, 0.0, 0.06) == pytest.approx(0.03)
    assert adapt_entropy_coef(0.01, 0.3, 0.2, 0.02, 0.0, 0.06) == 0.0
    assert applied_entropy_coef(0.05, math.inf, 0.2) == 0.0 and applied_entropy_coef(0.05, 0.2, 0.2) == 0.05


def test_decoupled_advantages_hand_computed():
    """GDPO on two groups of 3 with two rewards, one NaN (does not apply) and one unscorable row:
    group 1: r0 [1, 0, 0] -> z = [2/3, -1/3, -1/3] / (std 0.57735 + 1e-4); r1 [1, 1, 1] -> flat, 0;
    group 2: r0 [NaN, 1, 0] -> [0, 0.5, -0.5] / (0.70711 + 1e-4); r1 [0, 0, NaN] flat -> 0; row 5 unscorable."""
    nan = math.nan
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [nan, 0.0], [1.0, 0.0], [0.0, nan]])
    unscorable = torch.tensor([False, False, False, False, False, True])
    adv, parts = decoupled_advantages(rewards, torch.tensor([2.0, 1.0]), 3, unscorable=unscorable)
    s1, s2 = math.sqrt(1 / 3) + 1e-4, math.sqrt(0.5) + 1e-4
    total = torch.tensor([2 * (2 / 3) / s1, 2 * (-1 / 3) / s1, 2 * (-1 / 3) / s1, 0.0, 2 * 0.5 / s2])  # 5 scorable
    want = (total - total.mean()) / (total.std() + 1e-4)
    torch.testing.assert_close(adv, torch.cat([want, torch.zeros(1)]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(parts.sum(1), adv, rtol=0, atol=1e-6)
    assert parts[:, 1].abs().max() < 1e-6 and parts[5].eq(0).all()  # flat reward 1 contributes nothing
    flat, flat_parts = decoupled_advantages(torch.ones(4, 2), torch.ones(2), 2)
    assert flat.eq(0).all() and flat_parts.eq(0).all()
