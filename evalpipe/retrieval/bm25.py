"""BM25 over a sparse term x document weight matrix.

The index precomputes each (term, document) contribution once, so a query is
a gather of a few CSR rows and one bincount: no Python loop over documents.

Variants (Kamphuis et al., ECIR 2020):
- lucene:    idf = ln(1 + (N - df + 0.5) / (df + 0.5)), always positive;
             tf part = tf / (tf + k1 (1 - b + b dl/avgdl)). Same as bm25s "lucene".
- robertson: Okapi as in rank_bm25's BM25Okapi: idf = ln((N - df + 0.5) / (df + 0.5)),
             negative for terms in more than half the documents, so those get a floor
             of epsilon x mean idf; tf part = tf (k1 + 1) / (tf + k1 (...)).
A term repeated in the query counts once per occurrence (as in both references).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from evalpipe.corpus import Chunk
from evalpipe.retrieval import SPARSE, Hit, Method, RetrieverSettings

VARIANTS = ("lucene", "robertson")


class BM25Index:
    """BM25 scores for pre-tokenised documents (BM25Retriever tokenises chunk texts)."""

    def __init__(self, docs_tokens: Sequence[Sequence[str]], *, variant: str = "lucene",
                 k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25):
        if variant not in VARIANTS:
            raise ValueError(f"unknown BM25 variant {variant!r}; expected one of {VARIANTS}")
        self.variant, self.k1, self.b, self.epsilon = variant, float(k1), float(b), epsilon
        self.vocab: dict[str, int] = {}
        self.n_docs = len(docs_tokens)
        self._build(docs_tokens)

    def _build(self, docs_tokens: Sequence[Sequence[str]]) -> None:
        vocab = self.vocab
        setdefault = vocab.setdefault
        lengths = np.fromiter((len(d) for d in docs_tokens), dtype=np.int64, count=self.n_docs)
        # One pass in C-speed builtins: token -> id for every token of every document.
        ids = np.fromiter((setdefault(t, len(vocab)) for d in docs_tokens for t in d),
                          dtype=np.int64, count=int(lengths.sum()))
        n_terms = len(vocab)
        doc_of = np.repeat(np.arange(self.n_docs, dtype=np.int64), lengths)
        # Term-major keys, unique -> (term, doc) pairs with their term frequency.
        keys, tf = np.unique(ids * max(self.n_docs, 1) + doc_of, return_counts=True)
        term = keys // max(self.n_docs, 1)
        doc = keys - term * max(self.n_docs, 1)
        df = np.bincount(term, minlength=n_terms).astype(np.float64)
        n = float(self.n_docs)
        if self.variant == "lucene":
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
        else:
            idf = np.log((n - df + 0.5) / (df + 0.5))
            if len(idf):
                # rank_bm25 floor: terms in over half the documents get eps x mean idf.
                idf = np.where(idf < 0, self.epsilon * idf.mean(), idf)
        self.idf = idf
        # With every idf > 0 a matching document always scores > 0, so "score > 0"
        # finds the matches in one pass; otherwise (robertson edge cases) use postings.
        self._positive = bool((idf > 0).all())
        self.doc_len = lengths
        avgdl = float(lengths.mean()) if self.n_docs and lengths.sum() else 1.0
        self.avgdl = avgdl
        tf = tf.astype(np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * lengths[doc] / avgdl)
        tfc = tf / (tf + norm)
        if self.variant == "robertson":
            tfc *= self.k1 + 1.0
        data = idf[term] * tfc
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(term, minlength=n_terms), out=indptr[1:])
        # Rows are terms, columns documents; keys were sorted term-major, so this is CSR as is.
        self.weights = sp.csr_matrix((data, doc, indptr), shape=(n_terms, self.n_docs))
        self._data, self._indices, self._indptr = data, doc, indptr

    def term_ids(self, query_tokens: Iterable[str]) -> list[int]:
        """Ids of the query tokens found in the vocabulary, repeats kept."""
        get = self.vocab.get
        return [i for i in map(get, query_tokens) if i is not None]

    def _postings(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(document, weight) of every posting of the query terms."""
        ip, ind, dat = self._indptr, self._indices, self._data
        if len(ids) == 1:
            a, e = ip[ids[0]], ip[ids[0] + 1]
            return ind[a:e], dat[a:e]
        # Slices + concatenate are memcpy; a loop over query terms, never over documents.
        seg = [(ip[i], ip[i + 1]) for i in ids]
        return (np.concatenate([ind[a:e] for a, e in seg]),
                np.concatenate([dat[a:e] for a, e in seg]))

    def scores_ids(self, ids: list[int]) -> tuple[np.ndarray, bool]:
        """Dense scores for every document, and whether any document matched."""
        if not ids:
            return np.zeros(self.n_docs), False
        docs, weights = self._postings(ids)
        if not len(docs):
            return np.zeros(self.n_docs), False
        return np.bincount(docs, weights=weights, minlength=self.n_docs), True

    def get_scores(self, query_tokens: Iterable[str]) -> np.ndarray:
        """Score of every document for a tokenised query (reference-compatible)."""
        return self.scores_ids(self.term_ids(query_tokens))[0]

    def matching(self, ids: list[int]) -> np.ndarray:
        """Boolean mask of the documents holding at least one of the term ids."""
        mask = np.zeros(self.n_docs, dtype=bool)
        for i in np.unique(ids):
            mask[self._indices[self._indptr[i]:self._indptr[i + 1]]] = True
        return mask

    def top_k(self, query_tokens: Iterable[str], k: int,
              order_key: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(document index, score) of the k best documents that match a query term.

        Ties break by order_key (ascending; e.g. each chunk id's rank in sorted
        order), else by document index. Documents with no query term are never
        returned, so a query of unknown words gives [].
        """
        ids = self.term_ids(query_tokens)
        scores, any_match = self.scores_ids(ids)
        if not any_match or k <= 0:
            return []
        if not self._positive:
            return select_top(scores, np.flatnonzero(self.matching(ids)), k, order_key)
        # Every match scores > 0: find the k-th best value over the full array (one
        # O(n) pass), then only the few documents at or above it need sorting.
        n = self.n_docs
        kth = np.partition(scores, n - k)[n - k] if n > k else 0.0
        cand = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores)
        cs = scores[cand]
        if len(cand) > 1:
            order = np.lexsort((cand if order_key is None else order_key[cand], -cs))[:k]
            cand, cs = cand[order], cs[order]
        return list(zip(cand.tolist(), cs.tolist(), strict=True))


def select_top(scores: np.ndarray, candidates: np.ndarray, k: int,
               order_key: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The k best candidates by score descending, then order_key ascending.

    Every candidate tied with the k-th score is considered before cutting, so a
    tie at the boundary resolves by order_key, not by argpartition's whim.
    """
    if not len(candidates):
        return []
    cand_scores = scores[candidates]
    if len(candidates) > k:
        kth = np.partition(cand_scores, len(candidates) - k)[len(candidates) - k]
        keep = cand_scores >= kth
        candidates, cand_scores = candidates[keep], cand_scores[keep]
    key = order_key[candidates] if order_key is not None else candidates
    order = np.lexsort((key, -cand_scores))[:k]
    return [(int(candidates[i]), float(cand_scores[i])) for i in order]


def id_order(chunks: Sequence) -> np.ndarray:
    """Position of each chunk's id in sorted id order: the tie-break key."""
    order = np.empty(len(chunks), dtype=np.int64)
    order[sorted(range(len(chunks)), key=lambda i: chunks[i].id)] = np.arange(len(chunks))
    return order


class BM25Retriever:
    """BM25 over chunk texts with the Vietnamese/English sparse tokenizer."""

    def __init__(self, chunks: Sequence, *, variant: str = "lucene", k1: float = 1.5,
                 b: float = 0.75, bigrams: bool = True, tone_norm: bool = True,
                 fold_accents: bool = False):
        from evalpipe.retrieval.tokenize import Tokenizer

        self.chunks = list(chunks)
        self.tokenizer = Tokenizer(bigrams=bigrams, tone_norm=tone_norm,
                                   fold_accents=fold_accents)
        self.index = BM25Index([self.tokenizer(c.text) for c in self.chunks],
                               variant=variant, k1=k1, b=b)
        self.order_key = id_order(self.chunks)
        self.name = (f"bm25-{variant}" + ("+bigrams" if bigrams else "")
                     + ("+folded" if fold_accents else ""))

    def search(self, query: str, k: int) -> list:
        top = self.index.top_k(self.tokenizer(query), k, self.order_key)
        return [Hit(self.chunks[i], s, r) for r, (i, s) in enumerate(top, start=1)]



def _build(settings: RetrieverSettings, chunks: list[Chunk]) -> BM25Retriever:
    return BM25Retriever(chunks, **settings.bm25.model_dump(), bigrams=settings.bigrams,
                         tone_norm=settings.tone_norm, fold_accents=settings.fold_accents)


METHOD = Method(_build, uses=SPARSE)
