"""Peak memory of the update pass, plain vs shared prefix, gradient checkpointing off and on, and the largest
micro-batch that fits a GPU at the paper's settings.

    python benchmarks/memory.py                      # measure (8 fresh processes, a few minutes) and extrapolate
    python benchmarks/memory.py --completion-tokens 32 --rows 2 --image 384x384

Model: :mod:`granite_shape` (Granite Vision 3.3 2B's width, heads, vocabulary and image tokens; random weights
from a config), with 1 and 2 decoder layers and 4 SigLIP layers (the features the projector reads); full
fine-tuning of the language model and projector (the paper configs), vision tower frozen, bf16 autocast over
float32 weights (``trainer.precision: bf16-mixed``), SDPA; the frozen vision tower runs in float32 outside
autocast (CPU bf16 autocast of SigLIP materialises a ~3.7 GB temporary in a batched matmul, a CPU kernel
artifact that would swamp every figure). One update micro-batch: ``--rows`` completions of one
prompt (its image: ``--image``), ``--completion-tokens`` each, log-probs, a token-mean loss, backward.

Memory: the peak of the C heap in use during the pass (glibc ``mallinfo2``, sampled every 0.5 ms, as in
``benchmarks/asm.py``) above its level just before; weights and gradient buffers (allocated before) are
excluded, so the figure is the pass's activations and working memory ``A``. One fresh process per point.

Extrapolation (the formula printed with the table):

- depth: ``A(L) = c + L * s``; ``s = A(2) - A(1)`` per decoder layer, ``c = A(1) - s`` (embeddings, projector,
  vision features, head and log-probs, taken as fixed per micro-batch);
- a layer's ``s`` is ``w + a * tokens``: ``w`` = 2 B per trainable parameter of a decoder layer (the bf16 copies
  of its weights that autocast keeps for the pass, on a GPU too), ``a`` bytes per token and layer, where the
  tokens a layer runs are ``m (P + T)`` for ``m`` completions on the plain path (every row carries its prompt)
  and ``ceil(m / G) P + m T`` on the shared path (each prompt once, micro-batches aligned to groups);
- under checkpointing both paths keep each layer's input, the same bytes per token; the shared path's own ``a``
  (a few MiB per layer here) is below what the heap sampling resolves, so it is taken as at least the plain
  path's;
- full depth at ``m`` completions of ``T = 512`` tokens: ``A(m) = c + 40 (w + a tokens(m))``, ``G = 8``;
- per GPU: fixed memory ``F = 16 B x trainable + 4 B x frozen parameters`` (float32 weights, gradients and two
  AdamW moments; DDP keeps a full copy per GPU), the largest ``m`` (at most the rank's share of the step,
  ``128 x 8 / 4 = 256`` completions) with ``F + A(m) <= 0.9 x 80 GB`` (10% left to the allocator and the CUDA
  context).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import subprocess
import sys
import time
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2, help="completions in the measured micro-batch")
    parser.add_argument("--completion-tokens", type=int, default=32, help="tokens per measured completion")
    parser.add_argument("--image", default="384x384", help="the prompt image, WIDTHxHEIGHT")
    parser.add_argument("--group", type=int, default=8, help="G")
    parser.add_argument("--target-tokens", type=int, default=512, help="T of the extrapolation")
    parser.add_argument("--prompts-per-step", type=int, default=128)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--gpu-gb", type=float, default=80.0)
    parser.add_argument("--points", help="JSON file of earlier measurements to reuse (written by every run)")
    parser.add_argument("--point", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    image = tuple(int(x) for x in args.image.split("x"))
    if args.point:  # a child process: one measurement, as JSON
        layers, path, ckpt = args.point.split(",")
        torch.set_num_threads(1)
        print(json.dumps(measure_point(int(layers), path == "shared", ckpt == "on", args.rows,
                                       args.completion_tokens, image)))
        return
    points = {}
    saved = Path(args.points) if args.points else None
    if saved is not None and saved.is_file():
        points = {tuple(k.split(",")[:2]) + (int(k.split(",")[2]),): v for k, v in json.loads(saved.read_text()).items()}
    for path in ("plain", "shared"):
        for ckpt in ("off", "on"):
            for layers in (1, 2):
                if (path, ckpt, layers) in points:
                    continue
                out = subprocess.run([sys.executable, __file__, "--point", f"{layers},{path},{ckpt}",
                                      "--rows", str(args.rows), "--completion-tokens", str(args.completion_tokens),
                                      "--image", args.image], capture_output=True, text=True, check=True)
                points[path, ckpt, layers] = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"measured {path:6s} checkpointing {ckpt:3s} {layers} layer(s): "
                      f"{points[path, ckpt, layers]['mib']:8.1f} MiB in {points[path, ckpt, layers]['seconds']:.1f} s",
                      flush=True)
                if saved is not None:
                    saved.write_text(json.dumps({",".join(map(str, k)): v for k, v in points.items()}))
    table(points, args)


def layer_weight_bytes() -> int:
    """2 B per parameter of one decoder layer (autocast's bf16 copies): q, o ``H^2``; k, v ``H D_kv``; MLP ``3 H I``."""
    h, i = TEXT["hidden_size"], TEXT["intermediate_size"]
    d_kv = h * TEXT["num_key_value_heads"] // TEXT["num_attention_heads"]
    return 2 * (2 * h * h + 2 * h * d_kv + 3 * h * i)


def table(points: dict, args) -> None:
    counts = parameter_counts()
    trainable = counts["language_model"] + counts["projector"]
    fixed = 16 * trainable + 4 * counts["vision_tower"]
    budget = 0.9 * args.gpu_gb * 1e9
    cap = args.prompts_per_step * args.group // args.gpus
    depth, g, t, w = TEXT["num_hidden_layers"], args.group, args.target_tokens, layer_weight_bytes()
    print(f"\nrows {args.rows}, measured T {args.completion_tokens}, image {args.image}; extrapolated to {depth} "
          f"layers, G {g}, T {t}, {args.prompts_per_step} prompts x {g} on {args.gpus} x {args.gpu_gb:g} GB")
    print(f"F = 16 B x {trainable / 1e9:.3f}e9 trainable + 4 B x {counts['vision_tower'] / 1e9:.3f}e9 frozen "
          f"= {fixed / GIB:.1f} GiB; budget 0.9 x {args.gpu_gb:g} GB = {budget / GIB:.1f} GiB; w = {w / 2 ** 20:.0f} MiB; "
          f"m <= {cap} completions per GPU")
    print("s = A(2) - A(1); c = A(1) - s; a = (s - w) / tokens(rows, P, T_measured); "
          f"A(m) = c + {depth} (w + a tokens(m)); tokens_plain(m) = m (P + T), tokens_shared(m) = ceil(m / G) P + m T; "
          "largest m: F + A(m) <= budget")
    print("\n| path | checkpointing | A(1) MiB | A(2) MiB | s MiB/layer | a KiB/token/layer | A(8) GiB at 40 layers, "
          "T 512 | KiB per completion token (A(8) / 8 T) | largest micro-batch per GPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path, ckpt in (("plain", "off"), ("shared", "off"), ("plain", "on"), ("shared", "on")):
        a1, a2 = points[path, ckpt, 1]["mib"] * 2 ** 20, points[path, ckpt, 2]["mib"] * 2 ** 20
        p = points[path, ckpt, 1]["prompt_tokens"]
        s = a2 - a1
        c = a1 - s
        a = max(s - w, 0.0) / _tokens(path, args.rows, p, args.completion_tokens, g)
        if ckpt == "on" and path == "shared":  # both keep each layer's input per token: at least the plain figure
            plain = points["plain", "on", 2]["mib"] - points["plain", "on", 1]["mib"]
            a = max(a, max(plain * 2 ** 20 - w, 0.0) / _tokens("plain", args.rows, p, args.completion_tokens, g))

        def act(m: int) -> float:
            return c + depth * (w + a * _tokens(path, m, p, t, g))

        best = max([m for m in range(1, cap + 1) if fixed + act(m) <= budget], default=0)
        print(f"| {path} | {ckpt} | {a1 / 2 ** 20:.0f} | {a2 / 2 ** 20:.0f} | {s / 2 ** 20:.0f} | {a / 1024:.1f} | "
              f"{act(g) / GIB:.1f} | {act(g) / (g * t) / 1024:.0f} | {best} |")


if __name__ == "__main__":
    main()
