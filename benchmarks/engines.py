"""Rollout engines on the CPU: completions per second and a GRPO step's parts, for ``vllm``, ``shared`` and ``plain``.

    python benchmarks/engines.py                       # the demo model and a larger zoo model, every engine
    python benchmarks/engines.py --engines shared plain --models demo   # without vLLM installed

Models: ``demo`` (``checkpoints/demo``: the 0.7M-parameter Granite-Vision-shaped warm start) and ``zoo512`` (the tiny
zoo's LLaVA-NeXT / Granite builder at hidden 512, 4 layers, 8 heads: 13M parameters; random weights rarely stop, so
its completions run to the length limit). Work per step: ``--prompts`` demo puzzles (one 96 x 128 image each) x
``--group`` completions of at most ``--tokens`` tokens, temperature 1. The parts of a step, each timed on its own
after ``--warmup`` untimed steps, averaged over ``--steps``:

- ``sample_s``: the engine's rollout (vLLM: its start is in the warm-up; its weight push after the update is timed
  under ``update_s``);
- ``logprob_s``: the log-prob pass (no grad, the policy's own forward; vLLM's engine uses the ``shared`` one);
- ``update_s``: forward + backward over every completion, an SGD step, and the engine's ``update_weights``;
- ``completions_per_s``: completions / ``sample_s``; ``tokens_per_s``: sampled tokens / ``sample_s``.

One line per engine and model: ``model engine key=value ...``. Say the machine's load with any figure you report.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from lit_grpo.config import PerfConfig
from lit_grpo.data.sample import render_messages
from lit_grpo.families import row_layout
from lit_grpo.policy import PolicyConfig, image_token_ids, load_policy, stop_token_ids
from lit_grpo.rollout import SamplingConfig, build_engine, encode_prompts


def model_path(name: str, folder: str) -> str:
    if name == "demo":
        return "checkpoints/demo"
    from lit_grpo.testing.zoo import ZooConfig, save_vlm

    cfg = ZooConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                    intermediate_size=1024, vision_hidden_size=64)
    return str(save_vlm(f"{folder}/{name}", "llava_next", cfg))


def prompts(processor, count: int):
    from lit_grpo.tasks.visualsphinx.puzzles import write_puzzles
    from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx

    with tempfile.TemporaryDirectory() as folder:
        data = read_visualsphinx(str(write_puzzles(f"{folder}/p.parquet", num=count, seed=0)))
        samples = [data[i] for i in range(count)]
    return encode_prompts(processor, [render_messages(s, "visualsphinx_seed") for s in samples],
                          [s.images for s in samples])


def run(model_name: str, engine_name: str, args, folder: str) -> dict[str, float]:
    model, processor = load_policy(PolicyConfig(name_or_path=model_path(model_name, folder)))
    suppress = image_token_ids(model, processor)
    sampling = SamplingConfig(num_generations=args.group, max_completion_length=args.tokens)
    perf = PerfConfig(engine=engine_name, vllm_kv_cache_gib=1.0)
    engine = build_engine(processor, row_layout(model, processor), sampling,
                          stop_token_ids(model, processor, (), set(suppress)), suppress, perf)
    batch = prompts(processor, args.prompts)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    parts: dict[str, list[float]] = {"sample_s": [], "logprob_s": [], "update_s": [], "tokens": []}
    torch.manual_seed(0)
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        rollout = engine.sample(model, batch, args.group)
        t1 = time.perf_counter()
        engine.logps(model, rollout)
        t2 = time.perf_counter()
        logps, _ = engine.logps(model, rollout, grad=True)
        opt.zero_grad()
        (-(logps * rollout.completion_mask).sum() / rollout.completion_mask.sum()).backward()
        opt.step()
        engine.update_weights(model)
        t3 = time.perf_counter()
        if step >= args.warmup:
            for key, value in (("sample_s", t1 - t0), ("logprob_s", t2 - t1), ("update_s", t3 - t2),
                               ("tokens", float(rollout.completion_mask.sum()))):
                parts[key].append(value)
    out = {k: statistics.mean(v) for k, v in parts.items()}
    out["completions_per_s"] = args.prompts * args.group / out["sample_s"]
    out["tokens_per_s"] = out.pop("tokens") / out["sample_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", nargs="+", default=["vllm", "shared", "plain"])
    parser.add_argument("--models", nargs="+", default=["demo", "zoo512"], choices=["demo", "zoo512"])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}; {args.prompts} prompts x G={args.group}, <= {args.tokens} "
          f"tokens, {args.steps} timed steps after {args.warmup}")
    with tempfile.TemporaryDirectory() as folder:
        for model_name in args.models:
            for engine_name in args.engines:
                figures = run(model_name, engine_name, args, folder)
                print(f"{model_name} {engine_name} " + " ".join(f"{k}={v:.3g}" for k, v in figures.items()),
                      flush=True)


if __name__ == "__main__":
    main()
