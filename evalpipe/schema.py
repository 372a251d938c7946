"""Typed settings sections and their errors: one way to declare and check a setting.

A section is a pydantic model that forbids unknown keys and takes YAML's types as
written (`"3"` stays a string, `true` is no number). A value that must be one of a
registry's names (a format, a toolset, a retrieval method) is declared with
`one_of`, so a misspelt value is refused with the closest valid name, as a
misspelt key is. `input_error` turns the first schema error into one InputError:
file, line (when the YAML text is at hand), field, what was expected and the
closest valid key or value.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Collection, Sequence
from typing import Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from evalpipe.errors import InputError


class Section(BaseModel):
    """A settings section: unknown keys are errors, and values keep their YAML types."""

    model_config = ConfigDict(extra="forbid", strict=True)


def closest(name: str, names: Collection[str]) -> str:
    """' (did you mean X?)' for the closest of names, or ''."""
    close = difflib.get_close_matches(str(name), sorted(names), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def one_of(names: Callable[[], Collection[str]] | Collection[str], what: str) -> AfterValidator:
    """Checks that a string is one of a registry's names: `Annotated[str, one_of(...)]`.
    `names` may be a function, read when a value is checked (a registry in a module that
    is costly to import)."""

    def check(value: str) -> str:
        known = names() if callable(names) else names
        if value not in known:
            raise PydanticCustomError("unknown_name", "{message}", {
                "message": f"unknown {what} {value!r}{closest(value, known)}",
                "expected": " | ".join(known)})
        return value

    return AfterValidator(check)


def input_error(exc: ValidationError, root: type[BaseModel], *, file: str | None = None,
                text: str | None = None, prefix: str = "",
                overridden: Sequence[str] = (), data: Any = None) -> InputError:
    """The first error of `exc` (from validating the mapping `data` as `root`) as an
    InputError. `text`, the YAML the mapping was read from, lets it name a line; a field
    whose path is among `overridden` (--set keys) is named as that override instead of a
    file line. `data` tells which section an entry chose by its own key (a model entry
    by its backend), so that an unknown key there is named against that section's keys."""
    errors = exc.errors()
    err = errors[0]
    loc, section = _key_path(root, err["loc"], data)
    # A value that fits no member of a union (a name, or a list of names) fails once per
    # member: the deepest error under the same key says which list item is wrong.
    for other in errors[1:]:
        other_loc, other_section = _key_path(root, other["loc"], data)
        if len(other_loc) > len(loc) and other_loc[:len(loc)] == loc:
            err, loc, section = other, other_loc, other_section
    dotted = ".".join(filter(None, [prefix, _dotted(loc)]))
    line = line_of(text, loc) if text else None
    plain = ".".join(map(str, loc))  # how --set spells the path
    if any(plain == k or plain.startswith(k + ".") for k in overridden):
        file, line = f"--set {dotted}", None
    if err["type"] == "extra_forbidden":
        names = sorted(section.model_fields)
        return InputError(f"unknown key {loc[-1]!r}{closest(str(loc[-1]), names)}", file=file,
                          line=line, field=dotted, expected="one of " + ", ".join(names))
    if err["type"] == "unknown_name":
        return InputError(err["msg"], file=file, line=line, field=dotted,
                          expected=err["ctx"]["expected"])
    if err["type"] == "literal_error":  # a choice among a few words: mode, match, stream
        names = re.findall(r"'([^']*)'", err["ctx"]["expected"])
        return InputError(f"got {err['input']!r}{closest(str(err['input']), names)}",
                          file=file, line=line, field=dotted, expected=" | ".join(names))
    if err["type"] == "union_tag_invalid":
        tag, tags = err["ctx"]["discriminator"].strip("'"), err["ctx"]["expected_tags"]
        names = [t.strip(" '") for t in tags.split(",")]
        return InputError(f"unknown {tag} {err['ctx']['tag']!r}"
                          f"{closest(str(err['ctx']['tag']), names)}", file=file, line=line,
                          field=f"{dotted}.{tag}", expected=" | ".join(names))
    got = "missing" if err["type"] == "missing" else f"got {err.get('input')!r}"
    return InputError(got, file=file, line=line, field=dotted or "(top level)",
                      expected=err["msg"].lower().removeprefix("input should be ").removeprefix(
                          "value error, "))


def _key_path(root: type[BaseModel], loc: Sequence[Any], data: Any = None
              ) -> tuple[list[Any], type[BaseModel]]:
    """The error's path as the file spells it (without the member tag pydantic inserts
    after a tagged union: models[0].openai.concurency), and the section that holds its
    last key."""
    path: list[Any] = []
    cls: Any = root
    section = root
    node = data  # the part of the data at `path`
    for part in loc:
        members = _sections(cls, node)
        if isinstance(part, str) and len(members) > 1:  # the tag of a union member
            cls = next((m for m in members if part in _tag_values(m)), members[0])
            continue
        if isinstance(part, str) and not members:  # a member of a union of plain types
            continue
        if isinstance(part, str):
            section = members[0]
            cls = section.model_fields[part].annotation if part in section.model_fields \
                else None
        path.append(part)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    return path, section


def _sections(annotation: Any, data: Any = None) -> list[type[BaseModel]]:
    """The section classes inside list[...], X | None, Annotated[Union[...], ...]; where a
    marker chooses the section by the entry's own key (Registry.section_by), the one that
    `data` chose."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        chosen = arg.section(data) if hasattr(arg, "section") and isinstance(data, dict) \
            else None
        if chosen is not None:
            return [chosen]
        found += [s for s in _sections(arg, data) if s not in found]
    return found


def _tag_values(cls: type[BaseModel]) -> set[Any]:
    return {value for info in cls.model_fields.values()
            if typing.get_origin(info.annotation) is typing.Literal
            for value in typing.get_args(info.annotation)}


def _dotted(loc: Sequence[Any]) -> str:
    """('models', 0, 'dtype') -> models[0].dtype"""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def line_of(text: str, loc: Sequence[Any]) -> int | None:
    """The YAML line of loc (of its nearest enclosing node that the file spells)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    for i, part in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            hit = [(k, v) for k, v in node.value if k.value == str(part)]
            if not hit:
                break
            key, node = hit[0]
            if i == len(loc) - 1:
                return key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
    return node.start_mark.line + 1 if node is not None else None
