"""One registry per plug point: each name declared once, with what it stands for.

A plug point (backends, retrievers, toolsets, formats) keeps one `Registry`. A name
is added once, with its object or the "package.module:attr" where it lives; a path is
imported the first time the name is used, so that reading a config can list and
check every name without loading what is behind it (torch, numpy). From that one
declaration the config checks a value (`check`), the command line lists the names in
its help, and the code that builds a plug looks it up (`registry[name]`). An
unknown name is an InputError naming the closest known one, everywhere: there is no
fallback.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from pydantic import AfterValidator

from evalpipe.errors import InputError
from evalpipe.schema import closest, one_of

T = TypeVar("T")


class Registry(Generic[T]):
    """The names of one plug point, in the order they were added."""

    def __init__(self, what: str, field: str):
        self.what = what  # "format", in messages: unknown format 'x'
        self.field = field  # the config key its names go under, in errors
        self._targets: dict[str, T | str] = {}
        self.version = 0  # moves with every name added or removed

    def add(self, name: str, target: T | str) -> None:
        """Declare `name`: `target` is the object, or "package.module:attr" (imported on
        first use)."""
        if name in self._targets:
            raise ValueError(f"{self.what} {name!r} is registered already")
        self._targets[name] = target
        self.version += 1

    def remove(self, name: str) -> None:
        """Take a name back (a plug registered for a while, by a test say)."""
        del self._targets[name]
        self.version += 1

    def names(self) -> tuple[str, ...]:
        return tuple(self._targets)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._targets)

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def __getitem__(self, name: str) -> T:
        """What `name` stands for, imported if need be; InputError for a name not here."""
        if name not in self._targets:
            raise self.unknown(name)
        target = self._targets[name]
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            found: Any = importlib.import_module(module)
            for part in attr.split("."):
                found = getattr(found, part)
            self._targets[name] = target = found
        return target

    def unknown(self, name: str) -> InputError:
        return InputError(f"unknown {self.what} {name!r}{closest(str(name), self.names())}",
                          field=self.field, expected=self.choices())

    def choices(self) -> str:
        return " | ".join(self.names())

    def check(self) -> AfterValidator:
        """The config's check of a value: `Annotated[str, registry.check()]`. It reads
        the names when a value is checked, so a name added later is known."""
        return one_of(self.names, self.what)


__all__ = ["Registry"]
