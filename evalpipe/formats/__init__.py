"""Tool-call formats: each renders tools into the prompt and parses replies.

See docs/formats.md for each protocol, the parse error kinds and what lenient
mode repairs. A format is one line of FORMATS: its name and its `Format` class.
"""

from evalpipe.formats.base import ERROR_KINDS, Format, split_reasoning
from evalpipe.registry import Registry

FORMATS: Registry[type[Format]] = Registry("format", "formats")
FORMATS.add("native", "evalpipe.formats.hermes:NativeFormat")
FORMATS.add("hermes", "evalpipe.formats.hermes:HermesFormat")
FORMATS.add("json", "evalpipe.formats.json_format:JsonFormat")
FORMATS.add("xml", "evalpipe.formats.xml:XmlFormat")
FORMATS.add("openai", "evalpipe.formats.openai:OpenAIFormat")


def get_format(name: str, tools: list[dict] | None = None) -> Format:
    """A fresh format instance. `tools` (the cell's schemas) reach formats that
    read argument types from them (xml) before any prepare() call."""
    return FORMATS[name](tools=tools)


__all__ = ["ERROR_KINDS", "FORMATS", "Format", "get_format", "split_reasoning"]
