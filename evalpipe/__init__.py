"""evalpipe: batch evaluation of LLM tool calling, agent loops and RAG.

The public API (evalpipe/api.py): run, score, report, compare, validate, load and
RunResult. They are imported on first use, so `import evalpipe` stays cheap.
"""

__version__ = "0.1.0"

__all__ = [
    "Comparison",
    "RunResult",
    "__version__",
    "compare",
    "load",
    "report",
    "run",
    "score",
    "validate",
]
_API = frozenset(__all__) - {"Comparison", "__version__"}  # imported from evalpipe/api.py


def __getattr__(name: str):
    if name in _API:
        from evalpipe import api

        return getattr(api, name)
    if name == "Comparison":
        from evalpipe._report.compare import Comparison

        return Comparison
    raise AttributeError(f"module 'evalpipe' has no attribute {name!r}")

