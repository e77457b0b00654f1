"""Three GRPO steps on every tiny zoo family in LoRA and in full fine-tuning, gradient checkpointing off in one and on
in the other (float32, the shared-prefix engine; two more in bf16-mixed, two more with the plain engine): one process (B=4, no sharding) or
every rank of a ``torchrun`` launch sharded with FSDP2 (B=4 / WORLD each), on fixed rollouts.

Run by tests/test_fsdp.py: ``[torchrun --nproc_per_node 2] tests/fsdp_equivalence.py OUT_DIR ZOO_DIR DATA``. Per
configuration each rank writes ``<config>.rank<r>.json`` (the ``train/`` figures logged at every step, the
parameter bytes it holds, and, at the start of training, a rollout of two fixed prompts sampled from one seed with
its all-gather count, once with the policy gathered for the rollout and once without); rank 0 writes the trainable
weights after the last step (``<config>.pt``, gathered whole).
"""

import json
import sys
import time
import zlib
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist

from lit_grpo import GRPOConfig, GRPOModule
from lit_grpo.config import PerfConfig
from lit_grpo.data.datamodule import DatasetSpec, VLMDataModule
from lit_grpo.distributed import world
from lit_grpo.fsdp import gathered, parameter_bytes, units
from lit_grpo.policy import LoRAConfig, PolicyConfig
from lit_grpo.rewards import RewardSpec
from lit_grpo.rewards.registry import REWARDS
from lit_grpo.rollout import SamplingConfig, build_rollout, encode_prompts
from lit_grpo.strategy import FSDP2Strategy

FAMILIES = ["llava_next", "qwen2_vl", "qwen2_5_vl", "idefics3", "smolvlm", "llava"]
CONFIGS = [f"{family}-{tuning}-{'gc' if gc else 'nogc'}"
           for i, family in enumerate(FAMILIES) for tuning, gc in (("lora", i % 2 == 1), ("full", i % 2 == 0))]
"""Every family in LoRA and in full fine-tuning, gradient checkpointing on in one and off in the other, alternating
by family: each of the four tuning x checkpointing pairs on three families (a Latin square, half the full product)."""
CONFIGS += ["llava_next-full-gc-bf16", "qwen2_vl-lora-nogc-bf16",  # trainer.precision bf16-mixed
            "qwen2_5_vl-full-gc-plain", "idefics3-lora-nogc-plain"]  # the plain engine (perf.engine plain)
T = 10  # completion tokens

if "fsdp_test_length" not in REWARDS:
    REWARDS.register("fsdp_test_length")(lambda completions, **_: [len(c) % 7 / 7 for c in completions])


class AllGathers:
    """Counts the all-gather collectives run in this process (FSDP2 all-gathers with ``all_gather_single``)."""

    def __init__(self):
        self.count, self._original = 0, dist.all_gather_single

        def counted(*args, **kwargs):
            self.count += 1
            return self._original(*args, **kwargs)

        dist.all_gather_single = counted


GATHERS = AllGathers()


class FixedRollouts(GRPOModule):
    """Completions are a function of (sample id, index in group) only, so any process layout sees the same; their
    lengths differ by sample, and some have no stop token (truncated). At the start of training, a rollout of two
    fixed prompts through the real engine (sampled from a fixed seed), with its all-gather count."""

    def rollout(self, batch, group_size, greedy=False, temperature=None):
        enc = encode_prompts(self.processor, batch.messages, [s.images for s in batch.samples])
        suppressed = set(self.suppress_ids.tolist())
        allowed = torch.tensor([i for i in range(10, 300) if i not in suppressed])  # never an image token
        rows = []
        for s in batch.samples:
            for j in range(group_size):
                key = zlib.crc32(f"{s.id}/{j}".encode())
                ids = allowed[torch.randint(len(allowed), (T,), generator=torch.Generator().manual_seed(key))]
                if key % 5:
                    ids[2 + key % 7] = self.stop_ids[0]
                rows.append(ids)
        index = torch.arange(len(batch)).repeat_interleave(group_size)
        return build_rollout(enc, index, torch.stack(rows), self.processor.tokenizer, self.stop_ids, self.layout)

    def on_train_start(self):
        batch = self.trainer.datamodule.fixed_batch()
        out = {}
        for gather in (True, False):
            if hasattr(self.passes.engine, "gather_rollout"):
                self.passes.engine.gather_rollout = gather
                for unit in units(self.passes.engine.roots[id(self.policy)]):
                    unit.reshard()
            before = GATHERS.count
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(1)  # the same draws with and without sharding
                ro = super().rollout(batch, 2)
            out[f"gather={gather}"] = {"all_gathers": GATHERS.count - before, "tokens": ro.completion_ids.tolist()}
        if hasattr(self.passes.engine, "gather_rollout"):
            self.passes.engine.gather_rollout = True
            root = self.passes.engine.roots[id(self.policy)]
            out["units"] = len(units(root))
            out["decoder_units"] = len(self.layout.language_model(self.policy).layers)
            with gathered(root):
                out["gathered_bytes"] = parameter_bytes(self.policy)
        out["bytes"] = parameter_bytes(self.policy)
        if self.passes.reference is not None and self.passes.reference.frozen is not None:
            out["reference_bytes"] = parameter_bytes(self.passes.reference.frozen)
        self.record["start"] = out

    def on_train_batch_end(self, outputs, batch, batch_idx):
        logged = {k: float(v) for k, v in self.trainer.callback_metrics.items()
                  if k.startswith("train/") and k != "train/rollout/completions_per_second"}
        self.record["steps"].append({"ids": [s.id for s in batch.samples], "logged": logged})


class InOrder(VLMDataModule):
    """Training rows in file order, step k's 4 prompts split between the ranks in rank order; two fixed prompts."""

    def train_dataloader(self):
        rank, size = world()
        share = 4 // size
        rows = [k + rank * share + j for k in range(0, len(self.datasets["train"]), 4) for j in range(share)]
        self.datasets["rank"] = torch.utils.data.Subset(self.datasets["train"], rows)
        return self._loader("rank", self.batch_size, shuffle=False)

    def fixed_batch(self):
        return self.collate([self.datasets["train"][i] for i in (0, 1)])


def run(config: str, out: Path, zoo: Path, data: str, world_size: int) -> None:
    family, tuning, gc, *extra = config.split("-")
    L.seed_everything(0)
    module = FixedRollouts(
        policy=PolicyConfig(name_or_path=str(zoo / family), lora=LoRAConfig(r=4, alpha=8) if tuning == "lora" else None,
                            gradient_checkpointing=gc == "gc", freeze_vision_tower=False),
        rewards=[RewardSpec("fsdp_test_length")],
        grpo=GRPOConfig(scale_rewards="batch", loss_type="dapo", max_grad_norm=0.05, micro_batch_size=4, beta=0.1,
                        num_iterations=2),
        sampling=SamplingConfig(num_generations=4, max_completion_length=6),
        perf=PerfConfig(engine="plain" if "plain" in extra else "shared"),
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01))
    module.record = {"steps": []}
    trainer = L.Trainer(accelerator="cpu", devices=world_size, max_steps=3, logger=False, enable_checkpointing=False,
                        use_distributed_sampler=False, precision="bf16-mixed" if "bf16" in extra else "32-true",
                        strategy=FSDP2Strategy() if world_size > 1 else "auto", enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    start = time.perf_counter()
    trainer.fit(module, InOrder(train=DatasetSpec(path=data, rows=":12"), batch_size=4 // world_size))
    module.record["seconds"] = time.perf_counter() - start
    rank, _ = world()
    Path(out, f"{config}.rank{rank}.json").write_text(json.dumps(module.record))
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    if world_size > 1:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        weights = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        weights = module.state_dict()
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in weights.items() if k in trainable}, Path(out, f"{config}.pt"))


if __name__ == "__main__":
    OUT, ZOO, DATA = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    size = int(__import__("os").environ.get("WORLD_SIZE", "1"))
    for name in sys.argv[4].split(",") if len(sys.argv) > 4 else CONFIGS:
        run(name, OUT, ZOO, DATA, size)
    if torch.distributed.is_initialized():  # close the process group before exit: gloo's threads must not outlive it
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
