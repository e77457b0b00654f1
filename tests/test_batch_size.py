"""One meaning of the paper's "global batch size of 128" everywhere: completions per optimizer step (TRL's
meaning), 16 prompts x G = 8, in the paper configs, the benchmarks, README and docs/."""

import re
import sys
from pathlib import Path

import pytest
import yaml
from tiny_runs import composed

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.mark.parametrize("config", sorted(ROOT.glob("configs/granite_vision_*.yaml")), ids=lambda p: p.name)
def test_the_paper_configs_take_128_completions_a_step(config):
    if "data" not in yaml.safe_load(config.read_text()):  # an overlay (the rubric or ASM reward): its base sets the step
        return
    cfg = composed(config)  # with the files it extends (_base_)
    g = cfg["model"]["init_args"]["sampling"]["num_generations"]
    assert (cfg["data"]["batch_size"], g) == (16, 8)


def test_the_benchmarks_take_the_same_step():
    import gpu_step
    import memory

    assert gpu_step.PAPER["prompts"] * gpu_step.PAPER["group"] == 128
    args = memory.build_parser().parse_args([])
    assert args.prompts_per_step * args.group == 128 and args.prompts_per_step * args.group // args.gpus == 32


def test_docs_say_which_meaning_and_use_it():
    readme = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    assert "completions per optimizer step, not prompts" in readme
    assert "4 prompts x 8 = 32 completions per GPU" in readme and "16 prompts x G =\n8 = 128 completions" in readme
    assert not re.search(r"128 prompts per\s+step|256 completions per (GPU|step)", readme)
