"""VisualSphinx's two prompt templates, registered into the core's ``TEMPLATES``: ``visualsphinx_official`` (its
training prompt, think-then-box) and ``visualsphinx_seed`` (the seed paper's step-by-step suffix, the default
template of the data module)."""

from __future__ import annotations

from lit_grpo.data.sample import TEMPLATES, Sample

SEED_SUFFIX = "Let's think step by step and output the final answer within \\boxed{}."
R1V_INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final "
    "answer. The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST "
    "BE put in \\boxed{}."
)


def _choices(sample: Sample) -> str:
    return "The choices are:\n" + "\n".join(f"{k}: {v}" for k, v in sample.options.items())


@TEMPLATES.register("visualsphinx_official")
def visualsphinx_official(sample: Sample) -> tuple[str | None, str]:
    """VisualSphinx's training prompt: problem, choices, then the think-then-box instruction."""
    return "You are a helpful assistant.", f"{sample.question}\n\n{_choices(sample)}\n\n{R1V_INSTRUCTION}"


@TEMPLATES.register("visualsphinx_seed")
def visualsphinx_seed(sample: Sample) -> tuple[str | None, str]:
    """The seed paper's suffix: "Let's think step by step and output the final answer within \\boxed{}."."""
    return None, f"{sample.question}\n\n{_choices(sample)}\n\n{SEED_SUFFIX}"
