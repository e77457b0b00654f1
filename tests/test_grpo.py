"""GRPO maths against hand-computed tensors and a plain-loop oracle."""

import math

import pytest
import torch

from lit_grpo.grpo import group_advantages, grpo_loss, k3_kl, selective_log_softmax

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]


# ------------------------------------------------------------------ advantages
def test_group_advantages_hand_computed():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    a = 0.5 / (std + 1e-4)
    torch.testing.assert_close(group_advantages(r, 4), torch.tensor([a, -a, -a, a, 0, 0, 0, 0]))
    batch_std = math.sqrt(1 / 7)  # unbiased std of all 8 rewards (mean 0.5, squared deviations sum to 1)
    b = 0.5 / (batch_std + 1e-4)
    torch.testing.assert_close(group_advantages(r, 4, scale="batch"), torch.tensor([b, -b, -b, b, 0, 0, 0, 0]))
    torch.testing.assert_close(group_advantages(r, 4, scale="none"), torch.tensor([.5, -.5, -.5, .5, 0, 0, 0, 0]))


def test_group_advantages_nan_rows_get_zero_and_are_skipped_in_stats():
    r = torch.tensor([1.0, math.nan, 0.0, 0.0])
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0]; mean 1/3
    expected = torch.tensor([(2 / 3) / (std + 1e-4), 0.0, (-1 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4)])
    torch.testing.assert_close(group_advantages(r, 4), expected)
    assert group_advantages(torch.full((4,), math.nan), 2).eq(0).all()


def test_all_equal_group_is_exactly_zero():
    r = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7, 0.7])  # 0.1 * 3 / 3 != 0.1 in floating point
    assert group_advantages(r, 3).eq(0).all()
    assert group_advantages(r, 3, scale="batch")[:3].eq(0).all()


def _oracle_advantages(rewards, g, scale, eps):
    vals = rewards.tolist()
    valid_all = [v for v in vals if not math.isnan(v)]
    def std(xs):
        if len(xs) < 2:
            return 0.0
        m = sum(xs) / len(xs)
        return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    out = []
    for b in range(len(vals) // g):
        grp = vals[b * g:(b + 1) * g]
        ok = [v for v in grp if not math.isnan(v)]
        mean = sum(ok) / len(ok) if ok else 0.0
        denom = {"group": std(ok) + eps, "batch": std(valid_all) + eps, "none": 1.0}[scale]
        flat = len(set(ok)) <= 1
        out += [0.0 if (math.isnan(v) or flat) else (v - mean) / denom for v in grp]
    return torch.tensor(out)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_match_loop_oracle(scale):
    gen = torch.Generator().manual_seed(0)
    r = torch.randint(0, 3, (24,), generator=gen).float() / 2
    r[[3, 10, 11]] = math.nan
    torch.testing.assert_close(group_advantages(r, 4, scale), _oracle_advantages(r, 4, scale, 1e-4))


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.zeros(4), 3)
    with pytest.raises(ValueError, match=r"^unknown advantage scaling 'grup' \(did you mean group\?\); registered: batch"):
        group_advantages(torch.zeros(4), 2, scale="grup")


# ------------------------------------------------------------------ loss
def _fixture():
    logps = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0])
    return logps, mask, adv


@pytest.mark.parametrize("loss_type,value", [("dapo", -1 / 3), ("bnpo", -1 / 3), ("grpo", 0.0), ("dr_grpo", -1 / 8)])
def test_loss_on_policy_hand_computed(loss_type, value):
    # ratio 1 everywhere, so the per-token loss is -A: row 0 -> [-1, -1], row 1 -> [+1, masked].
    logps, mask, adv = _fixture()
    loss, stats = grpo_loss(logps, logps.detach(), adv, mask, loss_type=loss_type, max_completion_length=4)
    assert loss.item() == pytest.approx(value)
    assert stats["clip_ratio"].item() == 0.0


def test_dapo_gradient_hand_computed():
    logps, mask, adv = _fixture()
    loss, _ = grpo_loss(logps, logps.detach(), adv, mask)
    loss.backward()
    torch.testing.assert_close(logps.grad, torch.tensor([[-1 / 3, -1 / 3], [1 / 3, 0.0]]))


def test_clipping_hand_computed():
    logps = torch.zeros(2, 1, requires_grad=True)
    old = torch.full((2, 1), -math.log(1.5))  # ratio 1.5 on both tokens
    adv = torch.tensor([1.0, -1.0])
    loss, stats = grpo_loss(logps, old, adv, torch.ones(2, 1), loss_type="dapo")
    # positive advantage: min(1.5, 1.2) * 1 -> -1.2, no gradient; negative: min(-1.5, -1.2) -> +1.5, gradient.
    assert loss.item() == pytest.approx((-1.2 + 1.5) / 2)
    loss.backward()
    torch.testing.assert_close(logps.grad, torch.tensor([[0.0], [0.75]]))
    assert stats["clip_ratio_high"].item() == 0.5 and stats["clip_ratio_low"].item() == 0.0


def test_epsilon_high_separate_from_low():
    logps = torch.zeros(1, 1)
    old = torch.full((1, 1), -math.log(1.25))  # ratio 1.25
    loss, stats = grpo_loss(logps, old, torch.tensor([1.0]), torch.ones(1, 1), epsilon_low=0.2, epsilon_high=0.28)
    assert loss.item() == pytest.approx(-1.25) and stats["clip_ratio_high"].item() == 0.0


def test_k3_kl_hand_computed_and_beta():
    logps = torch.tensor([[0.0, -1.0]])
    ref = torch.tensor([[0.5, -1.0]])
    kl = k3_kl(logps, ref)
    torch.testing.assert_close(kl, torch.tensor([[math.exp(0.5) - 1.5, 0.0]]))
    loss, stats = grpo_loss(logps, logps, torch.tensor([0.0]), torch.ones(1, 2), ref_logps=ref, beta=0.1)
    assert loss.item() == pytest.approx(0.1 * (math.exp(0.5) - 1.5) / 2)
    assert stats["kl"].item() == pytest.approx((math.exp(0.5) - 1.5) / 2)
    with pytest.raises(ValueError, match="ref_logps"):
        grpo_loss(logps, logps, torch.tensor([0.0]), torch.ones(1, 2), beta=0.1)


def _oracle_loss(logps, old, adv, mask, ref, beta, el, eh, loss_type, max_len, num_items, num_seq):
    n, t = len(logps), len(logps[0])
    per = [[0.0] * t for _ in range(n)]
    for i in range(n):
        for j in range(t):
            if not mask[i][j]:
                continue
            ratio = math.exp(max(-20.0, min(20.0, logps[i][j] - old[i][j])))
            clipped = min(max(ratio, 1 - el), 1 + eh)
            v = -min(ratio * adv[i], clipped * adv[i])
            if beta:
                d = ref[i][j] - logps[i][j]
                v += beta * (math.exp(d) - d - 1)
            per[i][j] = v
    total = sum(map(sum, per))
    tokens = sum(sum(1 for x in row if x) for row in mask)
    if loss_type == "grpo":
        return sum(sum(per[i]) / max(1, sum(mask[i])) for i in range(n)) / num_seq
    if loss_type == "bnpo":
        return total / max(tokens, 1)
    if loss_type == "dr_grpo":
        return total / (num_seq * max_len)
    return total / num_items


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_loss_matches_loop_oracle(loss_type, beta):
    gen = torch.Generator().manual_seed(1)
    n, t = 6, 5
    logps = -torch.rand(n, t, generator=gen) * 3
    old = logps + 0.3 * torch.randn(n, t, generator=gen)
    ref = logps + 0.2 * torch.randn(n, t, generator=gen)
    adv = torch.randn(n, generator=gen)
    mask = torch.rand(n, t, generator=gen) > 0.3
    mask[2] = False  # an empty completion
    loss, _ = grpo_loss(logps, old, adv, mask, ref_logps=ref, beta=beta, epsilon_low=0.2, epsilon_high=0.28,
                        loss_type=loss_type, max_completion_length=7, num_items=37, num_sequences=9)
    expected = _oracle_loss(logps.tolist(), old.tolist(), adv.tolist(), mask.tolist(), ref.tolist(), beta, 0.2,
                            0.28, loss_type, 7, 37, 9)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_huge_masked_log_ratio_and_empty_rows_give_finite_gradients(loss_type):
    logps = torch.tensor([[0.0, 100.0], [0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0], [-100.0, 0.0]])
    mask = torch.tensor([[1, 0], [0, 0]], dtype=torch.bool)  # log-ratio 100 on masked positions, empty row 1
    ref = torch.tensor([[0.0, -100.0], [100.0, 0.0]])
    loss, stats = grpo_loss(logps, old, torch.tensor([1.0, -1.0]), mask, ref_logps=ref, beta=0.1,
                            loss_type=loss_type, max_completion_length=2)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logps.grad).all()
    assert logps.grad[0, 1] == 0 and logps.grad[1].eq(0).all()
    assert all(torch.isfinite(v) for v in stats.values())


def test_unmasked_huge_log_ratio_is_clamped_finite():
    logps = torch.tensor([[100.0]], requires_grad=True)
    loss, _ = grpo_loss(logps, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1))
    loss.backward()
    assert loss.item() == pytest.approx(math.exp(20.0)) and torch.isfinite(logps.grad).all()


def test_unknown_loss_type():
    with pytest.raises(ValueError, match="dapo"):
        grpo_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), loss_type="ppo")


# ------------------------------------------------------------------ log-probs
def test_selective_log_softmax_equals_full_log_softmax():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=gen)
    idx = torch.randint(0, 11, (3, 5), generator=gen)
    for temp in (1.0, 0.7):
        got, ent = selective_log_softmax(logits, idx, temp, chunk_rows=4, with_entropy=True)
        full = torch.log_softmax(logits / temp, -1)
        torch.testing.assert_close(got, full.gather(2, idx[..., None]).squeeze(2))
        torch.testing.assert_close(ent, -(full.exp() * full).sum(-1))


def test_selective_log_softmax_removes_suppressed_tokens():
    logits = torch.zeros(1, 1, 4)  # uniform over 4 tokens; suppress token 3 -> uniform over 3
    got, ent = selective_log_softmax(logits, torch.tensor([[0]]), suppress_ids=torch.tensor([3]), with_entropy=True)
    assert got.item() == pytest.approx(math.log(1 / 3)) and ent.item() == pytest.approx(math.log(3))
    with pytest.raises(ValueError, match="temperature"):
        selective_log_softmax(logits, torch.tensor([[0]]), temperature=0)
