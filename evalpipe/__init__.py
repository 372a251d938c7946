"""evalpipe: batch evaluation of LLM tool calling, agent loops and RAG."""

__version__ = "0.1.0"
