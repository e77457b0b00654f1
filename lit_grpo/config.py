"""The option groups of :class:`lit_grpo.GRPOModule` (dataclasses that LightningCLI parses from a config;
each field's docstring is its ``--print_config`` comment).

Every numeric field declares its range in its type (``Annotated[float, Range(ge=0)]``, :mod:`lit_grpo.ranges`),
and the groups are :class:`~lit_grpo.ranges.Checked`: a value out of range or not finite is refused however it
arrives. A new field declares its range the same way; :func:`check_settings` keeps only the choices (names)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from lit_grpo.grpo import ADVANTAGE_SCALES, LOSS_AGGREGATIONS
from lit_grpo.ranges import Checked, Range
from lit_grpo.rewards import RewardSpec
from lit_grpo.rewards.judge.config import JudgeConfig


@dataclasses.dataclass
class GRPOConfig(Checked):
    """The policy-gradient objective."""

    beta: Annotated[float, Range(ge=0)] = 0.0
    """Weight of the k3 KL to the reference policy; 0 loads no reference at all."""
    epsilon_low: Annotated[float, Range(ge=0, le=1)] = 0.2
    """Lower clip range of the importance ratio (``1 - epsilon_low``)."""
    epsilon_high: Annotated[float, Range(ge=0)] = 0.2
    """Upper clip range (``1 + epsilon_high``; DAPO's clip-higher uses 0.28)."""
    loss_type: str = "dapo"
    """Aggregation: ``grpo`` | ``bnpo`` | ``dr_grpo`` | ``dapo`` (see ``lit_grpo.grpo.grpo_loss``)."""
    scale_rewards: str = "group"
    """Advantage scaling: ``group`` | ``batch`` | ``none``."""
    advantage_eps: Annotated[float, Range(ge=0)] = 1e-4
    """Added to the std before dividing."""
    num_iterations: Annotated[int, Range(ge=1)] = 1
    """Optimizer steps per rollout (mu); > 1 stores the sampling policy's log-probs."""
    micro_batch_size: Annotated[int, Range(ge=1, note="null = all completions at once")] | None = None
    """Completions per forward/backward (gradient accumulation inside a step); None = all N at once."""
    mask_truncated_completions: bool = False
    """Exclude completions that hit ``max_completion_length`` without a stop token from the loss."""
    max_grad_norm: Annotated[float, Range(gt=0, note="null = no clipping")] | None = 1.0
    """Gradient-norm clip (None = off)."""


@dataclasses.dataclass
class EvalConfig(Checked):
    """How validation/test/predict complete prompts; each mode is logged under its own prefix."""

    greedy: bool = True
    """One greedy completion per prompt (``<stage>/greedy/...``)."""
    num_samples: Annotated[int, Range(ge=0)] = 0
    """Sampled completions per prompt at ``temperature`` (``<stage>/sampled/...``); 0 = off."""
    temperature: Annotated[float, Range(gt=0)] | None = None
    """Sampling temperature of evaluation (None = the training temperature)."""
    seed: int | None = 0
    """Sampling seed of evaluation (batch ``i`` uses ``seed + i``), so curves compare like with like; None = no reseeding."""
    metrics: list[RewardSpec] = dataclasses.field(default_factory=list)
    """Extra rewards computed only in evaluation (e.g. ``boxed_format`` compliance); not trained on."""
    before_fit: bool = False
    """Run validation once before the first training step (the step-0 point of the curves)."""
    scorer: str | None = None
    """Registered reward giving the correctness of each evaluation completion (logged as
    ``<stage>/<mode>/accuracy`` and tabulated by ``lit_grpo.callbacks.AccuracyTable``): ``accuracy``
    (paper protocol, MCQ), ``open_accuracy`` (paper protocol, open-ended, with ``pass_threshold``),
    ``phyx_official`` (PhyX rule mode), ``binary`` (VisualSphinx). When a configured reward (or metric) has
    this label and ``scorer_kwargs`` and ``judge`` are empty or equal to its kwargs, its values are reused (no
    second judge call); otherwise the scorer is built with ``scorer_kwargs`` and ``judge``."""
    scorer_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Options of the scorer other than its judge (see its docstring), e.g. ``strict`` of ``rubric``."""
    judge: JudgeConfig | None = None
    """The judge of a judge-backed scorer (``open_accuracy``, ``rubric``), each option settable on its own
    (``--model.init_args.evaluation.judge.num_judges=5``); ``None``: the configured reward's verdicts when it
    is the scorer, else the scorer's default (the offline judge)."""
    pass_threshold: float | None = None
    """A score counts as correct (1) when at least this, else 0 (NaN stays "cannot score"); ``None`` keeps the
    scorer's value. For ``open_accuracy`` (jury correctness / 2), ``1.0`` = every juror says fully correct."""

    @staticmethod
    def option_types(value) -> dict[str, Any]:
        """``scorer_kwargs`` is typed by the scorer's own options (:mod:`lit_grpo.ranges`)."""
        from lit_grpo.rewards.registry import reward_option_types

        return {"scorer_kwargs": reward_option_types(value.get("scorer"))}


@dataclasses.dataclass
class PerfConfig(Checked):
    """How much of each prompt is shared among its G completions."""

    share_prefix: bool = True
    """Run each prompt once per pass (sampling, old log-probs, reference, update) and let its completions attend to
    its cached keys and values; False = the plain path (every completion row carries its own prompt copy)."""
    cache_image_features: bool = True
    """With ``share_prefix``: encode each prompt's images once per rollout and reuse them in every pass, when
    the vision tower and projector are frozen; they are re-encoded in every pass when any of them trains."""


def check_settings(grpo: GRPOConfig, sampling) -> None:
    """Refuse a ``loss_type`` or ``scale_rewards`` that names no variant (``sampling``: a
    :class:`lit_grpo.rollout.SamplingConfig`; numbers are checked by their declared ranges when the groups are built).

    Raises:
        ValueError: naming the setting, its value and the valid names.
    """
    def either(names) -> str:
        return ", ".join(list(names)[:-1]) + " or " + list(names)[-1]

    problems = []
    if grpo.loss_type not in LOSS_AGGREGATIONS:
        problems.append(f"grpo.loss_type must be {either(LOSS_AGGREGATIONS)}, got {grpo.loss_type!r}")
    if grpo.scale_rewards not in ADVANTAGE_SCALES:
        problems.append(f"grpo.scale_rewards must be {either(ADVANTAGE_SCALES)}, got {grpo.scale_rewards!r}")
    if problems:
        raise ValueError("; ".join(problems))
