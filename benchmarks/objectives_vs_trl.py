"""The largest difference between lit_grpo's objectives and TRL 1.16's own code, over many random draws.

    pip install -e ".[dev]"                       # brings trl==1.16.0
    python benchmarks/objectives_vs_trl.py         # 50 draws of each option x {float32, extreme ratios, bf16}
    python benchmarks/objectives_vs_trl.py --draws 10

Each draw builds per-token log-probs of 6 completions of up to 7 tokens (two truncated, one all-masked; see
``lit_grpo.testing.trl_oracle.make_batch``), gives the same tensors to lit_grpo's loss and to TRL's
``GRPOTrainer._compute_loss`` (bf16: lit_grpo gets bf16 tensors and upcasts them, TRL the float32 copies) and
records the largest relative difference of the losses and of their gradients w.r.t. the log-probs and entropies
(``|a - b| / max(1, |b|)``). The sampler correction rows go through TRL's ``_generate_and_score_completions`` (its
vLLM importance-sampling path) first; the advantage rows compare TRL's advantages with lit_grpo's. The table is
the figures of docs/objectives.md.
"""

from __future__ import annotations

import argparse
import math
import os
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


def loss_rows(draws: int) -> dict[str, list[float]]:
    from lit_grpo.testing.trl_oracle import CASES, differences, make_batch, ours, theirs

    worst: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, options in CASES.items():
        for seed in range(draws):
            for dtype, extreme in ((torch.float32, False), (torch.float32, True), (torch.bfloat16, False)):
                b = make_batch(seed, dtype, extreme)
                mine_in = {"sampling_logps": b["sampling"]} if "off_policy_mask_threshold" in options else {}
                trl_in = {"sampling_per_token_logps": b["sampling"].float()} if mine_in else {}
                d = differences(b, ours(b, options, **mine_in), theirs(b, options, **trl_in))
                worst[name] = [max(w, x) for w, x in zip(worst[name], d)]
    return worst


def sampler_rows(draws: int) -> dict[str, list[float]]:
    from lit_grpo.objectives import sampler_correction
    from lit_grpo.testing import trl_oracle
    from lit_grpo.testing.trl_oracle import N, T, differences, make_batch, ours, theirs

    worst: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    lengths = [7, 3, 2, 5, 1, 7]
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    for mode, low, high in (("token_truncate", None, 3.0), ("token_mask", 0.5, 2.0), ("sequence_truncate", 0.2, 3.0),
                            ("sequence_mask", None, 3.0)):
        for loss_type in ("dapo", "grpo", "cispo", "vespo"):
            if loss_type == "vespo" and mode.startswith("sequence"):
                continue
            options = {"loss_type": loss_type, "epsilon_high": 5.0 if loss_type == "cispo" else 0.2}
            for seed in range(draws):
                b = {**make_batch(seed, extreme=seed % 2 == 1), "mask": mask}
                trainer = trl_oracle.trl_trainer(
                    {}, max_completion_length=T, use_vllm=True, vllm_importance_sampling_correction=True,
                    vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=low,
                    vllm_importance_sampling_clip_max=high, **options)
                out = trl_oracle.trl_generation(trainer, torch.rand(N, 1), [1.0], 3, lengths, b["old"], b["sampling"])
                ratio = sampler_correction(b["old"], out["sampling_per_token_logps"], mask, mode, low, high)
                key = f"sampler correction {mode} ({loss_type})"
                r = ((ratio - out["importance_sampling_ratio"]).abs().max()).item()
                mine = ours(b, options, sampler_ratio=ratio, sampling_logps=out["sampling_per_token_logps"])
                ref = theirs(b, options, trainer, importance_sampling_ratio=out["importance_sampling_ratio"],
                             sampling_per_token_logps=out["sampling_per_token_logps"])
                d = differences(b, mine, ref)
                worst[key] = [max(worst[key][0], d[0], r), max(worst[key][1], d[1])]
    return worst


def schedule_rows(draws: int) -> dict[str, list[float]]:
    """``steps_per_generation`` 2 (each update on half the rows, TRL's normalisers) and the adaptive entropy
    coefficient over 6 updates (the module's own control, ``GRPOModule._entropy_coef`` / ``_control_entropy``)."""
    import types

    from lit_grpo.config import GRPOConfig
    from lit_grpo.grpo import grpo_loss
    from lit_grpo.module import GRPOModule
    from lit_grpo.testing import trl_oracle
    from lit_grpo.testing.trl_oracle import T, differences, make_batch, theirs

    worst: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for seed in range(draws):
        for loss_type in ("dapo", "grpo", "cispo", "vespo", "dr_grpo", "luspo"):
            b = make_batch(seed)
            options = {"loss_type": loss_type, "epsilon_high": 5.0 if loss_type == "cispo" else 0.2}
            for part in (slice(0, 3), slice(3, 6)):
                sub = {k: v[part] for k, v in b.items()}
                mine, _ = grpo_loss(sub["logps"], sub["old"], sub["adv"], sub["mask"], max_completion_length=T,
                                    num_items=b["mask"].sum().item() / 2, num_sequences=3,
                                    **GRPOConfig(**options).loss_options())
                trainer = trl_oracle.trl_trainer({"steps_per_generation": 2}, max_completion_length=T,
                                                 **trl_oracle.trl_side(options)[1])
                ref = trl_oracle.trl_loss(trainer, sub["logps"], sub["mask"], sub["adv"],
                                          old_per_token_logps=sub["old"], num_items_in_batch=b["mask"].sum())
                key = f"steps_per_generation 2 ({loss_type})"
                worst[key] = [max(w, x) for w, x in zip(worst[key], differences(b, mine, ref))]
        options = dict(entropy_coef=0.05, use_adaptive_entropy=True, entropy_target=1.0, entropy_coef_delta=0.02,
                       entropy_coef_min=0.01, entropy_coef_max=0.08)
        module = types.SimpleNamespace(cfg=GRPOConfig(**options),
                                       entropy_control=torch.tensor([0.05, math.inf], dtype=torch.float64))
        trainer = trl_oracle.trl_trainer({k: v for k, v in options.items() if k in trl_oracle.ARGS}, entropy_coef=0.05,
                                         use_adaptive_entropy=True, max_completion_length=T)
        for step, scale in enumerate([2.0, 0.5, 0.4, 0.3, 3.0, 3.0]):
            b = make_batch(seed * 6 + step)
            with torch.no_grad():
                b["entropy"].mul_(scale)
            coef = GRPOModule._entropy_coef(module)
            mine, _ = grpo_loss(b["logps"], b["old"], b["adv"], b["mask"], entropy=b["entropy"], entropy_coef=coef)
            m = b["mask"].double()
            acted = ((b["entropy"].detach() * m).sum() / m.sum()).item()
            GRPOModule._control_entropy(module, {"entropy_acted": acted}, coef)
            d = differences(b, mine, theirs(b, {}, trainer))
            gap = abs(module.entropy_control[0].item() - trainer.entropy_coef)
            key = "use_adaptive_entropy (6 updates)"
            worst[key] = [max(worst[key][0], d[0], gap), max(worst[key][1], d[1])]
    return worst


def advantage_rows(draws: int) -> dict[str, list[float]]:
    from lit_grpo.grpo import decoupled_advantages, group_advantages
    from lit_grpo.testing import trl_oracle

    worst: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for seed in range(draws):
        g = torch.Generator().manual_seed(seed)
        rewards = torch.randint(0, 3, (16, 2), generator=g).float() / 2  # 4 groups of 4, values 0, 0.5, 1
        rewards[torch.rand(16, 2, generator=g) < 0.15] = math.nan  # a term that does not apply
        weights = [1.0, 0.5]
        total = torch.nansum(rewards * torch.tensor(weights), 1)
        total[torch.isnan(rewards).all(1)] = math.nan
        for aggregation, scale in (("sum_then_normalize", "group"), ("sum_then_normalize", "batch"),
                                   ("sum_then_normalize", "none"), ("normalize_then_sum", "group")):
            trainer = trl_oracle.trl_trainer(multi_objective_aggregation=aggregation, scale_rewards=scale)
            ref = trl_oracle.trl_generation(trainer, rewards, weights, 4, [2] * 16)["advantages"]
            mine = group_advantages(total, 4, scale) if aggregation == "sum_then_normalize" else \
                decoupled_advantages(rewards, torch.tensor(weights), 4, unscorable=torch.isnan(total))[0]
            key = f"advantages {aggregation}" + (f" ({scale})" if aggregation == "sum_then_normalize" else "")
            worst[key][0] = max(worst[key][0], (mine - ref).abs().max().item())
    return worst


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=50, help="random draws per option and input kind")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = {**loss_rows(args.draws), **sampler_rows(args.draws), **schedule_rows(args.draws),
            **advantage_rows(args.draws)}
    print(f"| option | largest loss difference | largest gradient difference |  ({args.draws} draws each)")
    print("| --- | --- | --- |")
    for name, (loss, grad) in rows.items():
        print(f"| {name} | {loss:.1e} | {grad:.1e} |")


if __name__ == "__main__":
    main()
