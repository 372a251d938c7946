"""Tool registry, safe execution and the built-in tools."""

from evalpipe.tools.builtin import BUILTIN_TOOLS, TOOLSETS, build_toolset
from evalpipe.tools.registry import Tool, ToolLimits, Toolset, result_text

__all__ = ["BUILTIN_TOOLS", "TOOLSETS", "Tool", "ToolLimits", "Toolset", "build_toolset",
           "result_text"]
