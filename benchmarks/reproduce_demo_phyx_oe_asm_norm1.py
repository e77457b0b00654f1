"""Whether this checkout trains ``checkpoints/demo_phyx_oe_asm_norm1`` again, bit for bit.

    python benchmarks/reproduce_demo_phyx_oe_asm_norm1.py       # about 2 minutes on one idle core

The shipped checkpoint is the attention sweep's run ``oe_asm_norm_w1_s0``: the SFT warm start
``checkpoints/demo_phyx`` trained 100 GRPO steps (4 prompts x 8 completions, open-ended, format + accuracy +
attention at weight 1 each, ``normalize_then_sum``, seed 0; see its README). This script trains the same run in a
temporary folder with the runner's command and compares the exported ``model.safetensors`` with the shipped one
by SHA-256. Training is chaotic at this scale: a change in the last bit of one step's reward (e.g. the order of a
mean's float32 sum) trains another policy by the last step, which a two-step check does not see. It prints the two hashes, the time taken, and when they differ the
``train/reward`` of each progress line (every few steps), to compare with the sweep's log of that run; exit status
0 when they match.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "checkpoints" / "demo_phyx_oe_asm_norm1" / "model.safetensors"
REWARDS = ('[{"name": "format", "weight": 1.0}, {"name": "open_accuracy", "weight": 1.0}, '
           '{"name": "attention", "weight": 1.0}]')
OVERLAY = """seed_everything: 0
trainer:
  enable_checkpointing: false
  logger: false
  default_root_dir: {tmp}
  callbacks:
  - class_path: lit_grpo.callbacks.ExportPretrained
    init_args: {{dirpath: {out}}}
model:
  init_args:
    policy:
      name_or_path: checkpoints/demo_phyx
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "export"
        overlay = Path(tmp) / "overlay.yaml"
        overlay.write_text(OVERLAY.format(out=out, tmp=tmp))
        cmd = [sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo_phyx_oe.yaml",
               "--config", "configs/demo_phyx_oe_asm.yaml", "--config", str(overlay),
               "--trainer.limit_val_batches=0", "--model.init_args.evaluation.before_fit=false",
               "--data.batch_size=4", "--trainer.max_steps=100", "--trainer.max_time=00:02:00:00",
               "--model.init_args.grpo.multi_objective_aggregation=normalize_then_sum",
               f"--model.init_args.rewards={REWARDS}"]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        took = time.perf_counter() - start
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
            print(f"the fit failed (exit {proc.returncode})")
            return 2
        trained, shipped = sha256(out / "model.safetensors"), sha256(SHIPPED)
    same = trained == shipped
    print(f"shipped {SHIPPED.relative_to(ROOT)}: {shipped}")
    print(f"trained now:                              {trained}")
    print(f"{'identical' if same else 'DIFFERENT'}; fit took {took:.0f} s (OMP_NUM_THREADS={env['OMP_NUM_THREADS']})")
    if not same:
        rewards = [line.split("train/reward")[1].split()[0] for line in (proc.stdout + proc.stderr).splitlines()
                   if "train/reward" in line and line.startswith("step ")]
        print("train/reward at each progress line:", " ".join(rewards))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
