"""One GRPO step's gradient for every objective variant, on W gloo processes, with micro-batches of every size in
:data:`MICRO` completions (0 = all of a rank's rows at once).

Run by tests/test_objectives_ddp.py: ``python tests/objectives_ddp.py WORLD OUT_JSON``. The policy is a table of
logits ``[N, T, V]`` shared by every rank (a DDP replica): rank r owns rows ``r * N / W ...`` of the rollout and
computes their log-probs and entropies from its rows of the table through a toy engine;
:meth:`lit_grpo.passes.PolicyPasses.accumulate_gradients` runs as in training, then the gradients are averaged over
ranks (what DDP does). Rank 0 writes every variant's gradient (summed over a step's updates) and loss.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lit_grpo.config import GRPOConfig
from lit_grpo.grpo import selective_log_softmax
from lit_grpo.objectives import sampler_correction
from lit_grpo.passes import LogprobPass, PolicyPasses
from lit_grpo.rollout import Rollout

N, T, V = 8, 6, 5
LENGTHS = [6, 2, 0, 4, 6, 1, 5, 3]
"""Rows 0 and 4 truncated (full length), row 2 all masked."""
MICRO = (0, 1, 2, 4)
VARIANTS = {
    "dapo": {}, "grpo": {"loss_type": "grpo"}, "dr_grpo": {"loss_type": "dr_grpo"},
    "luspo": {"loss_type": "luspo", "importance_sampling_level": "sequence"},
    "cispo": {"loss_type": "cispo", "epsilon_high": 3.0}, "sapo": {"loss_type": "sapo"},
    "vespo": {"loss_type": "vespo"}, "gspo": {"loss_type": "grpo", "importance_sampling_level": "sequence"},
    "delta": {"delta": 1.3, "epsilon_high": 0.1}, "bias-corrected-kl": {"beta": 0.1, "use_bias_correction_kl": True},
    "off-policy-mask": {"off_policy_mask_threshold": 0.05, "sampler": True},
    "sampler-token-truncate": {"sampler_correction_mode": "token_truncate", "sampler_correction_max": 1.5,
                               "sampler": True},
    "sampler-sequence-mask": {"sampler_correction_mode": "sequence_mask", "sampler_correction_max": 2.0,
                              "sampler": True},
    "steps-per-generation": {"steps_per_generation": 2}, "steps-per-generation-grpo": {"steps_per_generation": 2,
                                                                                      "loss_type": "grpo"},
    "bnpo": {"loss_type": "bnpo"},
    "top-entropy": {"top_entropy_quantile": 0.3, "epsilon_low": 0.99, "epsilon_high": 10.0},  # nothing clipped
    "entropy-bonus": {"entropy_coef": 0.05},
}


class Table(torch.nn.Module):
    """The policy: logits ``[N, T, V]``; rank r's rollout row i is table row ``offset + i``."""

    def __init__(self, offset: int):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.randn(N, T, V, generator=torch.Generator().manual_seed(0)))
        self.offset = offset


class TableEngine:
    """The engine interface's ``logps`` over the table (entropy as asked: no grad, or ``"grad"``)."""

    def logps(self, model, rollout, rows, *, grad=False, entropy=False):
        idx = torch.arange(rollout.num_completions)[rows]
        return selective_log_softmax(model.logits[model.offset + idx], rollout.completion_ids[idx],
                                     with_entropy=entropy)


def data():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (N, T), generator=g)
    mask = torch.arange(T)[None] < torch.tensor(LENGTHS)[:, None]
    with torch.no_grad():
        base = torch.randn(N, T, V, generator=torch.Generator().manual_seed(0))
        lp = lambda x: selective_log_softmax(x, ids)[0]  # noqa: E731
        old = lp(base + 0.4 * torch.randn(N, T, V, generator=g))
        ref = lp(base + 0.3 * torch.randn(N, T, V, generator=g))
        sampling = old + 0.3 * torch.randn(N, T, generator=g)
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2, 0.3, -0.1, 1.5, -0.9])
    return ids, mask, old, ref, sampling, adv


def run(rank: int, world: int, out: str) -> None:
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    ids, mask, old, ref, sampling, adv = data()
    part = slice(rank * N // world, (rank + 1) * N // world)
    rollout = Rollout({"input_ids": torch.zeros(N // world, 1, dtype=torch.long)}, ids[part], mask[part],
                      torch.tensor(LENGTHS)[part] == T, ["x"] * (N // world))
    results = {}
    for name, options, micro in [(n, o, m) for n, o in VARIANTS.items() for m in MICRO]:
        options = dict(options)
        cfg = GRPOConfig(micro_batch_size=micro or None, **{k: v for k, v in options.items() if k != "sampler"})
        sampler = None
        if options.get("sampler"):
            sampler = LogprobPass(sampling_logps=sampling[part], sampler_ratio=sampler_correction(
                old[part], sampling[part], mask[part], **cfg.sampler_options()))
        model, passes = Table(rank * N // world), PolicyPasses(TableEngine(), cfg, T)
        total, losses = torch.zeros(N, T, V), []
        for rows in passes.update_rows(N // world):
            model.zero_grad()
            stats = passes.accumulate_gradients(model, rollout, adv[part], old[part], ref[part], rows=rows,
                                                sampler=sampler, entropy_coef=cfg.entropy_coef)
            if world > 1:  # DDP: the gradient averaged over ranks
                dist.all_reduce(model.logits.grad)
                model.logits.grad /= world
            total += model.logits.grad
            losses.append(stats["loss"])
        results[f"{name}/m{micro}"] = {"grad": total.flatten().tolist(), "loss": losses}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    WORLD, OUT = int(sys.argv[1]), sys.argv[2]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    if WORLD == 1:
        run(0, 1, OUT)
    else:
        mp.spawn(run, args=(WORLD, OUT), nprocs=WORLD, join=True)
