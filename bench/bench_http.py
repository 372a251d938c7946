"""The OpenAI-compatible backend against a real llama.cpp server, end to end.

Starts llama-cpp-python's OpenAI-compatible server on 127.0.0.1 with the
embedded GGUF, runs the default question sets (configs/default.yaml's grid,
datasets/sample/*.jsonl) through `evalpipe.runner.execute_run` with the
`openai` backend at concurrency 1, 4 and 8, and once with the in-process
`llamacpp` backend on the same GGUF; prints questions/second for each and
compares final answers, stop reasons and scores sample by sample. The
generation cache is off, so every reply is generated.

    python bench/bench_http.py                       # the default grid, every question
    python bench/bench_http.py --limit 5             # 5 questions per suite
    python bench/bench_http.py --concurrency 1,4,8 --threads 2

Needs llama-cpp-python[server] (.ci/setup-llamacpp.sh).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from machine import load_note

# Greedy on both sides: llama-cpp-python's server would otherwise add repeat_penalty 1.1.
SERVER_SAMPLING = {"repeat_penalty": 1.0}

FALLBACK_QUESTIONS = [
    {"id": f"fb-{a}-{b}", "suite": "arithmetic", "question": f"What is {a} plus {b}?",
     "answer": a + b, "gold_calls": [{"id": "s1", "name": "add", "arguments": {"a": a, "b": b}}]}
    for a, b in [(12, 30), (7, 8), (123, 456), (9, 91), (250, 750), (33, 44), (5, 6), (70, 7)]
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(gguf: Path, threads: int | None, n_batch: int, log: Path
                 ) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "4096", "--seed", "0", "--verbose", "False",
           "--interrupt_requests", "False", "--n_batch", str(n_batch), "--n_ubatch", str(n_batch)]
    if threads:
        cmd += ["--n_threads", str(threads)]
    with open(log, "wb") as out:  # the server keeps its own copy of the descriptor
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama.cpp server exited ({proc.returncode}); see {log}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"llama.cpp server did not answer within 120 s; see {log}")


def load_raw_config(path: Path, limit: int | None, tmp: Path) -> dict:
    import yaml

    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    questions = [q for q in raw.get("questions", []) if (REPO / q).is_file()]
    if not questions:
        fallback = tmp / "fallback.jsonl"
        fallback.write_text("".join(json.dumps(q) + "\n" for q in FALLBACK_QUESTIONS))
        questions = [str(fallback)]
        print(f"note: {path}'s question files are missing; using {len(FALLBACK_QUESTIONS)} "
              "built-in arithmetic questions")
    raw["questions"] = [str(REPO / q) if not Path(q).is_absolute() else q for q in questions]
    if raw.get("corpus"):
        corpus = REPO / raw["corpus"]
        if corpus.is_dir():
            raw["corpus"] = str(corpus)
        else:
            raw.pop("corpus")
            raw["retrieval"] = [{"mode": "none"}]
    if limit:
        raw["limit"] = limit
    return raw


def run(raw: dict, model: dict, out: Path) -> tuple[Path, float]:
    from evalpipe.config import parse_config
    from evalpipe.runner import execute_run

    raw = copy.deepcopy(raw)
    raw["models"] = [model]
    config = parse_config(raw, source=str(REPO / "configs" / "default.yaml"), base=REPO)
    start = time.perf_counter()
    run_dir = execute_run(config, out, use_cache=False, echo=lambda s: None)
    return run_dir, time.perf_counter() - start


def outcome(run_dir: Path) -> dict[tuple[str, str], dict]:
    samples = {(s["cell_id"].split("/", 1)[1], s["question_id"]): s for s in map(
        json.loads, (run_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines())}
    scored = json.loads((run_dir / "scores.json").read_text(encoding="utf-8"))["samples"]
    for row in scored:
        key = (row["cell_id"].split("/", 1)[1], row["question_id"])
        samples[key]["_exact"] = row.get("exact")
        samples[key]["_category"] = row.get("category")
    return samples


def summary(samples: dict) -> dict:
    n = len(samples)
    infra = sum(s["stop_reason"] == "infra_error" for s in samples.values())
    exact = sum(bool(s["_exact"]) for s in samples.values() if s["stop_reason"] != "infra_error")
    tokens = sum(t.get("completion_tokens", 0) for s in samples.values() for t in s["turns"])
    return {"samples": n, "infra_error": infra, "exact": exact, "completion_tokens": tokens}


def compare(a: dict, b: dict) -> dict:
    keys = sorted(set(a) | set(b))
    missing = [k for k in keys if k not in a or k not in b]
    both = [k for k in keys if k in a and k in b]
    return {
        "compared": len(both), "missing": len(missing),
        "final_answer_diff": sum(a[k]["final_answer"] != b[k]["final_answer"] for k in both),
        "raw_diff": sum([t["raw"] for t in a[k]["turns"]] != [t["raw"] for t in b[k]["turns"]]
                        for k in both),
        "stop_reason_diff": sum(a[k]["stop_reason"] != b[k]["stop_reason"] for k in both),
        "exact_diff": sum(a[k]["_exact"] != b[k]["_exact"] for k in both),
        "category_diff": sum(a[k]["_category"] != b[k]["_category"] for k in both),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--model", default="smollm2-135m", help="an alias or a .gguf path")
    parser.add_argument("--limit", type=int, help="questions per suite")
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--threads", type=int, default=1,
                        help="llama.cpp threads, server and in-process (default 1)")
    parser.add_argument("--n-batch", type=int, default=1,
                        help="llama.cpp prompt batch, server and in-process (default 1: greedy "
                        "replies then do not depend on the server's prefix reuse)")
    parser.add_argument("--skip-inprocess", action="store_true")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    from evalpipe.backends.models import gguf_path

    gguf = gguf_path(args.model)
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ.setdefault("EVALPIPE_CACHE", str(tmp / "cache"))
        raw = load_raw_config(Path(args.config), args.limit, tmp)
        results: dict[str, dict] = {}
        runs: dict[str, dict] = {}
        proc, url = start_server(gguf, args.threads, args.n_batch, tmp / "server.log")
        try:
            for c in levels:
                model = {"id": args.model, "backend": "openai", "base_url": url,
                         "model": args.model, "concurrency": c, "timeout_s": 300,
                         "extra_body": SERVER_SAMPLING}
                run_dir, wall = run(raw, model, tmp / f"http-c{c}")
                runs[f"http c={c}"] = outcome(run_dir)
                results[f"http c={c}"] = {"wall_s": round(wall, 2),
                                          **summary(runs[f"http c={c}"])}
                print(f"http c={c}: {results[f'http c={c}']}", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.skip_inprocess:
            model = {"id": args.model, "backend": "llamacpp", "n_threads": args.threads,
                     "n_batch": args.n_batch}
            run_dir, wall = run(raw, model, tmp / "inprocess")
            runs["in-process"] = outcome(run_dir)
            results["in-process"] = {"wall_s": round(wall, 2), **summary(runs["in-process"])}
            print(f"in-process: {results['in-process']}", flush=True)

    print()
    print(f"model {args.model} ({gguf.name}), {os.cpu_count()} CPUs, llama.cpp threads "
          f"{args.threads}, n_batch {args.n_batch}, cache off")
    print("| backend | samples | wall s | samples/s | exact | infra_error |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['samples']} | {r['wall_s']} | "
              f"{r['samples'] / r['wall_s']:.2f} | {r['exact']} | {r['infra_error']} |")
    base = f"http c={levels[0]}"
    comparisons = {}
    for name, other in runs.items():
        if name != base:
            comparisons[f"{base} vs {name}"] = compare(runs[base], other)
    print()
    for name, diff in comparisons.items():
        print(f"{name}: {diff}")
    print(f"note: {load_note()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "comparisons": comparisons},
                                              indent=2))


if __name__ == "__main__":
    main()
