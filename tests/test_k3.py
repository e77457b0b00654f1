"""The k3 KL is exact for small and large log-ratios and never negative, per token and as logged."""

import mpmath
import pytest
import torch

from lit_grpo.grpo import grpo_loss, k3_kl

mpmath.mp.dps = 100  # exp(d) - d - 1 for d = 1e-30 needs ~65 digits


def exact(d: float) -> float:
    """``exp(d) - d - 1`` in 100-digit arithmetic, of the value ``d`` the tensor actually holds."""
    x = mpmath.mpf(d)
    return float(mpmath.exp(x) - x - 1)


DS = [1e-30, 1e-12, 1e-6, 1e-3, 0.25, 0.5, 0.5001, 1.0, 5.0, 20.0]


@pytest.mark.parametrize("dtype, rel", [(torch.float64, 1e-15), (torch.float32, 3e-7)])
@pytest.mark.parametrize("d", DS + [-d for d in DS] + [0.0])
def test_k3_kl_matches_100_digit_arithmetic(dtype, rel, d):
    ref = torch.tensor([d], dtype=dtype)
    got = k3_kl(torch.zeros(1, dtype=dtype), ref)
    want = exact(ref.item())
    smallest = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps  # float32 cannot hold 5e-61: 0 is nearest
    assert got.item() >= 0 and got.item() == pytest.approx(want, rel=rel, abs=smallest)


def test_the_issue_example_and_the_clamp():
    # exp(d) - d - 1 as written gives -5.96e-08 here; exactly it is 5.0000017e-13
    assert k3_kl(torch.tensor([-1e-6]), torch.tensor([0.0])).item() == pytest.approx(5.0000017e-13, rel=1e-6)
    # beyond the clamp of 20 the value is the clamp's
    assert k3_kl(torch.tensor([0.0]), torch.tensor([25.0], dtype=torch.float64)).item() == pytest.approx(exact(20.0))


def test_gradient_is_expm1_of_d():
    """d/d(logp) of exp(d) - d - 1 with d = ref - logp is 1 - exp(d) = -expm1(d), in both branches."""
    ref = torch.tensor([1e-4, -0.3, 0.7, -2.0], dtype=torch.float64)
    logp = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    k3_kl(logp, ref).sum().backward()
    assert torch.allclose(logp.grad, -torch.expm1(ref), rtol=1e-14, atol=0)


def test_the_logged_kl_of_near_equal_policies_is_never_negative():
    """Policy and reference log-probs a few float32 ulps apart (a reference pass through other kernels): the token
    mean of the KL that train/update/kl logs is >= 0 and equals the exact mean."""
    g = torch.Generator().manual_seed(0)
    ref = -torch.rand(64, 32, generator=g) * 5
    logps = ref + torch.randn(64, 32, generator=g) * 1e-6
    mask = torch.ones(64, 32)
    _, stats = grpo_loss(logps, logps.detach(), torch.zeros(64), mask, ref_logps=ref, beta=0.04)
    d = (ref.double() - logps.double()).flatten().tolist()
    want = sum(exact(x) for x in d) / len(d)
    assert stats["kl"].item() >= 0 and stats["kl"].item() == pytest.approx(want, rel=1e-4)
