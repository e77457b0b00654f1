"""lit_grpo against TRL's ``GRPOTrainer`` at the same work: completions turned into updates per second.

    pip install -e ".[benchmark]"            # TRL is a benchmark extra, never a runtime dependency
    python benchmarks/vs_trl.py              # every configuration, both image sizes
    python benchmarks/vs_trl.py --configs lora:0.04 --images base --rounds 1
    python benchmarks/vs_trl.py --gradient-checkpointing    # both trainers checkpoint (the paper setting)

Both trainers get the same embedded Granite-architecture VLM (LLaVA-NeXT + Granite + SigLIP, about 5M
parameters, float32, SDPA), saved to disk once and loaded by local path (offline), the same embedded
puzzles and prompts (the ``visualsphinx_seed`` template), the same reward (``binary``), G = 8, 16
completions per optimizer step (2 prompts), 64 completion tokens, temperature 1.0, top-p 1, top-k off,
the same learning rate (AdamW, no weight decay, constant), clip 0.2, ``dapo`` aggregation, one update per
rollout, one forward/backward over all 16 completions. TRL's bf16 default is turned off; gradient
checkpointing is off on both sides, or on on both with ``--gradient-checkpointing`` (non-reentrant, as
lit_grpo's ``policy.gradient_checkpointing``; lit_grpo keeps its shared prefix, one checkpoint per decoder
layer). The load of the machine (``os.getloadavg``) is printed before and after: the runs alternate, so both
trainers meet the same load. Full fine-tuning trains every weight on both sides (TRL's default; lit_grpo with
``freeze_vision_tower: false``); LoRA (r 16, alpha 32) wraps the language model's attention projections.

A step is everything between two optimizer steps: sampling, the scoring/reference passes, rewards,
advantages, forward + backward, the optimizer. Runs alternate A B A B (TRL, lit_grpo, TRL, lit_grpo) in one
process, each run a fresh trainer whose first ``--warmup`` steps are dropped; the table gives the median
step time over all rounds as completions per second, the ratio lit_grpo / TRL, and the same ratio of the
fastest steps (the least disturbed by other processes on a shared machine, as in ``benchmarks/asm.py``).

Image sizes: ``base`` = the puzzle images as generated (132 x 88 pixels: 70 image tokens of a 172-token
prompt); ``large`` = the same images upscaled 4x with the model allowing up to 5 x 5 high-resolution
tiles: about 4x as many image tokens per prompt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

G, COMPLETIONS_PER_STEP, MAX_TOKENS, LR = 8, 16, 64, 1e-5
MODEL = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
             intermediate_size=1024, vision_hidden_size=128, vision_layers=2)
"""About 4.7M parameters: the 'embedded Granite-architecture model (about 5M)' of the comparison."""
UPSCALE = 4
"""The large-image variant upscales every image by this factor."""


# ----------------------------------------------------------------------------------------- shared inputs
def build_model(root: Path, image: str) -> str:
    from lit_grpo.tasks.demo.embedded import EmbeddedModelConfig, save_embedded_vlm

    path = root / f"granite_5m_{image}"
    if not (path / "config.json").is_file():
        s = 56
        pinpoints = None if image == "base" else [[i * s, j * s] for i in range(1, 6) for j in range(1, 6)]
        save_embedded_vlm(path, EmbeddedModelConfig(grid_pinpoints=pinpoints, **MODEL))
    return str(path)


def build_samples(root: Path, image: str, num: int = 64):
    from lit_grpo.tasks.visualsphinx.puzzles import write_puzzles
    from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx

    path = root / "puzzles.parquet"
    if not path.is_file():
        write_puzzles(path, num=num, seed=0)
    ds = read_visualsphinx(str(path))
    samples = [ds[i] for i in range(len(ds))]
    if image == "large":
        import dataclasses

        samples = [dataclasses.replace(s, images=[im.resize((im.width * UPSCALE, im.height * UPSCALE))
                                                  for im in s.images]) for s in samples]
    return samples


def prompt_tokens(model_path: str, samples) -> tuple[float, float]:
    """Mean prompt tokens and image tokens of the first 8 prompts."""
    from lit_grpo.data.sample import render_messages
    from lit_grpo.families import load_processor
    from lit_grpo.rollout import encode_prompts

    processor = load_processor(model_path)
    image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    encs = [encode_prompts(processor, [render_messages(s, "visualsphinx_seed")], [s.images]) for s in samples[:8]]
    return (statistics.mean(int(e["attention_mask"].sum()) for e in encs),
            statistics.mean(int((e["input_ids"] == image_id).sum()) for e in encs))


def param_count(model_path: str) -> int:
    from transformers import AutoModelForImageTextToText

    return sum(p.numel() for p in AutoModelForImageTextToText.from_pretrained(model_path).parameters())


# ----------------------------------------------------------------------------------------- TRL
def run_trl(model_path: str, samples, lora: bool, beta: float, steps: int, out: Path,
            checkpointing: bool = False) -> list[float]:
    import datasets
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lit_grpo.data.sample import render_messages
    from lit_grpo.families import load_processor
    from lit_grpo.policy import LANGUAGE_MODEL_ATTENTION
    from lit_grpo.rewards import REWARDS

    rows = [{"prompt": render_messages(s, "visualsphinx_seed"), "images": s.images, "answer": s.answer}
            for s in samples]
    dataset = datasets.Dataset.from_list(rows)
    binary = REWARDS.get("binary")

    def reward(completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return binary([t if isinstance(t, str) else t[0]["text"] for t in texts], answer=answer)

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.start)

    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=COMPLETIONS_PER_STEP, gradient_accumulation_steps=1,
        num_generations=G, max_completion_length=MAX_TOKENS, temperature=1.0, top_p=1.0, top_k=0, beta=beta,
        learning_rate=LR, weight_decay=0.0, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
        epsilon=0.2, loss_type="dapo", scale_rewards="group", num_iterations=1, gradient_checkpointing=checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
        bf16=False, fp16=False, use_cpu=True, max_steps=steps, logging_steps=10 ** 6, save_strategy="no",
        report_to="none", seed=0, dataloader_num_workers=0, log_completions=False,
        model_init_kwargs={"dtype": torch.float32})
    peft = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LANGUAGE_MODEL_ATTENTION) if lora else None
    trainer = GRPOTrainer(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset,
                          processing_class=load_processor(model_path), peft_config=peft, callbacks=[Timer()])
    trainer.train()
    return times


# ----------------------------------------------------------------------------------------- lit_grpo
def run_lit(model_path: str, samples, lora: bool, beta: float, steps: int, perf: dict,
            checkpointing: bool = False) -> list[float]:
    import functools

    import lightning as L
    from torch.utils.data import DataLoader

    from lit_grpo.config import PerfConfig
    from lit_grpo.data.datamodule import PromptBatch
    from lit_grpo.data.sample import render_messages
    from lit_grpo.module import GRPOConfig, GRPOModule
    from lit_grpo.policy import LoRAConfig, PolicyConfig
    from lit_grpo.rewards import RewardSpec
    from lit_grpo.rollout import SamplingConfig

    times: list[float] = []

    class Timer(L.Callback):
        def on_train_batch_start(self, *a, **k):
            self.start = time.perf_counter()

        def on_train_batch_end(self, *a, **k):
            times.append(time.perf_counter() - self.start)

    extra = {"perf": PerfConfig(**perf)} if perf else {}
    module = GRPOModule(
        policy=PolicyConfig(name_or_path=model_path, local_files_only=True, freeze_vision_tower=False,
                            gradient_checkpointing=checkpointing,
                            lora=LoRAConfig(r=16, alpha=32) if lora else None),
        rewards=[RewardSpec("binary")],
        grpo=GRPOConfig(beta=beta, loss_type="dapo", scale_rewards="group", num_iterations=1, max_grad_norm=1.0),
        sampling=SamplingConfig(num_generations=G, temperature=1.0, top_p=1.0, top_k=0,
                                max_completion_length=MAX_TOKENS),
        optimizer=functools.partial(torch.optim.AdamW, lr=LR, weight_decay=0.0), **extra)
    loader = DataLoader(samples, batch_size=COMPLETIONS_PER_STEP // G, shuffle=True,
                        collate_fn=lambda s: PromptBatch(s, [render_messages(x, "visualsphinx_seed") for x in s]))
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, callbacks=[Timer()])
    trainer.fit(module, train_dataloaders=loader)
    return times


# ----------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=["lora:0", "lora:0.04", "full:0", "full:0.04"],
                        help="tuning:beta pairs (tuning = lora | full)")
    parser.add_argument("--images", nargs="+", default=["base", "large"], choices=["base", "large"])
    parser.add_argument("--rounds", type=int, default=2, help="A B rounds per configuration")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=1, help="steps dropped at the start of every run")
    parser.add_argument("--plain", action="store_true", help="lit_grpo's plain path (no prefix sharing)")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="both trainers with gradient checkpointing (non-reentrant)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: on a small machine shared with other work, several threads "
                             "busy-wait on each other and a tiny model's many small ops slow down ~100x)")
    parser.add_argument("--root", default=None, help="folder for the model and data (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    import trl

    root = Path(args.root or tempfile.mkdtemp(prefix="vs_trl_"))
    perf = {"engine": "plain", "cache_image_features": False} if args.plain else {}
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}, "
          f"{torch.get_num_threads()} threads; G={G}, {COMPLETIONS_PER_STEP} completions/step, "
          f"{MAX_TOKENS} completion tokens; median of {args.rounds} x {args.steps} steps after "
          f"{args.warmup} warm-up step(s) per run; lit_grpo path: {'plain' if args.plain else 'default'}; "
          f"gradient checkpointing {'on' if args.gradient_checkpointing else 'off'} (both); "
          f"load average {_load()}", flush=True)
    rows = []
    for image in args.images:
        model_path = build_model(root, image)
        samples = build_samples(root, image)
        tokens, image_tokens = prompt_tokens(model_path, samples)
        print(f"{image} images: {param_count(model_path) / 1e6:.2f}M parameters, {tokens:.0f} prompt tokens of "
              f"which {image_tokens:.0f} image tokens", flush=True)
        for config in args.configs:
            tuning, beta = config.split(":")
            lora, beta = tuning == "lora", float(beta)
            trl_times, lit_times = [], []
            for r in range(args.rounds):
                with tempfile.TemporaryDirectory() as out:
                    trl_times += run_trl(model_path, samples, lora, beta, args.warmup + args.steps,
                                         Path(out), args.gradient_checkpointing)[args.warmup:]
                lit_times += run_lit(model_path, samples, lora, beta, args.warmup + args.steps, perf,
                                     args.gradient_checkpointing)[args.warmup:]
            trl_cps = COMPLETIONS_PER_STEP / statistics.median(trl_times)
            lit_cps = COMPLETIONS_PER_STEP / statistics.median(lit_times)
            tokens_text = f"{tokens:.0f} ({image_tokens:.0f})"
            rows.append((image, tokens_text, tuning, beta, trl_cps, lit_cps, lit_cps / trl_cps,
                         min(trl_times) / min(lit_times)))
            print(f"  {image} {tuning} beta={beta}: TRL {[round(t, 2) for t in trl_times]} s, "
                  f"lit_grpo {[round(t, 2) for t in lit_times]} s", flush=True)
    print()
    print("| image | prompt tokens (image) | tuning | beta | TRL completions/s | lit_grpo completions/s | ratio | "
          "ratio of fastest steps |")
    print("|---|---|---|---|---|---|---|---|")
    for image, tokens, tuning, beta, a, b, ratio, fastest in rows:
        print(f"| {image} | {tokens} | {tuning} | {beta:g} | {a:.2f} | {b:.2f} | {ratio:.2f}x | {fastest:.2f}x |")
    print(f"\nload average at the end {_load()}")


def _load() -> str:
    """The 1, 5 and 15 minute load averages of the machine."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
