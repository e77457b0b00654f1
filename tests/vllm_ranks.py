"""The colocated vLLM engine on every rank of a ``torchrun`` launch (TRL's colocate: each rank its own engine), after
1, 2 and 3 optimizer updates of a policy trained across the ranks: DDP-style (whole weights on each rank, gradients
averaged) or sharded with FSDP2 (each rank holds half; the push gathers each weight whole), full fine-tuning or LoRA.

Run by tests/test_vllm.py: ``torchrun --nproc_per_node 2 tests/vllm_ranks.py OUT_DIR MODEL_DIR CONFIG`` with CONFIG
``<ddp|fsdp>-<full|lora>[-nopush]``. Each rank writes ``<config>.rank<r>.json``: after each update, the largest gap
between the sampled-token log-probs vLLM reports and the policy's own forward on that rank's rollout, and a checksum
of the policy's whole weights (equal on every rank when the ranks train one policy).
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from lit_grpo.config import PerfConfig
from lit_grpo.families import row_layout
from lit_grpo.fsdp import ShardedEngine, shard_policy
from lit_grpo.policy import LoRAConfig, PolicyConfig, image_token_ids, load_policy, stop_token_ids
from lit_grpo.rollout import SamplingConfig, build_engine
from lit_grpo.rollout.vllm import sampler_weights
from test_vllm import KV_CACHE_GIB, _prompts

SAMPLING = SamplingConfig(num_generations=4, temperature=0.8, top_k=40, top_p=0.9, max_completion_length=24)


def main(out: Path, model_dir: str, config: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    strategy, tuning, *rest = config.split("-")
    push = "nopush" not in rest
    torch.manual_seed(0)
    model, processor = load_policy(PolicyConfig(name_or_path=model_dir,
                                                lora=LoRAConfig(r=4, alpha=8) if tuning == "lora" else None))
    model.eval()
    layout, suppress = row_layout(model, processor), image_token_ids(model, processor)
    engine = build_engine(processor, layout, SAMPLING, stop_token_ids(model, processor, (), set(suppress)), suppress,
                          PerfConfig(engine="vllm", vllm_kv_cache_gib=KV_CACHE_GIB))
    if strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh

        root = shard_policy(model, init_device_mesh("cpu", (world,)))
        engine = ShardedEngine(engine, {id(model): root})
    prompts = _prompts(processor, True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.05 if tuning == "lora" else 0.002)  # full: a step that keeps it sampling
    torch.manual_seed(2 + rank)  # the ranks sample different completions
    gaps, sums = [], []
    for _ in range(3):
        rollout = engine.sample(model, prompts, 4)
        logps, _ = engine.logps(model, rollout, grad=True)
        opt.zero_grad()
        (-(logps * rollout.completion_mask).sum()).backward()
        if strategy == "ddp":
            for p in params:
                dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        if push:
            engine.update_weights(model)
        probe = engine.sample(model, prompts, 4)
        with torch.no_grad():
            own, _ = engine.logps(model, probe)
        mask = probe.completion_mask
        gaps.append(float(((own - probe.sampling_logps).abs() * mask).max()))
        sums.append(float(sum(w.double().sum() for _, w in sampler_weights(model))))
    inner = engine.inner if strategy == "fsdp" else engine
    (out / f"{config}.rank{rank}.json").write_text(json.dumps({"gaps": gaps, "sums": sums, "pushes": inner.pushes}))
    dist.barrier()



if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
