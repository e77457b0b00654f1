"""One GRPO step with 1 process (B=4) or 2 gloo processes (B=2 each) on fixed, deterministic rollouts.

Run by tests/test_ddp.py: ``python tests/ddp_equivalence.py WORLD OUT_DIR MODEL_DIR DATA``. Each rank writes its
advantages, rewards, logged ``train/`` figures and random draws (after seeding, and around a checkpoint
save / load); rank 0 writes the parameters after the step.
"""

import json
import sys
import zlib
from pathlib import Path

import lightning as L
import torch

from lit_grpo import GRPOConfig, GRPOModule
from lit_grpo.data.datamodule import DatasetSpec, VLMDataModule
from lit_grpo.distributed import world
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec
from lit_grpo.rewards.registry import REWARDS
from lit_grpo.rollout import Rollout, completion_mask, encode_prompts, repeat_rows

if "ddp_test_length" not in REWARDS:
    REWARDS.register("ddp_test_length")(lambda completions, **_: [len(c) % 7 / 7 for c in completions])


class FixedRollouts(GRPOModule):
    """Completions are a function of (sample id, index in group) only, so any process layout sees the same; their
    lengths differ by sample, and some have no stop token (truncated)."""

    def rollout(self, batch, group_size, greedy=False, temperature=None):
        enc = repeat_rows(encode_prompts(self.processor, batch.messages, [s.images for s in batch.samples]),
                          group_size)
        rows = []
        for s in batch.samples:
            for j in range(group_size):
                key = zlib.crc32(f"{s.id}/{j}".encode())
                ids = torch.randint(10, 300, (10,), generator=torch.Generator().manual_seed(key))
                if key % 5:
                    ids[2 + key % 7] = self.stop_ids[0]
                rows.append(ids)
        ids = torch.stack(rows)
        mask, truncated = completion_mask(ids, self.stop_ids)
        tok = self.processor.tokenizer
        texts = tok.batch_decode(ids.masked_fill(~mask, tok.pad_token_id), skip_special_tokens=True)
        return Rollout(enc, ids, mask, truncated, texts)

    def setup(self, stage):
        super().setup(stage)
        self.seed = torch.initial_seed()

    def training_step(self, batch, batch_idx):
        draws = torch.rand(3).tolist()  # what a sampler would draw on this rank
        out = super().training_step(batch, batch_idx)
        rank, _ = world()
        ids = [s.id for s in batch.samples for _ in range(self.sampling.num_generations)]
        logged = {k: float(v) for k, v in self.trainer.callback_metrics.items() if k.startswith("train/")}
        record = {"ids": ids, "advantages": out["advantages"], "total": out["total"], "logged": logged,
                  "seed": self.seed, "draws": draws}
        Path(OUT, f"rank{rank}.json").write_text(json.dumps(record))
        return out


if __name__ == "__main__":
    WORLD, OUT, MODEL, DATA = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    L.seed_everything(0)
    module = FixedRollouts(
        policy=PolicyConfig(name_or_path=MODEL), rewards=[RewardSpec("ddp_test_length")],
        grpo=GRPOConfig(scale_rewards="batch", loss_type="dapo", max_grad_norm=None, micro_batch_size=4, beta=0.1,
                        num_iterations=2),
        optimizer=lambda params: torch.optim.SGD(params, lr=1.0))
    data = VLMDataModule(train=DatasetSpec(path=DATA, rows=":4"), batch_size=4 // WORLD)
    trainer = L.Trainer(accelerator="cpu", devices=WORLD, strategy="ddp" if WORLD > 1 else "auto", max_steps=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, data)
    # every rank's own random stream survives a checkpoint: draw, load the checkpoint written before, draw again
    trainer.save_checkpoint(Path(OUT, "step.ckpt"))
    before = torch.rand(3).tolist()
    module.on_load_checkpoint(torch.load(Path(OUT, "step.ckpt"), weights_only=False))
    after = torch.rand(3).tolist()
    path = Path(OUT, f"rank{trainer.global_rank}.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "resume": [before, after]}))
    if trainer.global_rank == 0:
        torch.save({n: p.detach() for n, p in module.policy.named_parameters() if p.requires_grad},
                   Path(OUT, "params.pt"))
