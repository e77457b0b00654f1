"""Peak memory of the update pass, plain vs shared prefix, gradient checkpointing off and on, and the largest
micro-batch that fits a GPU at the paper's settings.

    python benchmarks/memory.py                      # measure (16 fresh processes, 2 at a time) and extrapolate
    python benchmarks/memory.py --rows 4,8 --completion-tokens 512 --image 384x384 --jobs 2
    python benchmarks/memory.py --fsdp-only          # only FSDP2's per-GPU parameter memory (counted, no measurement)

Model: :mod:`granite_shape` (Granite Vision 3.3 2B's width, heads, vocabulary and image tokens; random weights
from a config), with 1 and 2 decoder layers and 4 SigLIP layers (the features the projector reads); full
fine-tuning of the language model and projector (the paper configs), vision tower frozen, bf16 autocast over
float32 weights (``trainer.precision: bf16-mixed``), SDPA; the frozen vision tower runs in float32 outside
autocast (CPU bf16 autocast of SigLIP materialises a ~3.7 GB temporary in a batched matmul, a CPU kernel
artifact that would swamp every figure). One update micro-batch: ``m`` completions of one prompt (its image:
``--image``), ``--completion-tokens`` each (the paper's T = 512 by default, so nothing is extrapolated in T),
log-probs, a token-mean loss, backward; measured at two micro-batch sizes ``m1, m2`` (``--rows``).

Memory: the peak of the C heap in use during the pass (glibc ``mallinfo2``, sampled every 0.5 ms, as in
``benchmarks/asm.py``) above its level just before; weights and gradient buffers (allocated before) are
excluded, so the figure is the pass's activations and working memory ``A(L, m)``. One fresh process per point.

Extrapolation (the formula printed with the table), linear in depth and in the tokens the layers run:

- ``tokens(m)``: ``m (P + T)`` on the plain path (every row carries its prompt), ``ceil(m / G) P + m T`` on the
  shared path (each prompt once, micro-batches aligned to groups);
- per decoder layer ``s(m) = A(2, m) - A(1, m) = w + a tokens(m)``, outside the layers
  ``c(m) = A(1, m) - s(m) = c0 + c1 tokens(m)`` (embeddings, vision features, head and log-probs, and under
  checkpointing the one layer being recomputed in backward: all grow with the micro-batch); ``a, w, c1, c0`` from
  the two micro-batch sizes;
- full depth: ``A(m) = c0 + c1 tokens(m) + 40 (w + a tokens(m))``, ``G = 8``;
- per GPU: fixed memory ``F = 16 B x trainable + 4 B x frozen parameters`` (float32 weights, gradients and two
  AdamW moments; DDP keeps a full copy per GPU), the largest ``m`` (at most the rank's share of the step) with
  ``F + A(m) <= 0.9 x 80 GB`` (10% left to the allocator and the CUDA context).

The step is the paper's: a global batch size of 128 in TRL's meaning, completions per optimizer step, i.e. 16
prompts x G = 8 (the paper configs' ``data.batch_size: 16``); on 4 GPUs each takes 4 prompts, 32 completions.

FSDP2 (``configs/fsdp.yaml``; :func:`fsdp_memory`, counted from the model's parameters, nothing measured): per GPU
the sharded state ``F / W`` (W GPUs), plus during the update the units gathered at a time (the layer being computed
and the one prefetched, float32, and the root unit: embeddings, head, projector and the vision embeddings, which FSDP2
keeps gathered from forward to backward), plus, while sampling with ``gather_rollout`` (the default), a whole float32
copy of every parameter (each unit gathered once per rollout instead of once per generated token), freed before the
update. The largest micro-batch under FSDP2 uses the update's figure; the sampling cache (keys and values of the
rollout's completions) comes on top of the rollout's and is not modelled here.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asm import PeakHeap  # noqa: E402
from granite_shape import TEXT, build_granite_vision, parameter_counts  # noqa: E402

GIB = 2 ** 30


def _rollout(model, processor, rows: int, tokens: int, image: tuple[int, int], shared: bool):
    from PIL import Image

    from lit_grpo.families import row_layout
    from lit_grpo.rollout import PlainEngine, Rollout, SamplingConfig, SharedPrefixEngine, encode_prompts

    family = row_layout(model, processor)
    messages = [[{"role": "user", "content": [{"type": "image"},
                                              {"type": "text", "text": "Which option fits the missing panel?"}]}]]
    enc = encode_prompts(processor, messages, [[Image.new("RGB", image, "white")]])
    index = torch.zeros(rows, dtype=torch.long)
    ids = torch.randint(20, 400, (rows, tokens), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(rows, tokens, dtype=torch.bool)
    ro = Rollout(enc, ids, mask, torch.zeros(rows, dtype=torch.bool), [""] * rows, layout=family, prompt_index=index)
    engine = (SharedPrefixEngine if shared else PlainEngine)(processor, family, SamplingConfig(temperature=1.0), [], [])
    return ro, engine, enc


def measure_point(layers: int, shared: bool, checkpointing: bool, rows: int, tokens: int,
                  image: tuple[int, int]) -> dict:
    """One update micro-batch; returns its peak MiB above the start, seconds and prompt length."""
    from lit_grpo.policy import is_vision_parameter

    torch.manual_seed(0)
    model, processor = build_granite_vision(text_layers=layers, vision_layers=4)
    for name, p in model.named_parameters():
        p.requires_grad_(not is_vision_parameter(name))
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.config.use_cache = False
    model.train()
    tower, tower_forward = model.model.vision_tower, model.model.vision_tower.forward

    def float32_tower(*a, **k):  # CPU bf16 autocast of SigLIP materialises a ~3.7 GB temporary (a CPU artifact)
        with torch.autocast("cpu", enabled=False):
            return tower_forward(*a, **k)

    tower.forward = float32_tower
    ro, engine, enc = _rollout(model, processor, rows, tokens, image, shared)
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)  # gradient buffers exist before the pass: not its memory
    gc.collect()
    start = time.perf_counter()
    with PeakHeap() as heap, torch.autocast("cpu", dtype=torch.bfloat16):
        logps, _ = engine.logps(model, ro, slice(0, rows), grad=True)
        loss = -(logps * ro.completion_mask).sum() / ro.completion_mask.sum()
        loss.backward()
    return {"mib": heap.mib, "seconds": time.perf_counter() - start, "prompt_tokens": int(enc["input_ids"].shape[1])}


def _tokens(path: str, m: int, p: int, t: int, g: int) -> int:
    return m * (p + t) if path == "plain" else math.ceil(m / g) * p + m * t


def _measure(key: tuple, args) -> dict:
    path, ckpt, layers, rows = key
    out = subprocess.run([sys.executable, __file__, "--point", f"{layers},{path},{ckpt}", "--rows", str(rows),
                          "--completion-tokens", str(args.completion_tokens), "--image", args.image],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="4,8", help="the two micro-batch sizes measured (completions), m1,m2")
    parser.add_argument("--completion-tokens", type=int, default=512, help="tokens per measured completion (T)")
    parser.add_argument("--image", default="384x384", help="the prompt image, WIDTHxHEIGHT")
    parser.add_argument("--group", type=int, default=8, help="G")
    parser.add_argument("--prompts-per-step", type=int, default=16,
                        help="prompts per optimizer step over all GPUs (the paper: 16 x G = 128 completions)")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--gpu-gb", type=float, default=80.0)
    parser.add_argument("--jobs", type=int, default=2, help="measurements at once (one torch thread each)")
    parser.add_argument("--points", help="JSON file of earlier measurements to reuse (written by every run)")
    parser.add_argument("--fsdp-only", action="store_true", help="print FSDP2's per-GPU parameter memory and stop")
    parser.add_argument("--point", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fsdp_only:
        print_fsdp(args.gpus, args.gpu_gb)
        return
    image = tuple(int(x) for x in args.image.split("x"))
    if args.point:  # a child process: one measurement, as JSON
        layers, path, ckpt = args.point.split(",")
        torch.set_num_threads(1)
        print(json.dumps(measure_point(int(layers), path == "shared", ckpt == "on", int(args.rows),
                                       args.completion_tokens, image)))
        return
    sizes = tuple(int(r) for r in args.rows.split(","))
    if len(sizes) != 2 or sizes[0] >= sizes[1]:
        parser.error("--rows takes two increasing micro-batch sizes, e.g. 2,4")
    saved = Path(args.points) if args.points else None
    points = {}
    if saved is not None and saved.is_file():
        points = {(p, c, int(l), int(r)): v for k, v in json.loads(saved.read_text()).items()
                  for p, c, l, r in [k.split(",")]}
    todo = [(p, c, l, r) for p in ("plain", "shared") for c in ("off", "on") for l in (1, 2) for r in sizes
            if (p, c, l, r) not in points]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for key, point in zip(todo, pool.map(lambda k: _measure(k, args), todo)):
            points[key] = point
            print(f"measured {key[0]:6s} checkpointing {key[1]:3s} {key[2]} layer(s) {key[3]} rows: "
                  f"{point['mib']:8.1f} MiB in {point['seconds']:.1f} s", flush=True)
            if saved is not None:
                saved.write_text(json.dumps({",".join(map(str, k)): v for k, v in points.items()}))
    table(points, sizes, args)


def fsdp_memory(gpus: int) -> dict[str, float]:
    """FSDP2's per-GPU parameter memory in bytes (see the module docstring): ``sharded`` (weights, gradients and
    AdamW moments of the trainable parameters, float32 frozen weights, 1 / ``gpus`` each), ``update`` (two decoder
    layers and the root unit gathered, float32), ``rollout`` (every parameter gathered, float32), ``reference`` (a
    sharded frozen copy: full fine-tuning with ``beta > 0``)."""
    import torch
    from transformers.modeling_layers import GradientCheckpointingLayer

    from granite_shape import granite_vision_config
    from transformers import LlavaNextForConditionalGeneration

    counts = parameter_counts()
    trainable, frozen = counts["language_model"] + counts["projector"], counts["vision_tower"]
    with torch.device("meta"):
        model = LlavaNextForConditionalGeneration(granite_vision_config())
    in_layers = {id(p) for m in model.modules() if isinstance(m, GradientCheckpointingLayer) for p in m.parameters()}
    root = sum(p.numel() for p in model.parameters() if id(p) not in in_layers)
    layer = sum(p.numel() for p in model.model.language_model.layers[0].parameters())
    return {"sharded": (16 * trainable + 4 * frozen) / gpus, "update": 4 * (2 * layer + root),
            "rollout": 4 * (trainable + frozen), "reference": 4 * (trainable + frozen) / gpus,
            "root": root, "layer": layer}


def print_fsdp(gpus: int, gpu_gb: float) -> dict[str, float]:
    f = fsdp_memory(gpus)
    budget = 0.9 * gpu_gb * 1e9
    print(f"FSDP2 over {gpus} GPUs, per GPU: sharded state F / {gpus} = {f['sharded'] / GIB:.1f} GiB; during the "
          f"update + {f['update'] / GIB:.2f} GiB gathered (2 decoder layers of {f['layer'] / 1e6:.1f}M parameters and "
          f"the root unit of {f['root'] / 1e6:.0f}M, float32); while sampling with gather_rollout + "
          f"{f['rollout'] / GIB:.1f} GiB (every parameter whole, float32): {(f['sharded'] + f['rollout']) / GIB:.1f} "
          f"GiB before the sampling cache, of a {budget / GIB:.1f} GiB budget; full fine-tuning with beta > 0 adds "
          f"{f['reference'] / GIB:.1f} GiB (the sharded frozen reference)")
    return f


def layer_weight_bytes() -> int:
    """2 B per parameter of one decoder layer (autocast's bf16 copies): q, o ``H^2``; k, v ``H D_kv``; MLP ``3 H I``."""
    h, i = TEXT["hidden_size"], TEXT["intermediate_size"]
    d_kv = h * TEXT["num_key_value_heads"] // TEXT["num_attention_heads"]
    return 2 * (2 * h * h + 2 * h * d_kv + 3 * h * i)


def fit(points: dict, path: str, ckpt: str, sizes: tuple[int, int], t: int, g: int) -> dict:
    """The model's coefficients (bytes) from the four points of one path and checkpointing setting."""
    p = points[path, ckpt, 1, sizes[0]]["prompt_tokens"]
    tok = [_tokens(path, m, p, t, g) for m in sizes]
    s = [(points[path, ckpt, 2, m]["mib"] - points[path, ckpt, 1, m]["mib"]) * 2 ** 20 for m in sizes]
    c = [points[path, ckpt, 1, m]["mib"] * 2 ** 20 - s_m for m, s_m in zip(sizes, s)]
    a = max((s[1] - s[0]) / (tok[1] - tok[0]), 0.0)
    c1 = max((c[1] - c[0]) / (tok[1] - tok[0]), 0.0)
    return {"p": p, "a": a, "w": s[0] - a * tok[0], "c1": c1, "c0": c[0] - c1 * tok[0], "s": s, "c": c}


def table(points: dict, sizes: tuple[int, int], args) -> None:
    counts = parameter_counts()
    trainable = counts["language_model"] + counts["projector"]
    fixed = 16 * trainable + 4 * counts["vision_tower"]
    budget = 0.9 * args.gpu_gb * 1e9
    cap = args.prompts_per_step * args.group // args.gpus
    depth, g, t = TEXT["num_hidden_layers"], args.group, args.completion_tokens
    m1, m2 = sizes
    print(f"\nmeasured at m = {m1} and {m2} completions of T {t} tokens, image {args.image}; extrapolated to {depth} "
          f"layers, G {g}, {args.prompts_per_step} prompts x {g} = {args.prompts_per_step * g} completions per step on "
          f"{args.gpus} x {args.gpu_gb:g} GB")
    print(f"F = 16 B x {trainable / 1e9:.3f}e9 trainable + 4 B x {counts['vision_tower'] / 1e9:.3f}e9 frozen "
          f"= {fixed / GIB:.1f} GiB; budget 0.9 x {args.gpu_gb:g} GB = {budget / GIB:.1f} GiB; analytic bf16 layer "
          f"weights {layer_weight_bytes() / 2 ** 20:.0f} MiB; m <= {cap} completions per GPU")
    print("s(m) = A(2, m) - A(1, m) = w + a tokens(m); c(m) = A(1, m) - s(m) = c0 + c1 tokens(m); "
          f"A(m) = c0 + c1 tokens(m) + {depth} (w + a tokens(m)); tokens_plain(m) = m (P + T), "
          "tokens_shared(m) = ceil(m / G) P + m T; largest m: F + A(m) <= budget")
    sharded = print_fsdp(args.gpus, args.gpu_gb)
    fixed_fsdp = sharded["sharded"] + sharded["update"]
    print(f"\n| path | checkpointing | A(1, {m1}) / A(1, {m2}) MiB | A(2, {m1}) / A(2, {m2}) MiB | w MiB | "
          f"a KiB/token/layer | c0 MiB | c1 KiB/token | A(8) GiB at {depth} layers | KiB per completion token | "
          "largest micro-batch per GPU | same, FSDP2 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path, ckpt in (("plain", "off"), ("shared", "off"), ("plain", "on"), ("shared", "on")):
        f = fit(points, path, ckpt, sizes, t, g)

        def act(m: int) -> float:
            tokens = _tokens(path, m, f["p"], t, g)
            return f["c0"] + f["c1"] * tokens + depth * (f["w"] + f["a"] * tokens)

        best = max([m for m in range(1, cap + 1) if fixed + act(m) <= budget], default=0)
        best_fsdp = max([m for m in range(1, cap + 1) if fixed_fsdp + act(m) <= budget], default=0)
        mib = [[points[path, ckpt, layers, m]["mib"] for m in sizes] for layers in (1, 2)]
        print(f"| {path} | {ckpt} | {mib[0][0]:.0f} / {mib[0][1]:.0f} | {mib[1][0]:.0f} / {mib[1][1]:.0f} | "
              f"{f['w'] / 2 ** 20:.0f} | {f['a'] / 1024:.1f} | {f['c0'] / 2 ** 20:.0f} | {f['c1'] / 1024:.1f} | "
              f"{act(g) / GIB:.1f} | {act(g) / (g * t) / 1024:.0f} | {best} | {best_fsdp} |")


if __name__ == "__main__":
    main()
