"""The PhyX task's prompt templates and SFT reference responses: PhyX's own evaluation prompts (``phyx_official``,
the instructions its pre-rendered files hold), the reward-design paper's tag format (``physics_rubric``: ``<think>``,
``<answer>``, ``<unit>``, ``<principle>``, the tags the ``format`` reward checks) and the SFT reference in that
format (``physics_tags``). Registered into the core's ``TEMPLATES`` and ``REFERENCES``."""

from __future__ import annotations

from lit_grpo.data.sample import REFERENCES, TEMPLATES, Sample

MC_INSTRUCTION = ("Please directly answer the question and provide the correct OPTION LETTER ONLY, "
                  "e.g., A, B, C, D. OPTION: ")
"""Official MC instruction, appended right after the question, followed by ``A: ... B: ...``."""
OE_INSTRUCTION = " Please answer the question with step by step reasoning."
"""Official OE instruction, appended right after the question."""


def render_options(options: dict[str, str]) -> str:
    """``{"A": "x", "B": "y"}`` -> ``"A: x B: y"`` (the official MC prompt's option list)."""
    return " ".join(f"{k}: {v}" for k, v in options.items())


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


@REFERENCES.register("physics_tags")
def physics_tags(sample: Sample) -> str:
    """Physics items in the rubric format: ``<think>``, ``<answer>``, ``<unit>``, ``<principle>``.

    The reasoning is ``meta["solution"]`` (or ``meta["explanation"]``) when the dataset has one; unit and principle
    are the sample's task fields.
    """
    principle = sample.fields.get("principle")
    reasoning = str(sample.meta.get("solution") or sample.meta.get("explanation") or
                    f"Apply {principle or 'the relevant law'} to the quantities in the figure.").strip()
    return (f"<think>{reasoning}</think><answer>{sample.answer}</answer>"
            f"<unit>{sample.fields.get('unit') or 'none'}</unit><principle>{principle or ''}</principle>")
