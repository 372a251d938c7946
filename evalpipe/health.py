"""Signs in a cell's own samples that something outside the model went wrong.

A server that is sent tools out of band (the `openai` format: a `tools` field
beside the messages) renders them into the prompt with its own chat template;
llama.cpp's server without `--jinja`, for one, drops them without a word, and
every sample then scores `no_tool_call`. The prompt tokens the server reports
tell: with the tools in it, a first-turn prompt holds at least the tool
definitions' tokens. Pure: samples in, a message or None out.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

CHARS_PER_TOKEN = 4  # JSON tokenizes at 2.5-4 characters a token: 4 gives the fewest tokens
MIN_SHARE = 0.5  # of the tool definitions' tokens a prompt that holds them must show
MIN_SAMPLES = 3  # fewer first turns tell nothing


def first_turn_tokens(samples: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """question id -> prompt tokens of its first turn, over samples whose backend
    reported them (0 means not reported) and that reached the model."""
    out: dict[str, int] = {}
    for s in samples:
        turns = s.get("turns") or []
        tokens = (turns[0].get("prompt_tokens") or 0) if turns else 0
        if tokens > 0 and s.get("stop_reason") != "infra_error":
            out.setdefault(str(s.get("question_id")), int(tokens))
    return out


def ignored_tools(cell_id: str, tokens: Mapping[str, int], schemas: list[dict[str, Any]],
                  baseline: Mapping[str, int] | None = None) -> str | None:
    """A warning when the first-turn prompts of a cell that offers tools are too short to
    hold the tool definitions; None when they look right or there is too little to tell.

    `tokens`: question id -> first-turn prompt tokens of the cell; `baseline`: the same
    for the cell of the same model and retrieval without tools, when the run has one.
    With a baseline the prompts must grow by half the definitions' tokens (estimated
    at 4 characters a token, the fewest a JSON text takes); without one they must be
    at least that long."""
    if not schemas or len(tokens) < MIN_SAMPLES:
        return None
    expected = len(json.dumps(schemas, ensure_ascii=False)) / CHARS_PER_TOKEN
    shared = [q for q in tokens if baseline and q in baseline]
    if baseline and len(shared) >= MIN_SAMPLES:
        grown = statistics.median(tokens[q] - baseline[q] for q in shared)
        if grown >= MIN_SHARE * expected:
            return None
        seen = (f"{grown:+.0f} tokens against the same questions without tools "
                f"(median of {len(shared)})")
    else:
        median = statistics.median(tokens.values())
        if median >= MIN_SHARE * expected:
            return None
        seen = f"{median:.0f} tokens (median of {len(tokens)})"
    return (f"cell {cell_id}: the backend seems to have ignored the tools: its first-turn "
            f"prompts are {seen}, while the {len(schemas)} tool definitions alone take about "
            f"{expected:.0f}. A server whose chat template drops `tools` does this "
            "(llama.cpp's server needs --jinja); samples will score no_tool_call. Check the "
            "server, or use a format that writes the tools into the prompt (hermes, json, "
            "xml).")
