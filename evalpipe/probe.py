"""The latency probe: a few samples of a cell re-run one at a time, alone.

Inside the running batch a row's time to first token includes waiting for the
other rows' prefill: it measures the harness under load. The probe answers
"what would one user of this prompt design wait?": with `latency_probe: N`,
after a cell's batched run, N of its questions (spread evenly over the list, the
same ones in every cell) run again one conversation at a time, with nothing
else in flight, straight on the backend (no reply cache) and cold (no stored
prompt prefix). Their records go to probe.jsonl, never into samples.jsonl, so
they count in no accuracy figure; scoring.cost.probe_summary reads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evalpipe.engine import CellRuntime, Engine
from evalpipe.questions import Question

PROBE_FILE = "probe.jsonl"


def probe_questions(questions: list[Question], n: int) -> list[Question]:
    """`n` questions spread evenly over `questions`, in order."""
    if n <= 0 or not questions:
        return []
    if n >= len(questions):
        return list(questions)
    return [questions[i * len(questions) // n] for i in range(n)]


def run_probe(runtime: CellRuntime, questions: Iterable[Question], run_id: str
              ) -> list[dict[str, Any]]:
    """One record per question, each generated with nothing else in flight."""
    engine = Engine(lambda backend, settings: backend.probe_session(settings))
    out = []
    for q in questions:  # a fresh session per question: no state carried between them
        for samples in engine.run(runtime, [q], run_id, window=1):
            out += [dict(s.to_dict(), probe=True) for s in samples]
    return out
