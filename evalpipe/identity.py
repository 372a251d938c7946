"""Request and sample identity: what a recorded turn and a sample are found by, below
the engine and backends.

A request is the canonical JSON of the wire messages and the tools, so it does
not depend on any tokenizer's chat template; its hash is stored in each turn
(Turn.request_hash) and looked up by the replay backend.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def request_key(messages, tools) -> str:
    return json.dumps({"messages": messages, "tools": tools}, sort_keys=True, ensure_ascii=False)


def request_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sample_key(record: Mapping[str, Any]) -> tuple[str, str, int]:
    """A sample's identity in its run: cell, question and repeat (0 in runs without)."""
    return record["cell_id"], record["question_id"], int(record.get("repeat") or 0)
