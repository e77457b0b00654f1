"""Extra per-completion reward columns measured during the log-prob pass (the attention reward's ``asm`` is one).

A reward reads columns: the sample's fields, the rollout's (``truncated``, ``completion_length``), and columns that
only a forward of the policy over prompt + completion can give. A **column provider** gives those: registered in
:data:`COLUMNS` under each column name it gives, built once per module as ``factory(model, processor, options)``,
it watches the no-grad log-prob pass's full-sequence forward (its ``capture`` is a context manager whose hooks are
removed on exit, errors included) and then measures the rows that forward covered::

    with provider.capture(model, rollout) as cap:           # hooks on, one forward, hooks off
        model(**inputs)
    measurement = provider.score(cap, rollout, images)      # images[n]: row n's PIL images
    measurement.columns()                                   # {"asm": [N values]}
    type(measurement).cat([m1, m2])                         # micro-batches joined in row order

The module asks which columns its rewards (and evaluation metrics) read; for each one that is neither a sample nor
a rollout field it finds the provider registered under that name (a task registers it, like its rewards: the
registry imports the tasks on a miss) and runs the log-prob pass under it (:class:`lit_grpo.passes.PolicyPasses`,
the engine's ``measured_logps``). A provider may have an option group of the module, which its task registers
(:func:`lit_grpo.registry.option_group`; ``attention`` for ``asm``): its ``enabled`` turns the provider on with no
reward reading the column (``True``; an observer wants the measurement) or off (``False``: then a reward that reads
it is an error).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable, Protocol

from torch import nn

from lit_grpo.registry import Registry, built_group

__all__ = ["COLUMNS", "ColumnProvider", "Measurement", "build_providers"]


class Measurement(Protocol):
    """What a provider measured over some rows."""

    def columns(self) -> dict[str, list]:
        """Column name -> one value per row (NaN: cannot score that completion)."""

    @classmethod
    def cat(cls, parts: list[Any]) -> Any:
        """The measurements of consecutive row ranges, joined in row order."""


class ColumnProvider(Protocol):
    """Measures extra columns from the log-prob pass's forward (see the module docstring)."""

    def capture(self, model: nn.Module, rollout) -> AbstractContextManager:
        """Hooks on ``model`` for one full-sequence forward over ``rollout``'s rows, removed on exit."""

    def score(self, capture: Any, rollout, images: list[list]) -> Measurement:
        """The measurement of ``rollout``'s rows from what ``capture`` saw; ``images[n]``: row ``n``'s images."""


COLUMNS: Registry[Callable[..., ColumnProvider]] = Registry("log-prob-pass column", tasks=True)
"""Column name -> provider factory ``(model, processor, options) -> ColumnProvider`` (``options``: the module's
option group for it, or None)."""


def build_providers(model: nn.Module, processor, read: set[str],
                    groups: dict[str, Any] | None = None) -> dict[str, ColumnProvider]:
    """The providers a module runs its log-prob pass under: one per column of ``read`` (the columns the rewards read
    that are neither sample nor rollout fields) registered in :data:`COLUMNS`, plus those whose option group sets
    ``enabled: true``. ``groups``: the module's option groups of providers by name (``attention``), each the group's
    dataclass (its class names its ``column``) or a mapping of it (:func:`lit_grpo.registry.built_group`). A column
    not registered is left to the sample (a task's field).

    Raises:
        ValueError: a reward reads a column whose option group sets ``enabled: false``.
    """
    wanted, options = {c for c in read if c in COLUMNS}, {}
    for name, value in (groups or {}).items():
        enabled = value.get("enabled") if isinstance(value, dict) else getattr(value, "enabled", None)
        if enabled is None and not wanted:
            continue  # nothing reads a column and nothing asks for one: the group's task is not even imported
        group = built_group(name, value)
        options[group.column] = group
        if enabled is False and group.column in wanted:
            raise ValueError(f"a reward reads the log-prob pass's {group.column!r} column: it needs "
                             f"{name}.enabled true (or unset)")
        if enabled:
            wanted.add(group.column)
    return {c: COLUMNS.get(c)(model, processor, options.get(c)) for c in sorted(wanted)}
