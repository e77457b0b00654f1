"""Callbacks that observe training: completion samples as TensorBoard text, HF-format export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only


def _code(text: str) -> str:
    """Render ``text`` verbatim in TensorBoard's Markdown: every line indented as a code block."""
    return "\n".join("    " + line for line in str(text).splitlines() or [""])


def _prompt_text(messages: list[dict]) -> str:
    parts = []
    for m in messages:
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        body = " ".join("<image>" if c["type"] == "image" else c.get("text", "") for c in content)
        parts.append(f"[{m['role']}] {body}")
    return "\n".join(parts)


class CompletionSamples(L.Callback):
    """Every ``every_n_steps`` optimizer steps, log a few prompts with their completions and rewards as text."""

    def __init__(self, every_n_steps: int = 10, num_prompts: int = 1, num_completions: int = 4):
        self.every_n_steps, self.num_prompts, self.num_completions = every_n_steps, num_prompts, num_completions

    @rank_zero_only
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not isinstance(outputs, dict) or "completions" not in outputs or batch_idx % self.every_n_steps:
            return
        writer = getattr(trainer.logger, "experiment", None)
        if writer is None or not hasattr(writer, "add_text"):
            return
        g = outputs["group_size"]
        blocks = []
        for p in range(min(self.num_prompts, len(outputs["prompts"]))):
            blocks.append(f"**prompt {p}** (gold `{outputs['answers'][p]}`)\n\n{_code(_prompt_text(outputs['prompts'][p]))}")
            for j in range(p * g, p * g + min(self.num_completions, g)):
                rewards = ", ".join(f"{k}={v[j]:.3f}" for k, v in outputs["rewards"].items())
                blocks.append(f"completion {j - p * g}: total={outputs['total'][j]:.3f} ({rewards}), "
                              f"advantage={outputs['advantages'][j]:+.3f}\n\n{_code(outputs['completions'][j])}")
        writer.add_text("train/completions", "\n\n".join(blocks), trainer.global_step)


class ExportPretrained(L.Callback):
    """At the end of fit, write the policy in Hugging Face format (``save_pretrained``) with its processor.

    With LoRA the adapter is written (``merge: true`` merges it into a full model instead); the folder
    then loads by path as ``model.policy.name_or_path`` (or ``lora.adapter_path``).
    """

    def __init__(self, dirpath: str = "checkpoints/export", merge: bool = False):
        self.dirpath, self.merge = dirpath, merge

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        model = pl_module.policy
        if self.merge and hasattr(model, "merge_and_unload"):
            import copy

            model = copy.deepcopy(model).merge_and_unload()
        out = Path(self.dirpath)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        pl_module.processor.save_pretrained(out)


class EvalSummary(L.Callback):
    """Collect every validation's ``val/<mode>/reward/<name>`` mean +- SE; print and save the curves at the end.

    Writes ``eval_curves.csv`` and ``eval_curves.md`` into the logger's run folder and prints the first
    and last evaluation of each key with their standard errors (SE over prompts).
    """

    def __init__(self, keys: list[str] | None = None):
        self.keys = keys
        self.rows: list[dict[str, float]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()
                   if k.startswith("val/") and "/reward" in k}
        self.rows.append({"step": trainer.global_step, **metrics})

    def _keys(self) -> list[str]:
        found = sorted({k for r in self.rows for k in r if k != "step" and not k.endswith("_se")})
        return [k for k in found if self.keys is None or any(p in k for p in self.keys)]

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.rows:
            return
        keys = self._keys()
        first, last = self.rows[0], self.rows[-1]
        lines = [f"\nValidation (mean +- SE over prompts), step {first['step']} -> step {last['step']}:"]
        for k in keys:
            a, b = first.get(k, float("nan")), last.get(k, float("nan"))
            lines.append(f"  {k:<40} {a:.3f} +- {first.get(k + '_se', float('nan')):.3f}  ->  "
                         f"{b:.3f} +- {last.get(k + '_se', float('nan')):.3f}  (change {b - a:+.3f})")
        print("\n".join(lines))
        logdir = getattr(trainer.logger, "log_dir", None)
        if logdir:
            self._write(Path(logdir), keys)

    def _write(self, folder: Path, keys: list[str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        cols = ["step"] + [c for k in keys for c in (k, k + "_se")]
        with open(folder / "eval_curves.csv", "w") as f:
            f.write(",".join(cols) + "\n")
            for r in self.rows:
                f.write(",".join(f"{r.get(c, float('nan')):.6g}" for c in cols) + "\n")
        md = ["| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for r in self.rows:
            cells = [f"{r.get(k, float('nan')):.3f} ± {r.get(k + '_se', float('nan')):.3f}" for k in keys]
            md.append(f"| {r['step']} | " + " | ".join(cells) + " |")
        (folder / "eval_curves.md").write_text("\n".join(md) + "\n")
