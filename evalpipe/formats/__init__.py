"""Tool-call formats: each renders tools into the prompt and parses replies."""

from evalpipe.errors import InputError
from evalpipe.formats.base import Format, split_reasoning
from evalpipe.formats.hermes import HermesFormat, NativeFormat

FORMATS: dict[str, type[Format]] = {"hermes": HermesFormat, "native": NativeFormat}


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]()
    except KeyError:
        raise InputError(f"unknown format {name!r}", field="formats",
                         expected=" | ".join(FORMATS)) from None


__all__ = ["FORMATS", "Format", "get_format", "split_reasoning"]
