"""A name -> object registry that rejects duplicate names and lists the valid ones in its errors, and the
discovery of tasks: the packages that register readers, rewards, templates... into the core's registries.

The core never imports a task. A registry made with ``tasks=True`` imports them when a name is missing: one task
at a time, until the name appears (so a run that names ``binary`` imports VisualSphinx's task only); listing the
names (``names()``, an unknown name's error) imports them all. Tasks are found in two places:

- each subpackage of :mod:`lit_grpo.tasks` (a folder dropped there needs no other line);
- each entry point of the group ``lit_grpo.tasks`` of an installed distribution (a task outside this package:
  ``[options.entry_points] lit_grpo.tasks = my_task = my_pkg.my_task`` in its ``setup.cfg``).

An entry point would do for the tasks inside the package too; listing the folder keeps a source checkout or an
editable install made before a task was added working without re-running ``pip install``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import pkgutil
from typing import Annotated, Any, Callable, Generic, TypeVar

T = TypeVar("T")
TASK_PACKAGE = "lit_grpo.tasks"
"""The package whose subpackages are tasks, and the entry-point group of tasks outside it."""
_pending: list[str] | None = None
"""Task modules not imported yet, in discovery order (``None``: not listed yet)."""
unloadable: dict[str, str] = {}
"""Task module -> why it could not be imported (a package of its extra missing: ``pip install lit_grpo[phyx]``)."""


def task_modules() -> list[str]:
    """Every task module's dotted name: the subpackages of :data:`TASK_PACKAGE` (sorted), then the entry points of
    the group :data:`TASK_PACKAGE`, each once."""
    package = importlib.import_module(TASK_PACKAGE)
    found = [f"{TASK_PACKAGE}.{m.name}" for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name)
             if m.ispkg]
    found += [ep.value.split(":")[0] for ep in importlib.metadata.entry_points(group=TASK_PACKAGE)]
    return list(dict.fromkeys(found))


def load_next_task() -> bool:
    """Import the next task not imported yet; ``False`` when every task is imported."""
    global _pending
    if _pending is None:
        _pending = task_modules()
    if not _pending:
        return False
    name = _pending.pop(0)
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:  # a third-party package of the task's extra is not installed
        if exc.name is None or exc.name.split(".")[0] == name.split(".")[0]:
            raise
        unloadable[name] = f"{exc}; pip install the extra that holds it"
    return True


def did_you_mean(word: str, choices, cutoff: float = 0.6) -> str:
    """`` (did you mean X?)`` with the choice closest to ``word`` (difflib's ratio at least ``cutoff``), else ``""``:
    the one hint every unknown name or key gets."""
    import difflib

    lowered = {str(c).lower(): c for c in choices}  # "VLLM" is close to "vllm": case never counts against a choice
    close = difflib.get_close_matches(str(word).lower(), list(lowered), n=1, cutoff=cutoff)
    return f" (did you mean {lowered[close[0]]}?)" if close else ""


class UnknownName(KeyError, ValueError):
    """A name no registry entry has (:meth:`Registry.get`, :meth:`Registry.name_type`): the message names the closest
    and the valid ones. A ``KeyError`` (a lookup that failed) and a ``ValueError`` (a value refused), shown without
    the quotes a ``KeyError`` puts around its message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """Registered objects by name; ``kind`` names what is registered in error messages."""

    def __init__(self, kind: str, tasks: bool = False):
        self.kind, self.tasks = kind, tasks
        """``tasks``: tasks register into it; a missing name imports them (:func:`load_next_task`)."""
        self._entries: dict[str, T] = {}
        self.aliases: dict[str, str] = {}
        """Alias -> the name it stands for."""

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        """Decorator that registers its target under ``name`` and each of ``aliases`` (other names of the same entry,
        e.g. a paper's name for a formula); a second use of any name raises."""

        def deco(obj: T) -> T:
            for key in (name, *aliases):
                if key in self._entries:
                    raise ValueError(f"{self.kind} {key!r} is already registered")
            self._entries.update(dict.fromkeys((name, *aliases), obj))
            self.aliases.update(dict.fromkeys(aliases, name))
            return obj

        return deco

    def get(self, name: str) -> T:
        """The entry called ``name``; an unknown name raises :class:`UnknownName` (:meth:`unknown`'s words)."""
        if name not in self:
            raise UnknownName(self.unknown(name))
        return self._entries[name]

    def unknown(self, name: Any) -> str:
        """The words for ``name`` not registered: ``unknown <kind> 'name' (did you mean X?); registered: ...``."""
        return f"unknown {self.kind} {name!r}{did_you_mean(str(name), self.names())}; registered: {self.listing()}"

    def listing(self) -> str:
        """The registered names for an error message, then each task that could not be imported and why (its extra
        not installed), so an unknown name that a task would have registered says what to install."""
        missing = "".join(f"; task {t} not loaded: {why}" for t, why in unloadable.items()) if self.tasks else ""
        return ", ".join(self.names()) + missing

    def name_type(self) -> Any:
        """The declared type of an option that names an entry: ``str`` whose value must be registered, refused with
        :meth:`unknown`'s words. The check sits in the type (a pydantic validator), so the parser refuses an
        unknown name when the config is read (jsonargparse hands ``Annotated`` types to pydantic; ``--print_config``
        included) and :class:`~lit_grpo.settings.Checked` when a Python caller builds the group; the names are
        read when a value is checked, so a task that registers one later still counts."""
        import pydantic

        def registered(name: str) -> str:
            try:
                known = name in self  # a reward's dotted path is imported here
            except ValueError as exc:  # it names a module that fails to import, or no callable
                raise UnknownName(str(exc)) from None
            if not known:
                raise UnknownName(self.unknown(name))
            return name

        return Annotated[str, pydantic.AfterValidator(registered)]

    def names(self) -> list[str]:
        """Every registered name, sorted (with ``tasks``: after importing every task)."""
        return sorted(self.entries())

    def entries(self) -> dict[str, T]:
        """Name -> entry in registration order (with ``tasks``: after importing every task)."""
        while self.tasks and load_next_task():
            pass
        return dict(self._entries)

    def loaded(self, name: str) -> bool:
        """Whether ``name`` is registered already, importing no task."""
        return name in self._entries

    def __contains__(self, name: str) -> bool:
        """Whether ``name`` is registered (with ``tasks``: importing tasks one at a time until it is)."""
        if not isinstance(name, str):  # a config's list or mapping where a name goes: no name (not a TypeError)
            return False
        while name not in self._entries and self.tasks and load_next_task():
            pass
        return name in self._entries


OPTION_GROUPS: Registry[type] = Registry("option group", tasks=True)
"""Name -> the dataclass a task registers as one of the core's option groups (the attention task's ``attention``,
the PhyX task's ``judge``, the demo task's ``embedded``); the core types the option with :func:`option_group`."""


def option_group(name: str) -> Any:
    """The type of the option group ``name``, for a core option's annotation: ``judge: option_group("judge") | None``.

    The core's modules use postponed annotations, so this runs when the option's type is read (jsonargparse,
    ``get_type_hints``), not when the core is imported: on the command line (after :func:`load_option_groups`) it
    imports the task that owns the group, so the option is typed, checked and documented by the task's dataclass
    (``--help``, ``--print_config``) while the core imports no task. Elsewhere (a Python caller building the core's
    settings), and when the owning task cannot be imported (its extra missing), a group not registered yet is a
    plain mapping: building the settings imports no task, and the group's dataclass checks the mapping when it is
    built (:func:`built_group`).
    """
    return _group(name) if _typing or OPTION_GROUPS.loaded(name) else dict[str, Any]


def _group(name: str) -> Any:
    """The group's dataclass, importing tasks until one registers it; a mapping when none can (its extra missing)."""
    return OPTION_GROUPS.get(name) if name in OPTION_GROUPS else dict[str, Any]


_typing = False
"""Whether :func:`option_group` imports the task that owns a group (set by :func:`load_option_groups`)."""


_SLOTS: list[tuple[type, str, str]] = []
"""``(dataclass, field, group)``: the fields of the core's option dataclasses that a task's group types
(:func:`option_slot`)."""


def option_slot(cls: type, field: str, group: str) -> None:
    """Declare that ``cls.field`` (a dataclass field annotated ``Any``: a Python caller's mapping or the group's
    dataclass, built by :func:`built_group`) holds the option group
    ``group``: :func:`load_option_groups` types it with the group's dataclass. For modules whose annotations are read
    as they are written (the option dataclasses: jsonargparse keeps a field's ``Annotated`` bounds only then), where
    ``option_group(...)`` in the annotation would be fixed at import, before any task could register the group.
    A slot declared after :func:`load_option_groups` ran (its module imported later) is typed at once."""
    _SLOTS.append((cls, field, group))
    if _typing:
        _type_slot(cls, field, group)


def _type_slot(cls: type, field: str, group: str) -> None:
    # the three places a dataclass field's type is read: the class's annotations (get_type_hints, pydantic),
    # the generated __init__'s (inspect.signature: jsonargparse) and the field itself (dataclasses.fields)
    typed = option_group(group) | None
    cls.__annotations__[field] = cls.__init__.__annotations__[field] = typed
    next(f for f in dataclasses.fields(cls) if f.name == field).type = typed


def load_option_groups() -> None:
    """Type the tasks' option groups from now on (:func:`option_group`, :func:`option_slot`): what the command line
    does before it reads its options."""
    global _typing
    _typing = True
    for slot in _SLOTS:
        _type_slot(*slot)


def built_group(name: str, value: Any) -> Any:
    """``value`` of the option group ``name`` as its dataclass (importing the task that owns it): a mapping (a Python
    caller's, or a signature's ``{}`` default) is built with the group's defaults filled in and checked; an instance
    (the parser's) is kept."""
    return _group(name)(**value) if isinstance(value, dict) else value
