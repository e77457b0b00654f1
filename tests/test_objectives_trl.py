"""Every objective equals TRL 1.16's own code on the same tensors.

TRL's ``GRPOTrainer._compute_loss`` (loss) and ``_generate_and_score_completions`` (advantages, sampler correction)
run on a minimal trainer object (:mod:`lit_grpo.testing.trl_oracle`) with the model's output replaced by the same
per-token log-probs and entropies lit_grpo gets: sequences of different lengths, two truncated (full length), one
all-masked, extreme ratios (log-ratios of +-9 to +-15), and bf16 inputs (lit_grpo upcasts them; TRL gets the float32
copies). Loss and gradient agree to 1e-6 relative; most are bit-equal. ``benchmarks/objectives_vs_trl.py`` prints
the largest differences over many draws.
"""

import math
import types

import pytest
import torch

from lit_grpo.config import GRPOConfig
from lit_grpo.grpo import decoupled_advantages, group_advantages, grpo_loss
from lit_grpo.module import GRPOModule
from lit_grpo.objectives import sampler_correction
from lit_grpo.rewards.registry import score_completions
from lit_grpo.testing import trl_oracle
from lit_grpo.testing.trl_oracle import CASES, N, T, differences, make_batch, ours, theirs, trl_side

pytest.importorskip("trl")


@pytest.mark.parametrize("data", ["plain", "extreme", "bf16"])
@pytest.mark.parametrize("name", list(CASES))
def test_loss_and_gradient_equal_trl(name, data):
    b = make_batch(seed=len(name), dtype=torch.bfloat16 if data == "bf16" else torch.float32,
                   extreme=data == "extreme")
    options = CASES[name]
    inputs = {"sampling_logps": b["sampling"]} if "off_policy_mask_threshold" in options else {}
    trl_inputs = {"sampling_per_token_logps": b["sampling"].float()} if inputs else {}
    mine, ref = ours(b, options, **inputs), theirs(b, options, **trl_inputs)
    assert torch.isfinite(mine) and torch.isfinite(ref)
    loss_diff, grad_diff = differences(b, mine, ref)
    assert loss_diff <= 1e-6 and grad_diff <= 1e-6, (loss_diff, grad_diff)
    assert b["logps"].grad is None  # nothing accumulated: both differentiated the same graph leaves


def test_most_options_are_bit_equal():
    """Where the arithmetic is the same sequence of operations the results are the same bits (float32 inputs)."""
    exact = ["grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo", "gspo", "delta", "clip-higher",
             "off-policy-mask", "top-entropy", "entropy-bonus"]
    for name in exact:
        b = make_batch(seed=3)
        inputs = {"sampling_logps": b["sampling"]} if "off-policy" in name else {}
        trl_inputs = {"sampling_per_token_logps": b["sampling"]} if inputs else {}
        assert differences(b, ours(b, CASES[name], **inputs), theirs(b, CASES[name], **trl_inputs)) == (0.0, 0.0), name


@pytest.mark.parametrize("mode,low,high", [("token_truncate", None, 3.0), ("token_mask", 0.5, 2.0),
                                           ("sequence_truncate", 0.2, 3.0), ("sequence_mask", None, 3.0)])
@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "cispo", "vespo"])
def test_sampler_correction_equals_trl(mode, low, high, loss_type):
    """An off-policy sampler: TRL's importance-sampling ratio (vLLM path) equals
    :func:`~lit_grpo.objectives.sampler_correction` bit for bit, and the corrected losses agree (VESPO folds the
    ratio into its weight and takes the token modes only, as TRL)."""
    if loss_type == "vespo" and mode.startswith("sequence"):
        pytest.skip("TRL refuses VESPO with a sequence-level correction, as lit_grpo does")
    lengths = [7, 3, 2, 5, 1, 7]
    b = make_batch(seed=11, extreme=True)
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    b["mask"] = mask
    b["sampling"][2, 0] = math.nan  # a token the sampler could not score: weight 1
    options = {"loss_type": loss_type, "epsilon_high": 5.0 if loss_type == "cispo" else 0.2}
    args, attrs = trl_side(options)
    trainer = trl_oracle.trl_trainer(args, max_completion_length=T, use_vllm=True,
                                     vllm_importance_sampling_correction=True, vllm_importance_sampling_mode=mode,
                                     vllm_importance_sampling_clip_min=low, vllm_importance_sampling_clip_max=high,
                                     **attrs)
    out = trl_oracle.trl_generation(trainer, torch.rand(N, 1), [1.0], 3, lengths, b["old"], b["sampling"])
    assert torch.equal(out["completion_mask"].bool(), mask)
    ratio = sampler_correction(b["old"], out["sampling_per_token_logps"], mask, mode, low, high)
    assert torch.equal(ratio, out["importance_sampling_ratio"])
    mine = ours(b, options, sampler_ratio=ratio, sampling_logps=out["sampling_per_token_logps"])
    ref = theirs(b, options, trainer, importance_sampling_ratio=out["importance_sampling_ratio"],
                 sampling_per_token_logps=out["sampling_per_token_logps"])
    loss_diff, grad_diff = differences(b, mine, ref)
    assert loss_diff <= 1e-6 and grad_diff <= 1e-6, (loss_diff, grad_diff)


@pytest.mark.parametrize("loss_type", ["dapo", "cispo", "vespo", "grpo", "dr_grpo", "luspo"])
def test_steps_per_generation_normalisers_equal_trl(loss_type):
    """One rollout, two updates: each on half of the rows, the token normaliser the rollout's tokens / 2 and the
    sequence normaliser the half's rows, as TRL's ``steps_per_generation=2`` (one micro-batch per update)."""
    b = make_batch(seed=5)
    options = {"loss_type": loss_type, "epsilon_high": 5.0 if loss_type == "cispo" else 0.2}
    args, attrs = trl_side(options)
    tokens = b["mask"].sum()
    for part in (slice(0, 3), slice(3, 6)):
        sub = {k: (v[part] if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
        mine, _ = grpo_loss(sub["logps"], sub["old"], sub["adv"], sub["mask"], max_completion_length=T,
                            num_items=tokens.item() / 2, num_sequences=3, **GRPOConfig(**options).loss_options())
        trainer = trl_oracle.trl_trainer({**args, "steps_per_generation": 2}, max_completion_length=T, **attrs)
        ref = trl_oracle.trl_loss(trainer, sub["logps"], sub["mask"], sub["adv"], old_per_token_logps=sub["old"],
                                  num_items_in_batch=tokens)
        assert differences(b, mine, ref) == (0.0, 0.0)


def test_adaptive_entropy_control_follows_trl_step_by_step():
    """Skywork-OR1's control over six updates whose entropy falls below the target and rises above it again: the
    module's coefficient logic (``GRPOModule._entropy_coef`` / ``_control_entropy``) applies and moves the same
    coefficient as TRL, and every loss and gradient agrees."""
    options = dict(entropy_coef=0.05, use_adaptive_entropy=True, entropy_target=1.0, entropy_coef_delta=0.02,
                   entropy_coef_min=0.01, entropy_coef_max=0.08)
    cfg = GRPOConfig(**options)
    module = types.SimpleNamespace(cfg=cfg, entropy_control=torch.tensor([0.05, math.inf], dtype=torch.float64))
    args = {k: v for k, v in options.items() if k in trl_oracle.ARGS}
    trainer = trl_oracle.trl_trainer(args, entropy_coef=0.05, use_adaptive_entropy=True, max_completion_length=T)
    applied, theirs_coef = [], []
    for step, scale in enumerate([2.0, 0.5, 0.4, 0.3, 3.0, 3.0]):  # mean entropy about 1.5 * scale
        b = make_batch(seed=step)
        with torch.no_grad():
            b["entropy"].mul_(scale)
        coef = GRPOModule._entropy_coef(module)
        loss, _ = grpo_loss(b["logps"], b["old"], b["adv"], b["mask"], entropy=b["entropy"], entropy_coef=coef)
        m = b["mask"].double()
        GRPOModule._control_entropy(module, {"entropy_acted": ((b["entropy"].detach() * m).sum() / m.sum()).item()},
                                    coef)
        ref = theirs(b, {}, trainer)
        assert differences(b, loss, ref) == (0.0, 0.0)
        applied.append(coef), theirs_coef.append(trainer.entropy_coef)
    assert applied == pytest.approx([0.0, 0.0, 0.05, 0.07, 0.08, 0.0], abs=1e-12)  # none before a measurement or
    # after an update whose entropy was above the target
    assert module.entropy_control[0].item() == pytest.approx(theirs_coef[-1], abs=1e-12) == 0.04
    assert theirs_coef == pytest.approx([0.03, 0.05, 0.07, 0.08, 0.06, 0.04], abs=1e-12)


REWARDS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, math.nan], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0],
                        [math.nan, math.nan], [1.0, 0.0], [0.5, 0.25], [0.5, 0.75], [0.5, 0.0], [0.5, math.nan]])
"""Three groups of 4 completions, two reward terms; NaN = the term does not apply (TRL's None); row 6 has none."""


def _ours_rewards(weights):
    """The per-reward values and weighted total of :func:`score_completions` on :data:`REWARDS` (None terms)."""
    fns = {f"r{k}": (lambda col: lambda completions, **_: [None if math.isnan(v) else v for v in col])(
        REWARDS[:, k].tolist()) for k in range(2)}
    return score_completions(fns, {"r0": weights[0], "r1": weights[1]}, ["x"] * len(REWARDS), {})


@pytest.mark.parametrize("aggregation,scale", [("sum_then_normalize", "group"), ("sum_then_normalize", "batch"),
                                               ("sum_then_normalize", "none"), ("normalize_then_sum", "group")])
@pytest.mark.parametrize("weights", [(1.0, 0.5), (2.0, -1.0)])
def test_advantages_equal_trl(aggregation, scale, weights):
    """TRL's advantages (both multi-objective aggregations, every scaling) from the same rewards and weights; GDPO's
    per-reward contributions sum to the advantage."""
    per, total = _ours_rewards(weights)
    trainer = trl_oracle.trl_trainer(multi_objective_aggregation=aggregation, scale_rewards=scale)
    ref = trl_oracle.trl_generation(trainer, REWARDS, list(weights), 4, [2] * len(REWARDS))["advantages"]
    if aggregation == "sum_then_normalize":
        mine = group_advantages(total, 4, scale)
    else:
        values = torch.stack([per["r0"], per["r1"]], 1)
        mine, parts = decoupled_advantages(values, torch.tensor(weights), 4, unscorable=torch.isnan(total))
        torch.testing.assert_close(parts.sum(1), mine, atol=1e-6, rtol=0)
    assert (mine - ref).abs().max().item() <= 1e-6


def test_ours_stays_finite_where_trl_overflows():
    """The one place the arithmetic differs on purpose: a log-ratio beyond 20 (TRL: ``exp`` overflows to inf, the
    loss is inf or NaN; lit_grpo clamps it to +-20) and a huge log-ratio on a masked position (TRL: inf * 0 = NaN;
    lit_grpo zeroes masked log-ratios before ``exp``)."""
    b = make_batch(seed=1)
    with torch.no_grad():
        b["old"][1, 0] = b["logps"][1, 0] - 100.0  # valid token, A < 0: ratio exp(100)
        b["old"][2, 4] = b["logps"][2, 4] - 200.0  # masked position
    mine, ref = ours(b, {}), theirs(b, {})
    assert not torch.isfinite(ref)
    assert torch.isfinite(mine)
    (grad,) = torch.autograd.grad(mine, b["logps"])
    assert torch.isfinite(grad).all()
