"""Tool-call formats: each renders tools into the prompt and parses replies.

See docs/formats.md for each protocol, the parse error kinds and what lenient
mode repairs.
"""

from evalpipe.errors import InputError
from evalpipe.formats.base import ERROR_KINDS, Format, split_reasoning
from evalpipe.formats.hermes import HermesFormat, NativeFormat
from evalpipe.formats.json_format import JsonFormat
from evalpipe.formats.openai import OpenAIFormat
from evalpipe.formats.xml import XmlFormat
from evalpipe.schema import closest

FORMATS: dict[str, type[Format]] = {
    "native": NativeFormat,
    "hermes": HermesFormat,
    "json": JsonFormat,
    "xml": XmlFormat,
    "openai": OpenAIFormat,
}


def get_format(name: str, tools: list[dict] | None = None) -> Format:
    """A fresh format instance. `tools` (the cell's schemas) reach formats that
    read argument types from them (xml) before any prepare() call."""
    try:
        cls = FORMATS[name]
    except KeyError:
        raise InputError(f"unknown format {name!r}{closest(name, FORMATS)}", field="formats",
                         expected=" | ".join(FORMATS)) from None
    return cls(tools=tools)


__all__ = ["ERROR_KINDS", "FORMATS", "Format", "HermesFormat", "JsonFormat", "NativeFormat",
           "OpenAIFormat", "XmlFormat", "get_format", "split_reasoning"]
