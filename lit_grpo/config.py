"""The option groups of :class:`lit_grpo.GRPOModule` (dataclasses that LightningCLI parses from a config;
each field's docstring is its ``--print_config`` comment)."""

from __future__ import annotations

import dataclasses
from typing import Any

from lit_grpo.grpo import ADVANTAGE_SCALES, LOSS_AGGREGATIONS
from lit_grpo.rewards import RewardSpec
from lit_grpo.rewards.judge.config import JudgeConfig


@dataclasses.dataclass
class GRPOConfig:
    """The policy-gradient objective."""

    beta: float = 0.0
    """Weight of the k3 KL to the reference policy; 0 loads no reference at all."""
    epsilon_low: float = 0.2
    """Lower clip range of the importance ratio (``1 - epsilon_low``)."""
    epsilon_high: float = 0.2
    """Upper clip range (``1 + epsilon_high``; DAPO's clip-higher uses 0.28)."""
    loss_type: str = "dapo"
    """Aggregation: ``grpo`` | ``bnpo`` | ``dr_grpo`` | ``dapo`` (see ``lit_grpo.grpo.grpo_loss``)."""
    scale_rewards: str = "group"
    """Advantage scaling: ``group`` | ``batch`` | ``none``."""
    advantage_eps: float = 1e-4
    """Added to the std before dividing."""
    num_iterations: int = 1
    """Optimizer steps per rollout (mu); > 1 stores the sampling policy's log-probs."""
    micro_batch_size: int | None = None
    """Completions per forward/backward (gradient accumulation inside a step); None = all N at once."""
    mask_truncated_completions: bool = False
    """Exclude completions that hit ``max_completion_length`` without a stop token from the loss."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clip (None = off)."""


@dataclasses.dataclass
class EvalConfig:
    """How validation/test/predict complete prompts; each mode is logged under its own prefix."""

    greedy: bool = True
    """One greedy completion per prompt (``<stage>/greedy/...``)."""
    num_samples: int = 0
    """Sampled completions per prompt at ``temperature`` (``<stage>/sampled/...``); 0 = off."""
    temperature: float | None = None
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


@dataclasses.dataclass
class PerfConfig:
    """How much of each prompt is shared among its G completions."""

    share_prefix: bool = True
    """Run each prompt once per pass (sampling, old log-probs, reference, update) and let its completions attend to
    its cached keys and values; False = the plain path (every completion row carries its own prompt copy)."""
    cache_image_features: bool = True
    """With ``share_prefix``: encode each prompt's images once per rollout and reuse them in every pass, when
    the vision tower and projector are frozen; they are re-encoded in every pass when any of them trains."""


def check_settings(grpo: GRPOConfig, sampling) -> None:
    """Refuse settings that would train on nothing or fail deep inside a step (``sampling``: a
    :class:`lit_grpo.rollout.SamplingConfig`).

    Raises:
        ValueError: naming the setting, its value and what it must be.
    """
    def either(names) -> str:
        return ", ".join(list(names)[:-1]) + " or " + list(names)[-1]

    problems = []
    if grpo.loss_type not in LOSS_AGGREGATIONS:
        problems.append(f"grpo.loss_type must be {either(LOSS_AGGREGATIONS)}, got {grpo.loss_type!r}")
    if grpo.scale_rewards not in ADVANTAGE_SCALES:
        problems.append(f"grpo.scale_rewards must be {either(ADVANTAGE_SCALES)}, got {grpo.scale_rewards!r}")
    if sampling.num_generations < 2:
        problems.append(f"sampling.num_generations must be >= 2, got {sampling.num_generations}: a group of one "
                        "completion has no reward spread, so every advantage (and the loss) would be 0")
    if sampling.max_completion_length < 1:
        problems.append(f"sampling.max_completion_length must be >= 1, got {sampling.max_completion_length}")
    if sampling.temperature <= 0:
        problems.append(f"sampling.temperature must be > 0, got {sampling.temperature} (for greedy evaluation "
                        "use evaluation.greedy: true)")
    if not 0 < sampling.top_p <= 1:
        problems.append(f"sampling.top_p must be in (0, 1] (1 = off), got {sampling.top_p}")
    if sampling.top_k < 0:
        problems.append(f"sampling.top_k must be >= 0 (0 = off), got {sampling.top_k}")
    for name in ("beta", "epsilon_low", "epsilon_high", "advantage_eps"):
        if getattr(grpo, name) < 0:
            problems.append(f"grpo.{name} must be >= 0, got {getattr(grpo, name)}")
    if grpo.max_grad_norm is not None and grpo.max_grad_norm <= 0:
        problems.append(f"grpo.max_grad_norm must be > 0 or null (no clipping), got {grpo.max_grad_norm}")
    if grpo.micro_batch_size is not None and grpo.micro_batch_size < 1:
        problems.append(f"grpo.micro_batch_size must be >= 1 or null (all completions at once), "
                        f"got {grpo.micro_batch_size}")
    if grpo.num_iterations < 1:
        problems.append(f"grpo.num_iterations must be >= 1, got {grpo.num_iterations}")
    if problems:
        raise ValueError("; ".join(problems))
