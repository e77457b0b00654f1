"""Prompt templates: a sample -> chat messages (system turn + a user turn with image and text parts).

The model's processor turns the messages into tokens with its own chat template. Templates:
``visualsphinx_official`` and ``visualsphinx_seed`` (puzzles), ``physics_rubric`` (the reward-design
paper's tag format) and ``phyx_official`` (PhyX's own MC and OE evaluation prompts).
"""

from __future__ import annotations

from typing import Callable

from lit_grpo.data.phyx import MC_INSTRUCTION, OE_INSTRUCTION, render_options
from lit_grpo.data.sample import Sample
from lit_grpo.registry import Registry

Messages = list[dict]
TEMPLATES: Registry[Callable[[Sample], tuple[str | None, str]]] = Registry("prompt template")
"""Template name -> function returning ``(default system prompt or None, user text)``."""

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


RUBRIC_INSTRUCTION = (
    "Think through the problem step by step inside <think> </think>. Then give {answer} inside "
    "<answer> </answer>, the unit of your answer inside <unit> </unit>, and the physics principle you "
    "applied inside <principle> </principle>."
)
RUBRIC_ANSWER = {"mcq": "only the letter of the correct option", "open": "the final answer as a number with its unit"}


@TEMPLATES.register("physics_rubric")
def physics_rubric(sample: Sample) -> tuple[str | None, str]:
    """The reward-design paper's format: asks for ``<think>``, ``<answer>``, ``<unit>``, ``<principle>``.

    MCQ samples list their options (``A: ...`` lines) and ask for the letter; open-ended ones ask for a
    value with its unit. These are the tags the ``format`` reward checks.
    """
    instruction = RUBRIC_INSTRUCTION.format(answer=RUBRIC_ANSWER[sample.answer_format])
    if sample.answer_format == "mcq":
        options = "\n".join(f"{k}: {v}" for k, v in sample.options.items())
        return None, f"{sample.question}\n\nOptions:\n{options}\n\n{instruction}"
    return None, f"{sample.question}\n\n{instruction}"


@TEMPLATES.register("phyx_official")
def phyx_official(sample: Sample) -> tuple[str | None, str]:
    """PhyX's evaluation prompts, as the pre-rendered MC and OE files hold them.

    MCQ: the problem text, then "Please directly answer the question and provide the correct OPTION
    LETTER ONLY, e.g., A, B, C, D. OPTION: " and ``A: ... B: ...``; open-ended: the problem text, then
    " Please answer the question with step by step reasoning.". No system prompt.
    """
    if sample.answer_format == "mcq":
        return None, f"{sample.question}{MC_INSTRUCTION}{render_options(sample.options)}"
    return None, f"{sample.question}{OE_INSTRUCTION}"


def render_messages(sample: Sample, template: str, system_prompt: str | None = None) -> Messages:
    """Chat messages for ``sample``: ``system_prompt`` (if given) replaces the template's default."""
    default_system, text = TEMPLATES.get(template)(sample)
    system = system_prompt if system_prompt is not None else default_system
    messages: Messages = [{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []
    content = [{"type": "image"} for _ in sample.images] + [{"type": "text", "text": text}]
    messages.append({"role": "user", "content": content})
    return messages
