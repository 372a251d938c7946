"""Continuous batching for local decoder models, with shared-prefix reuse.

`DecodeSession` (from `BatchGenerator.session`) is a manual decode loop that
prompts can join while it runs; `BatchGenerator.generate` submits a list of
prompts to one and runs it dry. Instead of `model.generate`:

- waiting prompts are admitted shortest first, up to `batch_size` rows, and
  prefilled in runs of similar length;
- each row stops at its own end-of-sequence token and is returned at once;
  finished rows leave the batch in place (compute shrinks) and waiting prompts
  are prefilled and merged in, so one long answer does not hold the rest back;
- the longest common token prefix of the first prompts (system prompt + tool
  definitions in an eval cell) is prefilled once and kept in a small LRU
  store; rows attend to it in place (`prefix_attention`), so only each row's
  own tokens are prefilled and cached per row. Prompts submitted in different
  groups (the cells of a model sharing one session) get one prefix per group,
  and a decode step serves rows on different prefixes together;
- a conversation's cache outlives its turn (`TurnStore`, keyed by the caller's
  key): its next turn, submitted under the same key, prefills only the tokens
  past what the last turn already holds (the tool results and the new turn
  header), not its earlier turns again.

Layout of the key/value cache: one buffer per layer, [rows, kv_heads,
capacity, head_dim], with spare columns so that a decode step writes in place
instead of concatenating (`torch.cat` copies the whole cache every step).
Rows are right-aligned: padding sits on the left of a row and is masked out.
Keys are cached after the rotary embedding, so moving columns does not change
them; each row's positions come from its own count of real tokens (prefix
included), exactly as `generate` computes them from the attention mask.

Only models whose cache layers are all plain full-attention layers take this
path (`supported`); others (sliding-window, linear attention) fall back to
`model.generate` in the backend. Where the shared-prefix attention cannot be
installed, the prefix is copied under every row instead.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import torch

from evalpipe.backends.local import (
    decode_step,
    own_attention,
    packed_linear,
    packing,
    prefix_attention,
)

GROW = 64  # spare columns added whenever a layer buffer has to grow
MIN_PREFIX = 16  # shorter common prefixes are not worth a stored cache
# The batch cap: rows until a decode step reaches this share of the tokens/s that
# unlimited rows would give (from the measured step time a + c * rows), at least
# MIN_CAP; measured only when more than MEASURE_ABOVE rows could run at once.
PEAK_SHARE, MIN_CAP, MEASURE_ABOVE = 0.95, 16, 64
ROW_COST_FLOOR = 1e-9  # seconds a row: a measured slope below it is noise
PREFILL_TOKENS = 4096  # tokens (rows x columns) a prefill forward takes at most


@dataclass
class RowResult:
    """What one prompt produced: new token ids (end token excluded) and timings."""

    tokens: list[int]
    stopped: bool  # True: ended on an end-of-sequence token; False: hit max_new_tokens
    prompt_tokens: int
    prefill_ms: float  # from the row's admission to its first token
    decode_ms: float  # from its first token to its last
    error: str | None = None
    # Batching-independent cost: prompt tokens served from the shared prefix (computed
    # once, not for this row), and this row's share of the prefill forwards it was part
    # of (a batched prefill's time split by the tokens each row contributed).
    prefix_tokens: int = 0
    prefill_compute_ms: float = 0.0


@dataclass
class _Row:
    key: Hashable  # the caller's name for this prompt
    prompt: list[int]
    group: Hashable = None  # prompts that share a prefix (an eval cell's)
    admitted: float = 0.0
    first: float = 0.0
    out: list[int] = field(default_factory=list)
    stopped: bool = False
    rng: torch.Generator | None = None
    prefix_tokens: int = 0
    compute_ms: float = 0.0
    # Cross-turn reuse: `head` leading own tokens come from the conversation's last turn
    # (`head_kv`, per layer); `skip` is how many prompt tokens the row's cache does not
    # hold (the shared prefix attended in place), None where its cache cannot be kept.
    head: int = 0
    head_kv: list | None = None
    skip: int | None = None


def _cache_classes():
    from transformers.cache_utils import Cache, DynamicLayer

    return Cache, DynamicLayer


def unsupported(model) -> str | None:
    """Why the loop cannot run `model`, or None when every attention layer of it keeps a
    plain, full cache."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        types, _ = get_layer_types_and_kwargs(model.config.get_text_config(decoder=True))
    except Exception as exc:  # noqa: BLE001 - an older or unusual config: take the safe path
        return f"its config gives no attention layer types ({type(exc).__name__})"
    others = sorted(set(types) - {"full_attention"})
    if not types or others:
        return (f"its cache has {' and '.join(others) or 'no'} layers; the batching loop "
                "keeps full-attention caches only")
    return None


def supported(model) -> bool:
    """True when every attention layer of the model keeps a plain, full cache."""
    return unsupported(model) is None


def _make_layer_class():
    _, DynamicLayer = _cache_classes()

    class BufferLayer(DynamicLayer):
        """A DynamicLayer whose tensors are views into a buffer with spare columns."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
            super().__init__()
            self.buf_k, self.buf_v, self.length = keys, values, length
            self.device = keys.device
            self.is_initialized = True
            self._view()

        def _view(self) -> None:
            self.keys = self.buf_k[:, :, : self.length]
            self.values = self.buf_v[:, :, : self.length]

        def reserve(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
            """Views of the next `m` columns (keys, values), grown into if need be, for
            the caller to write before `commit(m)` (rotary.py writes them in place)."""
            n = self.length
            if n + m > self.buf_k.shape[-2]:
                self.buf_k = _regrow(self.buf_k, n, n + m + GROW)
                self.buf_v = _regrow(self.buf_v, n, n + m + GROW)
            return self.buf_k[:, :, n: n + m], self.buf_v[:, :, n: n + m]

        def commit(self, m: int) -> None:
            self.length += m
            self._view()

        def update(self, key_states, value_states, *args, **kwargs):
            keys, values = self.reserve(key_states.shape[-2])
            keys.copy_(key_states)
            values.copy_(value_states)
            self.commit(key_states.shape[-2])
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

    return BufferLayer


def _regrow(buf: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    # Spare columns stay unwritten (see BatchGenerator._empty_layers).
    new = buf.new_empty(buf.shape[0], buf.shape[1], capacity, buf.shape[3])
    new[:, :, :used] = buf[:, :, :used]
    return new


@dataclass
class _Prefix:
    tokens: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer [1, kv_heads, P, head_dim]
    ms: float  # its own prefill's time, not yet charged to any row


class Prefixes:
    """The prefixes a session's rows attend to in place, by id. A decode step whose rows
    start with different ones attends to them stored one after another (`shared`), each
    from a multiple of the decode kernel's block; with one prefix that is its own cache."""

    def __init__(self, entries: list[_Prefix] | None = None):
        self.entries: list[_Prefix] = []
        self.starts: list[int] = []  # each entry's first position in the stored prefixes
        self._stored: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        for entry in entries or ():
            self.add(entry)

    def add(self, prefix: _Prefix) -> int:
        """The id of `prefix` (of an equal one added before)."""
        for i, entry in enumerate(self.entries):
            if entry.tokens == prefix.tokens:
                return i
        start = 0
        if self.entries:
            lib = own_attention.kernel()
            block = own_attention.prefix_block(lib) if lib is not None else 1
            start = -(-(self.starts[-1] + len(self.entries[-1].tokens)) // block) * block
        self.entries.append(prefix)
        self.starts.append(start)
        self._stored = None
        return len(self.entries) - 1

    def _kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if self._stored is None:
            if len(self.entries) == 1:
                self._stored = self.entries[0].kv
            else:
                width = self.starts[-1] + len(self.entries[-1].tokens)
                self._stored = []
                for layer, (k0, _) in enumerate(self.entries[0].kv):
                    pk, pv = (k0.new_zeros(1, k0.shape[1], width, k0.shape[3]) for _ in "kv")
                    for start, entry in zip(self.starts, self.entries):
                        k, v = entry.kv[layer]
                        pk[:, :, start: start + k.shape[2]] = k
                        pv[:, :, start: start + v.shape[2]] = v
                    self._stored.append((pk, pv))
        return self._stored

    def shared(self, ids: torch.Tensor) -> prefix_attention.SharedPrefix:
        """What rows starting with the prefixes `ids` [rows] (-1: none) attend to."""
        ids = ids.cpu()
        starts = torch.tensor(self.starts, dtype=torch.int64)
        lengths = torch.tensor([len(e.tokens) for e in self.entries], dtype=torch.int64)
        have, at = ids >= 0, ids.clamp(min=0)
        return prefix_attention.SharedPrefix(self._kv(), torch.where(have, starts[at], 0),
                                             torch.where(have, lengths[at], 0))


class _State:
    """The running batch: per-layer buffers, the attention mask, next positions, and
    the prefix each row attends to without holding a copy (`prefix`: ids in
    `prefixes`, -1 for none)."""

    def __init__(self, layers, mask: torch.Tensor, pos: torch.Tensor, last: torch.Tensor,
                 rows: list[_Row], prefix: torch.Tensor, prefixes: Prefixes | None = None):
        self.layers, self.mask, self.pos, self.last, self.rows = layers, mask, pos, last, rows
        self.prefix, self.prefixes = prefix, prefixes

    @property
    def length(self) -> int:
        return self.mask.shape[1]

    def kv(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[i]
        return layer.buf_k[:, :, : layer.length], layer.buf_v[:, :, : layer.length]


class PrefixStore:
    """Key/value caches of shared prompt prefixes, keyed by their token ids (LRU)."""

    def __init__(self, capacity: int = 8):
        self.capacity = capacity
        self.entries: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = \
            OrderedDict()
        self.hits = self.misses = 0

    def longest(self, tokens: list[int]) -> tuple[tuple[int, ...], list] | None:
        """The longest stored prefix of `tokens`."""
        best = None
        for key in self.entries:
            if len(key) <= len(tokens) and (best is None or len(key) > len(best)) \
                    and tuple(tokens[: len(key)]) == key:
                best = key
        if best is None:
            return None
        self.entries.move_to_end(best)
        return best, self.entries[best]

    def put(self, key: tuple[int, ...], kv) -> None:
        self.entries[key] = kv
        self.entries.move_to_end(key)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()


@dataclass
class _Turn:
    tokens: list[int]  # the tokens the cache holds, from the prompt's start
    skip: int  # leading tokens not held (the shared prefix attended in place)
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer [kv_heads, len - skip, head_dim]
    nbytes: int


class TurnStore:
    """Each conversation's key/value cache as its last turn ended, keyed by the
    caller's key, so that its next turn prefills only what is new. Bounded in bytes;
    the oldest entry is evicted first (a conversation that has ended is never asked
    for again, so it ages out)."""

    def __init__(self, budget_bytes: int, max_entries: int | None = None):
        self.budget, self.max_entries = budget_bytes, max_entries
        self.entries: OrderedDict[Hashable, _Turn] = OrderedDict()
        self.bytes = 0
        self.hits = self.evicted = 0

    def put(self, key: Hashable, turn: _Turn) -> None:
        self.take(key)
        if turn.nbytes > self.budget:
            return
        self.entries[key] = turn
        self.bytes += turn.nbytes
        while self.bytes > self.budget or len(self.entries) > (self.max_entries or 1 << 62):
            _, old = self.entries.popitem(last=False)
            self.bytes -= old.nbytes
            self.evicted += 1

    def take(self, key: Hashable) -> _Turn | None:
        turn = self.entries.pop(key, None)
        if turn is not None:
            self.bytes -= turn.nbytes
        return turn


def common_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_prefix(prompts: list[list[int]]) -> list[int]:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for p in prompts[1:]:
        j = 0
        while j < n and p[j] == first[j]:
            j += 1
        n = j
    return first[:n]


def available_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # pragma: no cover
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


class BatchGenerator:
    def __init__(self, model, eos_ids: list[int], pad_id: int, prefix_store: PrefixStore | None,
                 memory_fraction: float = 0.5, pack: bool = True):
        """`pack`: replace the model's linears by packed copies on the CPU (the model is
        the engine's from then on: packed_linear.py)."""
        self.model = model
        self._device: torch.device | None = None
        self.eos = torch.tensor(sorted(set(eos_ids)) or [-1], dtype=torch.long)
        self.pad_id = pad_id
        self.store = prefix_store
        self.memory_fraction = memory_fraction
        self.Layer = _make_layer_class()
        self.Cache, _ = _cache_classes()
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        cfg = model.config.get_text_config(decoder=True)
        self.n_layers = cfg.num_hidden_layers
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.heads = cfg.num_attention_heads
        self.hidden = cfg.hidden_size
        self.intermediate = getattr(cfg, "intermediate_size", 4 * cfg.hidden_size)
        self.vocab = cfg.vocab_size
        # Rows attend to the shared prefix without a copy of it where the model allows.
        self.shared_attention = supported(model) and prefix_attention.install(model)
        # Every forward multiplies few rows by all the weights: on the CPU, pack them once
        # (in place of the model's own: packing.py) instead of on every call.
        self.packed: packing.PackedLinears | None = None
        self.unpacked_why = "not on the CPU" if self.device.type != "cpu" else \
            None if pack else "the model runs through model.generate"
        if self.unpacked_why is None:
            free = available_memory(self.device)
            self.packed = packing.PackedLinears.install(model, free)
            self.unpacked_why = None if self.packed is not None else (
                packing.why_not(model, free)
                or "the packed product disagreed with the stock layer on a probe")
        # What the key/value cache and the activations are kept in: float32 around
        # bfloat16 panels (packed_linear.py), else the model's dtype.
        self.dtype = self.packed.activations if self.packed is not None \
            else next(model.parameters()).dtype
        # Decode steps in a few kernel calls a layer where the model is fused throughout
        # (decode_step.py), else through the model's forward.
        self.decode_step = decode_step.DecodeStep.of(model, self.dtype) \
            if self.packed is not None else None
        # `attended`: key columns the computed tokens attended to, summed (each token sees
        # every position up to its own): the context-dependent part of the compute.
        self.stats = {"prefilled_tokens": 0, "reused_tokens": 0, "decode_steps": 0,
                      "decoded_tokens": 0, "turn_reused_tokens": 0, "attended": 0}
        # Keep each conversation's cache between its turns, in at most this share of
        # the free memory (0 turns it off).
        self.turn_memory_fraction = 0.25
        self.last_prefix_ms = 0.0  # compute time of the last prefix prefilled (0 if stored)
        self.prefill_tokens = PREFILL_TOKENS
        self.step_cost: tuple[float, float] | None = None  # decode step: (a s, c s/row)
        self.cap_note = ""  # how the last measured batch cap was chosen (for the run's log)
        self.log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)

    # -- sizes -------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        if self._device is None:  # asked every step: a model does not move
            self._device = next(self.model.parameters()).device
        return self._device

    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.kv_heads * self.head_dim * self.dtype.itemsize

    def pick_batch_size(self, cap: int, longest_prompt: int, max_new: int) -> int:
        """Rows that fit in `memory_fraction` of the free memory, at most `cap`."""
        item = self.dtype.itemsize
        context = longest_prompt + max_new
        per_row = self.kv_bytes_per_token() * (context + GROW) * 2  # x2: a merge copies the cache
        # Prefill activations of one row: MLP, attention scores and the last logits.
        per_row += item * longest_prompt * (3 * self.intermediate + 4 * self.hidden
                                            + self.heads * context) + 4 * self.vocab
        budget = available_memory(self.device) * self.memory_fraction
        return int(max(1, min(cap, budget // max(per_row, 1))))

    def measure_step(self, context: int, rows: tuple[int, int] = (8, 64)) -> tuple[float, float]:
        """Seconds of one decode step as `a + c * rows` (a: reading the weights, c: one
        row's compute), timed on rows of `context` cached tokens; measured once."""
        if self.step_cost is None:
            times = []
            for b in rows:
                layers = self._empty_layers(b, context + 1)
                for layer in layers:
                    layer.length = context
                    layer._view()
                ids = torch.full((b, 1), self.pad_id, dtype=torch.long, device=self.device)
                mask = torch.ones((b, context + 1), dtype=torch.long, device=self.device)
                pos = torch.full((b, 1), context, dtype=torch.long, device=self.device)
                best = float("inf")
                for _ in range(3):  # the fastest of three: the least disturbed by other work
                    for layer in layers:
                        layer.length = context
                        layer._view()
                    t0 = time.perf_counter()
                    self._decode(layers, ids[:, 0], mask, pos[:, 0], None)
                    best = min(best, time.perf_counter() - t0)
                times.append(best)
            c = max((times[1] - times[0]) / (rows[1] - rows[0]), ROW_COST_FLOOR)
            self.step_cost = (max(times[0] - c * rows[0], 0.0), c)
        return self.step_cost

    def rate_cap(self, bound: int, longest_prompt: int, max_new: int) -> int:
        """The batch cap: rows at which a decode step gives PEAK_SHARE of the tokens/s
        more rows could, within `bound` and the rows the memory holds."""
        memory_rows = self.pick_batch_size(1 << 30, longest_prompt, max_new)
        a, c = self.measure_step(min(longest_prompt, 256) + max_new // 2)
        # rows / (a + c rows) >= share / c  <=>  rows >= share / (1 - share) * a / c
        wanted = max(MIN_CAP, round(PEAK_SHARE / (1 - PEAK_SHARE) * a / c))
        cap = max(1, min(bound, memory_rows, wanted))
        limit = ("the configured batch_size" if cap == bound else
                 "the key/value memory" if cap == memory_rows else "the step rate")
        # more rows took no longer than fewer (other work slowed the small batch): the
        # row's cost is unknown, and a peak extrapolated from the floor would be noise
        rate = (f"{PEAK_SHARE:.0%} of the peak {1 / c:.0f} tokens/s at {wanted} rows"
                if c > ROW_COST_FLOOR else "no cost per row measurable, no rate limit")
        self.cap_note = (
            f"batch cap {cap} rows ({limit}): decode step {a * 1000:.0f} ms + {c * 1000:.2f} "
            f"ms/row measured, {rate}; memory holds {memory_rows} rows "
            f"({self.kv_bytes_per_token() * (longest_prompt + max_new) / 2**20:.1f} MiB of "
            f"cache each); batch_size allows {bound}")
        return cap

    # -- model calls -------------------------------------------------------------------------
    def _forward(self, layers, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor,
                 state: _State | None = None):
        cache = self.Cache(layers=layers)
        extra = {}
        if state is not None and state.prefixes is not None and bool((state.prefix >= 0).any()):
            extra["shared_prefix"] = state.prefixes.shared(state.prefix)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                         use_cache=True, logits_to_keep=1, **{self.cache_kw: cache}, **extra)
        return out.logits[:, -1, :].float()

    def _decode(self, layers, last: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor,
                state: _State | None) -> torch.Tensor:
        """The logits of one decode step: each row's `last` token [rows] at `pos` [rows],
        `mask` [rows, columns] including the new column."""
        if self.decode_step is None:
            return self._forward(layers, last[:, None], mask, pos[:, None], state)
        prefix = None
        if state is not None and state.prefixes is not None and bool((state.prefix >= 0).any()):
            prefix = state.prefixes.shared(state.prefix)
        return self.decode_step(last, pos, layers, mask, prefix)

    def _prefill_forward(self, layers, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor,
                         state: _State | None = None) -> torch.Tensor:
        """`_forward` over `ids` in chunks of columns (at most `prefill_tokens` tokens),
        each on top of the cache the earlier ones left: a chunk's queries skip attention
        to the columns after it (which one masked forward computes and discards) and
        activations stay bounded. The logits of the last column."""
        rows, width = ids.shape
        step = max(1, self.prefill_tokens // rows)
        for c0 in range(0, width, step):
            c1 = min(width, c0 + step)
            logits = self._forward(layers, ids[:, c0:c1], mask[:, : mask.shape[1] - width + c1],
                                   pos[:, c0:c1], state)
        return logits

    def _empty_layers(self, rows: int, capacity: int, used: int | None = None):
        """Buffers of `capacity` columns whose first `used` (default: all) are zeros:
        padding there must be finite. Spare columns past them are left unwritten (a
        step writes each before attention reads it), so their pages are not touched."""
        shape = (rows, self.kv_heads, capacity, self.head_dim)
        layers = []
        for _ in range(self.n_layers):
            k, v = (torch.empty(shape, dtype=self.dtype, device=self.device) for _ in "kv")
            k[:, :, :used].zero_()
            v[:, :, :used].zero_()
            layers.append(self.Layer(k, v, 0))
        return layers

    def _prefix_kv(self, prefix: list[int]):
        """The key/value cache of `prefix` (one row), from the store or computed."""
        key, store = tuple(prefix), self.store
        found = store.longest(prefix) if store is not None else None
        if store is not None and found is not None and len(found[0]) == len(prefix):
            store.hits += 1
            self.stats["reused_tokens"] += len(prefix)
            self.last_prefix_ms = 0.0
            return found[1]
        start = 0
        layers = self._empty_layers(1, len(prefix))
        if found is not None:  # extend a stored, shorter prefix
            start = len(found[0])
            for layer, (k, v) in zip(layers, found[1]):
                layer.buf_k[:, :, :start] = k
                layer.buf_v[:, :, :start] = v
                layer.length = start
                layer._view()
            self.stats["reused_tokens"] += start
        if self.store is not None:
            self.store.misses += 1
        ids = torch.tensor([prefix[start:]], device=self.device)
        mask = torch.ones(1, len(prefix), dtype=torch.long, device=self.device)
        pos = torch.arange(start, len(prefix), device=self.device)[None]
        t0 = time.perf_counter()
        self._prefill_forward(layers, ids, mask, pos)
        self.last_prefix_ms = (time.perf_counter() - t0) * 1000
        self.stats["prefilled_tokens"] += len(prefix) - start
        self.stats["attended"] += _positions_sum(start, len(prefix))
        kv = [(layer.buf_k[:, :, : layer.length].clone(), layer.buf_v[:, :, : layer.length].clone())
              for layer in layers]
        if self.store is not None:
            self.store.put(key, kv)
        return kv

    def _copies_prefix(self, prefix_len: int) -> bool:
        """Whether rows on a prefix of `prefix_len` tokens hold a copy of it (the model's
        own attention) instead of attending to the stored one in place."""
        return bool(prefix_len) and not self.shared_attention

    def _prefill_columns(self, rows: list[_Row], prefix_len: int) -> int:
        """Cache columns `_prefill` fills for `rows`: a copied prefix, the longest kept
        head and the longest suffix."""
        copied = prefix_len if self._copies_prefix(prefix_len) else 0
        return copied + max(r.head for r in rows) + max(len(r.prompt) - prefix_len - r.head
                                                        for r in rows)

    def _window(self, into: tuple[list, int, int], rows: int, columns: int, used: int) -> list:
        """Layers that are views of `rows` rows of `into` = (layers, first row, end
        column), starting `columns` before the end: a run prefilled there needs no copy
        to join the others. The padding left of the view and its first `used` columns
        are zeroed, as `_empty_layers` does."""
        big, r0, end = into
        layers = []
        for layer in big:
            k, v = (buf[r0: r0 + rows] for buf in (layer.buf_k, layer.buf_v))
            k[:, :, : end - columns + used].zero_()
            v[:, :, : end - columns + used].zero_()
            layers.append(self.Layer(k[:, :, end - columns:], v[:, :, end - columns:], 0))
        return layers

    def _prefill(self, rows: list[_Row], prefixes: Prefixes | None, pid: int, max_new: int,
                 into: tuple[list, int, int] | None = None) -> tuple[_State, torch.Tensor]:
        """Prefill the suffixes of `rows` on top of their prefix (`pid` in `prefixes`, -1:
        none): a new batch state (its next tokens not chosen yet) and the logits to choose
        them from. With `into` (layers, first row, end column) the cache is written into
        those layers' rows, right-aligned to end at that column, instead of new buffers."""
        prefix = prefixes.entries[pid] if prefixes is not None and pid >= 0 else None
        prefix_kv, prefix_len = (prefix.kv, len(prefix.tokens)) if prefix else (None, 0)
        suffixes = [r.prompt[prefix_len + r.head:] for r in rows]
        width = max(len(s) for s in suffixes)
        head = max(r.head for r in rows)  # columns of caches kept from the rows' last turns
        n = len(rows)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        smask = torch.zeros((n, head + width), dtype=torch.long)
        for i, (r, s) in enumerate(zip(rows, suffixes)):
            ids[i, width - len(s):] = torch.tensor(s)
            smask[i, head + width - len(s):] = 1
            smask[i, head - r.head: head] = 1
        ids, smask = ids.to(self.device), smask.to(self.device)
        start = torch.tensor([prefix_len + r.head for r in rows], device=self.device)
        pos = start[:, None] + smask[:, head:].cumsum(-1) - 1
        pos.masked_fill_(smask[:, head:] == 0, 1)
        on = torch.full((n,), pid if prefix_len else -1, dtype=torch.long, device=self.device)
        if not self._copies_prefix(prefix_len):  # attended in place, never copied
            # The prefill forward attends to this one prefix alone.
            state = _State(None, smask, None, None, rows, torch.zeros_like(on),
                           Prefixes([prefix])) if prefix else None
            mask, copied = smask, 0
        else:  # the model's own attention: every row holds a copy of the prefix
            state = None
            pmask = torch.ones((n, prefix_len), dtype=torch.long, device=self.device)
            mask, copied = torch.cat([pmask, smask], dim=1), prefix_len
            on = torch.full_like(on, -1)
        layers = self._empty_layers(n, copied + head + width + min(max_new, GROW), copied + head) \
            if into is None else self._window(into, n, copied + head + width, copied + head)
        if copied and prefix_kv is not None:
            for layer, (k, v) in zip(layers, prefix_kv):
                layer.buf_k[:, :, :copied] = k
                layer.buf_v[:, :, :copied] = v
        for i, r in enumerate(rows):  # kept caches, right-aligned before the new tokens
            for layer, (k, v) in zip(layers, r.head_kv or ()):
                layer.buf_k[i, :, copied + head - r.head: copied + head] = k[:, : r.head]
                layer.buf_v[i, :, copied + head - r.head: copied + head] = v[:, : r.head]
            r.head_kv = None
            r.skip = prefix_len if prefix_len == 0 or state is not None else None
        for layer in layers:
            layer.length = copied + head
            layer._view()
        t0 = time.perf_counter()
        logits = self._prefill_forward(layers, ids, mask, pos, state)
        _share(rows, (time.perf_counter() - t0) * 1000, [len(s) for s in suffixes])
        for r in rows:
            r.prefix_tokens = prefix_len
        self.stats["prefilled_tokens"] += sum(len(s) for s in suffixes)
        self.stats["attended"] += sum(_positions_sum(len(r.prompt) - len(s), len(r.prompt))
                                      for r, s in zip(rows, suffixes))
        self.stats["reused_tokens"] += prefix_len * n
        self.stats["turn_reused_tokens"] += sum(r.head for r in rows)
        next_pos = torch.tensor([len(r.prompt) for r in rows], dtype=torch.long,
                                device=self.device)
        return _State(layers, mask, next_pos, None, rows, on, prefixes), logits

    def _merge(self, parts: list[tuple[_State, list[int]]], headroom: int) -> _State | None:
        """One state holding the kept rows of each part, in order; columns that are
        padding in every row of a part are cut off its left."""
        picked = [(state, torch.tensor(keep, device=self.device)) for state, keep in parts if keep]
        if not picked:
            return None
        spans = []
        for state, idx in picked:
            mask = state.mask.index_select(0, idx)
            real = mask.any(dim=0).nonzero()
            lo = int(real[0]) if len(real) else state.length
            spans.append((lo, state.length, mask))
        length = max(hi - lo for lo, hi, _ in spans)
        rows_total = sum(m.shape[0] for _, _, m in spans)
        layers = self._empty_layers(rows_total, length + headroom, length)
        mask = torch.zeros((rows_total, length), dtype=torch.long, device=self.device)
        r0 = 0
        for (state, idx), (lo, hi, m) in zip(picked, spans):
            n, w = m.shape[0], hi - lo
            mask[r0: r0 + n, length - w:] = m[:, lo:hi]
            for li, layer in enumerate(layers):
                k, v = state.kv(li)
                layer.buf_k[r0: r0 + n, :, length - w: length] = k.index_select(0, idx)[:, :, lo:hi]
                layer.buf_v[r0: r0 + n, :, length - w: length] = v.index_select(0, idx)[:, :, lo:hi]
            r0 += n
        for layer in layers:
            layer.length = length
            layer._view()

        def pick(name: str) -> torch.Tensor:
            return torch.cat([getattr(state, name).index_select(0, idx) for state, idx in picked])

        rows = [state.rows[i] for state, idx in picked for i in idx.tolist()]
        return _State(layers, mask, pick("pos"), pick("last"), rows, pick("prefix"),
                      _prefixes_of(state for state, _ in picked))

    # -- the loop ----------------------------------------------------------------------------
    def session(self, *, max_new_tokens: int, batch_size: int, temperature: float = 0.0,
                top_p: float = 1.0, seed: int = 0, prefix_reuse: bool = True) -> DecodeSession:
        """A running batch that prompts can join at any time (see `DecodeSession`)."""
        return DecodeSession(self, max_new_tokens=max_new_tokens, batch_size=batch_size,
                             temperature=temperature, top_p=top_p, seed=seed,
                             prefix_reuse=prefix_reuse)

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, batch_size: int,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                 prefix_reuse: bool = True, progress: Callable[[int], None] | None = None
                 ) -> list[RowResult]:
        """One result per prompt, in order: all prompts submitted at once, then run dry."""
        session = self.session(max_new_tokens=max_new_tokens, batch_size=batch_size,
                               temperature=temperature, top_p=top_p, seed=seed,
                               prefix_reuse=prefix_reuse)
        session.turns = None  # independent prompts: no conversation has a next turn
        for i, prompt in enumerate(prompts):
            session.submit(i, prompt)
        results: list[RowResult | None] = [None] * len(prompts)
        while session.pending:
            for key, row in session.step():
                results[key] = row
                if progress is not None:
                    progress(1)
        return results  # type: ignore[return-value]


class DecodeSession:
    """A batch that keeps decoding while prompts come and go.

    `submit` queues a prompt under a caller's key; each `step` admits waiting
    prompts when a quarter of the slots are free (shortest first, prefilled on
    top of the shared prefix), runs one decode step for every running row, and
    returns the rows that finished. An agent loop submits a conversation's next
    turn as soon as its tool results are in, so the batch never waits for the
    slowest conversation of a turn.

    Each group of prompts (`submit`'s `group`: the cells of a model sharing the
    session each submit as one) gets its own shared prefix: the longest common
    token prefix of the group's prompts waiting at the first step that sees the
    group; a later prompt that does not start with its group's prefix is
    prefilled whole. Rows of every group decode together, each attending to its
    own prefix, so each step reads the weights once for all of them.
    """

    def __init__(self, gen: BatchGenerator, *, max_new_tokens: int, batch_size: int,
                 temperature: float, top_p: float, seed: int, prefix_reuse: bool):
        self.gen, self.max_new, self.batch_size = gen, max_new_tokens, batch_size
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.prefix_reuse = prefix_reuse
        self.started = time.perf_counter()
        self.waiting: list[_Row] = []
        self.state: _State | None = None
        self.alive: list[int] = []  # indices into state.rows of the rows still decoding
        self.finished: list[tuple[Hashable, RowResult]] = []
        self.prefixes = Prefixes()
        self.group_prefix: dict[Hashable, int] = {}  # each group's prefix id (-1: none)
        self.first_wave = True
        self.eos = gen.eos.to(gen.device)
        budget = int(available_memory(gen.device) * gen.turn_memory_fraction)
        # No more conversations than the engine keeps open at once per group (its window,
        # 4 x the batch) can come back; older entries belong to conversations that ended.
        self.open_per_group = max(64, 4 * batch_size)
        self.turns = TurnStore(budget, self.open_per_group) \
            if prefix_reuse and budget > 0 else None
        self.cap: int | None = None  # chosen from the measured step rate, once rows allow

    @property
    def pending(self) -> int:
        """Prompts submitted whose results have not been returned by `step` yet."""
        running = len(self.alive) if self.state is not None else 0
        return len(self.waiting) + running + len(self.finished)

    def submit(self, key, prompt: list[int], group: Hashable = None) -> None:
        """Queue `prompt` under `key`; prompts of one `group` share a prefix."""
        row = _Row(key, list(prompt), group)
        if self.max_new <= 0:
            self.finished.append((key, RowResult([], False, len(row.prompt), 0.0, 0.0)))
            return
        if self.temperature > 0:  # a row's samples depend on its prompt and the seed only
            h = hashlib.sha256(f"{self.seed}:{row.prompt}".encode()).digest()
            row.rng = torch.Generator(device=self.gen.device)
            row.rng.manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))
        self.waiting.append(row)

    def cancel(self) -> None:
        """Drop every prompt not yet returned, waiting or decoding: the session is empty
        (pending 0) and can take new prompts. The cancellation point of a run stopped
        between decode steps; dropped conversations' kept caches go with their rows."""
        self.waiting, self.finished, self.state, self.alive = [], [], None, []

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, RowResult]]:
        """Admit, decode one token for every running row; the (key, result) of rows that ended."""
        try:
            self._step()
        except (RuntimeError, ValueError) as exc:  # e.g. out of memory: unfinished rows fail
            message = f"{type(exc).__name__}: {exc}"
            running = [self.state.rows[i] for i in self.alive] if self.state is not None else []
            for r in running + self.waiting:
                self.finished.append((r.key, RowResult([], False, len(r.prompt), 0.0, 0.0,
                                                         message)))
            self.waiting, self.state, self.alive = [], None, []
        out, self.finished = self.finished, []
        return out

    # -- internals ---------------------------------------------------------------------------
    def _finish(self, r: _Row) -> None:
        ended = time.perf_counter()
        self.finished.append((r.key, RowResult(r.out, r.stopped, len(r.prompt),
                                               (r.first - r.admitted) * 1000,
                                               (ended - r.first) * 1000,
                                               prefix_tokens=r.prefix_tokens,
                                               prefill_compute_ms=r.compute_ms)))

    def _choose(self, logits: torch.Tensor, rows: list[_Row]) -> torch.Tensor:
        """Greedy: argmax of float32 logits, as `generate`; else each row samples from
        its own generator."""
        if self.temperature <= 0:
            return packed_linear.argmax(logits)
        probs = torch.softmax(logits / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p > self.top_p
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p.masked_fill(drop, 0.0))
        return torch.cat([torch.multinomial(probs[i], 1, generator=r.rng)
                          for i, r in enumerate(rows)])

    def _take(self, state: _State, rows: Sequence[int], tokens: torch.Tensor) -> list[int]:
        """Append the chosen tokens to the rows at `rows` of `state`; the positions (in
        `rows`) of those still running."""
        alive = []
        for i, (j, t, e) in enumerate(zip(rows, tokens.tolist(),
                                          torch.isin(tokens, self.eos).tolist())):
            r = state.rows[j]
            if e:
                r.stopped = True
            else:
                r.out.append(t)
                if len(r.out) < self.max_new:
                    alive.append(i)
                    continue
            self._keep(state, j)
            self._finish(r)
        return alive

    def _keep(self, state: _State, j: int) -> None:
        """Store the cache of row `j` (which just ended) for its conversation's next turn:
        the real columns of its row, i.e. every token fed to the model so far (a token
        chosen at the length limit was never fed)."""
        r = state.rows[j]
        if self.turns is None or r.skip is None:
            return
        fed = r.prompt + (r.out if r.stopped else r.out[:-1])
        cols = state.mask[j].nonzero().flatten()
        if len(cols) != len(fed) - r.skip:  # not the layout this expects: keep nothing
            return
        kv = [(k[j].index_select(1, cols), v[j].index_select(1, cols))
              for k, v in (state.kv(i) for i in range(self.gen.n_layers))]
        self.turns.put(r.key, _Turn(fed, r.skip, kv, len(cols) * self.gen.kv_bytes_per_token()))

    def _attach_head(self, r: _Row, skip: int) -> None:
        """Give `r` the cache its conversation's last turn left, as far as its prompt
        starts with the same tokens (at least one token is left to prefill)."""
        turns = self.turns
        turn = turns.take(r.key) if turns is not None else None
        if turns is None or turn is None or turn.skip != skip:
            return
        m = min(common_length(turn.tokens, r.prompt), len(r.prompt) - 1) - skip
        if m > 0:
            r.head, r.head_kv = m, turn.kv
            turns.hits += 1

    def _decide_prefixes(self) -> None:
        """A prefix for each group first seen among the waiting prompts: the longest one
        its waiting prompts share, where it is worth a stored cache."""
        new: dict[Hashable, list[list[int]]] = {}
        for r in self.waiting:
            if r.group not in self.group_prefix:
                new.setdefault(r.group, []).append(r.prompt)
        for group, prompts in new.items():
            self.group_prefix[group] = -1
            # Each prompt prefills at least one token of its own.
            prefix = common_prefix(prompts)[: min(len(p) for p in prompts) - 1]
            if self.prefix_reuse and len(prefix) >= MIN_PREFIX:
                kv = self.gen._prefix_kv(prefix)  # its time goes to the rows of its first wave
                self.group_prefix[group] = self.prefixes.add(
                    _Prefix(prefix, kv, self.gen.last_prefix_ms))
        if new and self.turns is not None:
            self.turns.max_entries = self.open_per_group * len(self.group_prefix)

    def _prefix_of(self, r: _Row) -> int:
        """The id of the prefix `r` is prefilled on: its group's, where its prompt starts
        with it and goes on past it; else -1."""
        pid = self.group_prefix.get(r.group, -1)
        if pid < 0:
            return -1
        tokens = self.prefixes.entries[pid].tokens
        return pid if len(tokens) < len(r.prompt) and r.prompt[: len(tokens)] == tokens else -1

    def _admit(self, batch: list[_Row]) -> _State | None:
        """Prefill `batch` (on the shared prefix where it applies): a state of the rows
        that did not end on their first token."""
        t0 = self.started if self.first_wave else time.perf_counter()
        self.first_wave = False
        for r in batch:
            r.admitted = t0
        on: dict[int, list[_Row]] = {}  # prefix id (-1: none) -> its rows
        for r in batch:
            on.setdefault(self._prefix_of(r), []).append(r)
        runs = []
        for pid in sorted(on, key=lambda pid: pid < 0):  # rows on a prefix first
            group = on[pid]
            prefix = self.prefixes.entries[pid] if pid >= 0 else None
            plen = len(prefix.tokens) if prefix else 0
            if prefix and prefix.ms:  # every row brought the same prefix tokens
                _share(group, prefix.ms, [plen] * len(group))
                prefix.ms = 0.0
            if not plen or self.gen.shared_attention:  # a copied prefix: caches not kept
                for r in group:
                    self._attach_head(r, plen)
            group.sort(key=lambda r: len(r.prompt) - r.head)
            runs += [(chunk, pid, plen) for chunk in _similar_lengths(group, plen)]
        # Several runs are prefilled into one buffer, each right-aligned to its end, so
        # they join without a copy (a merge copied every row's cache into new memory).
        into = None
        if len(runs) > 1:
            end = max(self.gen._prefill_columns(chunk, plen) for chunk, _, plen in runs)
            into = (self.gen._empty_layers(len(batch), end + GROW, 0), 0, end)
        parts = []
        for chunk, pid, _ in runs:
            state, logits = self.gen._prefill(chunk, self.prefixes, pid, self.max_new, into)
            if into is not None:
                into = (into[0], into[1] + len(chunk), into[2])
            state.last = self._choose(logits, chunk)
            now = time.perf_counter()
            for r in chunk:
                r.first = now
            parts.append((state, self._take(state, range(len(chunk)), state.last)))
        if all(len(keep) == len(state.rows) for state, keep in parts):
            if into is None:  # one run alone: nothing to drop or join, no copy
                return parts[0][0]
            return _stacked(into[0], [state for state, _ in parts])
        return self.gen._merge(parts, GROW)  # rows that ended on their first token go

    def _step(self) -> None:
        gen = self.gen
        if any(r.group not in self.group_prefix for r in self.waiting):
            self._decide_prefixes()
        n_alive = len(self.alive) if self.state is not None else 0
        new_state = None
        if self.waiting:
            self.waiting.sort(key=lambda r: len(r.prompt))  # similar lengths prefill together
            longest = len(self.waiting[-1].prompt)
            cap = gen.pick_batch_size(self.batch_size, longest, self.max_new)
            if self.cap is None and cap > MEASURE_ABOVE and len(self.waiting) + n_alive > \
                    MEASURE_ABOVE:  # fewer rows than that: the memory bound alone decides
                self.cap = gen.rate_cap(self.batch_size, longest, self.max_new)
                gen.log(gen.cap_note)
            cap = min(cap, self.cap or MEASURE_ABOVE)
            free = cap - n_alive
            if free >= max(1, cap // 4) or n_alive == 0:
                batch, self.waiting = self.waiting[:free], self.waiting[free:]
                new_state = self._admit(batch)
        state, alive = self.state, self.alive
        dead = (len(state.rows) - len(alive)) if state is not None else 0
        if new_state is not None and (state is None or not alive):
            state, alive = new_state, list(range(len(new_state.rows)))  # nothing to merge: no copy
        elif new_state is not None and state is not None:
            state = gen._merge([(state, alive), (new_state, list(range(len(new_state.rows))))],
                               min(self.max_new, GROW))
            alive = list(range(len(state.rows))) if state is not None else []
        elif state is not None and dead and (dead * 4 >= len(state.rows) or not self.waiting):
            state = _compact(state, alive)
            alive = list(range(len(state.rows)))
        self.state, self.alive = state, alive
        if state is None or not alive:
            return
        # One decode step for every row in the batch (finished rows not yet dropped ride
        # along and are ignored).
        mask = torch.cat([state.mask, torch.ones((len(state.rows), 1), dtype=torch.long,
                                                 device=gen.device)], dim=1)
        logits = gen._decode(state.layers, state.last, mask, state.pos, state)
        gen.stats["decode_steps"] += 1
        gen.stats["decoded_tokens"] += len(alive)
        # The token fed is a row's last chosen one: it sits at position prompt + out - 1.
        gen.stats["attended"] += sum(len(state.rows[j].prompt) + len(state.rows[j].out)
                                     for j in alive)
        state.mask, state.pos = mask, state.pos + 1
        chosen = self._choose(logits, state.rows)
        state.last = chosen
        still = self._take(state, alive, chosen[alive])
        self.alive = [alive[i] for i in still]


def _positions_sum(start: int, end: int) -> int:
    """Key columns attended by tokens at positions start..end-1 (position p sees p + 1)."""
    return (end * (end + 1) - start * (start + 1)) // 2


def _share(rows: list[_Row], ms: float, tokens: list[int]) -> None:
    """Charge `ms` of one forward to its rows in proportion to the tokens each brought."""
    total = sum(tokens)
    for r, n in zip(rows, tokens):
        r.compute_ms += ms * n / total if total else ms / len(rows)


def _similar_lengths(rows: list[_Row], skip: int, slack: float = 1.25) -> list[list[_Row]]:
    """Rows (sorted by the length of their part to prefill: the prompt past its first
    `skip` tokens and its kept head) cut into runs whose longest part to prefill is at
    most `slack` times their shortest, so a prefill pads little."""
    runs: list[list[_Row]] = []
    for r in rows:
        if runs and len(r.prompt) - skip - r.head <= slack * (
                len(runs[-1][0].prompt) - skip - runs[-1][0].head):
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def _stacked(layers, parts: list[_State]) -> _State:
    """One state over `layers`, into which `parts` (in order) were prefilled as views
    whose rows follow each other and whose columns all end at the same one."""
    length = max(state.length for state in parts)
    for layer in layers:
        layer.length = length
        layer._view()
    rows_total = sum(len(state.rows) for state in parts)
    mask = torch.zeros((rows_total, length), dtype=torch.long, device=parts[0].mask.device)
    r0 = 0
    for state in parts:
        n = len(state.rows)
        mask[r0: r0 + n, length - state.length:] = state.mask
        r0 += n
    pos, last, prefix = (torch.cat([getattr(state, name) for state in parts])
                         for name in ("pos", "last", "prefix"))
    return _State(layers, mask, pos, last, [r for state in parts for r in state.rows], prefix,
                  _prefixes_of(parts))


def _prefixes_of(states) -> Prefixes | None:
    """The session's prefixes, which every part of a batch refers to (or None)."""
    return next((state.prefixes for state in states if state.prefixes is not None), None)


def _compact(state: _State, alive: list[int]) -> _State:
    """Drop finished rows in place: live rows from the end move into the holes, so only
    as many rows are copied as have finished, and nothing is allocated."""
    n = len(alive)
    holes = sorted(set(range(n)) - set(alive))
    movers = [i for i in alive if i >= n]
    order = list(range(n))
    for hole, mover in zip(holes, movers):
        order[hole] = mover
        for layer in state.layers:
            layer.buf_k[hole].copy_(layer.buf_k[mover])
            layer.buf_v[hole].copy_(layer.buf_v[mover])
    for layer in state.layers:
        layer.buf_k, layer.buf_v = layer.buf_k[:n], layer.buf_v[:n]
        layer._view()
    idx = torch.tensor(order, device=state.mask.device)
    return _State(state.layers, state.mask.index_select(0, idx), state.pos.index_select(0, idx),
                  state.last.index_select(0, idx), [state.rows[i] for i in order],
                  state.prefix.index_select(0, idx), state.prefixes)
