"""evalpipe against the eval harnesses and two serving engines, on the same workloads.

    python bench/bench_peers.py                                   # every workload and peer, twice
    python bench/bench_peers.py --repeats 3 --workloads W1,W2
    python bench/bench_peers.py --n 4 --repeats 1 --workloads W1 --peers vllm   # a smoke test
    python bench/bench_peers.py --workloads W4 --w4-model smollm2-135m          # W4's mechanics

Workloads (bench/workloads.py): W1 single-turn arithmetic, W2 agent loop with the
calculator, W2f the forced-plan loop (systems that run evalpipe's loop only), W3
RAG prepend with BM25 top 3, W4 the agent loop on the tool-calling
Qwen2.5-Coder-0.5B-Instruct, where the multi-turn path really runs. Every system
gets the prompts evalpipe renders with the model's chat template (or, for the
servers, the same messages and tools), greedy decoding and the same new-token
limit, on the workload model's converted float32 folder (llama.cpp: the GGUF it
was converted from), offline.

Peers, each in its own venv (bench/peer_envs.py; `python bench/peer_envs.py`
creates them ahead of a run): lm-eval (HFLM.generate_until; no tool loop), Inspect
AI (its hf provider, greedy, the calculator as Inspect tools, its own loop), vLLM's
CPU build and llama.cpp's server (llama-cpp-python), both driven by evalpipe's
OpenAI backend, which runs the whole agent loop. How each is set up, and why that
is its best here: bench/peer_runs.py.

dtypes (`--dtypes float32,bfloat16`): evalpipe and vLLM run at each, each a row of
its own ("evalpipe bfloat16", "vllm bfloat16 c64 stream off"); the float32 rows
keep the plain names. A bfloat16 row's replies are counted against the same
system's float32 replies (its own rounding against its own reference), the other
rows' against evalpipe's float32 replies; under each table a line sets the peer at
its best (the fastest of its rows, per round) against evalpipe at its best.

Method: each system runs `--repeats` times, alternating (evalpipe, peer 1, peer 2,
..., evalpipe, peer 1, ...). Each row prints the median wall time and its range,
the ratio to evalpipe's wall (per round, median and range), how many replies are
identical to evalpipe's (turn for turn where the peer runs the loop), questions/s,
tokens/s, the share of the machine's matmul ceiling, the threads that really
computed (read from /proc during the run) and the load average before and after
every run. The clock covers the first request to the last reply: models are
loaded and warmed up beforehand, for every system.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import peer_envs
import peer_runs
import procstat
from bench_engine import add_threads_option, use_threads
from compare import BASE, Run, alternating, best_against_best, markdown, summary
from machine import cpu_line, flops_per_token, load_now, matmul_rate
from workloads import NAMES, Workload, build, run_engine, runtime

HARNESSES = ("lm-eval", "inspect")
SERVERS = ("vllm", "llama.cpp")


def conversations(backend, w: Workload) -> list[dict[str, Any]]:
    """Per question, what the harnesses get: the first turn's wire messages (the tool
    protocol written into the system prompt where the chat template cannot take tools),
    the tool schemas the template takes otherwise, and the rendered prompt text."""
    from evalpipe.engine import Engine

    engine, cell = Engine(), runtime(backend, w)
    out = []
    for q in w.questions:
        c = engine._start(cell, q)
        wire, tools = cell.fmt.prepare(c.messages, cell.toolset.schemas(),
                                       backend.template_supports_tools)
        out.append({"id": q.id, "messages": wire, "tools": cell.toolset.schemas(),
                    "template_tools": tools, "prompt": backend.render(wire, tools)})
    return out


def runs_for(peer: str, w: Workload) -> str | None:
    """Why `peer` cannot run `w`, or None."""
    if w.forced is not None and peer in HARNESSES:
        return "the forced-plan loop needs evalpipe's engine"
    return None


def named(system: str, dtype: str) -> str:
    """A system's row name at `dtype`: float32 keeps the plain name."""
    return system if dtype == "float32" else f"{system} {dtype}"


class Sides:
    """The systems of one workload, each able to run one side of a round."""

    def __init__(self, args: argparse.Namespace, w: Workload, backends: dict[str, Any],
                 pythons: dict, setting: peer_runs.Setting):
        from evalpipe.backends.models import converted_dir

        self.args, self.w, self.pythons, self.s = args, w, pythons, setting
        self.backends = backends  # evalpipe's, by dtype (float32 first)
        self.model_dir = str(converted_dir(w.model))
        self.ours: dict[str, list[str]] | None = None  # evalpipe's float32 replies, round 1
        # Each float32 row's replies of the first round, the reference of its bfloat16 row.
        self.float32: dict[str, dict[str, list[str]]] = {}
        self.convs = conversations(backends["float32"], w) \
            if set(HARNESSES) & set(pythons) else []

    def names(self) -> list[str]:
        """The sides of a round, in order: evalpipe at each dtype, then each peer (vLLM at
        each dtype)."""
        out = [named(BASE, d) for d in self.args.dtypes]
        for peer in self.pythons:
            out += [named(peer, d) for d in self.args.dtypes] if peer == "vllm" else [peer]
        return out

    def run(self, side: str, rnd: int) -> list[Run]:
        system, _, dtype = side.partition(" ")
        dtype = dtype or "float32"
        return self.evalpipe(dtype, rnd) if system == BASE else self.peer(system, dtype, rnd)

    def evalpipe(self, dtype: str, rnd: int) -> list[Run]:
        backend = self.backends[dtype]
        backend.prefix_store.clear()
        stats = dict(backend.batcher.stats)
        with peer_runs.measured(os.getpid()) as m:
            r = run_engine(backend, self.w, self.args.batch_size)
        row = named(BASE, dtype)
        reference = self.ours if dtype == "float32" else self.float32.get(BASE)
        run = peer_runs.from_engine(row, rnd, self.w, r, reference, m["occupancy"])
        run.processed_tokens = sum(backend.batcher.stats[k] - stats[k]
                                   for k in ("prefilled_tokens", "decoded_tokens"))
        if dtype != "float32":
            run.parity_against = "evalpipe float32"
        elif self.ours is None:
            self.ours = self.float32[BASE] = r["replies"]
            run.parity = None  # the reference itself
        return [run]

    def peer(self, peer: str, dtype: str, rnd: int) -> list[Run]:
        python = self.pythons[peer]
        if isinstance(python, str):
            return [Run(named(peer, dtype), rnd, error=python)]
        why = runs_for(peer, self.w)
        if why:
            return [Run(peer, rnd, error=f"not run: {why}")]
        assert self.ours is not None, "evalpipe runs first in every round"
        if peer in HARNESSES:
            return [peer_runs.harness_side(
                peer, python, self.w, self.model_dir, self.model_name, self.convs, self.ours,
                self.args.peer_batch, rnd, self.s)]
        port = peer_runs.free_port()
        served = self.w.model
        if peer == "vllm":
            levels = vllm_levels(self.args, len(self.w.questions))
            row = named(peer, dtype)
            cmd, env = peer_runs.vllm_command(python, self.model_dir, served, port,
                                              max(lv.concurrency for lv in levels),
                                              self.args.vllm_kv_gib, dtype)
            references = {} if dtype == "float32" else {
                level.row(row): (level.row("vllm float32"), self.float32.get(level.row(peer), {}))
                for level in levels}
            runs = peer_runs.server_side(peer, cmd, env, port, self.w, served, levels,
                                         self.ours, rnd, self.s, row=row,
                                         references=references)
            if dtype == "float32":
                for run in runs:
                    if run.replies is not None:
                        self.float32.setdefault(run.row, run.replies)
            return runs
        from evalpipe.backends.models import gguf_path

        levels = [peer_runs.Level(c, False) for c in
                  clamp(self.args.llamacpp_concurrency, len(self.w.questions))]
        cmd, env = peer_runs.llamacpp_command(python, str(gguf_path(self.w.model)), served,
                                              port, self.s.threads)
        # Greedy: its sampler otherwise adds a repeat penalty of 1.1.
        return peer_runs.server_side(peer, cmd, env, port, self.w, served, levels, self.ours,
                                     rnd, self.s, extra_body={"repeat_penalty": 1.0})

    @property
    def model_name(self) -> str:
        """The name Inspect's hf provider is given: the model's own (the alias's description
        starts with it), which is how it picks its tool-call parser (Qwen Coder: fenced json
        blocks)."""
        from evalpipe.backends.models import ALIASES

        alias = ALIASES.get(self.w.model)
        return alias.description.split(" (")[0] if alias else self.w.model


def clamp(spec: str, n: int) -> list[int]:
    """Concurrency levels from "16,64,160", none above the number of questions (a level
    above it runs the same as the number itself), without repeats."""
    return list(dict.fromkeys(min(int(c), n) for c in spec.split(",")))


def vllm_levels(args: argparse.Namespace, n: int) -> list[peer_runs.Level]:
    """Every --vllm-concurrency level with streaming off (its best), and the levels
    of --vllm-stream-on with streaming on (evalpipe's default for a server; "none":
    no streaming rows)."""
    off = [peer_runs.Level(c, False) for c in clamp(args.vllm_concurrency, n)]
    on_spec = args.vllm_stream_on or str(max(lv.concurrency for lv in off))
    if on_spec == "none":
        return off
    return off + [peer_runs.Level(c, True) for c in clamp(on_spec, n)]


def run_workload(args, w: Workload, backends: dict[str, Any], pythons: dict,
                 s: peer_runs.Setting, ceiling: float, log: Callable[[str], None]) -> None:
    sides = Sides(args, w, backends, pythons, s)
    runs: list[Run] = []
    for rnd, side in alternating(sides.names(), args.repeats):
        before = load_now()
        log(f"[{w.name}] round {rnd + 1}/{args.repeats}: {side}")
        try:
            got = sides.run(side, rnd)
        except Exception as exc:  # noqa: BLE001 - a peer failing is a row, not a crash
            got = [Run(side, rnd, error=f"{type(exc).__name__}: {exc}")]
        after = load_now()
        for run in got:
            run.load = (before, after)
        runs += got
    n = len(w.questions)
    print(f"\n### {w.label}: {n} questions, up to {w.max_turns} turns, "
          f"{w.max_new_tokens} new tokens, {args.repeats} alternating rounds\n")
    print(markdown(summary(runs, ceiling)), flush=True)
    for peer in pythons:
        line = best_against_best(runs, BASE, peer)
        if line and len(args.dtypes) > 1:
            print(f"\n{line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    # A SIGTERM (a `timeout` around the benchmark) unwinds through the `finally` blocks,
    # so a server started here is stopped with it instead of left serving.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="W1,W2,W3:16,W4",
                    help=f"comma-separated, of {', '.join(NAMES)}; NAME:N runs the first N "
                         "questions of one workload")
    ap.add_argument("--peers", default="lm-eval,inspect,vllm,llama.cpp",
                    help="comma-separated, of " + ", ".join(peer_envs.PEERS) + "; or 'none'")
    ap.add_argument("--repeats", type=int, default=2,
                    help="alternating rounds; every system runs once per round (at least 2 "
                         "for a result: one run of each is not one)")
    ap.add_argument("--n", type=int, default=None,
                    help="questions per workload (default: W1 160, W2 64, W3 all, W4 32)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--w4-model", default=None,
                    help="model alias for W4 (default qwen2.5-coder-0.5b; the default model "
                         "checks W4's mechanics where the 0.5B is not fetched)")
    ap.add_argument("--peer-batch", type=int, default=64, help="lm-eval and Inspect batch size")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="evalpipe's batch_size (default: what a run gets by default)")
    ap.add_argument("--vllm-concurrency", default="64,160",
                    help="levels run with streaming off, each a row")
    ap.add_argument("--vllm-stream-on", default=None,
                    help="levels run with streaming on (default: the highest level; "
                         "'none': no streaming rows)")
    ap.add_argument("--vllm-kv-gib", type=int, default=4, help="VLLM_CPU_KVCACHE_SPACE")
    ap.add_argument("--dtypes", default="float32",
                    help="comma-separated weights dtypes evalpipe and vLLM run at, each a "
                         "row (float32 first: the other rows' replies are counted against "
                         "their own system's float32 ones)")
    ap.add_argument("--llamacpp-concurrency", default="4",
                    help="levels for llama.cpp's server (it serves one request at a time)")
    ap.add_argument("--venv-root", default=str(peer_envs.ROOT))
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per peer run")
    add_threads_option(ap)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    args.dtypes = args.dtypes.split(",")
    if args.dtypes[0] != "float32" or not set(args.dtypes) <= {"float32", "bfloat16"}:
        ap.error("--dtypes: float32 first, then bfloat16 if wanted")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    threads = use_threads(args.threads)
    peers = [] if args.peers == "none" else args.peers.split(",")
    unknown = set(peers) - set(peer_envs.PEERS)
    if unknown:
        ap.error(f"unknown peer(s) {', '.join(sorted(unknown))}")
    pythons = {p: peer_envs.venv(p, Path(args.venv_root), log) for p in peers}
    setting = peer_runs.Setting(threads, args.timeout, log)
    rate = matmul_rate()
    print(f"{cpu_line()}; CPUs allowed {procstat.format_cpus(procstat.online_cpus())}; "
          f"load average {load_now():.1f} at the start")
    print(f"evalpipe: torch threads {threads}; float32 matmul {rate / 1e9:.0f} GFLOP/s "
          "measured (the ceiling's rate)")
    for p, py in pythons.items():
        shown = py if isinstance(py, str) else ", ".join(
            f"{k} {v}" for k, v in peer_envs.versions(py, p).items())
        print(f"peer {p}: {shown}")
    print("timed span: first request to last reply, for every system; model load and a "
          f"{peer_runs.WARMUP}-question warm-up before it. Greedy everywhere.")

    from evalpipe.backends import load_backend
    from evalpipe.errors import EvalpipeError

    loaded: dict[str, dict[str, Any]] = {}  # evalpipe's backends of one model, by dtype
    for spec in args.workloads.split(","):
        name, _, size = spec.partition(":")
        w = build(name, int(size) if size else args.n, args.max_new_tokens,
                  model=args.w4_model if name == "W4" else None)
        if w.model not in loaded:
            loaded.clear()  # one model in memory at a time (in each dtype)
            try:
                backends = {d: load_backend({"id": w.model, "dtype": d}) for d in args.dtypes}
            except EvalpipeError as exc:  # the 0.5B not fetched here: the others still run
                print(f"\n### {w.label}: not run: {exc}", flush=True)
                continue
            for backend in backends.values():
                run_engine(backend, build("W1", 2, 4))  # first-call costs, untimed
                print(f"evalpipe: {backend.log_line()}")
            loaded[w.model] = backends
        backends = loaded[w.model]
        fpt = flops_per_token(backends["float32"].model)
        print(f"\nmodel {w.model}: {fpt / 1e6:.0f} MFLOP per token -> ceiling "
              f"{rate / fpt:.0f} tokens/s")
        run_workload(args, w, backends, pythons, setting, fpt / rate, log)
    print(f"\nnote: {cpu_line()}; load average {load_now():.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
