"""Judge settings: the jury (K calls, quorum) and the OpenAI-compatible HTTP judge in :class:`JudgeConfig`;
the offline judge's own settings in ``JudgeConfig.offline`` (:class:`OfflineJudgeConfig`).
The PhyX task registers :class:`JudgeConfig` as the option group ``judge`` (:func:`lit_grpo.registry.option_group`):
the core's ``evaluation.judge`` is typed by it, so each setting is a command-line option, without the core importing
the task.

``base_url`` picks the judge (:func:`lit_grpo.tasks.phyx.judge.base.build_judge`): set, the HTTP client
(:class:`~lit_grpo.tasks.phyx.judge.client.OpenAIJudge`); unset, the rule-based offline judge.

The API key is never a configuration value: ``api_key_env`` holds the *name* of an environment
variable, read by the client for each request. A judge setting that holds a key (a field named like a
credential under ``extra_body``, a value equal to the key or shaped like one) is refused, naming the
field and never the value (:mod:`lit_grpo.api_keys`).
"""


import dataclasses
import difflib
from typing import Annotated, Any
from annotated_types import Ge, Gt, Le

from lit_grpo.settings import Checked, Finite
from lit_grpo.api_keys import find_credentials
from lit_grpo.registry import OPTION_GROUPS


@dataclasses.dataclass
class OfflineJudgeConfig(Checked):
    """The offline judge's settings (``judge.offline``); the defaults are our documented choices."""

    rel_tol: Annotated[float, Ge(0), Finite] = 0.01
    """Relative tolerance of a fully correct value."""
    partial_rel_tol: Annotated[float, Ge(0), Finite] = 0.05
    """Relative tolerance of a partially correct value."""
    min_reasoning_words: Annotated[int, Ge(0)] = 20
    """Words in ``<think>`` for a reasoning score of 2."""


@OPTION_GROUPS.register("judge")
@dataclasses.dataclass
class JudgeConfig(Checked):
    """Where and how to ask the judge. Numbers the paper does not give are our documented defaults."""

    base_url: str | None = None
    """OpenAI-compatible server, e.g. ``http://judge-host:8000/v1`` (vLLM ``serve``, SGLang, a hosted API);
    ``None`` uses the rule-based offline judge."""
    model: str = "openai/gpt-oss-120b"
    """Model name sent with each request (the paper's judge: GPT-oss 120B served with vLLM)."""
    api_key_env: str | None = "JUDGE_API_KEY"
    """NAME of the environment variable holding the API key (never the key itself); unset -> no key sent."""
    num_judges: Annotated[int, Ge(1)] = 3
    """Jury size K: independent calls per completion (the paper: 3)."""
    min_votes: Annotated[int, Ge(1)] | None = None
    """Successful calls needed to score a completion (default: all K); fewer give NaN."""
    temperature: Annotated[float, Ge(0), Finite] = 0.7
    """Judge sampling temperature (not given by the paper)."""
    top_p: Annotated[float, Gt(0), Le(1), Finite] = 1.0
    """Judge nucleus sampling."""
    max_tokens: Annotated[int, Ge(1)] = 2048
    """Reply token limit; a reply cut at this limit is a failed call (reasoning models need room)."""
    seed: int | None = 0
    """Juror k's request carries ``seed + k`` (reproducible, distinct jurors); ``None`` sends no seed."""
    structured_output: bool = True
    """Ask for the reply schema with ``response_format: json_schema``; turn off for servers that reject it."""
    extra_body: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Extra request fields, e.g. ``{"reasoning_effort": "low"}``."""
    timeout_s: Annotated[float, Gt(0), Finite] = 60.0
    """Limit of one HTTP attempt (connect, send, wait, read)."""
    call_deadline_s: Annotated[float, Gt(0), Finite] = 300.0
    """Total limit of one call, retries and waits included."""
    step_deadline_s: Annotated[float, Gt(0), Finite] = 900.0
    """Total limit of all the calls of one step; calls still running then are failed."""
    max_retries: Annotated[int, Ge(0)] = 5
    """Retries after a timeout, a dropped connection, HTTP 429 or 5xx."""
    backoff_s: Annotated[float, Ge(0), Finite] = 1.0
    """First retry delay without ``Retry-After``; doubles each retry (with jitter)."""
    backoff_max_s: Annotated[float, Ge(0), Finite] = 30.0
    """Largest retry delay without ``Retry-After`` (``Retry-After`` is honoured as given, within the deadline)."""
    concurrency: Annotated[int, Ge(1)] = 64
    """Requests in flight at once."""
    max_failure_fraction: Annotated[float, Ge(0), Le(1), Finite] = 0.25
    """Stop the run when more than this fraction of a step's calls fail."""
    max_reply_bytes: Annotated[int, Ge(1024)] = 4 * 2**20
    """Largest reply body read, after decompression (4 MiB); a longer one is a failed call."""
    cache_size: Annotated[int, Ge(0)] = 200_000
    """Identical requests answered from memory for the run (least recently used evicted)."""
    offline: OfflineJudgeConfig = dataclasses.field(default_factory=OfflineJudgeConfig)
    """Settings of the offline judge (used when ``base_url`` is unset): its tolerances and reasoning proxy."""

    def __post_init__(self):
        super().__post_init__()  # the declared types first: an offline dict's are named under offline.
        if isinstance(self.offline, dict):
            self.offline = _offline_from_dict(self.offline)
        if self.min_votes is not None and self.min_votes > self.num_judges:
            raise ValueError(f"judge min_votes must be in 1..num_judges={self.num_judges}, got {self.min_votes}")
        _refuse_credentials(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "JudgeConfig":
        """Build from a reward's ``judge`` kwargs; unknown keys (an ``api_key`` above all) raise a clear error."""
        values = dict(values or {})
        _refuse_credentials(values)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            offline = {f.name for f in dataclasses.fields(OfflineJudgeConfig)}
            hint = (" Never put the key in a config: export it and set api_key_env to the variable's name."
                    if any("key" in k and k != "api_key_env" for k in unknown) else
                    f" {unknown[0]} is an offline judge setting: judge.offline.{unknown[0]}"
                    if unknown[0] in offline else "")
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = hint or (f" Did you mean {close[0]}?" if close else "")
            raise ValueError(f"unknown judge settings {unknown}.{hint} Valid: {', '.join(sorted(known))}")
        return cls(**values)


def _offline_from_dict(values: dict[str, Any]) -> OfflineJudgeConfig:
    known = {f.name for f in dataclasses.fields(OfflineJudgeConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise ValueError(f"unknown offline judge settings {unknown}.{hint} Valid: {', '.join(sorted(known))}")
    return OfflineJudgeConfig(**values)


def _refuse_credentials(values: dict[str, Any]) -> None:
    """Raise when judge settings hold an API key; the message names the fields, never the value."""
    held = find_credentials({"judge": values})
    if held:
        raise ValueError(f"{'; '.join(held[:3])}: an API key never goes into a config (it would be printed and "
                         "saved); export it and set judge.api_key_env to the variable's NAME")
