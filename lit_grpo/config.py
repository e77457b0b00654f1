"""The option groups of :class:`lit_grpo.GRPOModule` (dataclasses that LightningCLI parses from a config;
each field's docstring is its ``--print_config`` comment)."""

from __future__ import annotations

import dataclasses
from typing import Any

from lit_grpo.grpo import ADVANTAGE_SCALES, LOSS_OPTIONS
from lit_grpo.objectives import LOSS_TYPES, SAMPLER_CORRECTION_MODES
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
    """The objective (README "Objectives"): TRL's ``grpo`` | ``bnpo`` | ``dr_grpo`` | ``dapo`` | ``luspo`` (the
    clipped surrogate, aggregated as ``seq-mean-token-mean`` | ``micro-batch-token-mean`` |
    ``seq-mean-token-sum-norm`` | ``token-mean`` | ``seq-mean-token-sum``, names also accepted) or ``cispo`` |
    ``sapo`` | ``vespo`` (their own per-token terms); see ``lit_grpo.objectives``."""
    scale_rewards: str = "group"
    """Advantage scaling: ``group`` (``group-std``) | ``batch`` (``batch-std``) | ``none`` (``no-std``)."""
    advantage_eps: float = 1e-4
    """Added to the std before dividing."""
    multi_objective_aggregation: str = "sum_then_normalize"
    """``sum_then_normalize``: advantages of the weighted total; ``normalize_then_sum`` (GDPO): each reward
    normalised within its group, the weighted sum normalised over the batch (``scale_rewards`` must stay ``group``);
    each reward's share of the advantage is logged as ``train/advantage/<reward>``."""
    num_iterations: int = 1
    """Passes over each rollout (mu); > 1 stores the sampling policy's log-probs."""
    steps_per_generation: int = 1
    """Optimizer updates per pass over one rollout: its N completions split into this many equal parts, one update
    each (TRL's ``steps_per_generation`` = this times the micro-batches of an update); > 1 stores the sampling
    policy's log-probs. A training step is still one rollout: it makes ``num_iterations * steps_per_generation``
    updates and ``global_step`` counts rollouts."""
    micro_batch_size: int | None = None
    """Completions per forward/backward (gradient accumulation inside an update); None = all at once."""
    importance_sampling_level: str = "token"
    """``token``: one importance ratio per token; ``sequence``: the sequence's geometric-mean ratio (GSPO)."""
    delta: float | None = None
    """Two-sided clipping (INTELLECT-2): the ratio of the clipped surrogate is capped at ``delta`` (> 1 +
    ``epsilon_high``, e.g. 4); None = off."""
    sapo_temperature_pos: float = 1.0
    """``loss_type: sapo``: gate temperature of positive-advantage tokens."""
    sapo_temperature_neg: float = 1.05
    """``loss_type: sapo``: gate temperature of the others."""
    vespo_k_pos: float = 2.0
    """``loss_type: vespo``: gamma power ``k`` for advantages >= 0."""
    vespo_lambda_pos: float = 3.0
    """``loss_type: vespo``: gamma decay ``lambda`` for advantages >= 0."""
    vespo_k_neg: float = 3.0
    """``loss_type: vespo``: ``k`` for negative advantages."""
    vespo_lambda_neg: float = 2.0
    """``loss_type: vespo``: ``lambda`` for negative advantages."""
    top_entropy_quantile: float = 1.0
    """Train the policy term only on the tokens in this top quantile of entropy, per micro-batch over every rank
    ("Beyond the 80/20 rule": 0.2); 1 = every token."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (mean token entropy of each micro-batch); with ``use_adaptive_entropy`` its start."""
    use_adaptive_entropy: bool = False
    """Skywork-OR1's control: after each update the coefficient moves by ``entropy_coef_delta`` towards keeping the
    entropy above ``entropy_target``, applied only while the entropy is at or below it."""
    entropy_coef_min: float = 0.0
    """Adaptive control: lowest coefficient."""
    entropy_coef_max: float = 1.0
    """Adaptive control: highest coefficient."""
    entropy_coef_delta: float = 0.005
    """Adaptive control: step of the coefficient per update."""
    entropy_target: float = 0.2
    """Adaptive control: target mean token entropy (nats)."""
    off_policy_mask_threshold: float | None = None
    """DeepSeek-V3.2's off-policy sequence mask: drop negative-advantage completions whose mean log-prob drop from the
    sampler to the current policy exceeds this (e.g. 0.5); None = off."""
    use_bias_correction_kl: bool = False
    """Multiply the k3 KL by the importance ratio (DeepSeek-V3.2's unbiased KL gradient; TRL's default is true)."""
    sampler_correction: bool = True
    """Weight the loss by ``pi_old / mu`` when the engine's sampler ``mu`` is not the policy itself (another engine or
    stale weights; the built-in engines sample from the policy, and their correction is exactly 1)."""
    sampler_correction_mode: str = "sequence_mask"
    """``token_truncate`` | ``token_mask`` | ``sequence_truncate`` | ``sequence_mask``: per token or per sequence,
    clamped to or zeroed outside ``[sampler_correction_min, sampler_correction_max]``."""
    sampler_correction_min: float | None = None
    """Lower bound of the sampler weight (None = none)."""
    sampler_correction_max: float = 3.0
    """Upper bound (the cap) of the sampler weight."""
    mask_truncated_completions: bool = False
    """Exclude completions that hit ``max_completion_length`` without a stop token from the loss."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clip (None = off)."""

    def loss_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`lit_grpo.grpo.grpo_loss` this config sets."""
        names = ("beta", "epsilon_low", "epsilon_high", "loss_type", *LOSS_OPTIONS)
        return {name: getattr(self, name) for name in names}

    def sampler_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`lit_grpo.objectives.sampler_correction`."""
        return dict(mode=self.sampler_correction_mode, ratio_min=self.sampler_correction_min,
                    ratio_max=self.sampler_correction_max)


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
    problems = objective_problems(grpo)
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
    if problems:
        raise ValueError("; ".join(problems))


def _either(names) -> str:
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1]


def objective_problems(grpo: GRPOConfig) -> list[str]:
    """What is wrong with the objective's options (:func:`check_settings`), one phrase each."""
    problems = []

    def need(ok: bool, name: str, rule: str) -> None:
        if not ok:
            problems.append(f"grpo.{name} must be {rule}, got {getattr(grpo, name)!r}")

    need(grpo.loss_type in LOSS_TYPES, "loss_type", _either(LOSS_TYPES.names()))
    need(grpo.scale_rewards in ADVANTAGE_SCALES, "scale_rewards", _either(ADVANTAGE_SCALES.names()))
    need(grpo.multi_objective_aggregation in ("sum_then_normalize", "normalize_then_sum"),
         "multi_objective_aggregation", "sum_then_normalize or normalize_then_sum")
    if grpo.multi_objective_aggregation == "normalize_then_sum":
        need(grpo.scale_rewards in ("group", "group-std", "grpo"), "scale_rewards",
             "group with multi_objective_aggregation normalize_then_sum (each reward is scaled by its group's std "
             "and the sum by the batch's; no other scaling applies)")
    need(grpo.importance_sampling_level in ("token", "sequence"), "importance_sampling_level", "token or sequence")
    for name in ("beta", "epsilon_low", "epsilon_high", "advantage_eps", "entropy_coef", "entropy_coef_min",
                 "entropy_coef_delta", "entropy_target", "vespo_k_pos", "vespo_k_neg"):
        need(getattr(grpo, name) >= 0, name, ">= 0")
    for name in ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_lambda_pos", "vespo_lambda_neg",
                 "sampler_correction_max"):
        need(getattr(grpo, name) > 0, name, "> 0")
    need(grpo.num_iterations >= 1, "num_iterations", ">= 1")
    need(grpo.steps_per_generation >= 1, "steps_per_generation", ">= 1")
    need(grpo.delta is None or grpo.delta > 1 + grpo.epsilon_high, "delta",
         "null or above 1 + epsilon_high (the cap of the ratio; INTELLECT-2 uses 4)")
    need(grpo.loss_type != "cispo" or grpo.epsilon_high >= 1, "epsilon_high",
         ">= 1 with loss_type cispo, where it caps the importance ratio itself (ScaleRL's eps_max, e.g. 5.0)")
    need(0 <= grpo.top_entropy_quantile <= 1, "top_entropy_quantile", "in [0, 1] (1 = every token)")
    need(grpo.entropy_coef_max >= grpo.entropy_coef_min, "entropy_coef_max", ">= entropy_coef_min")
    need(grpo.off_policy_mask_threshold is None or grpo.off_policy_mask_threshold >= 0, "off_policy_mask_threshold",
         "null (off) or >= 0")
    need(grpo.sampler_correction_mode in SAMPLER_CORRECTION_MODES, "sampler_correction_mode",
         _either(SAMPLER_CORRECTION_MODES))
    need(grpo.sampler_correction_min is None or 0 <= grpo.sampler_correction_min < grpo.sampler_correction_max,
         "sampler_correction_min", "null or in [0, sampler_correction_max)")
    return problems
