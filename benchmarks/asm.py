"""Cost of the attention reward in the log-prob pass, against ``output_attentions=True``.

    python benchmarks/asm.py                      # sequence lengths 512, 1024, 2048
    python benchmarks/asm.py --lengths 512 --rows 2

For each total sequence length L (prompt with its image tokens + completion, the completion being
``--completion-fraction`` of L), on a Granite-Vision-shaped LLaVA-NeXT model (about 18M parameters,
float32, SDPA), it measures the trainer's log-prob pass (one no-grad forward over prompt + completion
giving per-token log-probs) three ways:

- ``plain``: the forward alone (what the pass costs without the attention reward);
- ``asm``: the same forward inside the attention capture, then the ASM of every row (reconstruction of
  the final layer's completion rows in chunks, grid mapping, foreground score), exactly as the trainer;
- ``attentions``: the forward with eager attention and ``output_attentions=True``, which would hand
  back every layer's ``[rows, heads, L, L]`` weights.

Time: the fastest of ``--repeats`` runs after a warm-up (the run least disturbed by other processes on
a shared machine), plain and ASM passes alternating in one process so that load hits both alike; and,
since the difference of two whole passes is noisy under load, the median time of the ASM step alone
(reconstruction and score, after the forward), as a share of the plain pass.
Memory: the peak of the C heap in use (glibc ``mallinfo2``, where torch's CPU tensors live) during one
pass above its level just before, sampled every 0.5 ms by a thread: the pass's own working memory and
outputs, model and inputs excluded. "extra" is that figure minus the plain pass's; "asm own" is the
ASM step's own peak after the forward plus the captured queries and keys it keeps; the ratio uses the
larger of the two. One fresh process per length. The table also gives the size of the tensors
``output_attentions`` returns. Targets: ASM adds at most 10% to the pass's time, and its extra memory is
at least 20x below the extra memory of ``output_attentions=True`` at 2,048 tokens.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.mallinfo2.restype = _MallInfo2


def heap_in_use() -> int:
    """Bytes the C heap has handed out and not taken back (glibc ``mallinfo2``: arena + mmap'd blocks)."""
    info = _LIBC.mallinfo2()
    return info.uordblks + info.hblkhd


class PeakHeap:
    """Peak of :func:`heap_in_use` above its value at entry, sampled every 0.5 ms by a thread (torch
    releases the GIL inside its ops, so the sampler sees their temporaries)."""

    def __enter__(self) -> "PeakHeap":
        self.base = self.peak = heap_in_use()
        self._stop = False
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, heap_in_use())
            time.sleep(0.0005)

    def __exit__(self, *exc) -> None:
        self._stop = True
        self._thread.join()
        self.peak = max(self.peak, heap_in_use())

    @property
    def mib(self) -> float:
        return (self.peak - self.base) / 2 ** 20


def _setup(length: int, rows: int, fraction: float):
    from PIL import Image, ImageDraw

    from lit_grpo.tasks.attention.meter import AttentionConfig, AttentionMeter
    from lit_grpo.tasks.demo.embedded import EmbeddedModelConfig, build_embedded_vlm
    from lit_grpo.rollout import Rollout, encode_prompts, repeat_rows

    cfg = EmbeddedModelConfig(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2,
                              intermediate_size=1536, vision_hidden_size=64, vision_layers=2)
    model, processor = build_embedded_vlm(cfg)
    image = Image.new("RGB", (132, 88), "white")
    ImageDraw.Draw(image).rectangle([20, 20, 60, 60], fill=(200, 30, 30))
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which option?"}]}]]
    enc = encode_prompts(processor, messages, [[image]])
    t = int(length * fraction)
    filler = length - t - enc["input_ids"].shape[1]
    gen = torch.Generator().manual_seed(0)
    text_ids = lambda n: torch.randint(10, 300, (1, n), generator=gen)  # noqa: E731  ordinary BPE tokens
    enc["input_ids"] = torch.cat([enc["input_ids"], text_ids(filler)], 1)
    enc["attention_mask"] = torch.ones_like(enc["input_ids"])
    prompt = repeat_rows(enc, rows)
    completion = text_ids(t * rows).view(rows, t)
    rollout = Rollout(prompt, completion, torch.ones(rows, t, dtype=torch.bool), torch.zeros(rows, dtype=torch.bool),
                      [""] * rows)
    meter = AttentionMeter(model, processor, AttentionConfig())
    params = sum(p.numel() for p in model.parameters())
    return model, rollout, meter, [[image]] * rows, params, cfg


def _worker(length: int, rows: int, fraction: float, repeats: int) -> dict:
    """One sequence length in this (fresh) process: the plain and ASM passes timed alternately (so that
    load from other processes hits both alike), then the peak heap of each pass and of ``output_attentions``."""
    from lit_grpo.rollout import completion_logps, model_inputs

    torch.set_num_threads(int(os.environ.get("ASM_BENCH_THREADS", "2")))
    model, rollout, meter, images, params, cfg = _setup(length, rows, fraction)

    steps: list[float] = []

    @torch.no_grad()
    def run(kind: str):
        if kind == "plain":
            return completion_logps(model, rollout, 1.0)[0]
        if kind == "attentions":
            return model(**model_inputs(rollout), use_cache=False, output_attentions=True).attentions
        with meter.capture(model, rollout) as cap:
            logps = completion_logps(model, rollout, 1.0)[0]
        start = time.perf_counter()
        asm = meter.score(cap, rollout, images).asm
        steps.append(time.perf_counter() - start)
        return logps, asm

    times = {"plain": [], "asm": []}
    run("plain"), run("asm")  # warm-up
    for _ in range(repeats):
        for kind in ("plain", "asm"):
            start = time.perf_counter()
            run(kind)
            times[kind].append(time.perf_counter() - start)
    out = {k: min(v) for k, v in times.items()}
    out["step"] = statistics.median(steps[1:])
    with torch.no_grad():
        with PeakHeap() as peak:
            result = run("plain")
        out["plain_mib"] = peak.mib
        del result
        with PeakHeap() as peak:
            with meter.capture(model, rollout) as cap:
                logps = completion_logps(model, rollout, 1.0)[0]
            with PeakHeap() as own:
                asm = meter.score(cap, rollout, images).asm
        out["asm_mib"], out["asm_own_mib"] = peak.mib, own.mib + (cap.q.nbytes + cap.k.nbytes) / 2 ** 20
        del logps, asm, cap
    model.set_attn_implementation("eager")
    with PeakHeap() as peak:
        start = time.perf_counter()
        result = run("attentions")
        out["attentions_s"] = time.perf_counter() - start
    out["attentions_mib"] = peak.mib
    out["returned_mib"] = sum(a.numel() * a.element_size() for a in result) / 2 ** 20
    out["params"] = params
    return out


def _measure(length: int, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--lengths", str(length), "--rows", str(args.rows),
           "--completion-fraction", str(args.completion_fraction), "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--rows", type=int, default=4, help="completions scored in one pass (a micro-batch)")
    parser.add_argument("--completion-fraction", type=float, default=0.25, help="completion tokens T / L")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.lengths[0], args.rows, args.completion_fraction, args.repeats)))
        return
    print(f"Log-prob pass over {args.rows} rows, completion T = {args.completion_fraction:.0%} of L, float32, "
          f"{os.environ.get('ASM_BENCH_THREADS', '2')} threads, load average {os.getloadavg()[0]:.1f}.\n"
          f"Time: fastest of {args.repeats} runs, plain and ASM alternating. Memory: peak heap in use during the pass "
          "above its level before (glibc mallinfo2 sampled every 0.5 ms; model and inputs excluded).")
    header = (f"{'L':>5} {'T':>4} | {'plain s':>7} {'asm s':>7} {'+time':>6} {'step s':>6} {'+step':>6} | "
              f"{'plain MiB':>9} {'asm MiB':>7} "
              f"{'extra':>6} {'asm own':>7} | {'out_attn s':>10} {'MiB':>7} {'extra':>7} {'returned':>8} | "
              f"{'mem ratio':>9}")
    print(header + "\n" + "-" * len(header), flush=True)
    for length in args.lengths:
        r = _measure(length, args)
        asm_extra = max(r["asm_mib"] - r["plain_mib"], 0.0)
        attn_extra = r["attentions_mib"] - r["plain_mib"]
        ratio = attn_extra / max(asm_extra, r["asm_own_mib"], 1.0)  # the larger of the two ASM figures
        print(f"{length:>5} {int(length * args.completion_fraction):>4} | {r['plain']:>7.3f} {r['asm']:>7.3f} "
              f"{r['asm'] / r['plain'] - 1:>+6.1%} {r['step']:>6.3f} {r['step'] / r['plain']:>+6.1%} | "
              f"{r['plain_mib']:>9.1f} {r['asm_mib']:>7.1f} {asm_extra:>6.1f} {r['asm_own_mib']:>7.1f} | "
              f"{r['attentions_s']:>10.2f} {r['attentions_mib']:>7.1f} {attn_extra:>7.1f} {r['returned_mib']:>8.1f} | "
              f"{ratio:>8.0f}x", flush=True)
    print(f"model: {r['params'] / 1e6:.1f}M parameters (Granite-Vision-shaped LLaVA-NeXT, 6 layers, 8 query / 2 KV "
          "heads).\n'+time': (asm - plain) / plain from whole passes (noisy on a loaded machine); 'step s': median "
          "time of the ASM step alone after the forward; '+step' = step / plain.\n'extra': rise of the pass's peak; "
          "'asm own': the ASM step's own peak (after the forward) plus the captured q/k; mem ratio = out_attn extra / "
          "the larger of the two.\nTargets at 2048: +time <= 10%, mem ratio >= 20x.")


if __name__ == "__main__":
    main()
