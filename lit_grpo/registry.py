"""A name -> object registry that rejects duplicate names and lists the valid ones in its errors."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Registered objects by name; ``kind`` names what is registered in error messages."""

    def __init__(self, kind: str):
        self.kind = kind
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
        """The entry called ``name``; an unknown name raises ``KeyError`` listing the valid ones."""
        if name not in self._entries:
            raise KeyError(f"unknown {self.kind} {name!r}; registered: {', '.join(sorted(self._entries))}")
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries
