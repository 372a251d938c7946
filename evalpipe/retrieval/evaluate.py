"""Retrieval-only evaluation: every method against the gold passages, no model.

    rows = evaluate_retrievers(questions, chunks, [{"method": "bm25"}, {"method": "dense"}])
    print(format_table(rows))

One row per method x language, plus a row "all" per method. Only questions
with gold passages count. Each row holds recall@k, hit@k, MRR and nDCG@k
(means over questions), their count, and a 95% interval for recall (Student t)
and hit (Wilson).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evalpipe.corpus import Chunk
from evalpipe.questions import Question
from evalpipe.records import DEFAULT_K
from evalpipe.retrieval import RETRIEVERS, build_retriever, resolve_settings
from evalpipe.scoring.retrieval_metrics import retrieval_scores

METRICS = ("recall", "hit", "mrr", "ndcg")
_DEFAULTS = resolve_settings({})


def method_label(settings: dict[str, Any]) -> str:
    """A short name: settings["name"] if given, else the method plus what differs from
    the defaults, e.g. "bm25", "bm25 variant=robertson bigrams=False", "hybrid"."""
    if settings.get("name"):
        return str(settings["name"])
    s = resolve_settings(settings)
    parts = [s["method"]]
    for key in RETRIEVERS[s["method"]].uses:
        if key == "bm25":
            parts += [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in s["bm25"].items() if v != _DEFAULTS["bm25"][k]]
        elif s[key] != _DEFAULTS[key]:
            parts.append(f"{key}={s[key]:g}" if isinstance(s[key], float) else f"{key}={s[key]}")
    return " ".join(parts)


def _search_all(retriever: Any, queries: list[str], depth: int) -> list[list]:
    many = getattr(retriever, "search_many", None)  # dense batches its forward passes
    if many is not None:
        return many(queries, depth)
    return [retriever.search(q, depth) for q in queries]


def _row(label: str, lang: str, k: int, scores: list[dict[str, float]]) -> dict[str, Any]:
    from evalpipe.scoring.stats import mean_interval, wilson

    n = len(scores)
    row: dict[str, Any] = {"method": label, "lang": lang, "k": k, "count": n}
    for m in METRICS:
        row[m] = sum(s[m] for s in scores) / n if n else None
    rec = mean_interval([s["recall"] for s in scores])
    row["recall_lo"], row["recall_hi"] = rec["lo"], rec["hi"]
    row["hit_lo"], row["hit_hi"] = wilson(sum(1 for s in scores if s["hit"]), n)
    return row


def evaluate_retrievers(questions: Sequence[Question], chunks: list[Chunk],
                        methods: Sequence[dict[str, Any]], k: int = DEFAULT_K,
                        mrr_depth: int = 100,
                        group: Callable[[Question], str] | None = None) -> list[dict[str, Any]]:
    """Rows of retrieval scores per method x language ("all" first, then by language).

    group replaces the language as the row key (e.g. by a tag); the column is
    still called "lang". MRR looks at the best mrr_depth chunks (a gold passage
    ranked lower counts 0).
    """
    key = group or (lambda q: q.lang)
    gold_qs = [q for q in questions if q.gold_passages]
    langs = sorted({key(q) for q in gold_qs})
    rows: list[dict[str, Any]] = []
    for settings in methods:
        label = method_label(settings)
        retriever = build_retriever(settings, chunks)
        ranked = _search_all(retriever, [q.question for q in gold_qs], max(k, mrr_depth))
        per_q = []
        for q, hits in zip(gold_qs, ranked, strict=True):
            spans = [{"doc": h.chunk.doc, "start": h.chunk.start, "end": h.chunk.end,
                      "rank": h.rank} for h in hits]
            per_q.append((key(q), retrieval_scores(spans, q.gold_passages, k)))
        # every question here has gold passages, so every score is a dict
        rows.append(_row(label, "all", k, [s for _, s in per_q if s is not None]))
        for lang in langs:
            rows.append(_row(label, lang, k, [s for ql, s in per_q
                                              if ql == lang and s is not None]))
    return rows


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of evaluate_retrievers rows."""
    k = rows[0]["k"] if rows else 3
    head = (f"| method | lang | n | recall@{k} | 95% CI | hit@{k} | MRR | nDCG@{k} |\n"
            "|---|---|---:|---:|---|---:|---:|---:|")
    lines = [head]
    for r in rows:
        ci = ("–" if r.get("recall_lo") is None
              else f"[{r['recall_lo']:.2f}, {r['recall_hi']:.2f}]")
        lines.append(f"| {r['method']} | {r['lang']} | {r['count']} | {_fmt(r['recall'])} | {ci} "
                     f"| {_fmt(r['hit'])} | {_fmt(r['mrr'])} | {_fmt(r['ndcg'])} |")
    return "\n".join(lines) + "\n"
