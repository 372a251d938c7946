"""BM25 throughput: evalpipe's index against bm25s, on the same tokens.

    python bench/bench_bm25.py                 # site corpus + 20k synthetic chunks (~1 min)
    python bench/bench_bm25.py --synthetic 50000 --queries 2000 --repeat 5

Both sides get identical pre-tokenised input (evalpipe's tokenizer with
bigrams), the Lucene variant, k1 = 1.5, b = 0.75, top k = 3. Timed: building
the index from token lists, and answering every query (token lists -> top k,
sorted). Tokenisation is outside both timings. Each figure is the best of
--repeat runs, the two sides alternating; the ratios printed are bm25s time /
evalpipe time, so > 1 means evalpipe is faster. Scores of the top hit are
cross-checked before timing.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from machine import load_note  # bench/machine.py: CPU, flags, load

from evalpipe.corpus import chunk_corpus, load_corpus
from evalpipe.retrieval.bm25 import BM25Index
from evalpipe.retrieval.tokenize import Tokenizer

ROOT = Path(__file__).resolve().parents[1]


def best_of(repeat: int, ours: Callable[[], object], ref: Callable[[], object]
            ) -> tuple[float, object, float, object]:
    """Best time of each side, alternating runs so that a busy machine slows both alike."""
    best = [float("inf"), float("inf")]
    out: list[object] = [None, None]
    for _ in range(repeat):
        for side, fn in enumerate((ours, ref)):
            t0 = time.perf_counter()
            out[side] = fn()
            best[side] = min(best[side], time.perf_counter() - t0)
    return best[0], out[0], best[1], out[1]


def site_tokens(tok: Tokenizer) -> list[list[str]]:
    site = ROOT / "datasets" / "site"
    if not site.is_dir():
        sys.exit("datasets/site not found")
    chunks = chunk_corpus(load_corpus(site), size=800)
    docs = [tok(c.text) for c in chunks]
    while len(docs) < 300:  # a tiny corpus times mostly overhead; replicate to ~300 chunks
        docs = docs + docs
    return docs


def synthetic_tokens(base: list[list[str]], n: int, rng: np.random.Generator) -> list[list[str]]:
    """n chunks drawn from the site's unigram distribution (Zipf-like), 60-200 tokens each."""
    uni = [t for d in base for t in d if "_" not in t]
    vocab, counts = np.unique(np.array(uni, dtype=object), return_counts=True)
    # Stretch the vocabulary with rare made-up words so df is spread as in a real corpus.
    rare = np.array([f"w{i}" for i in range(20000)], dtype=object)
    vocab = np.concatenate([vocab, rare])
    p = np.concatenate([counts, np.full(len(rare), 0.05)]).astype(float)
    p /= p.sum()
    lengths = rng.integers(60, 200, size=n)
    flat = rng.choice(vocab, size=int(lengths.sum()), p=p)
    out, pos = [], 0
    for ln in lengths:
        words = list(flat[pos:pos + ln])
        pos += ln
        out.append(words + [a + "_" + b for a, b in itertools.pairwise(words)])
    return out


def make_queries(docs: list[list[str]], n: int, rng: np.random.Generator) -> list[list[str]]:
    """Queries of 3-8 consecutive words (and their bigrams) taken from random chunks."""
    out = []
    for i in rng.integers(0, len(docs), size=n):
        words = [t for t in docs[i] if "_" not in t]
        ln = int(rng.integers(3, 9))
        s = int(rng.integers(0, max(1, len(words) - ln)))
        w = words[s:s + ln]
        out.append(w + [a + "_" + b for a, b in itertools.pairwise(w)])
    return out


def bench(name: str, docs: list[list[str]], queries: list[list[str]], k: int,
          repeat: int) -> None:
    import bm25s

    def build_ours() -> BM25Index:
        return BM25Index(docs, variant="lucene", k1=1.5, b=0.75)

    def build_ref():
        ref = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
        ref.index(docs, show_progress=False)
        return ref

    t_ours_b, ours, t_ref_b, ref = best_of(repeat, build_ours, build_ref)

    # Cross-check before timing: the top score of each query agrees.
    for qt in queries[:50]:
        top = ours.top_k(qt, k)
        _, rscores = ref.retrieve([qt], k=k, show_progress=False)
        assert abs(top[0][1] - float(rscores[0][0])) < 1e-4, (qt, top, rscores)

    def query_ours():
        return [ours.top_k(qt, k) for qt in queries]

    def query_ref():
        return ref.retrieve(queries, k=k, show_progress=False, n_threads=0)

    t_ours_q, _, t_ref_q, _ = best_of(repeat, query_ours, query_ref)
    n_tok = sum(map(len, docs))
    print(f"\n## {name}: {len(docs)} chunks, {n_tok} tokens, {len(ours.vocab)} terms, "
          f"{len(queries)} queries, k={k}")
    print(f"| | evalpipe | bm25s {bm25s.__version__} | ratio (bm25s / evalpipe) |")
    print("|---|---:|---:|---:|")
    print(f"| index build | {t_ours_b * 1e3:.1f} ms | {t_ref_b * 1e3:.1f} ms "
          f"| {t_ref_b / t_ours_b:.2f}x |")
    print(f"| {len(queries)} queries | {t_ours_q * 1e3:.1f} ms | {t_ref_q * 1e3:.1f} ms "
          f"| {t_ref_q / t_ours_q:.2f}x |")
    print(f"| queries/s | {len(queries) / t_ours_q:,.0f} | {len(queries) / t_ref_q:,.0f} | |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--synthetic", type=int, default=20000, help="synthetic chunks (0: skip)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    tok = Tokenizer(bigrams=True)
    site = site_tokens(tok)
    bench("site corpus", site, make_queries(site, args.queries, rng), args.k, args.repeat)
    if args.synthetic:
        syn = synthetic_tokens(site, args.synthetic, rng)
        bench("synthetic", syn, make_queries(syn, args.queries, rng), args.k, args.repeat)
    print(f"note: {load_note()}")


if __name__ == "__main__":
    main()
