"""benchmarks/gpu_step.py: the FLOPs count by hand, device peaks by name, and the --tiny run on the CPU."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_step  # noqa: E402

SHAPE = dict(hidden=4, layers=1, intermediate=8, heads=2, kv_heads=1, vocab=10)


def test_update_flops_by_hand():
    """H 4, one layer, MLP 8, 2 query / 1 key-value heads (D_kv 2), V 10. Per token: 2 (2*16 + 2*4*2 + 3*4*8) =
    288. One sequence of 2 tokens: 3 (query, key) pairs, head on 2 positions: 3 (288*2 + 4*4*3 + 2*4*10*2) =
    3 * 784 = 2352. A prompt of 2 shared by 2 completions of 1 token: 4 tokens, 3 + 2 * (1 + 2) = 9 pairs:
    3 (1152 + 144 + 160) = 4368; the same rows plain (2 sequences of 3): 6 tokens, 12 pairs: 3 (1728 + 192 + 160)
    = 6240."""
    assert gpu_step.update_flops(**SHAPE, runs=[(1, 2, 0)], head_tokens=2) == 2352
    assert gpu_step.update_flops(**SHAPE, runs=[(1, 2, 0), (2, 1, 2)], head_tokens=2) == 4368
    assert gpu_step.update_flops(**SHAPE, runs=[(2, 3, 0)], head_tokens=2) == 6240


@pytest.mark.parametrize("name,tflops", [("NVIDIA H200", 989), ("NVIDIA H100 PCIe", 756), ("NVIDIA H100 80GB HBM3", 989),
                                         ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA A10G", 70), ("NVIDIA L40S", 362),
                                         ("NVIDIA L4", 121), ("Some New Accelerator", None)])
def test_device_peak_by_name(name, tflops):
    assert gpu_step.device_peak(name) == (None if tflops is None else tflops * 1e12)


@pytest.mark.slow
def test_tiny_run_prints_every_figure_for_both_trainers(tmp_path, capsys):
    pytest.importorskip("trl")
    results = gpu_step.main(["--tiny", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    for trainer in ("lit_grpo", "trl"):
        for key in ("generation_tokens_per_s", "update_tokens_per_s", "update_tflops", "mfu", "peak_memory_gib",
                    "update_flops"):
            assert f"{trainer}.{key}: " in out
        figures = results[trainer]
        assert figures["mfu"] is None and f"{trainer}.mfu: n/a" in out  # no peak on a CPU
        assert figures["generation_tokens_per_s"] > 0 and figures["update_tokens_per_s"] > 0
        assert figures["peak_memory_gib"] > 0
    # 2 prompts x G 4 x 8 tokens: lit_grpo runs each prompt once, TRL every row's copy: fewer FLOPs per token
    assert results["lit_grpo"]["update_flops"] < results["trl"]["update_flops"]


@pytest.mark.slow
def test_tiny_run_sharded_on_two_cpu_ranks(tmp_path):
    """The FSDP2 path the script takes on GPUs (``--strategy fsdp2 --devices N``), here on 2 CPU processes that
    Lightning starts (loopback): rank 0 prints every figure of lit_grpo's run, once."""
    from launch import run_together

    command = [sys.executable, str(Path(gpu_step.__file__)), "--tiny", "--no-trl", "--strategy", "fsdp2", "--devices",
               "2", "--root", str(tmp_path)]
    stdout = run_together([command], timeout=300)[0]
    assert "lit_grpo: fsdp2 on 2 device(s)" in stdout
    for key in ("generation_tokens_per_s", "update_tokens_per_s", "update_flops", "peak_memory_gib", "step_seconds"):
        lines = [line for line in stdout.splitlines() if line.startswith(f"lit_grpo.{key}: ")]
        assert len(lines) == 1 and float(lines[0].split(": ")[1]) > 0, key
    assert "lit_grpo.mfu: n/a" in stdout and "trl." not in stdout


def test_trl_is_refused_beside_several_devices(capsys):
    with pytest.raises(SystemExit):
        gpu_step.main(["--tiny", "--strategy", "fsdp2", "--devices", "2"])
    assert "TRL runs on one device here: add --no-trl" in capsys.readouterr().err
