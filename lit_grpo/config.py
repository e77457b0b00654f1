"""The option groups of :class:`lit_grpo.GRPOModule` (dataclasses that LightningCLI parses from a config;
each field's docstring is its ``--print_config`` comment).

Every numeric field declares its range in its type (``Annotated[float, Ge(0), Finite]``, :mod:`lit_grpo.settings`),
every fixed choice is a ``Literal``, every name of a registered variant its registry's ``name_type()``, and the
groups are :class:`~lit_grpo.settings.Checked`: a value out of range, not finite, not a choice or not registered is
refused however it arrives. A new field declares its range the same way; :func:`check_settings` keeps the rules
that tie several options together."""


import dataclasses
from typing import Annotated, Any, ClassVar, Literal
from annotated_types import Ge, Gt, Le

from lit_grpo.grpo import ADVANTAGE_SCALES, LOSS_OPTIONS
from lit_grpo.objectives import LOSS_TYPES
from lit_grpo.registry import option_slot
from lit_grpo.rollout import ENGINES
from lit_grpo.settings import Checked, Finite
from lit_grpo.rewards import RewardSpec
from lit_grpo.rewards.registry import REWARDS


@dataclasses.dataclass
class GRPOConfig(Checked):
    """The policy-gradient objective."""

    # a TRL recipe's option name gets a pointer to ours instead of a bare unknown-key error
    renamed: ClassVar[dict[str, str]] = {
        "vllm_importance_sampling_correction": "sampler_correction (TRL's vllm_importance_sampling_correction; "
                                               "here it applies to every sampler that is not the policy)",
        "vllm_importance_sampling_mode": "sampler_correction_mode (TRL's vllm_importance_sampling_mode, same modes)",
        "vllm_importance_sampling_cap": "sampler_correction_max (TRL's vllm_importance_sampling_cap / _clip_max)",
        "vllm_importance_sampling_clip_max": "sampler_correction_max (TRL's vllm_importance_sampling_clip_max)",
        "vllm_importance_sampling_clip_min": "sampler_correction_min (TRL's vllm_importance_sampling_clip_min)",
        "use_vllm": "perf.engine: vllm (TRL's vllm_mode colocate) or vllm_server (server)",
        "vllm_mode": "perf.engine: vllm (colocate) or vllm_server (server)",
        **{name: f"perf.{name}" for name in ("vllm_gpu_memory_utilization", "vllm_max_model_length",
                                              "vllm_enable_sleep_mode", "vllm_server_host", "vllm_server_port",
                                              "vllm_server_timeout", "vllm_group_port")}}
    """TRL's names of options this group names otherwise -> ours (a config that sets one is refused, naming it)."""

    # 0 by default (TRL's default, and DAPO drops the KL): no reference model is loaded, a model's memory saved
    beta: Annotated[float, Ge(0), Finite] = 0.0
    """Weight of the k3 KL to the reference policy; 0 loads no reference at all."""
    # at most 1: the lower bound 1 - epsilon_low of a ratio stays >= 0
    epsilon_low: Annotated[float, Ge(0), Le(1), Finite] = 0.2
    """Lower clip range of the importance ratio (``1 - epsilon_low``)."""
    # no upper bound: loss_type cispo uses epsilon_high itself as the ratio's cap, which must be >= 1 there
    epsilon_high: Annotated[float, Ge(0), Finite] = 0.2
    """Upper clip range (``1 + epsilon_high``; DAPO's clip-higher uses 0.28)."""
    # a registered name, not a Literal: a task may register a loss type (objectives.py)
    loss_type: LOSS_TYPES.name_type() = "dapo"
    """The objective (docs/objectives.md): TRL's ``grpo`` | ``bnpo`` | ``dr_grpo`` | ``dapo`` | ``luspo`` (the
    clipped surrogate, aggregated as ``seq-mean-token-mean`` | ``micro-batch-token-mean`` |
    ``seq-mean-token-sum-norm`` | ``token-mean`` | ``seq-mean-token-sum``, names also accepted) or ``cispo`` |
    ``sapo`` | ``vespo`` (their own per-token terms); see ``lit_grpo.objectives``."""
    # registered for the same reason, each under its formula name and TRL's alias
    scale_rewards: ADVANTAGE_SCALES.name_type() = "group"
    """Advantage scaling: ``group`` (``group-std``) | ``batch`` (``batch-std``) | ``none`` (``no-std``)."""
    # TRL's 1e-4: a group with equal rewards divides 0 by eps, not by 0
    advantage_eps: Annotated[float, Ge(0), Finite] = 1e-4
    """Added to the std before dividing."""
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize"
    """``sum_then_normalize``: advantages of the weighted total; ``normalize_then_sum`` (GDPO): each reward
    normalised within its group, the weighted sum normalised over the batch (``scale_rewards`` must stay ``group``);
    each reward's share of the advantage is logged as ``train/advantage/<reward>``."""
    num_iterations: Annotated[int, Ge(1)] = 1
    """Passes over each rollout (mu); > 1 stores the sampling policy's log-probs."""
    steps_per_generation: Annotated[int, Ge(1)] = 1
    """Optimizer updates per pass over one rollout: its N completions split into this many equal parts (sizes differing by
    one where it does not divide N), one update each (TRL's ``steps_per_generation`` = this times the micro-batches of an update); > 1 stores the sampling
    policy's log-probs. A training step is still one rollout: it makes ``num_iterations * steps_per_generation``
    updates and ``global_step`` counts rollouts."""
    # None: one forward per update; set it when N rows do not fit in memory
    micro_batch_size: Annotated[int, Ge(1)] | None = None
    """Completions per forward/backward (gradient accumulation inside an update); None = all at once."""
    importance_sampling_level: Literal["token", "sequence"] = "token"
    """``token``: one importance ratio per token; ``sequence``: the sequence's geometric-mean ratio (GSPO)."""
    # Gt(1): a cap at or below 1 would clip every ratio above 1, even on-policy; the > 1 + epsilon_high rule is
    # cross-field, in objective_problems
    delta: Annotated[float, Gt(1), Finite] | None = None
    """Two-sided clipping (INTELLECT-2): the ratio of the clipped surrogate is capped at ``delta`` (> 1 +
    ``epsilon_high``, e.g. 4); None = off."""
    sapo_temperature_pos: Annotated[float, Gt(0), Finite] = 1.0
    """``loss_type: sapo``: gate temperature of positive-advantage tokens."""
    sapo_temperature_neg: Annotated[float, Gt(0), Finite] = 1.05
    """``loss_type: sapo``: gate temperature of the others."""
    vespo_k_pos: Annotated[float, Ge(0), Finite] = 2.0
    """``loss_type: vespo``: gamma power ``k`` for advantages >= 0."""
    vespo_lambda_pos: Annotated[float, Gt(0), Finite] = 3.0
    """``loss_type: vespo``: gamma decay ``lambda`` for advantages >= 0."""
    vespo_k_neg: Annotated[float, Ge(0), Finite] = 3.0
    """``loss_type: vespo``: ``k`` for negative advantages."""
    vespo_lambda_neg: Annotated[float, Gt(0), Finite] = 2.0
    """``loss_type: vespo``: ``lambda`` for negative advantages."""
    top_entropy_quantile: Annotated[float, Ge(0), Le(1), Finite] = 1.0
    """Train the policy term only on the tokens in this top quantile of entropy, per micro-batch over every rank
    ("Beyond the 80/20 rule": 0.2); 1 = every token."""
    entropy_coef: Annotated[float, Ge(0), Finite] = 0.0
    """Weight of an entropy bonus (mean token entropy of each micro-batch); with ``use_adaptive_entropy`` its start."""
    use_adaptive_entropy: bool = False
    """Skywork-OR1's control: after each update the coefficient moves by ``entropy_coef_delta`` towards keeping the
    entropy above ``entropy_target``, applied only while the entropy is at or below it."""
    entropy_coef_min: Annotated[float, Ge(0), Finite] = 0.0
    """Adaptive control: lowest coefficient."""
    entropy_coef_max: Annotated[float, Ge(0), Finite] = 1.0
    """Adaptive control: highest coefficient."""
    entropy_coef_delta: Annotated[float, Ge(0), Finite] = 0.005
    """Adaptive control: step of the coefficient per update."""
    entropy_target: Annotated[float, Ge(0), Finite] = 0.2
    """Adaptive control: target mean token entropy (nats)."""
    off_policy_mask_threshold: Annotated[float, Ge(0), Finite] | None = None
    """DeepSeek-V3.2's off-policy sequence mask: drop negative-advantage completions whose mean log-prob drop from the
    sampler to the current policy exceeds this (e.g. 0.5); None = off."""
    use_bias_correction_kl: bool = False
    """Multiply the k3 KL by the importance ratio (DeepSeek-V3.2's unbiased KL gradient; TRL's default is true)."""
    sampler_correction: bool = True
    """Weight the loss by ``pi_old / mu`` when the engine's sampler ``mu`` is not the policy itself (another engine or
    stale weights; the built-in engines sample from the policy, and their correction is exactly 1)."""
    # sequence_mask and a cap of 3 are TRL's defaults (vllm_importance_sampling_*): kept so a TRL run compares
    sampler_correction_mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = \
        "sequence_mask"
    """``token_truncate`` | ``token_mask`` | ``sequence_truncate`` | ``sequence_mask``: per token or per sequence,
    clamped to or zeroed outside ``[sampler_correction_min, sampler_correction_max]``."""
    sampler_correction_min: Annotated[float, Ge(0), Finite] | None = None
    """Lower bound of the sampler weight (None = none)."""
    sampler_correction_max: Annotated[float, Gt(0), Finite] = 3.0
    """Upper bound (the cap) of the sampler weight."""
    mask_truncated_completions: bool = False
    """Exclude completions that hit ``max_completion_length`` without a stop token from the loss."""
    max_grad_norm: Annotated[float, Gt(0), Finite] | None = 1.0  # transformers' TrainingArguments default
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
class EvalConfig(Checked):
    """How validation/test/predict complete prompts; each mode is logged under its own prefix."""

    greedy: bool = True
    """One greedy completion per prompt (``<stage>/greedy/...``)."""
    num_samples: Annotated[int, Ge(0)] = 0
    """Sampled completions per prompt at ``temperature`` (``<stage>/sampled/...``); 0 = off."""
    temperature: Annotated[float, Gt(0), Finite] | None = None
    """Sampling temperature of evaluation (None = the training temperature)."""
    # one seed for every evaluation: the sampled curve then differs between checkpoints by the policy, not the noise
    seed: int | None = 0
    """Sampling seed of evaluation (batch ``i`` uses ``seed + i``), so curves compare like with like; None = no reseeding."""
    metrics: list[RewardSpec] = dataclasses.field(default_factory=list)
    """Extra rewards computed only in evaluation (e.g. ``boxed_format`` compliance); not trained on."""
    before_fit: bool = False
    """Run validation once before the first training step (the step-0 point of the curves)."""
    scorer: REWARDS.name_type() | None = None
    """Registered reward giving the correctness of each evaluation completion (logged as
    ``<stage>/<mode>/accuracy`` and tabulated by ``lit_grpo.tasks.table.AccuracyTable``, whose caption names it):
    ``accuracy`` (paper protocol, MCQ), ``open_equivalence`` (paper protocol, open-ended: one judge call on the
    extracted answer, unit and principle), ``open_accuracy`` (the accuracy reward's jury, with ``pass_threshold``),
    ``phyx_official`` (PhyX rule mode), ``binary`` (VisualSphinx). When a configured reward (or metric) has
    this label and ``scorer_kwargs`` and ``judge`` are empty or equal to its kwargs, its values are reused (no
    second judge call); otherwise the scorer is built with ``scorer_kwargs`` and ``judge``."""
    scorer_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Options of the scorer other than its judge (see its docstring), e.g. ``strict`` of ``rubric``."""
    judge: Any = None  # a mapping or the judge group's dataclass; typed on the command line (option_slot)
    """The judge of a judge-backed scorer (``open_equivalence``, ``open_accuracy``, ``rubric``), each option settable on its own
    (``--model.init_args.evaluation.judge.num_judges=5``); ``None``: the configured reward's verdicts when it
    is the scorer, else the scorer's default (the offline judge). Its fields: the PhyX task's ``JudgeConfig``
    (``lit_grpo.tasks.phyx.judge.config``), registered as the option group ``judge``."""
    pass_threshold: Annotated[float, Finite] | None = None
    """A score counts as correct (1) when at least this, else 0 (NaN stays "cannot score"); ``None`` keeps the
    scorer's value. For ``open_accuracy`` (jury correctness / 2), ``1.0`` = every juror says fully correct."""

    @staticmethod
    def option_types(value) -> dict[str, Any]:
        """``scorer_kwargs`` is typed by the scorer's own options (:mod:`lit_grpo.settings`)."""
        from lit_grpo.rewards.registry import reward_option_types

        return {"scorer_kwargs": reward_option_types(value.get("scorer"))}


option_slot(EvalConfig, "judge", "judge")  # typed by the PhyX task's JudgeConfig on the command line


@dataclasses.dataclass
class PerfConfig(Checked):
    """The rollout engine, and how much of each prompt it shares among its G completions."""

    renamed: ClassVar[dict[str, str]] = {"share_prefix": "engine: shared (share_prefix true) or plain (false)"}
    """Options that were renamed -> what replaces them (a config that sets one is refused, naming it)."""
    engine: ENGINES.name_type() = "shared"
    """The registered rollout engine (:data:`lit_grpo.rollout.ENGINES`): ``shared`` runs each prompt once per pass
    (sampling, old log-probs, reference, update) and lets its completions attend to its cached keys and values;
    ``plain`` gives every completion row its own prompt copy (``transformers``' ``generate``, full forwards)."""
    cache_image_features: bool = True
    """With the ``shared`` engine: encode each prompt's images once per rollout and reuse them in every pass, when
    the vision tower and projector are frozen; they are re-encoded in every pass when any of them trains."""
    # 0.3 is TRL's default: the training process shares the device with vLLM (colocate) and keeps the rest
    vllm_gpu_memory_utilization: Annotated[float, Gt(0), Le(1), Finite] = 0.3
    """With ``engine: vllm``: the share of the device's memory the process may fill before vLLM sizes its KV cache
    with the rest of that share (TRL's option of the same name; on a CPU, a share of the machine's memory)."""
    vllm_kv_cache_gib: Annotated[float, Gt(0), Finite] | None = None
    """With ``engine: vllm``: the KV cache's size in GiB (vLLM's ``kv_cache_memory_bytes``), instead of a share of
    memory; the plain choice on a CPU or with several engines in one process."""
    vllm_max_model_length: Annotated[int, Ge(1)] | None = None
    """With ``engine: vllm``: the longest prompt + completion vLLM's KV cache is sized for (TRL's
    ``vllm_max_model_length``); None = the model config's ``max_position_embeddings``."""
    vllm_server_host: str = "127.0.0.1"
    """With ``engine: vllm_server``: the address of the generation server (``python -m lit_grpo.serve``)."""
    vllm_server_port: Annotated[int, Ge(1), Le(65535)] = 8000
    """With ``engine: vllm_server``: its HTTP port (the server's ``--port``)."""
    vllm_server_timeout: Annotated[float, Gt(0), Finite] = 240.0
    """With ``engine: vllm_server``: seconds to wait for the server to be up, and for each of its answers."""
    # TRL's default group port, so a TRL server setup keeps working
    vllm_group_port: Annotated[int, Ge(1), Le(65535)] = 51216
    """With ``engine: vllm_server``: the port on the server's machine of the weight group (the trainer pushes the
    weights through it after every update; TRL's option of the same name)."""
    vllm_enable_sleep_mode: bool = False
    """With ``engine: vllm`` on a GPU: vLLM frees its KV cache and weights during each step's updates (sleep level 2;
    TRL's option of the same name) and is woken for each weight push and the next rollout: the update gets that
    memory, at the cost of the waking. No effect on a CPU."""


def check_settings(grpo: GRPOConfig, sampling) -> None:
    """Refuse combinations of options that cannot train (``sampling``: a
    :class:`lit_grpo.rollout.SamplingConfig`; each number alone is checked by its declared range when the groups
    are built).

    Raises:
        ValueError: naming the setting, its value and what it must be.
    """
    # every combination problem in one message: a config is fixed in one go, not one refusal at a time
    problems = objective_problems(grpo)
    if problems:
        raise ValueError("; ".join(problems))


def objective_problems(grpo: GRPOConfig) -> list[str]:
    """What is wrong with the objective's option combinations (:func:`check_settings`), one phrase
    each."""
    problems = []

    def need(ok: bool, name: str, rule: str) -> None:
        if not ok:
            problems.append(f"grpo.{name} must be {rule}, got {getattr(grpo, name)!r}")

    if grpo.multi_objective_aggregation == "normalize_then_sum":
        # GDPO's batch-level normalisation of the weighted sum is its own scaling; a second one would be applied twice
        need(grpo.scale_rewards in ("group", "group-std", "grpo"), "scale_rewards",
             "group with multi_objective_aggregation normalize_then_sum (each reward is scaled by its group's std "
             "and the sum by the batch's; no other scaling applies)")
    clipped = LOSS_TYPES.get(grpo.loss_type).policy == "clip"
    need(grpo.delta is None or clipped, "delta", f"null with loss_type {grpo.loss_type} (it caps the ratio of the "
         f"clipped surrogate, which {grpo.loss_type} does not use)")
    need(grpo.delta is None or not clipped or grpo.delta > 1 + grpo.epsilon_high, "delta",
         "null or above 1 + epsilon_high (the cap of the ratio; INTELLECT-2 uses 4)")
    need(grpo.loss_type != "cispo" or grpo.epsilon_high >= 1, "epsilon_high",
         ">= 1 with loss_type cispo, where it caps the importance ratio itself (ScaleRL's eps_max, e.g. 5.0)")
    need(grpo.entropy_coef_max >= grpo.entropy_coef_min, "entropy_coef_max", ">= entropy_coef_min")
    need(grpo.sampler_correction_min is None or grpo.sampler_correction_min < grpo.sampler_correction_max,
         "sampler_correction_min", "null or below sampler_correction_max")
    return problems
