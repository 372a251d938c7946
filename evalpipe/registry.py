"""One registry per plug point: each name declared once, with what it stands for.

A plug point (backends, retrievers, toolsets, formats) keeps one `Registry`. A name
is added once, with its object or the "package.module:attr" where it lives; a path is
imported the first time the name is used, so that reading a config can list and
check every name without loading what is behind it (torch, numpy). From that one
declaration the config checks a value (`check`), the command line lists the names in
its help, and the code that builds a plug looks it up (`registry[name]`). An
unknown name is an InputError naming the closest known one, everywhere: there is no
fallback.

Where each name brings a section of its own (a backend's model entry), a field
declared `Annotated[Base, registry.section_by("backend")]` is validated as the
section registered under the entry's own `backend`, looked up when a value is
checked, so a name added later is known there too.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, GetCoreSchemaHandler, ValidationError
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError, core_schema

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

    def get(self, name: str) -> T | None:
        """What `name` stands for, or None where it is not registered."""
        return self[name] if name in self._targets else None

    def unknown(self, name: str) -> InputError:
        return InputError(f"unknown {self.what} {name!r}{closest(str(name), self.names())}",
                          field=self.field, expected=self.choices())

    def choices(self) -> str:
        return " | ".join(self.names())

    def check(self) -> AfterValidator:
        """The config's check of a value: `Annotated[str, registry.check()]`. It reads
        the names when a value is checked, so a name added later is known."""
        return one_of(self.names, self.what)

    def section_by(self, key: str, default: str | None = None) -> SectionBy:
        """The config's check of an entry whose `key` names its section here (with
        `default` where the entry has no such key)."""
        return SectionBy(self, key, default)


class SectionBy:
    """A pydantic marker: validate a mapping as the section `registry` holds under the
    mapping's `key`; a section instance passes as it is."""

    def __init__(self, registry: Registry[Any], key: str, default: str | None):
        self.registry, self.key, self.default = registry, key, default

    def section(self, value: dict[str, Any]) -> type[BaseModel] | None:
        """The section a mapping names (None: it names none that is registered)."""
        name = value.get(self.key, self.default)
        return self.registry.get(name) if isinstance(name, str) else None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        def validate(value: Any, info: core_schema.ValidationInfo) -> Any:
            if isinstance(value, source):
                return value
            if not isinstance(value, dict):
                raise PydanticCustomError("not_mapping", "Input should be a mapping")
            section = self.section(value)
            if section is None:
                name = value.get(self.key, self.default)
                raise ValidationError.from_exception_data(self.registry.what, [InitErrorDetails(
                    type=PydanticCustomError("unknown_name", "{message}", {
                        "message": f"unknown {self.registry.what} {name!r}"
                                   f"{closest(str(name), self.registry.names())}",
                        "expected": self.registry.choices()}),
                    loc=(self.key,), input=name)])
            return section.model_validate({self.key: self.default, **value},
                                          context=info.context)

        return core_schema.with_info_plain_validator_function(validate)


__all__ = ["Registry"]
