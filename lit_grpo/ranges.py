"""Numeric options: each declares its range on its type, and one function checks every value against it.

**Declaring.** An option's range is part of its type, ``Annotated[<int or float>, Range(...)]``, on a dataclass
field, a constructor parameter or a reward function's parameter; the docstring under it stays its help:

    beta: Annotated[float, Range(ge=0)] = 0.0
    top_p: Annotated[float, Range(gt=0, le=1, note="1 = off")] = 1.0
    micro_batch_size: Annotated[int, Range(ge=1)] | None = None        # None stays allowed by the type
    weights: dict[str, Annotated[float, Range(ge=0)]] | None = None     # every value of the dict

A new option is checked by declaring its type, nothing else: without a ``Range`` it is still checked to be
finite (``tests/test_ranges.py`` lists every numeric option of the module, the data, the judge and the rewards that
declares no range and is not on its list of options for which any finite value is right).

**What is checked**, however a value arrives (a YAML file, ``${oc.env:NAME}``, a command-line flag, Python):
every number (``int`` or ``float``; ``bool`` is no number) inside an option is finite (YAML's ``.nan`` and
``.inf`` pass every ``x < 0`` test), at any depth of lists and dicts, declared or not; and a number whose type
carries a ``Range`` lies in it.

**Where.** :func:`check_value` is the one check. It walks a value along its type: a dataclass field by field, a
``dict[str, X]`` value by value, a ``list[X]`` item by item, a ``{class_path, init_args}`` block by the class's
constructor. An option whose keys' types depend on another field (a reward's ``kwargs`` on its ``name``) is typed
by the dataclass's ``option_types(value)`` hook. Classes we do not own (torch's optimizers and lr schedulers) take
the ranges of :data:`CLASS_RANGES` by parameter name. Two callers:

- :class:`Checked`, the base of the option dataclasses: building one (from Python) checks every field;
- :func:`lit_grpo.preflight.check_config`: the parsed configuration, through the model class's and the data
  module's constructors, before any model work and before any log folder; each problem is one line naming the
  full key (``model.init_args.grpo.max_grad_norm must be > 0 (null = no clipping), got nan``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union

__all__ = ["Range", "Checked", "Keys", "check_value", "check_arguments", "raise_problems", "argument_types",
           "CLASS_RANGES"]


@dataclasses.dataclass(frozen=True)
class Range:
    """The interval a number must lie in: ``ge`` / ``gt`` below, ``le`` / ``lt`` above (each optional); ``note``
    says what the bounds mean, shown in the refusal."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    note: str | None = None

    def holds(self, x: float) -> bool:
        """Whether ``x`` is finite and in the interval."""
        return (math.isfinite(x) and (self.ge is None or x >= self.ge) and (self.gt is None or x > self.gt)
                and (self.le is None or x <= self.le) and (self.lt is None or x < self.lt))

    def describe(self) -> str:
        """``>= 1``, ``> 0``, ``in (0, 1]``, ... and the note."""
        low = f"[{_num(self.ge)}" if self.ge is not None else f"({_num(self.gt)}" if self.gt is not None else None
        high = f"{_num(self.le)}]" if self.le is not None else f"{_num(self.lt)})" if self.lt is not None else None
        if low and high:
            text = f"in {low}, {high}"
        elif low:
            text = (">= " if low[0] == "[" else "> ") + low[1:]
        elif high:
            text = ("<= " if high[-1] == "]" else "< ") + high[:-1]
        else:
            text = "a finite number"
        return f"{text} ({self.note})" if self.note else text

    def __repr__(self) -> str:  # Annotated[float, Range(in (0, 1])]
        return f"Range({self.describe()})"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


class Keys(dict):
    """The types of a mapping's keys (key -> type), for a dict option typed by something else (a reward's
    signature); keys it does not list are checked as finite only."""


FINITE = Range()


# ----------------------------------------------------------------- classes we do not own, by parameter name
_UNIT = Annotated[float, Range(ge=0, le=1)]
CLASS_RANGES: dict[str, dict[str, Any]] = {
    "torch.optim.": {
        "lr": Annotated[float, Range(ge=0)], "eps": Annotated[float, Range(ge=0)],
        "weight_decay": Annotated[float, Range(ge=0)], "betas": list[Annotated[float, Range(ge=0, lt=1)]],
        "momentum": Annotated[float, Range(ge=0)], "dampening": _UNIT, "alpha": Annotated[float, Range(ge=0)],
        "rho": _UNIT, "lr_decay": Annotated[float, Range(ge=0)],
        "initial_accumulator_value": Annotated[float, Range(ge=0)]},
    "torch.optim.lr_scheduler.": {
        "start_factor": Annotated[float, Range(gt=0, le=1)], "end_factor": _UNIT,
        "total_iters": Annotated[int, Range(ge=0)], "gamma": Annotated[float, Range(gt=0)],
        "step_size": Annotated[int, Range(ge=1)], "T_max": Annotated[int, Range(ge=1)],
        "T_0": Annotated[int, Range(ge=1)], "T_mult": Annotated[int, Range(ge=1)],
        "eta_min": Annotated[float, Range(ge=0)], "factor": _UNIT, "max_lr": Annotated[float, Range(ge=0)],
        "pct_start": _UNIT},
}
"""Ranges of the parameters of classes outside lit_grpo (torch's optimizers and lr schedulers), by the class's
module prefix, then by parameter name; applied to whichever class of that module has the parameter."""


# ----------------------------------------------------------------- the check
def check_value(value: Any, tp: Any, where: str) -> list[str]:
    """Problems of ``value`` as an option of type ``tp`` named ``where`` (see the module docstring); ``[]`` when
    it is fine. One line per problem, naming the full key: ``grpo.epsilon_low must be in [0, 1], got 1.5``."""
    if value is None:
        required = _required_number(tp)
        return [f"{where} must be {required.describe()}, got None"] if required else []
    tp, ranges = _resolve(tp, value)
    if typing.get_origin(tp) is typing.Literal and value not in typing.get_args(tp):  # a fixed choice (Python
        # callers: jsonargparse refuses a wrong choice itself, from a file or a flag)
        return [f"{where} must be one of {', '.join(map(str, typing.get_args(tp)))}, got {value!r}"]
    if isinstance(value, (bool, str, bytes)):
        return []
    if isinstance(value, (int, float)):
        bad = [r for r in (ranges or [FINITE]) if not r.holds(float(value))]
        return [f"{where} must be {bad[0].describe()}, got {value!r}"] if bad else []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        tp = tp if dataclasses.is_dataclass(tp) else type(value)
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return [p for key, item in value.items() for p in check_value(item, _key_type(tp, value, key), f"{where}.{key}")]
    if isinstance(value, Sequence):
        return [p for i, item in enumerate(value) for p in check_value(item, _item_type(tp, i), f"{where}[{i}]")]
    return []


def check_arguments(fn: Any, values: Mapping[str, Any], where: str) -> list[str]:
    """Problems of ``values`` as the keyword arguments of ``fn`` (a function or a class: its constructor), each
    named ``<where>.<key>``."""
    hints = argument_types(fn)
    return [p for key, value in values.items() if key not in ("self", "__class__")
            for p in check_value(value, hints.get(key, Any), f"{where}.{key}")]


def raise_problems(problems: list[str]) -> None:
    """Raise ``ValueError`` with the first problem (and how many more) when there are any."""
    if problems:
        from lit_grpo.errors import first_and_more

        raise ValueError(first_and_more(problems))


@dataclasses.dataclass
class Checked:
    """Base of the option dataclasses: building one checks every field with :func:`check_value` (so Python
    callers meet the same refusals as the command line). A subclass with its own ``__post_init__`` calls this
    one. A dataclass itself (without fields), so that jsonargparse still parses its subclasses as plain
    dataclasses (a ``grpo:`` block, not a ``class_path``)."""

    def __post_init__(self) -> None:
        raise_problems(check_value(self, type(self), type(self).__name__))


# ----------------------------------------------------------------- types
def _resolve(tp: Any, value: Any) -> tuple[Any, list[Range]]:
    """``tp`` without ``Annotated`` (its ranges returned) and, for a union, the member that fits ``value``."""
    ranges: list[Range] = []
    while True:
        if typing.get_origin(tp) is Annotated:
            ranges += [m for m in tp.__metadata__ if isinstance(m, Range)]
            tp = tp.__origin__
        elif typing.get_origin(tp) in (Union, types.UnionType):
            members = [m for m in typing.get_args(tp) if m is not type(None)]
            tp = next((m for m in members if _fits(m, value)), Any)
        else:
            return tp, ranges


def _required_number(tp: Any) -> Range | None:
    """The range of a number type that does not admit ``None`` (``float``, ``Annotated[int, Range(ge=1)]``)."""
    if typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp):
        return None
    base, ranges = _resolve(tp, 1.0)
    return (ranges or [FINITE])[0] if base in (int, float) else None


def _fits(tp: Any, value: Any) -> bool:
    base = tp
    while typing.get_origin(base) is Annotated:
        base = base.__origin__
    origin = typing.get_origin(base) or base
    if origin is typing.Literal:
        return not isinstance(value, (Mapping, list, tuple))
    if isinstance(value, bool):
        return origin is bool
    if isinstance(value, (int, float)):
        return origin in (int, float)
    if isinstance(value, Mapping) or dataclasses.is_dataclass(value):
        return dataclasses.is_dataclass(origin) or origin in (dict, Mapping) or isinstance(base, Keys)
    if isinstance(value, (list, tuple)):
        return origin in (list, tuple, Sequence)
    return False


def _key_type(tp: Any, mapping: Mapping, key: str) -> Any:
    if isinstance(tp, Keys):
        return tp.get(key, Any)
    if dataclasses.is_dataclass(tp):
        extra = tp.option_types(mapping) if hasattr(tp, "option_types") else {}
        return extra[key] if key in extra else argument_types(tp).get(key, Any)
    if typing.get_origin(tp) in (dict, Mapping) and len(typing.get_args(tp)) == 2:
        return typing.get_args(tp)[1]
    if isinstance(mapping.get("class_path"), str):
        return Keys(argument_types(mapping["class_path"])) if key == "init_args" else Any
    return Any


def _item_type(tp: Any, i: int) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and args and args[-1] is not Ellipsis:
        return args[i] if i < len(args) else Any
    return args[0] if args else Any


@functools.lru_cache(maxsize=None)
def argument_types(target: Any) -> dict[str, Any]:
    """Parameter (or field) -> type, ranges kept, of a dataclass, a class's constructor, a function, or a class
    named by its import path; for a class of a module in :data:`CLASS_RANGES`, its parameters found there."""
    if isinstance(target, str):
        module, _, name = target.rpartition(".")
        try:
            target = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            return {}
    fn = target.__init__ if inspect.isclass(target) and not dataclasses.is_dataclass(target) else target
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an annotation that does not resolve here: its values are checked as finite only
        hints = {}
    if inspect.isclass(target):
        path = f"{target.__module__}.{target.__qualname__}"
        for prefix, table in sorted(CLASS_RANGES.items()):  # longest prefix last: it wins
            if path.startswith(prefix):
                hints.update({k: v for k, v in table.items() if _has_parameter(fn, k)})
    return hints


def _has_parameter(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def type_name(tp: Any, value: Any) -> str:
    """A declared type as an error message names it, ranges left out (``value``: the value refused): ``str``;
    ``list`` for a ``list[str]`` given a non-list (``list[str]`` for a list); ``one of dict[str, float], None`` for a
    union.

    >>> type_name(typing.Optional[dict[str, typing.Annotated[float, Range(ge=0)]]], "x")
    'one of dict[str, float], None'
    """
    tp = _without_ranges(tp)
    members = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return "one of " + ", ".join(_member_name(_without_ranges(m)) for m in members)
    origin = typing.get_origin(tp)
    if origin is not None and not isinstance(value, origin):
        return origin.__name__
    return _member_name(tp)


def _without_ranges(tp: Any) -> Any:
    """``tp`` with every ``Annotated`` range replaced by the type it constrains."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _without_ranges(args[0])
    if origin in (list, dict, tuple, set) and args:
        return types.GenericAlias(origin, tuple(_without_ranges(a) for a in args))
    return tp


def _member_name(tp: Any) -> str:
    if tp is type(None):
        return "None"
    if typing.get_origin(tp) is None and isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")
