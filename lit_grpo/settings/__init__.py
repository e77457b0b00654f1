"""Settings: each option declares its check in its type, a library enforces it, and one place words a refusal.

**Declaring** (one line per option, in its group's dataclass; the docstring under it is its ``--help``):

    beta: Annotated[float, Ge(0), Finite] = 0.0                 # a range (annotated_types), and finite
    top_p: Annotated[float, Gt(0), Le(1), Finite] = 1.0
    micro_batch_size: Annotated[int, Ge(1)] | None = None       # None stays allowed by the type
    importance_sampling_level: Literal["token", "sequence"] = "token"   # a fixed choice

**Enforcing.** jsonargparse refuses a value outside its type, range or choices while it parses a config file or a
flag (it hands ``Annotated`` types to pydantic), naming the key. Python callers meet the same types through
:class:`Checked`, the base of the option groups: pydantic validates every field when one is built. A float is
finite only when its type says so (``Finite``): YAML's ``.nan`` and ``.inf`` pass every ``x < 0`` test. Options
whose keys are typed by another field (a reward's ``kwargs`` by its ``name``) give those types through the group's
``option_types(values)`` hook; classes we do not own (torch's optimizers) take theirs from :data:`CLASS_RANGES`.

**Wording.** A refusal is one line, ``<key>: must be <rule> (got <value>)``: :func:`rule` reads the rule from the
declared type, :func:`describe` the key and value from pydantic's structured errors (``loc``, ``type``, ``input``);
no library's message text is parsed for them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

import pydantic
from annotated_types import Ge, Gt, Le, Lt, Predicate

from lit_grpo.registry import UnknownName

__all__ = ["Finite", "Checked", "SettingError", "rule", "problems", "shown", "check_arguments", "argument_types",
           "CLASS_RANGES"]

Finite = Predicate(math.isfinite)
"""A number that is not NaN or infinite (on every float option: no range test refuses NaN, and no upper bound inf)."""
_CONSTRAINTS = {"greater_than_equal": ">= {ge}", "greater_than": "> {gt}", "less_than_equal": "<= {le}",
                "less_than": "< {lt}", "predicate_failed": "a finite number", "finite_number": "a finite number",
                "literal_error": "one of {expected}"}
"""pydantic's error types of a broken declared rule -> the rule, from the error's ``ctx`` (used where the declared
type is not at hand: a value inside a dict or list)."""


class ConfigError(ValueError):
    """A mistake in the configuration or the command line: shown as one ``error:`` line, exit status 2."""


class SettingError(ValueError):
    """Settings refused by their declared types: ``problems`` are ``<key>: <what> (got <value>)`` lines, keys
    relative to the object checked; the message names its class (``GRPOConfig.beta: must be >= 0 (got -1.0)``)."""

    def __init__(self, problems: list[str], owner: str = "", message: str | None = None):
        from lit_grpo.errors import first_and_more

        self.problems, self.owner = problems, owner
        join = "." if owner.isidentifier() else " "  # a class (GRPOConfig.beta) or a phrase (reward 'x' option k)
        super().__init__(message or first_and_more([f"{owner}{join}{p}" if owner else p for p in problems]))


class Problem(str):
    """One problem's line, ``<key>: <what> (got <value>)``, that keeps the dotted ``key`` it names and the refused
    ``value`` (to find the config file that gave it)."""

    key: str
    value: Any

    def __new__(cls, line: str, key: str, value: Any) -> Problem:
        made = super().__new__(cls, line)
        made.key, made.value = key, value
        return made


def _num(x: Any) -> str:
    return str(int(x)) if isinstance(x, (int, float)) and float(x).is_integer() else repr(x)


def rule(tp: Any) -> str | None:
    """What a value of the declared type ``tp`` must be: its ``Literal`` choices (``one of token, sequence``) or its
    ``annotated_types`` bounds (``>= 1``, ``in (0, 1]``, ``a finite number``); None when it declares neither."""
    members = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    nullable = " or null" if type(None) in members else ""
    for member in members:
        if typing.get_origin(member) is Literal:  # and a bool beside it (W&B's log_model: "all" | bool)
            return "one of " + ", ".join([*map(str, typing.get_args(member))] + ["true", "false"] * (bool in members)) \
                + nullable
        if typing.get_origin(member) is not Annotated:
            continue
        meta = member.__metadata__
        bound = {k: getattr(m, k) for m in meta for k in ("ge", "gt", "le", "lt") if getattr(m, k, None) is not None}
        low = next(((k, bound[k]) for k in ("ge", "gt") if k in bound), None)
        high = next(((k, bound[k]) for k in ("le", "lt") if k in bound), None)
        if low and high:
            text = f"in {'[(' [low[0] == 'gt']}{_num(low[1])}, {_num(high[1])}{'])' [high[0] == 'lt']}"
        elif low or high:
            k, x = low or high
            text = f"{dict(ge='>=', gt='>', le='<=', lt='<')[k]} {_num(x)}"
        elif Finite in meta:
            text = "a finite number"
        else:
            continue
        return text + nullable
    return None


_NOUNS = {float: "a number", int: "an integer"}
_NOT_FINITE = ("predicate_failed", "finite_number")
"""pydantic's error types of a value that is not finite (``Finite``'s predicate; an integer given ``inf``)."""


def _bounded(tp: Any) -> Any:
    """The type that the bounds of ``tp`` (an ``Annotated`` type, or a union holding one) are declared on; None
    when it declares no bound."""
    members = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    return next((typing.get_args(m)[0] for m in members if typing.get_origin(m) is Annotated
                 and any(getattr(x, k, None) is not None for x in m.__metadata__ for k in ("ge", "gt", "le", "lt"))),
                None)


def describe(key: str, err: dict[str, Any], tp: Any = None) -> str:
    """The one line of a pydantic error ``err`` (an item of ``ValidationError.errors()``) of the option ``key``:
    the rule ``tp`` declares (or, inside a dict or list, the one the error's ``ctx`` names), or pydantic's own
    sentence for a value of the wrong type; then the value given."""
    if err["type"] == "value_error" and isinstance(err.get("ctx", {}).get("error"), SettingError):
        inner = err["ctx"]["error"].problems[0]  # a field's problem, raised by the dataclass's own check
        if not key or not isinstance(inner, Problem):
            return f"{key}.{inner}" if key else inner
        return Problem(f"{key}.{inner}", f"{key}.{inner.key}", inner.value)
    if err["type"] == "value_error" and isinstance(err.get("ctx", {}).get("error"), UnknownName):
        return f"{key}: {err['ctx']['error']}"  # names the value, the closest registered name and the valid ones
    declared = rule(tp)
    if declared or err["type"] in _CONSTRAINTS:  # the whole declared rule (a value that is no number breaks it too)
        what = declared or _CONSTRAINTS[err["type"]].format(**{k: _num(v) if not isinstance(v, str) else v
                                                               for k, v in err.get("ctx", {}).items()})
        bounded = _bounded(tp) if declared else None
        if bounded is not None:  # bounds: say what kind of value, where the bound alone does not
            if err["type"] not in _CONSTRAINTS or isinstance(err["input"], bool):  # no number ("abc", false)
                what = f"{_NOUNS.get(bounded, 'a value')} {what}"
            elif err["type"] in _NOT_FINITE:  # inf meets ">= 0": it is its finiteness that fails
                what = f"{'an integer' if bounded is int else 'a finite number'} {what}"
        what = f"must be {what}"
    elif tp is not None:  # a value of another type: the declared one, named as Python writes it
        what = f"expected {type_name(tp, err['input'])}"
    else:
        what = err["msg"][:1].lower() + err["msg"][1:]
    # a number written as a string ("5") is quoted, so the line does not refuse what looks like the declared type
    got = repr(err["input"]) if err["type"] in _SCALAR_TYPES and isinstance(err["input"], str) else shown(err["input"])
    return Problem(f"{key}: {what} (got {got})", key, err["input"])


def shown(value: Any) -> str:
    """A refused value as a config writes it: a flag's text as typed, ``null``/``true``/``false`` in YAML's
    spelling (not Python's ``None``/``True``), any other value as its ``repr``."""
    if isinstance(value, str):
        return value
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)


def _an_object(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool, list, dict, type(None))):
        raise ValueError("expected an object")
    return value


_OBJECT = Annotated[Any, pydantic.AfterValidator(_an_object)]
"""Stands in for a union member pydantic cannot check (a ``Protocol`` such as ``Judge``): an object handed over
in Python, never a config's plain value."""


@functools.lru_cache(maxsize=None)
def _adapter(tp: Any) -> pydantic.TypeAdapter | None:
    """pydantic's validator of ``tp`` (classes it does not know are checked with ``isinstance``); None when it
    cannot build one (an annotation it cannot read: such an option is left to the code that uses it)."""
    try:
        try:
            return pydantic.TypeAdapter(tp, config=pydantic.ConfigDict(arbitrary_types_allowed=True))
        except pydantic.PydanticUserError:  # a dataclass carries its own config
            return pydantic.TypeAdapter(tp)
    except Exception:
        if typing.get_origin(tp) not in (Union, types.UnionType):
            return None
        members = tuple(m if _adapter(m) is not None else _OBJECT for m in typing.get_args(tp))
        return _adapter(Union[members]) if members != typing.get_args(tp) else None


_SCALAR_TYPES = ("int_type", "float_type", "bool_type")
"""pydantic's strict-mode errors of a scalar of another type: the conversions its lax mode makes (``true`` -> 1,
1 -> ``true``, 2.0 -> 2, ``"5"`` -> 5) are refused, since the option gets the value as written, not as converted."""


def problems(value: Any, tp: Any, key: str) -> list[str]:
    """Problems of ``value`` as an option of the declared type ``tp`` named ``key``; ``[]`` when it is fine.

    Checked in pydantic's lax mode, then, for a value a config can hold, in its strict mode as JSON (where a list
    is a tuple, a string a path and a mapping a dataclass, as in a config), of whose errors only a scalar of another
    type counts (:data:`_SCALAR_TYPES`)."""
    adapter = _adapter(tp)
    if adapter is None:
        return []
    try:
        adapter.validate_python(value)
    except pydantic.ValidationError as exc:
        return [_located(value, tp, key, exc.errors()[0])]
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):  # an object handed over in Python: the lax check is all there is
        return []
    try:
        adapter.validate_json(text, strict=True)
    except pydantic.ValidationError as exc:
        errors = [e for e in exc.errors() if e["type"] in _SCALAR_TYPES]
        if errors:
            return [_located(value, tp, key, errors[0])]
    return []


def _located(value: Any, tp: Any, key: str, err: dict[str, Any]) -> str:
    """The line of ``err``, named by the item of ``value`` it is about (``key.name``, ``key[1]``)."""
    node, path, inner = value, key, tp
    for part in err["loc"]:  # pydantic's loc also names union members and validators: keep what indexes value
        if isinstance(part, int) and isinstance(node, (list, tuple)) and part < len(node):
            node, path, inner = node[part], f"{path}[{part}]", _member(inner, part)
        elif isinstance(node, Mapping) and part in node:
            node, path, inner = node[part], f"{path}.{part}", _member(inner, part)
    return describe(path, err, inner)


def _member(tp: Any, part: str | int) -> Any:
    """The declared type of item ``part`` of a value of type ``tp`` (a dataclass's field, a dict's or a list's
    item), or None where it is not declared."""
    while typing.get_origin(tp) in (Annotated, Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if typing.get_origin(tp) is Annotated or len(args) == 1 else None
    if dataclasses.is_dataclass(tp):
        return argument_types(tp).get(part)
    args = typing.get_args(tp)
    return args[-1] if typing.get_origin(tp) in (list, dict, Mapping) and args else None


@dataclasses.dataclass
class Checked:
    """Base of the option dataclasses: building one validates every field against its declared type (so Python
    callers meet the refusals of the command line). A subclass with its own ``__post_init__`` calls this one. A
    dataclass itself (without fields), so that jsonargparse parses its subclasses as plain dataclasses (a ``grpo:``
    block, not a ``class_path``)."""

    def __post_init__(self) -> None:
        hints = argument_types(type(self))
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        keyed = self.option_types(values) if hasattr(self, "option_types") else {}
        found = []
        for name, value in values.items():
            if name in keyed and isinstance(value, Mapping):  # keys typed by another field (a reward's options)
                found += [p for k, v in value.items() for p in problems(v, keyed[name].get(k, Any), f"{name}.{k}")]
            else:
                found += problems(value, hints.get(name, Any), name)
        if found:
            raise SettingError(found, type(self).__name__)


def check_arguments(fn: Any, values: Mapping[str, Any], where: str) -> list[str]:
    """Problems of ``values`` as the keyword arguments of ``fn`` (a function or a class: its constructor), each
    named ``<where>.<key>``; a ``{class_path, init_args}`` value is checked by that class's constructor."""
    hints, found = argument_types(fn), []
    for key, value in values.items():
        if key in ("self", "__class__"):
            continue
        if isinstance(value, Mapping) and isinstance(value.get("class_path"), str):
            found += check_arguments(value["class_path"], value.get("init_args") or {}, f"{where}.{key}.init_args")
        else:
            found += problems(value, hints.get(key, Any), f"{where}.{key}")
    return found


_UNIT = Annotated[float, Ge(0), Le(1), Finite]
_NONNEG, _POSITIVE = Annotated[float, Ge(0), Finite], Annotated[float, Gt(0), Finite]
CLASS_RANGES: dict[str, dict[str, Any]] = {
    "torch.optim.": {
        "lr": _NONNEG, "eps": _NONNEG, "weight_decay": _NONNEG, "betas": list[Annotated[float, Ge(0), Lt(1)]],
        "momentum": _NONNEG, "dampening": _UNIT, "alpha": _NONNEG, "rho": _UNIT, "lr_decay": _NONNEG,
        "initial_accumulator_value": _NONNEG},
    "torch.optim.lr_scheduler.": {
        "start_factor": Annotated[float, Gt(0), Le(1), Finite], "end_factor": _UNIT,
        "total_iters": Annotated[int, Ge(0)], "gamma": _POSITIVE, "step_size": Annotated[int, Ge(1)],
        "T_max": Annotated[int, Ge(1)], "T_0": Annotated[int, Ge(1)], "T_mult": Annotated[int, Ge(1)],
        "eta_min": _NONNEG, "factor": _UNIT, "max_lr": _NONNEG, "pct_start": _UNIT},
}
"""Ranges of the parameters of classes outside lit_grpo (torch's optimizers and lr schedulers), by the class's
module prefix, then by parameter name; applied to whichever class of that module has the parameter."""


@functools.lru_cache(maxsize=None)
def argument_types(target: Any) -> dict[str, Any]:
    """Parameter (or field) -> declared type of a dataclass, a class's constructor, a function, or a class named by
    its import path; for a class of a module in :data:`CLASS_RANGES`, its parameters found there."""
    if isinstance(target, str):
        module, _, name = target.rpartition(".")
        try:
            target = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            return {}
    fn = target.__init__ if inspect.isclass(target) and not dataclasses.is_dataclass(target) else target
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an annotation that does not resolve here: left to the code that uses the value
        hints = {}
    if inspect.isclass(target):
        path = f"{target.__module__}.{target.__qualname__}"
        for prefix, table in sorted(CLASS_RANGES.items()):  # longest prefix last: it wins
            if path.startswith(prefix):
                params = inspect.signature(fn).parameters
                hints.update({k: v for k, v in table.items() if k in params})
    return hints


def type_name(tp: Any, value: Any) -> str:
    """A declared type as an error message names it, bounds left out (``value``: the value refused): ``str``;
    ``list`` for a ``list[str]`` given a non-list (``list[str]`` for a list); ``dict[str, float] or null`` for a union
    of two, ``one of int, str, null`` for more (None in a config's spelling).

    >>> type_name(typing.Optional[dict[str, Annotated[float, Ge(0)]]], "x")
    'dict[str, float] or null'
    """
    tp = bare_type(tp)
    if typing.get_origin(tp) in (Union, types.UnionType):
        names = [_member_name(m) for m in typing.get_args(tp)]
        return " or ".join(names) if len(names) == 2 else "one of " + ", ".join(names)
    origin = typing.get_origin(tp)
    return origin.__name__ if origin is not None and not isinstance(value, origin) else _member_name(tp)


def bare_type(tp: Any) -> Any:
    """``tp`` with every ``Annotated`` replaced by the type it constrains."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return bare_type(args[0])
    if origin in (Union, types.UnionType):
        return Union[tuple(bare_type(a) for a in args)]
    if origin in (list, dict, tuple, set) and args:
        return types.GenericAlias(origin, tuple(bare_type(a) for a in args))
    return tp


def _member_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    return tp.__name__ if typing.get_origin(tp) is None and isinstance(tp, type) else str(tp).replace("typing.", "")


from lit_grpo import compat  # noqa: E402


class HelpFormatter(compat.HelpFormatter):
    """``--help`` names an option's type without its declared bounds (``float``, not ``Annotated[float, Ge(ge=0),
    ...]``); the bounds are enforced on parse and worded in a refusal."""

    def type_text(self, hint: Any) -> str | None:
        return type_name(hint, None) if bare_type(hint) != hint else None
