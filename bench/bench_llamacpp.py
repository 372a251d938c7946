"""evalpipe's engine vs llama-cpp-python on the same GGUF file, one request at a time.

    python bench/bench_llamacpp.py [--n 16] [--dtype float32] [--threads 1]

Both sides run the embedded SmolLM2-135M-Instruct: evalpipe on the dequantised
copy (bfloat16 by default, batched engine), llama.cpp on the Q4_1 GGUF it came from
(create_chat_completion, greedy, one request at a time, the same hermes prompt
and calculator tools, the same agent loop). Prints questions/second of each
and the ratio. When llama-cpp-python is not installed, says so and exits 0.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import bench_questions, make_runtime, one_at_a_time, run_engine
from machine import load_note


def run_llamacpp(n: int, threads: int, max_new_tokens: int) -> tuple[float, dict[str, str], str]:
    """llama-cpp-python's chat completion, one request at a time: wall seconds, final
    answer per question id, and the GGUF's name.

    Runs in its own process: in one process with PyTorch's bfloat16 (AMX) kernels,
    llama.cpp died of an illegal instruction on this machine."""
    from llama_cpp import Llama

    from evalpipe.backends.models import ALIASES, fetch_gguf

    gguf = fetch_gguf(ALIASES["smollm2-135m"])
    llm = Llama(model_path=str(gguf), n_ctx=4096, n_threads=threads, n_threads_batch=threads,
                n_batch=512, verbose=False, seed=0)
    runtime = make_runtime(None, max_new_tokens=max_new_tokens)
    questions = bench_questions(n)

    def complete(wire, limit=max_new_tokens):
        wire = [{"role": m["role"], "content": m.get("content") or ""} for m in wire]
        reply = llm.create_chat_completion(messages=wire, temperature=0.0, top_k=1,
                                           max_tokens=limit, seed=0)
        return reply["choices"][0]["message"].get("content") or ""

    one_at_a_time(runtime, questions[:1], lambda wire: complete(wire, 4))  # warm-up
    seconds, answers = one_at_a_time(runtime, questions, complete)
    return seconds, answers, gguf.name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both torch and llama.cpp (default: one per core)")
    ap.add_argument("--dtype", default="bfloat16",
                    help="evalpipe's weights (llama.cpp runs its 4-bit Q4_1 file either way)")
    ap.add_argument("--batch-size", type=int, default=64, help="the engine's batch cap")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    args = ap.parse_args(argv)
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        print(f"llama-cpp-python is not installed ({exc}); `pip install llama-cpp-python` "
              "builds it from source (~4+ minutes on 2 cores). Skipping this benchmark.")
        return 0

    import torch

    from evalpipe.backends import load_backend

    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    backend = load_backend({"id": "smollm2-135m", "dtype": args.dtype})
    questions = bench_questions(args.n)
    runtime = make_runtime(backend, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    run_engine(make_runtime(backend, max_new_tokens=4), questions[:2])  # warm-up
    backend.prefix_store.clear()

    engine_s, engine_answers, _ = run_engine(runtime, questions)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        cpp_s, cpp_answers, gguf = pool.submit(run_llamacpp, args.n, threads,
                                               args.max_new_tokens).result()
    n = len(questions)
    same = sum(engine_answers[q.id] == cpp_answers[q.id] for q in questions)
    print(f"questions: {n} (hermes, calculator, max_new_tokens={args.max_new_tokens}); "
          f"threads {threads} on each side; GGUF {gguf}")
    ours = f"evalpipe engine ({args.dtype}, batch cap {args.batch_size})"
    for label, seconds in ((ours, engine_s),
                           ("llama.cpp (Q4_1, one request at a time)", cpp_s)):
        print(f"{label:<42}: {seconds:8.1f} s  {n / seconds:6.3f} q/s")
    print(f"questions/second ratio: {cpp_s / engine_s:.2f}x  (target >= 2x)")
    print(f"identical final answers: {same}/{n} (different weights: Q4_1 vs its dequantised "
          "copy, so not expected to be equal)")
    print(f"note: {load_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
