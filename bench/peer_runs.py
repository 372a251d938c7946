"""One side of bench_peers.py's comparison per peer: start it, warm it up, time it.

Every side times the same span: from the first request to the last reply. The
model is loaded and one small warm-up batch has run before the clock starts, for
every system (evalpipe too), so no row carries a model load or first-call costs.

- lm-eval and Inspect AI run in a child process in their own venv (`peer_envs.py`),
  greedy, on the prompts evalpipe rendered; the child reports its replies and which
  of its threads computed.
- vLLM's CPU build and llama.cpp's server (llama-cpp-python) serve on 127.0.0.1 and
  are driven by evalpipe's OpenAI backend, which runs the whole agent loop, so their
  replies are compared turn for turn over every conversation. While a run is timed,
  the server's process tree is read from /proc before and after (`procstat.py`):
  the worker's busy threads and the CPUs they were allowed on are printed, and a
  vLLM worker that did not compute on as many cores as evalpipe is refused.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import procstat
from compare import Run
from workloads import Workload, build, run_engine

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
WARMUP = 4  # questions run before the clock starts, on every system


@dataclass
class Setting:
    """What every side shares: the thread count evalpipe uses, the limits."""

    threads: int
    timeout_s: float
    log: Callable[[str], None]


def threads_line(occ: procstat.Occupancy | None) -> str:
    return occ.describe() if occ else "no CPU time seen"


def from_engine(row: str, rnd: int, w: Workload, r: dict[str, Any], ours: dict | None,
                occ: procstat.Occupancy | None) -> Run:
    """A Run from `run_engine`'s result; parity turn for turn against evalpipe's."""
    from compare import same_replies

    run = Run(row, rnd, wall_s=r["wall_s"], questions=len(w.questions),
              prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"],
              turns=r["turns"], threads=threads_line(occ))
    if ours is not None:
        run.parity = same_replies(ours, r["replies"])
    errors = sum(t.get("finish_reason") == "error" for s in r["samples"] for t in s.turns)
    if errors:
        run.notes.append(f"{errors} requests failed")
    run.notes.append(f"{r['turns']} turns")
    return run


@contextmanager
def measured(pid: int) -> Iterator[dict[str, Any]]:
    """Snapshots of `pid`'s process tree around the block; `out["occupancy"]` after it."""
    out: dict[str, Any] = {}
    before, t0 = procstat.snapshot(pid), time.perf_counter()
    yield out
    wall = time.perf_counter() - t0
    out["occupancy"] = procstat.occupancy(before, procstat.snapshot(pid), wall)


# -- harnesses in a child process ------------------------------------------------------------

CHILD_LM_EVAL = r'''
import json, os, sys, time
job = json.load(open(sys.argv[1]))
sys.path.insert(0, job["bench_dir"])
import procstat
import torch
torch.set_num_threads(job["threads"])
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
lm = HFLM(pretrained=job["model"], batch_size=job["batch"], dtype="float32", device="cpu")
greedy = {"until": job["stop"], "max_gen_toks": job["max_new"], "do_sample": False,
          "temperature": 0.0}
def requests(convs):
    return [Instance(request_type="generate_until", doc={}, idx=i,
                     arguments=(c["prompt"], dict(greedy))) for i, c in enumerate(convs)]
lm.generate_until(requests(job["conversations"][:job["warmup"]]), disable_tqdm=True)
before, t0 = procstat.snapshot(os.getpid()), time.perf_counter()
texts = lm.generate_until(requests(job["conversations"]), disable_tqdm=True)
wall = time.perf_counter() - t0
occ = procstat.occupancy(before, procstat.snapshot(os.getpid()), wall)
tok = lm.tokenizer
json.dump({"wall_s": wall, "replies": {c["id"]: [t] for c, t in zip(job["conversations"], texts)},
           "turns": len(texts), "threads": occ.describe() if occ else "no CPU time seen",
           "prompt_tokens": sum(len(tok(c["prompt"])["input_ids"]) for c in job["conversations"]),
           "completion_tokens": sum(len(tok(t)["input_ids"]) for t in texts)}, sys.stdout)
'''

CHILD_INSPECT = r'''
import json, os, sys, tempfile, time
job = json.load(open(sys.argv[1]))
sys.path.insert(0, job["bench_dir"])
import procstat
import torch
torch.set_num_threads(job["threads"])
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig, get_model
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolDef

def tool(schema):
    fn = schema["function"]
    ops = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b,
           "multiply": lambda a, b: a * b, "divide": lambda a, b: a / b if b else float("nan")}
    async def execute(a: float, b: float):
        return ops[fn["name"]](a, b)
    props = fn["parameters"]["properties"]
    return ToolDef(execute, name=fn["name"], description=fn["description"],
                   parameters={k: v.get("description", k) for k, v in props.items()}).as_tool()

tools = [tool(s) for s in job["tool_schemas"]]
# Greedy: the hf provider samples (do_sample=True, the model's temperature) unless told.
model = get_model("hf/" + job["model_name"], model_path=job["model"], device="cpu",
                  batch_size=job["batch"], do_sample=False, dtype="float32")
config = GenerateConfig(max_tokens=job["max_new"], temperature=0.0,
                        max_connections=job["batch"])

def task(convs):
    samples = [Sample(id=c["id"], input=[ChatMessageSystem(content=c["messages"][0]["content"]),
                                         ChatMessageUser(content=c["messages"][1]["content"])])
               for c in convs]
    solver = ([use_tools(tools)] if tools else []) + [generate()]
    return Task(dataset=samples, solver=solver, message_limit=2 + 2 * job["max_turns"],
                config=config)

def run(convs):
    logs = inspect_eval(task(convs), model=model, log_dir=tempfile.mkdtemp(), display="none",
                        max_connections=job["batch"])
    if logs[0].status != "success":
        json.dump({"error": f"inspect {logs[0].status}: {str(logs[0].error)[-300:]}"}, sys.stdout)
        sys.exit(0)
    return logs[0]

run(job["conversations"][:job["warmup"]])
before, t0 = procstat.snapshot(os.getpid()), time.perf_counter()
log = run(job["conversations"])
wall = time.perf_counter() - t0
occ = procstat.occupancy(before, procstat.snapshot(os.getpid()), wall)
replies = {str(s.id): [m.text for m in s.messages if m.role == "assistant"] for s in log.samples}
usage = log.stats.model_usage
json.dump({"wall_s": wall, "replies": replies, "turns": sum(map(len, replies.values())),
           "threads": occ.describe() if occ else "no CPU time seen",
           "prompt_tokens": sum(u.input_tokens for u in usage.values()),
           "completion_tokens": sum(u.output_tokens for u in usage.values())}, sys.stdout)
'''


def harness_side(peer: str, python: Path, w: Workload, model_dir: str, model_name: str,
                 conversations: list[dict], ours: dict[str, list[str]], batch: int,
                 rnd: int, s: Setting) -> Run:
    """One timed run of lm-eval or Inspect AI in a child process."""
    from compare import same_replies

    tools = w.toolset != "none"
    job = {"model": model_dir, "model_name": model_name, "threads": s.threads, "batch": batch,
           "max_new": w.max_new_tokens, "max_turns": w.max_turns, "warmup": WARMUP,
           "stop": ["<|im_end|>"], "conversations": conversations, "bench_dir": str(BENCH),
           "tool_schemas": conversations[0]["tools"] if tools and peer == "inspect" else []}
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "job.json"
        spec.write_text(json.dumps(job))
        code = CHILD_LM_EVAL if peer == "lm-eval" else CHILD_INSPECT
        try:
            r = subprocess.run([str(python), "-c", code, str(spec)], check=False,
                               capture_output=True, text=True, timeout=s.timeout_s,
                               env={**os.environ, **OFFLINE})
        except subprocess.TimeoutExpired:
            return Run(peer, rnd, error=f"timed out after {s.timeout_s:.0f} s")
    if r.returncode:
        return Run(peer, rnd, error=f"exit {r.returncode}: "
                   + " | ".join(r.stderr.strip().splitlines()[-3:]))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "error" in out:
        return Run(peer, rnd, error=out["error"])
    run = Run(peer, rnd, wall_s=out["wall_s"], questions=len(w.questions),
              prompt_tokens=out["prompt_tokens"], completion_tokens=out["completion_tokens"],
              turns=out["turns"], threads=out["threads"])
    if peer == "lm-eval" and tools:  # one generation per question: compare first replies
        run.parity, run.parity_unit = same_replies(ours, out["replies"], "first"), "first replies"
        run.notes.append("no tool loop: one turn per question")
    elif peer == "inspect" and tools:  # its own loop and tool schema; its messages keep only
        # the text outside parsed tool calls, so the last replies are what can be compared
        run.parity, run.parity_unit = same_replies(ours, out["replies"], "last"), "final replies"
        run.notes.append(f"Inspect's own tool loop; {out['turns']} turns")
    else:
        run.parity = same_replies(ours, out["replies"])
    return run


# -- servers -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(server: subprocess.Popen, port: int, log: Path, timeout: float) -> str | None:
    """None once the server answers /v1/models; otherwise why not."""
    end = time.time() + timeout
    while time.time() < end:
        if server.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            return f"exited {server.returncode}: {' | '.join(tail)}"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            return None
        except OSError:
            time.sleep(1)
    return f"did not answer within {timeout:.0f} s"


def stop_group(server: subprocess.Popen) -> None:
    """Stop the server and every process of its group, and return only when they are
    gone: vLLM's engine and worker processes outlive the API server by seconds while
    they free gigabytes, and the next side must not run beside them."""
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


def reset_prefix_cache(port: int) -> bool:
    """Empty vLLM's prefix cache (dev mode); False where the server does not offer it."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/reset_prefix_cache", data=b"",
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Level:
    concurrency: int
    stream: bool

    def row(self, peer: str) -> str:
        """`peer`: the system as its rows name it ("vllm", "vllm bfloat16")."""
        return f"{peer} c{self.concurrency} stream {'on' if self.stream else 'off'}"


def vllm_command(python: Path, model_dir: str, served: str, port: int, max_seqs: int,
                 kv_gib: int, dtype: str = "float32") -> tuple[list[str], dict[str, str]]:
    """`vllm serve` at its documented best for a CPU machine, and its environment:
    no core kept back for the front end (VLLM_CPU_NUM_OF_RESERVED_CPU=0; by default it
    keeps one and then sets the worker's OMP_NUM_THREADS to the rest: 1 of 2 here),
    OpenMP threads bound by vLLM itself (VLLM_CPU_OMP_THREADS_BIND=auto, one thread per
    physical core), a KV cache sized for the workloads (VLLM_CPU_KVCACHE_SPACE), and
    dev mode for /reset_prefix_cache between levels. `dtype`: float32, or bfloat16 (its
    CPU build's default for bfloat16 checkpoints, and its fastest with AVX512_BF16 or
    AMX; the float32 folder's weights are rounded at load, as evalpipe's copy is)."""
    env = {**os.environ, **OFFLINE, "VLLM_TARGET_DEVICE": "cpu",
           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_OMP_THREADS_BIND": "auto",
           "VLLM_CPU_KVCACHE_SPACE": str(kv_gib), "VLLM_SERVER_DEV_MODE": "1"}
    env.pop("OMP_NUM_THREADS", None)  # vLLM sets it per worker from the binding
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
           "--served-model-name", served, "--host", "127.0.0.1", "--port", str(port),
           "--dtype", dtype, "--max-num-seqs", str(max_seqs), "--seed", "0"]
    return cmd, env


def llamacpp_command(python: Path, gguf: str, served: str, port: int,
                     threads: int) -> tuple[list[str], dict[str, str]]:
    """llama-cpp-python's server at its best here: every core for generation and for
    prompt batches, no logits kept for every prompt token (its server's default keeps
    them, for prompt logprobs nobody asks for here), full 512-token prompt batches, and
    no request interrupted by the next one (its default with concurrency > 1).
    It has no parallel slots: it serves one request at a time, so concurrency only
    overlaps the HTTP and template work of the next request with the current one."""
    cmd = [str(python), "-m", "llama_cpp.server", "--model", gguf, "--model_alias", served,
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads),
           "--n_threads_batch", str(threads), "--n_ctx", "8192", "--n_batch", "512",
           "--n_ubatch", "512", "--logits_all", "False", "--interrupt_requests", "False",
           "--seed", "0", "--verbose", "False"]
    return cmd, {**os.environ, **OFFLINE}


def server_side(peer: str, cmd: list[str], env: dict[str, str], port: int, w: Workload,
                served: str, levels: list[Level], ours: dict[str, list[str]], rnd: int,
                s: Setting, extra_body: dict[str, Any] | None = None, row: str = "",
                references: dict[str, tuple[str, dict[str, list[str]]]] | None = None
                ) -> list[Run]:
    """Start the server, warm it up, run `w` at each level (timed, its process tree read
    before and after), stop it. vLLM's worker must compute on as many cores as evalpipe
    uses; if it does not, its rows are refused. `row`: how its rows are named (default
    `peer`); `references`: per level row, another reference for its parity than
    evalpipe's replies `ours` (whose, the replies)."""
    from evalpipe.backends import load_backend

    row = row or peer

    def backend(level: Level):
        return load_backend({"id": peer, "backend": "openai", "model": served,
                             "base_url": f"http://127.0.0.1:{port}/v1",
                             "concurrency": level.concurrency, "mode": "chat",
                             "stream": "on" if level.stream else "off", "timeout_s": 600,
                             "extra_body": extra_body or {}})

    def refused(why: str, threads: str = "") -> list[Run]:
        return [Run(level.row(row), rnd, error=why, threads=threads) for level in levels]

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with open(log, "wb") as out:
            server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
        try:
            why = wait_ready(server, port, log, s.timeout_s)
            if why:
                return refused(f"{peer} {why}")
            warm = build(w.name, WARMUP, w.max_new_tokens, model=w.model)
            with measured(server.pid) as m:
                run_engine(backend(Level(WARMUP, False)), warm, batch_size=WARMUP)
            occ = m["occupancy"]
            s.log(f"[{peer}] warm-up: {threads_line(occ)}")
            if peer == "vllm" and (occ is None or not occ.computes_on(s.threads)):
                return refused(f"refused: its worker did not compute on {s.threads} cores, as "
                               "evalpipe does (threads read during its warm-up)",
                               threads_line(occ))
            runs = []
            for level in levels:
                note = []
                if peer == "vllm" and not reset_prefix_cache(port):
                    note = ["prefix cache NOT reset (warm from the run before)"]
                with measured(server.pid) as m:
                    r = run_engine(backend(level), w, batch_size=level.concurrency)
                against, reference = (references or {}).get(level.row(row), ("", ours))
                run = from_engine(level.row(row), rnd, w, r, reference, m["occupancy"])
                run.parity_against, run.replies = against, r["replies"]
                run.notes += note
                s.log(f"[{peer}] {level.row(row)}: {r['wall_s']:.1f} s; {run.threads}")
                runs.append(run)
            return runs
        finally:
            stop_group(server)
