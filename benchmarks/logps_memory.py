"""Peak memory of per-token log-probs: the chunked selective log-softmax against a plain ``log_softmax``.

    python benchmarks/logps_memory.py                 # N=16, T=512, V=49155 (Granite's vocabulary)
    python benchmarks/logps_memory.py --dtype float32 --chunk-rows 512 --threads 1

Logits ``[N, T, V]`` are made once (``--dtype``, bfloat16 by default: what a model in bfloat16 hands the
head); each method then turns them into the log-prob of one token per position at temperature 0.9:

- ``plain``: ``log_softmax(logits.float() / temperature, -1).gather(-1, index)`` (the whole ``[N, T, V]``
  in float32, twice);
- ``chunked``: :func:`lit_grpo.grpo.selective_log_softmax` (``chunk_rows x V`` float32 at a time).

Each runs without grad (the scoring and reference passes) and with grad (forward + backward into the
logits, the update). Memory: on CUDA ``torch.cuda.max_memory_allocated`` above the level before the call;
on CPU the peak of the C heap in use above its level before the call (glibc ``mallinfo2``, sampled every
0.5 ms by a thread, as in ``benchmarks/asm.py``). The logits themselves (and their gradient buffer with
grad, which any method needs) are excluded: the figure is the method's own working memory.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asm import PeakHeap  # noqa: E402

from lit_grpo.grpo import selective_log_softmax  # noqa: E402

TEMPERATURE = 0.9


def plain(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float() / TEMPERATURE, -1).gather(-1, index[..., None]).squeeze(-1)


def chunked(logits: torch.Tensor, index: torch.Tensor, chunk_rows: int) -> torch.Tensor:
    return selective_log_softmax(logits, index, TEMPERATURE, chunk_rows=chunk_rows)[0]


def measure(fn, logits: torch.Tensor, index: torch.Tensor, grad: bool) -> tuple[float, float, torch.Tensor]:
    """(peak MiB above the start, seconds, log-probs) of one call (+ backward with ``grad``)."""
    gc.collect()
    if grad:
        logits.grad = torch.zeros_like(logits)  # the gradient buffer exists before: not the method's memory
    cuda = logits.is_cuda
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    with PeakHeap() as heap, torch.set_grad_enabled(grad):
        out = fn(logits, index)
        if grad:
            out.sum().backward()
        if cuda:
            torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    mib = (torch.cuda.max_memory_allocated() - base) / 2 ** 20 if cuda else heap.mib
    return mib, seconds, out.detach()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=16, help="rows N (completions)")
    parser.add_argument("--t", type=int, default=512, help="completion tokens T")
    parser.add_argument("--v", type=int, default=49155, help="vocabulary V (Granite: 49,155)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--chunk-rows", type=int, default=1024, help="rows per chunk of the chunked method")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(args.n, args.t, args.v, generator=gen) * 4).to(getattr(torch, args.dtype))
    logits = logits.to(args.device).requires_grad_(True)
    index = torch.randint(0, args.v, (args.n, args.t), generator=gen).to(args.device)
    size = logits.numel() * logits.element_size() / 2 ** 20
    print(f"N={args.n} T={args.t} V={args.v}, logits {args.dtype} on {args.device} ({size:.0f} MiB; "
          f"float32 copy {logits.numel() * 4 / 2 ** 20:.0f} MiB), chunk {args.chunk_rows} rows, "
          f"temperature {TEMPERATURE}")
    methods = {"plain log_softmax": plain, "chunked selective": lambda x, i: chunked(x, i, args.chunk_rows)}
    print("| pass | method | peak MiB | seconds |")
    print("|---|---|---|---|")
    for grad in (False, True):
        results = {}
        for name, fn in methods.items():
            mib, seconds, out = measure(fn, logits, index, grad)
            results[name] = out
            print(f"| {'forward + backward' if grad else 'no grad'} | {name} | {mib:.0f} | {seconds:.2f} |", flush=True)
        a, b = results.values()
        print(f"|  | max abs difference | {(a - b).abs().max().item():.1e} |  |")


if __name__ == "__main__":
    main()
