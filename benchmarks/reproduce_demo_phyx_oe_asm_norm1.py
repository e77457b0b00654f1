"""Whether this checkout trains ``checkpoints/demo_phyx_oe_asm_norm1`` again, bit for bit.

    python benchmarks/reproduce_demo_phyx_oe_asm_norm1.py       # about 2 minutes on one idle core

The shipped checkpoint is the attention sweep's run ``oe_asm_norm_w1_s0``: the SFT warm start
``checkpoints/demo_phyx`` trained 100 GRPO steps (4 prompts x 8 completions, open-ended, format + accuracy +
attention at weight 1 each, ``normalize_then_sum``, seed 0; see its README). This script builds that run from
``configs/experiments/phyx_attention_sweep.yaml`` with the runner's own code (its configs, arguments and generated
overlay), trains it with the runner's launcher in a temporary output folder, and compares the exported
``model.safetensors`` with the shipped one by SHA-256. Training is chaotic at this scale: a change in the last bit
of one step's reward (e.g. the order of a mean's float32 sum) trains another policy by the last step, which a
two-step check does not see. It prints the two hashes, the time taken and ``identical`` or ``DIFFERENT``; when they
differ, how this environment differs from the one recorded beside the shipped checkpoint (``environment.json``,
:mod:`lit_grpo.environment`; docs/install.md#locked installs that one) and the ``train/reward`` of each progress line
(every few steps), to compare with the sweep's log of that run; exit status 0 when they match.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "checkpoints" / "demo_phyx_oe_asm_norm1" / "model.safetensors"
RECORDED = SHIPPED.with_name("environment.json")
SWEEP = "configs/experiments/phyx_attention_sweep.yaml"
RUN = "oe_asm_norm_w1_s0"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    os.chdir(ROOT)  # the configs' relative paths, as the runner reads them
    from lit_grpo.tasks.phyx.experiments import parse
    from lit_grpo.tasks.phyx.experiments.phyx import _configs, _write_yaml, fit_overlay, launch

    with tempfile.TemporaryDirectory() as tmp:
        exp = parse(["phyx", "--config", SWEEP, "--output", tmp])
        run = next(r for r in exp.runs() if r.name == RUN)
        overlay = _write_yaml(exp.path("configs", f"{run.name}.fit.yaml"), fit_overlay(exp, run))
        log = exp.path("runs", run.name, "fit.log")
        rc, took = launch(["fit", *_configs([*run.configs, overlay]), *run.fit_args], log, "subprocess")
        if rc != 0:
            print(log.read_text()[-3000:])
            print(f"the fit failed (exit {rc})")
            return 2
        trained, shipped = sha256(exp.path("runs", run.name, "model.safetensors")), sha256(SHIPPED)
        output = log.read_text()
    same = trained == shipped
    print(f"shipped {SHIPPED.relative_to(ROOT)}: {shipped}")
    print(f"trained now:                                       {trained}")
    print(f"{'identical' if same else 'DIFFERENT'}; fit took {took:.0f} s "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')})")
    if not same:
        from lit_grpo.environment import differences, record

        if RECORDED.is_file():
            lines = differences(json.loads(RECORDED.read_text()), record())
            print(f"this environment against {RECORDED.relative_to(ROOT)} ({len(lines)} differences):")
            print("\n".join(f"  {line}" for line in lines) or "  none: the same versions, build and hardware")
        else:
            print(f"no environment is recorded beside the shipped checkpoint ({RECORDED.relative_to(ROOT)})")
        rewards = [line.split("train/reward")[1].split()[0] for line in output.splitlines()
                   if "train/reward" in line and line.startswith("step ")]
        print("train/reward at each progress line:", " ".join(rewards))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
