"""GRPO steps at the paper's settings on one GPU with a Granite-Vision-3.3-2B-shaped model: lit_grpo and TRL.

    python benchmarks/gpu_step.py                 # one GPU: the full-size random model, bf16-mixed (<= 4 min on an H200)
    python benchmarks/gpu_step.py --tiny          # the embedded toy model on the CPU (what the test suite runs)
    python benchmarks/gpu_step.py --engine vllm   # both trainers sample with vLLM colocated (vLLM installed; GPU)
    python benchmarks/gpu_step.py --no-trl        # lit_grpo only
    python benchmarks/gpu_step.py --no-trl --strategy fsdp2 --devices 4     # lit_grpo sharded with FSDP2 over 4 GPUs
    python benchmarks/gpu_step.py --tiny --no-trl --strategy fsdp2 --devices 2   # the same on 2 CPU processes

Model: :mod:`granite_shape` (Granite Vision 3.3 2B's shape, random weights from a config, saved once to a
temporary folder and loaded by path like a real checkpoint; ``--tiny``: the embedded 0.2M-parameter model).
Settings of the paper configs on one GPU: 16 prompts x G = 8 = 128 completions per optimizer step (the paper's
global batch size of 128, in TRL's meaning: completions per step; on N GPUs each takes 16 / N prompts), at most
512 completion tokens, micro-batches of 16 completions, temperature
1.0, beta 0, one update per rollout, full fine-tuning of the language model and projector (vision tower frozen),
float32 weights under ``bf16-mixed``, SDPA, gradient checkpointing on; the embedded puzzles (a 132 x 88 image: one
384 px tile, 1,261 image tokens of a 1,363-token prompt). Random weights almost never sample the stop token, so completions run to the full 512 tokens.
Each trainer runs ``--warmup`` + ``--steps`` steps; the figures are over the timed steps. ``--strategy fsdp2`` (or
``ddp``) with ``--devices N`` runs lit_grpo on N processes (GPUs, or CPU processes without one), each with the
per-GPU settings above (``--prompts`` changes the prompts per rank); the figures are rank 0's (TRL: one device only).

Printed per trainer (one ``key: value`` line each):

- ``generation_tokens_per_s``: completion tokens sampled / time in sampling;
- ``update_tokens_per_s``: completion tokens trained on / time in the update pass (forward + backward over the
  micro-batches; lit_grpo: ``PolicyPasses.accumulate_gradients``; TRL: ``training_step`` less its generation and
  scoring);
- ``update_tflops`` and ``mfu``: :func:`update_flops` (the language model's and head's matmul FLOPs over the
  tokens each implementation runs: lit_grpo every prompt once per group, TRL every row's prompt; forward +
  backward = 3 x forward; recomputation not counted) per second, and that over the device's bf16 dense peak
  (:data:`PEAK_TFLOPS`, by device name; ``n/a`` on a CPU or an unknown device);
- ``peak_memory_gib``: ``torch.cuda.max_memory_allocated`` over the run (CPU: the C heap's peak above the start);
- ``step_seconds``: the mean wall time of a timed step (sampling to optimizer step).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

PEAK_TFLOPS = {"H200": 989.0, "H100 SXM": 989.0, "H100 NVL": 835.0, "H100 PCIe": 756.0, "H100": 989.0,
               "GH200": 989.0, "B200": 2250.0, "A100": 312.0, "A800": 312.0, "L40S": 362.0, "L4": 121.0,
               "A10G": 70.0, "A10": 125.0, "RTX 4090": 165.0, "RTX 6000 Ada": 364.0, "V100": 125.0}
"""bf16 (V100: fp16) dense tensor-core peak in TFLOPS by device-name substring (first match, in this order)."""

PAPER = dict(prompts=16, group=8, tokens=512, micro_batch=16)
TINY = dict(prompts=2, group=4, tokens=8, micro_batch=4)


VLLM_MEMORY = 0.3
"""``--engine vllm``: the share of the GPU vLLM takes in both trainers (TRL's default)."""


def device_peak(name: str) -> float | None:
    """The bf16 dense peak (FLOPS) of a device called ``name`` (``torch.cuda.get_device_name``), or None."""
    for key, tflops in PEAK_TFLOPS.items():
        if key.lower() in name.lower():
            return tflops * 1e12
    return None


def update_flops(hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int, vocab: int,
                 runs: list[tuple[int, int, int]], head_tokens: int) -> float:
    """Matmul FLOPs of one forward + backward (3 x forward) of a Llama/Granite-style language model.

    ``runs``: ``(count, query_tokens, cached_tokens)``: ``count`` sequences of ``query_tokens`` tokens, each
    attending causally to itself after ``cached_tokens`` earlier tokens (a prompt: ``(B, P, 0)``; completions
    after their shared prompt: ``(N, T, P)``; plain rows: ``(N, P + T, 0)``). ``head_tokens``: positions the
    output head runs on. Per token and layer the projections cost ``2 (2 H^2 + 2 H D_kv + 3 H I)`` (q, o; k, v with
    ``D_kv = H kv_heads / heads``; gate, up, down); attention ``4 H`` per (query, key) pair (scores and values),
    ``q (q + 1) / 2 + q c`` pairs per sequence; the head ``2 H V`` per position. Norms, rotary, softmax and the
    vision tower are left out.
    """
    d_kv = hidden * kv_heads // heads
    per_token = 2 * (2 * hidden * hidden + 2 * hidden * d_kv + 3 * hidden * intermediate)
    tokens = sum(n * q for n, q, _ in runs)
    pairs = sum(n * (q * (q + 1) // 2 + q * c) for n, q, c in runs)
    forward = layers * (per_token * tokens + 4 * hidden * pairs) + 2 * hidden * vocab * head_tokens
    return 3.0 * forward


def _text_shape(config) -> dict:
    t = config.text_config
    return dict(hidden=t.hidden_size, layers=t.num_hidden_layers, intermediate=t.intermediate_size,
                heads=t.num_attention_heads, kv_heads=t.num_key_value_heads, vocab=t.vocab_size)


class Meter:
    """Seconds, tokens and FLOPs accumulated by named wrappers, for the timed steps only."""

    def __init__(self):
        self.on = False
        self.seconds = {"generation": 0.0, "update": 0.0, "step": 0.0}
        self.steps = 0
        self.tokens = {"generation": 0, "update": 0}
        self.flops = 0.0

    def timed(self, key: str, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            _sync()
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            _sync()
            if self.on:
                self.seconds[key] += time.perf_counter() - start
            return out
        return wrapper


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


@contextlib.contextmanager
def peak_memory():
    """Yields a dict whose ``gib`` is the peak memory of the block (CUDA allocator, or the C heap on a CPU)."""
    out = {}
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        yield out
        out["gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    else:
        from asm import PeakHeap

        with PeakHeap() as heap:
            yield out
        out["gib"] = heap.mib / 1024


def build_model(root: Path, tiny: bool) -> str:
    """Save the model (random weights) under ``root`` once; returns its path."""
    path = root / ("tiny" if tiny else "granite_vision_3_3_2b_shape")
    if (path / "config.json").is_file():
        return str(path)
    if tiny:
        from lit_grpo.tasks.demo.embedded import save_embedded_vlm

        return str(save_embedded_vlm(path))
    from granite_shape import build_granite_vision

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model, processor = build_granite_vision()
    model.to(torch.bfloat16).save_pretrained(path)
    processor.save_pretrained(path)
    del model
    return str(path)


def _samples(root: Path, num: int):
    from vs_trl import build_samples

    samples = build_samples(root, "base", num=max(num, 8))
    return (samples * (num // len(samples) + 1))[:num]


def _strategy(name: str):
    if name == "fsdp2":
        from lit_grpo.strategy import FSDP2Strategy

        return FSDP2Strategy()
    return "ddp" if name == "ddp" else "auto"


def run_lit(path: str, samples, s: dict, steps: int, warmup: int, meter: Meter, strategy: str = "single",
            devices: int = 1, engine: str = "shared"):
    import lightning as L
    from torch.utils.data import DataLoader

    from lit_grpo.data.datamodule import PromptBatch
    from lit_grpo.data.sample import render_messages
    from lit_grpo.config import PerfConfig
    from lit_grpo.module import GRPOConfig, GRPOModule
    from lit_grpo.policy import PolicyConfig
    from lit_grpo.rewards import RewardSpec
    from lit_grpo.rollout import SamplingConfig

    module = GRPOModule(
        policy=PolicyConfig(name_or_path=path, local_files_only=True, gradient_checkpointing=True),
        rewards=[RewardSpec("binary")],
        grpo=GRPOConfig(beta=0.0, loss_type="dapo", micro_batch_size=s["micro_batch"]),
        sampling=SamplingConfig(num_generations=s["group"], temperature=1.0, max_completion_length=s["tokens"]),
        perf=PerfConfig(engine=engine, vllm_gpu_memory_utilization=VLLM_MEMORY),
        optimizer=functools.partial(torch.optim.AdamW, lr=1e-5, weight_decay=0.0))
    shape = _text_shape(module.policy.config)
    rollout_fn, update_fn = module.rollout, module.passes.accumulate_gradients

    def rollout(batch, group_size, *a, **k):
        out = rollout_fn(batch, group_size, *a, **k)
        if meter.on:
            meter.tokens["generation"] += int(out.completion_mask.sum())
        return out

    def accumulate(policy, ro, *a, **k):
        if meter.on:
            b, p = ro.num_prompts, ro.prompts["input_ids"].shape[1]
            n, t = ro.completion_ids.shape
            meter.tokens["update"] += int(ro.completion_mask.sum())
            meter.flops += update_flops(**shape, runs=[(b, p, 0), (n, t, p)], head_tokens=n * t)
        return update_fn(policy, ro, *a, **k)

    module.rollout = meter.timed("generation", rollout)
    module.passes.accumulate_gradients = meter.timed("update", accumulate)

    class Start(L.Callback):
        def on_train_batch_start(self, trainer, *a, **k):
            meter.on = trainer.global_step >= warmup
            _sync()
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, *a, **k):
            _sync()
            if meter.on:
                meter.seconds["step"] += time.perf_counter() - self.start
                meter.steps += 1

    loader = DataLoader(samples, batch_size=s["prompts"], shuffle=False,
                        collate_fn=lambda x: PromptBatch(x, [render_messages(y, "visualsphinx_seed") for y in x]))
    trainer = L.Trainer(max_steps=warmup + steps, accelerator="auto", devices=devices, precision="bf16-mixed",
                        strategy=_strategy(strategy), logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, callbacks=[Start()])
    trainer.fit(module, train_dataloaders=loader)
    return trainer


def run_trl(path: str, samples, s: dict, steps: int, warmup: int, meter: Meter, out: Path,
            engine: str = "shared") -> None:
    import datasets
    from transformers import AutoConfig, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lit_grpo.data.sample import render_messages
    from lit_grpo.families import load_processor
    from lit_grpo.rewards import REWARDS

    rows = [{"prompt": render_messages(x, "visualsphinx_seed"), "images": x.images, "answer": x.answer}
            for x in samples]
    binary = REWARDS.get("binary")

    def reward(completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return binary([t if isinstance(t, str) else t[0]["text"] for t in texts], answer=answer)

    completions = s["prompts"] * s["group"]
    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=s["micro_batch"],
        gradient_accumulation_steps=completions // s["micro_batch"], num_generations=s["group"],
        max_completion_length=s["tokens"], temperature=1.0, beta=0.0, learning_rate=1e-5, weight_decay=0.0,
        lr_scheduler_type="constant", loss_type="dapo", num_iterations=1, gradient_checkpointing=True,
        gradient_checkpointing_kwargs={"use_reentrant": False}, bf16=True, use_cpu=not torch.cuda.is_available(),
        max_steps=warmup + steps, logging_steps=10 ** 6, save_strategy="no", report_to="none", seed=0,
        dataloader_num_workers=0, log_completions=False, model_init_kwargs={"dtype": torch.float32},
        **(dict(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=VLLM_MEMORY)
           if engine == "vllm" else {}))
    trainer = GRPOTrainer(model=path, reward_funcs=reward, args=args, train_dataset=datasets.Dataset.from_list(rows),
                          processing_class=load_processor(path))
    for name, p in trainer.model.named_parameters():  # the vision tower frozen, as lit_grpo's default
        if "vision_tower" in name:
            p.requires_grad_(False)
    shape = _text_shape(AutoConfig.from_pretrained(path))
    generate_score, prepare, step = (trainer._generate_and_score_completions, trainer._prepare_inputs,
                                     trainer.training_step)
    inside = {"prepare": 0.0}

    def generate_and_score(*a, **k):
        batch = generate_score(*a, **k)
        if meter.on:
            n, t = batch["completion_mask"].shape
            p = batch["prompt_ids"].shape[1]
            meter.tokens["generation"] += int(batch["completion_mask"].sum())
            meter.tokens["update"] += int(batch["completion_mask"].sum())
            meter.flops += update_flops(**shape, runs=[(n, p + t, 0)], head_tokens=n * t)
        return batch

    def prepare_inputs(*a, **k):
        _sync()
        start = time.perf_counter()
        out_ = prepare(*a, **k)
        _sync()
        inside["prepare"] += time.perf_counter() - start
        return out_

    def training_step(*a, **k):
        before = inside["prepare"]
        _sync()
        start = time.perf_counter()
        out_ = step(*a, **k)
        _sync()
        if meter.on:
            meter.seconds["update"] += time.perf_counter() - start - (inside["prepare"] - before)
        return out_

    trainer._generate_and_score_completions = generate_and_score
    trainer._generate = meter.timed("generation", trainer._generate)
    trainer._prepare_inputs = prepare_inputs
    trainer.training_step = training_step

    class Start(TrainerCallback):
        def on_step_begin(self, args_, state, control, **kw):
            meter.on = state.global_step >= warmup

    trainer.add_callback(Start())
    trainer.train()


def report(name: str, meter: Meter, memory: dict, peak: float | None) -> dict:
    gen = meter.tokens["generation"] / max(meter.seconds["generation"], 1e-9)
    upd = meter.tokens["update"] / max(meter.seconds["update"], 1e-9)
    tflops = meter.flops / max(meter.seconds["update"], 1e-9) / 1e12
    figures = {"generation_tokens_per_s": gen, "update_tokens_per_s": upd, "update_tflops": tflops,
               "mfu": None if peak is None else tflops * 1e12 / peak, "peak_memory_gib": memory["gib"],
               "update_flops": meter.flops, "step_seconds": meter.seconds["step"] / max(meter.steps, 1)}
    print(f"[{name}]")
    for key, value in figures.items():
        text = "n/a" if value is None else (f"{value:.3e}" if key == "update_flops" else f"{value:.4g}")
        print(f"{name}.{key}: {text}")
    return figures


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the embedded toy model, a few tokens (CPU, tests)")
    parser.add_argument("--steps", type=int, default=1, help="timed steps per trainer")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--no-trl", action="store_true", help="skip TRL's GRPOTrainer")
    parser.add_argument("--root", default=None, help="folder for the model and data (default: a temp dir)")
    parser.add_argument("--strategy", choices=("single", "ddp", "fsdp2"), default="single",
                        help="lit_grpo's strategy: one device, DDP, or FSDP2 (lit_grpo.strategy.FSDP2Strategy)")
    parser.add_argument("--devices", type=int, default=1, help="processes (GPUs, or CPU processes without one)")
    parser.add_argument("--prompts", type=int, default=None, help="prompts per rank and step (default: the settings')")
    parser.add_argument("--engine", choices=("shared", "vllm"), default="shared",
                        help="sampler: lit_grpo's shared-prefix engine and TRL's generate, or vLLM colocated in both "
                             "(lit_grpo's perf.engine: vllm, TRL's use_vllm with vllm_mode colocate)")
    args = parser.parse_args(argv)
    if (args.devices > 1 or args.strategy != "single") and not args.no_trl:
        parser.error("TRL runs on one device here: add --no-trl to run lit_grpo alone with --strategy / --devices")
    s = {**(TINY if args.tiny else PAPER), **({"prompts": args.prompts} if args.prompts else {})}
    # the ranks Lightning starts run this script again: they find the model and data in the same folder
    root = Path(args.root or os.environ.setdefault("GPU_STEP_ROOT", tempfile.mkdtemp(prefix="gpu_step_")))
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    peak = device_peak(name) if torch.cuda.is_available() else None
    first = "LOCAL_RANK" not in os.environ or os.environ.get("RANK", os.environ["LOCAL_RANK"]) == "0"
    say = print if first else (lambda *a, **k: None)
    say(f"device: {name}; peak: {'n/a' if peak is None else f'{peak / 1e12:g} TFLOPS'}; {s['prompts']} prompts x "
        f"G {s['group']}, {s['tokens']} completion tokens, micro-batch {s['micro_batch']}; "
        f"{args.warmup} warm-up + {args.steps} timed step(s); lit_grpo: {args.strategy} on {args.devices} "
        f"device(s)", flush=True)
    start = time.perf_counter()
    path = build_model(root, args.tiny)
    samples = _samples(root, s["prompts"] * (args.warmup + args.steps) * args.devices)
    say(f"model and data ready in {time.perf_counter() - start:.0f} s", flush=True)
    results = {}
    meter = Meter()
    with peak_memory() as memory:
        trainer = run_lit(path, samples, s, args.steps, args.warmup, meter, args.strategy, args.devices, args.engine)
    if not trainer.is_global_zero:
        return {}
    results["lit_grpo"] = report("lit_grpo", meter, memory, peak)
    if not args.no_trl:
        meter = Meter()
        with peak_memory() as memory, tempfile.TemporaryDirectory() as out:
            run_trl(path, samples, s, args.steps, args.warmup, meter, Path(out), args.engine)
        results["trl"] = report("trl", meter, memory, peak)
    print(f"total {time.perf_counter() - start:.0f} s")
    return results


if __name__ == "__main__":
    main()
