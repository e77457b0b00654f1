"""Reward registry, reward specs from the config, and the weighted sum that makes the total reward.

A reward is a callable ``(completions: list[str], **columns) -> list[float | None]`` where every column
is a list aligned with ``completions`` (``answer``, ``answer_format``, ``options``, ``id``, ``meta``, ``images``,
each task field of the samples, e.g. PhyX's ``principle``, ``unit``, ``domain``, and any extras of the log-prob
pass). Two values are
not numbers, as in TRL: ``None`` means "does not apply" (``accuracy`` on an open-ended row, a missing
gold): the term is left out of that completion's total. NaN means "failed" (a judge call that failed, a
jury without quorum): that completion's total cannot be scored, it gets advantage 0 and is counted in
``train/rollout/frac_unscorable``, never read as 0. Any other non-finite value (``inf``) is a bug in the reward:
a failure too, with a warning naming the reward.

A composite reward may return a :class:`RewardOutput` (a list of its per-completion totals) that also
carries ``components`` (per-completion values logged next to the total, not added to it) and
``metrics`` (scalars of the call, e.g. judge latency).
"""


import copy
import dataclasses
import functools
import importlib
import inspect
import logging
import math
import typing
from typing import Any, Callable

import torch
from lightning.pytorch.utilities import rank_zero_only

from lit_grpo.data.sample import RECORD_COLUMNS
from lit_grpo.errors import InputError, UserError
from lit_grpo.settings import Checked, Problem, SettingError, argument_types, problems
from lit_grpo.registry import Registry, did_you_mean

log = logging.getLogger(__name__)

RewardFn = Callable[..., list[float | None]]


class RewardRegistry(Registry):
    """The reward registry: a registered name, or a dotted path to a reward outside the package
    (``name: my_pkg.my_reward`` in a config imports ``my_pkg`` and takes its ``my_reward``, no wrapper script).

    A path to a reward its module registers (with :func:`register_reward`) is that reward under a second name. A
    path to a plain function (or class) registers it as is: its parameters without a default, other than
    ``completions``, are the columns it reads (``def my_reward(completions, answer, strict=False, **_)`` reads
    ``answer`` and takes the option ``strict``); a class's columns are those of its ``__call__``.
    """

    def __contains__(self, name: object) -> bool:
        # a dotted path is imported on first lookup: a config can name a reward of any installed module, no wrapper
        return super().__contains__(name) or (isinstance(name, str) and "." in name and self._import(name))

    def _import(self, path: str) -> bool:
        """Register the object at dotted ``path`` under that path; ``False`` when the module or its attribute does
        not exist."""
        module, _, attr = path.rpartition(".")
        if not module or not attr or module.startswith("."):  # a relative path has no package to resolve against
            return False
        try:
            imported = importlib.import_module(module)
        except (Exception, SystemExit) as exc:  # the user's module runs here: any error of its own (a sys.exit too,
            # which would end the command without a word) is named, never a traceback
            # only the missing module itself makes the name unknown; a module that exists but fails (a missing
            # import of its own, an error in its code) is a real error, reported as one
            missing = isinstance(exc, ModuleNotFoundError) and exc.name is not None
            if missing and (module == exc.name or module.startswith(exc.name + ".")):
                return False  # no such module: the name is unknown
            why = (str(exc) if missing else f"it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit)
                   else f"{type(exc).__name__}: {exc}")
            fix = "install it, or fix the module" if missing else "fix the module"  # it is there: its code failed
            raise InputError(f"reward {path!r}: importing {module} failed: {why} ({fix})") from None
        obj = getattr(imported, attr, None)
        if obj is None:
            return False
        if not callable(obj):
            raise InputError(f"reward {path!r}: {module}.{attr} is a {type(obj).__name__}, not a function or class")
        # the same object registered already: the path is a second name for it, keeping its registration's columns
        known = next((n for n, e in self._entries.items() if e is obj), None)
        if known is not None:
            self.register(path)(obj)
            INFO[path] = INFO.get(known, RewardInfo())
            return True
        params = inspect.signature(obj.__call__ if inspect.isclass(obj) else obj).parameters.values()
        plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        skip = ("self", "completions")
        # parameters without a default are the columns: the same rule unmet_columns and the startup check apply
        columns = [p.name for p in params if p.kind in plain and p.default is p.empty and p.name not in skip]
        register_reward(path, columns=tuple(columns))(obj)
        return True


REWARDS: RewardRegistry = RewardRegistry("reward", tasks=True)
"""Reward functions and reward classes by name (register with :func:`register_reward`) or dotted path."""


@dataclasses.dataclass(frozen=True)
class RewardInfo:
    """What a registered reward says about itself."""

    columns: tuple[str, ...] = ()
    """The columns it reads besides the completions (``answer``, ``answer_format``, ``asm``...): a function's
    other parameters are its options."""
    extractor: Callable[[str, str], str | None] | None = None
    """``fn(completion, answer_format)``: the answer it reads, shown in evaluation records when it is the scorer."""
    gameable: str | None = None
    """Why a policy trained on it can game it (a warning names it as a training reward)."""
    protocol: str | None = None
    """How it decides, in words, for the caption of a table it scored
    (:func:`lit_grpo.tasks.table.protocol_caption`)."""


INFO: dict[str, RewardInfo] = {}


def register_reward(name: str, *, columns: tuple[str, ...] = (), extractor: Callable[[str, str], str | None] | None
                    = None, gameable: str | None = None, protocol: str | None = None) -> Callable:
    """Register a reward function or class under ``name`` with what it reads (:class:`RewardInfo`)."""

    def deco(obj):
        REWARDS.register(name)(obj)
        INFO[name] = RewardInfo(tuple(columns), extractor, gameable, protocol)
        return obj

    return deco


def reward_info(name: str) -> RewardInfo:
    """The :class:`RewardInfo` of the reward registered as ``name`` (an unknown name raises, listing them)."""
    REWARDS.get(name)  # raises, listing the names, for an unknown one
    return INFO.get(name, RewardInfo())


def reward_options(name: str) -> list[str]:
    """The options (``kwargs``) a registered reward takes: a class's constructor parameters, a function's
    parameters other than ``completions`` and its columns."""
    entry, info = REWARDS.get(name), reward_info(name)
    params = inspect.signature(entry.__init__ if inspect.isclass(entry) else entry).parameters.values()
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    # columns are filled by the step, not the config: they are no options even when they have no default
    skip = {"self", "completions", *info.columns}
    return [p.name for p in params if p.kind in plain and p.name not in skip]


def option_default(name: str, option: str) -> Any:
    """The default of option ``option`` of the reward registered as ``name`` (``inspect.Parameter.empty`` without
    one)."""
    entry = REWARDS.get(name)
    params = inspect.signature(entry.__init__ if inspect.isclass(entry) else entry).parameters
    return params[option].default


def reward_option_types(name: str | None) -> dict[str, Any]:
    """Option -> declared type (bounds kept, :mod:`lit_grpo.settings`) of the reward registered as ``name``; empty
    for a name that is not registered (refused by the name's own type, naming the registered ones or why a dotted
    path does not import)."""
    try:
        known = name in REWARDS
    except ValueError:  # a dotted path that does not import
        known = False
    if not known:
        return {}
    entry, options = REWARDS.get(name), reward_options(name)
    hints = argument_types(entry)
    return {k: hints[k] for k in options if k in hints}


def check_options(spec: "RewardSpec") -> None:
    """Refuse ``kwargs`` that are not options of the reward (a typo would be ignored by its ``**_``), and option
    values of the wrong type: each value a config can hold is checked against its parameter's annotation by
    pydantic (:mod:`lit_grpo.settings`: types, ranges, finite numbers, choices; a mapping for a dataclass option,
    such as a judge's settings, field by field, after its own check of unknown keys).

    Raises:
        ValueError: naming the reward, the unknown keys and the valid ones, or the option and the type or range it
            needs.
    """
    who = repr(spec.label) if spec.label == spec.name else f"{spec.label!r} ({spec.name})"
    valid = reward_options(spec.name)
    unknown = [k for k in spec.kwargs if k not in valid]
    if unknown:
        raise ValueError(f"reward {who} has no option {', '.join(map(repr, unknown))}"
                         f"{did_you_mean(unknown[0], valid)}; "
                         f"its options: {', '.join(valid) or 'none'}")
    declared = reward_option_types(spec.name)
    # only config-shaped values are type-checked: a Python caller may pass an object the annotation cannot judge
    found = [p for key, value in spec.kwargs.items() if config_value(value)
             for p in problems(value, declared.get(key, Any), key)]
    if found:  # out of its declared type or range (lit_grpo.settings)
        raise ValueError(f"reward {who} option {found[0]}")
    for key, value in spec.kwargs.items():  # the types are checked above (pydantic); a settings mapping's own
        settings = settings_class(spec.name, key) if isinstance(value, dict) else None  # checks: unknown keys, hints
        if settings is not None and hasattr(settings, "from_dict"):
            try:
                settings.from_dict(value)
            except SettingError as exc:  # a declared type of the settings: named by its dotted key
                raise SettingError([f"{key}.{exc.problems[0]}"], f"reward {who} option") from None
            except ValueError as exc:
                raise ValueError(f"reward {who} option {key!r}: {exc}") from None


def config_value(value: Any) -> bool:
    """Whether ``value`` is what a config holds (None, str, numbers, lists and mappings of them)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and config_value(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(config_value(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def settings_class(name: str, key: str) -> type | None:
    """The dataclass a reward's option ``key`` takes as a mapping (a judge's :class:`JudgeConfig`), if any."""
    entry = REWARDS.get(name)
    hints = typing.get_type_hints(entry.__init__ if inspect.isclass(entry) else entry)
    members = typing.get_args(hints.get(key)) or (hints.get(key),)
    return next((t for t in members if dataclasses.is_dataclass(t)), None)


@dataclasses.dataclass
class RewardSpec(Checked):
    """One term of the total reward: ``weight * reward(name, **kwargs)``."""

    name: REWARDS.name_type()
    """Registered reward name (``binary``, ``format``, ``accuracy``, ...) or dotted path to a reward outside the
    package (``my_pkg.my_reward``, see :class:`RewardRegistry`)."""
    weight: float = 1.0
    """Weight in the total reward (any finite number)."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Options of the reward (see its docstring)."""
    alias: str | None = None
    """Name under which it is logged (defaults to ``name``); lets one reward appear twice."""

    def __post_init__(self):
        try:
            super().__post_init__()
        except SettingError as exc:  # an option of the reward: named as the reward's (reward 'x' option k: ...)
            if not exc.problems[0].startswith("kwargs."):
                raise
            who = repr(self.label) if self.label == self.name else f"{self.label!r} ({self.name})"
            shown = SettingError([p.removeprefix("kwargs.") for p in exc.problems], f"reward {who} option")
            raise SettingError(exc.problems, "RewardSpec", str(shown)) from None  # keys stay under kwargs
        if isinstance(self.weight, (int, float)) and not math.isfinite(self.weight):  # here, not in the type: a
            # weight from ${oc.env:...} is still text when the parser checks the type (pydantic: "not a number")
            raise SettingError([Problem(f"weight: must be a finite number (got {self.weight!r})", "weight",
                                        self.weight)], "RewardSpec")

    @staticmethod
    def option_types(value) -> dict[str, Any]:
        """``kwargs`` is typed by the reward's own options (:mod:`lit_grpo.settings`)."""
        return {"kwargs": reward_option_types(value.get("name"))}

    @property
    def label(self) -> str:
        """The name it is logged under: ``alias``, else the name (a dotted path's last part)."""
        return self.alias or self.name.rpartition(".")[2]


class RewardOutput(list):
    """A reward's per-completion values (a plain ``list`` of floats to any caller) plus extras for logging.

    ``components``: name -> per-completion values (e.g. a rubric's ``principle``, ``unit``), reported
    as ``<label>/<name>``; ``metrics``: name -> scalar for this call (e.g. ``judge/latency_s``),
    reported as ``<label>/<name>``. Neither enters the weighted total.
    """

    def __init__(self, values, components: dict[str, list[float]] | None = None,
                 metrics: dict[str, float] | None = None):
        super().__init__(values)
        self.components = dict(components or {})
        self.metrics = dict(metrics or {})


class RewardError(UserError, ValueError):
    """A reward raised, or returned something that is not one value per completion; names the reward, the
    completion (index in the step's completions, row id) and what it did."""


VALUES_RULE = "a reward returns one value per completion: a number, None (does not apply) or NaN (failed)"


def _row(columns: dict[str, list] | None, i: int) -> str:
    ids = (columns or {}).get("id")
    return f" (row id {ids[i]})" if isinstance(ids, (list, tuple)) and i < len(ids) else ""


def _number(value: Any) -> float | None:
    """``value`` as a float (``None`` kept); raises ``TypeError`` / ``ValueError`` for anything but a number."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, dict, list, tuple)):
        raise TypeError(type(value).__name__)
    try:
        return float(value)
    # a Python int can exceed float's range; as a score it is unusable, so it counts as failed, not as an error
    except OverflowError:  # an int beyond float range: a value beyond float32, so a failed score
        return math.inf if value > 0 else -math.inf


def _column(label: str, values, n: int, warn: bool = True,
            columns: dict[str, list] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(values, applies, failed)``: float32 ``[N]`` values with NaN where the term does not apply or failed,
    and the bool ``[N]`` masks of the two cases (``None`` = does not apply; NaN, +-inf, or a value beyond
    float32's range = failed). ``warn``: log failures (terms; a component's NaN is routine). ``columns``: the
    step's columns, for the row ids in errors.

    Raises:
        RewardError: not a sequence of ``n`` values, or a value that is not a number or None (names the first).
    """
    # a str has a len too: refused first, or every character would count as one value
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise RewardError(f"reward {label!r} returned {type(values).__name__} {values!r:.60}, not a list: "
                          f"{VALUES_RULE}")
    if len(values) != n:
        raise RewardError(f"reward {label!r} returned {len(values)} values for {n} completions: {VALUES_RULE}")
    numbers = []
    for i, v in enumerate(values):
        try:
            numbers.append(_number(v))
        except (TypeError, ValueError):
            raise RewardError(f"reward {label!r} returned {v!r:.60} (a {type(v).__name__}) for completion {i} of {n}"
                              f"{_row(columns, i)}: {VALUES_RULE}") from None
    applies = torch.tensor([v is not None for v in numbers], dtype=torch.bool)
    raw = torch.tensor([math.nan if v is None else v for v in numbers], dtype=torch.float32)
    # None is "does not apply"; NaN or inf where it applied is "failed": the two mean different things in the total
    failed = applies & ~torch.isfinite(raw)
    if warn and failed.any():
        _warn_failures(label, raw, failed)
    return torch.where(failed, torch.nan, raw), applies, failed


def _warn_failures(label: str, raw: torch.Tensor, failed: torch.Tensor) -> None:
    """Every +-inf (a bug in the reward), and a reward's first NaN (a failed score, e.g. a judge call)."""
    infinite, n = int(torch.isinf(raw).sum()), len(raw)
    if infinite:
        log.warning("reward %r returned %d infinite value(s) (or beyond float32) for %d completions; they count as "
                    "failed scores (total NaN, advantage 0), never as numbers: fix the reward", label, infinite, n)
    # one NaN warning per reward per process: a judge failing on some calls every step would flood the log
    elif label not in _WARNED_NAN:
        _WARNED_NAN.add(label)
        log.warning("reward %r failed (NaN) on %d of %d completions: their totals cannot be scored (advantage 0, "
                    "counted in frac_unscorable); '%s/frac_failed' reports later failures", label,
                    int(failed.sum()), n, label)


_WARNED_NAN: set[str] = set()


def build_reward(spec: RewardSpec) -> RewardFn:
    """Instantiate a registered reward class, or bind ``kwargs`` to a registered function."""
    entry = REWARDS.get(spec.name)
    check_options(spec)
    if inspect.isclass(entry):
        # a partial keeps .func: call_reward tells a plain function from a stateful object by it
        return entry(**spec.kwargs)
    return functools.partial(entry, **spec.kwargs)


def build_rewards(specs: list[RewardSpec], training: bool = False) -> dict[str, RewardFn]:
    """Label -> callable for every spec; duplicate labels raise (use ``alias``).

    ``training``: the specs are the training rewards; one that a policy can game (a registered reward with a
    ``gameable`` note, e.g. ``phyx_official``) and that has a non-zero weight is named in one warning line.
    """
    out: dict[str, RewardFn] = {}
    for spec in specs:
        # two specs under one label would overwrite each other's values and weights in the step's dicts
        if spec.label in out:
            raise ValueError(f"reward {spec.label!r} appears twice; give one an alias")
        out[spec.label] = build_reward(spec)
        note = reward_info(spec.name).gameable
        if training and note and spec.weight != 0:
            _warn_gameable(spec.label, note)
    return out


@rank_zero_only
def _warn_gameable(label: str, note: str) -> None:
    log.warning("training reward %r can be gamed: %s", label, note)


def required_columns(specs: list[RewardSpec]) -> set[str]:
    """Columns the rewards read that neither every sample (:data:`~lit_grpo.data.sample.RECORD_COLUMNS`) nor the
    rollout (``truncated``, ``completion_length``) gives: a task's sample fields (``unit``) and the log-prob pass's
    columns (``asm``, :mod:`lit_grpo.columns`)."""
    given = set(RECORD_COLUMNS) | {"truncated", "completion_length"}
    # the record's and the rollout's columns are always there: only the rest needs a provider or a task field
    return {c for spec in specs for c in reward_info(spec.name).columns if c not in given}


def unmet_columns(fns: dict[str, RewardFn], given: set[str]) -> list[str]:
    """One line for each reward in ``fns`` (label -> the built callable, its options bound) with a parameter that has
    no default, is not ``completions`` and is not among the columns ``given`` (a typo such as ``anwser`` would
    otherwise score every row against None). A parameter with a default is optional; ``**kwargs`` takes what
    exists."""
    lines = []
    for label, fn in fns.items():
        try:
            params = inspect.signature(fn).parameters.values()
        # no readable signature (some builtins): nothing can be said about the columns it takes
        except (TypeError, ValueError):
            continue
        plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        unmet = [p.name for p in params if p.kind in plain and p.default is p.empty
                 and p.name not in ("self", "completions") and p.name not in given]
        if unmet:
            lines.append(f"reward {label!r} takes the column(s) {', '.join(map(repr, unmet))}, which the data does "
                         f"not have; its columns: {', '.join(sorted(given))} (fix the parameter's name, or give it "
                         "a default to make it optional)")
    return lines


def score_completions(
    fns: dict[str, RewardFn], weights: dict[str, float], completions: list[str], columns: dict[str, list],
    metrics: dict[str, float] | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Run every reward and form the weighted total.

    Shape: ``N`` completions -> per-reward ``[N]`` float32 tensors and a total ``[N]``.
    Per reward, NaN marks a completion the term did not apply to or failed on (so its mean is over the
    rows where it applied and succeeded). The total of a completion is the weighted sum of the terms that
    apply to it (``None`` terms are skipped, as TRL does); it is NaN ("cannot score": advantage 0,
    counted in ``frac_unscorable``) when a term of non-zero weight failed (NaN or +-inf), or when no term
    applies at all. A term of weight 0 (an evaluation-only metric) never changes the total. The
    components of a :class:`RewardOutput` are added to the returned dict as ``"<label>/<component>"``
    (after the terms; never in the total), and its metrics go into ``metrics`` (when given) as
    ``"<label>/<name>"``, with ``"<label>/frac_failed"`` for a reward that failed on some completion.
    Raises:
        RewardError: a reward function raised, or a reward returned something else than a number or None per
        completion (names the reward and the completion).
    """
    n = len(completions)
    per: dict[str, torch.Tensor] = {}
    extra: dict[str, torch.Tensor] = {}
    total = torch.zeros(n, dtype=torch.float32)
    applied, unscorable = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    for label, fn in fns.items():
        values = call_reward(label, fn, completions, columns)
        per[label], applies, failed = _column(label, values, n, columns=columns)
        weight = float(weights[label])
        ok = applies & ~failed
        # nan_to_num on top of the mask: 0 * NaN would still be NaN in the sum
        total += torch.where(ok, weight * torch.nan_to_num(per[label]), torch.zeros_like(total))
        if weight != 0:  # an evaluation-only metric neither makes a row scorable nor unscorable
            applied |= applies
            unscorable |= failed
        for name, comp in getattr(values, "components", {}).items():
            extra[f"{label}/{name}"] = _column(f"{label}/{name}", comp, n, warn=False)[0]
        if metrics is not None:
            metrics.update({f"{label}/{k}": float(v) for k, v in getattr(values, "metrics", {}).items()})
            if failed.any():
                metrics[f"{label}/frac_failed"] = failed.float().mean().item()
    overflow = applied & ~unscorable & ~torch.isfinite(total)
    if overflow.any():
        log.warning("the weighted total overflowed float32 on %d of %d completions; they count as unscorable",
                    int(overflow.sum()), n)
    # no weighted term applied at all: there is nothing to score, which is "cannot score", not a 0 reward
    total[unscorable | ~applied | overflow] = math.nan
    per.update(extra)
    return per, total


def call_reward(label: str, fn: RewardFn, completions: list[str], columns: dict[str, list]):
    """``fn(completions, **columns)``. A reward function that raises is called again on one completion at a time to
    find the first that it cannot score, and the error names the reward and that completion. A reward object (a
    judge, the attention reward) is not called again: its error goes on as it is, with a note naming the reward.

    A function without ``**kwargs`` gets only the columns it names (TRL passes every column, so its rewards take
    ``**kwargs``; a reward written without them is called with what it asks for).

    Raises:
        RewardError: a reward function raised (its error's type and message, one line).
    """
    # each reward gets its own copy: a reward that edits a column (a judge normalising answers) changes no later one
    columns, completions = own_copy(taken_columns(fn, columns)), list(completions)
    try:
        return fn(completions, **columns)
    # a UserError is already a one-line message for the user: passed on untouched
    except UserError:
        raise
    except SystemExit as exc:  # not an exit of the run: the run saves its last finished step and says why
        if type(exc) is not SystemExit:  # a stop of the run (Lightning's SIGTERMException: an abandoned step)
            raise
        raise RewardError(f"reward {label!r} called sys.exit({exc.code!r}) while scoring a batch of {len(completions)} "
                          "completions: a reward returns values (None or NaN where it cannot score)") from exc
    except Exception as exc:
        # a plain function (or a partial of one) is retried row by row to name the failing completion; an object may
        # hold state (a judge's calls, its budget), so it is never called again
        if not callable(getattr(fn, "func", None)) and not inspect.isfunction(fn):
            if hasattr(exc, "add_note"):
                exc.add_note(f"(in reward {label!r})")
            raise
        raise _find_failure(label, fn, completions, columns, exc) from exc


def own_copy(columns: dict[str, list]) -> dict[str, list]:
    """A copy of ``columns`` a reward may change at will (lists, dicts, nested values and images copied), so one
    reward never changes what a later one scores or the sample itself; an image shared by a group's rows is copied
    once and stays shared in the copy."""
    from PIL import Image

    memo: dict[int, Any] = {}
    for value in columns.get("images") or []:
        for image in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(image, Image.Image) and id(image) not in memo:
                memo[id(image)] = image.copy()  # PIL's copy: pixels and info, without deepcopy's pickling
    # deepcopy with the memo: each image is copied once and the copy shared, as the original rows shared it
    return copy.deepcopy(columns, memo)


def taken_columns(fn: RewardFn, columns: dict[str, list]) -> dict[str, list]:
    """``columns`` that ``fn`` takes: all of them when it has ``**kwargs`` (or no readable signature), else those
    among its parameters."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return columns
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return columns
    return {k: v for k, v in columns.items() if k in params}


def _find_failure(label: str, fn: RewardFn, completions: list[str], columns: dict[str, list],
                  exc: Exception) -> RewardError:
    n = len(completions)
    for i in range(n):
        try:
            fn(completions[i:i + 1], **{k: v[i:i + 1] if isinstance(v, list) and len(v) == n else v
                                      for k, v in columns.items()})
        except Exception as one:
            exc, where = one, f"on completion {i} of {n}{_row(columns, i)}"
            break
    else:
        where = f"on the {n} completions together (each alone it scores)"
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return RewardError(f"reward {label!r} raised {where}: {text}")
