"""The logic behind bench/bench_peers.py's table, without a clock or a model: reading
which threads computed from /proc, the alternating order, medians and ranges, ratios
per round, replies counted against evalpipe's, and how the peers are started."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import compare
import procstat
from compare import Run

STATUS = "Name:\tVLLM::Worker\nState:\tS (sleeping)\nThreads:\t27\nCpus_allowed_list:\t0-1\n"


def stat_line(pid: int, comm: str, ppid: int, utime: int, stime: int) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime ...
    return f"{pid} ({comm}) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0\n"


def test_status_and_cpu_lists():
    status = procstat.parse_status(STATUS)
    assert status["Threads"] == "27" and status["Name"] == "VLLM::Worker"
    assert procstat.cpu_list(status["Cpus_allowed_list"]) == {0, 1}
    assert procstat.cpu_list("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert procstat.format_cpus(frozenset({0, 1, 2, 5, 7, 8})) == "0-2,5,7-8"
    assert procstat.format_cpus(procstat.cpu_list("3")) == "3"


def test_stat_fields_after_a_command_name_with_spaces_and_parentheses():
    line = stat_line(42, "python3 (x) y", 7, 150, 50)
    assert procstat.cpu_ticks(line) == 200
    assert procstat.parent_pid(line) == 7


def fake_proc(root: Path, processes: dict[int, tuple[str, int, dict[int, tuple[int, str]]]]):
    """processes: pid -> (name, ppid, {tid: (ticks, allowed cpus)})."""
    for pid, (name, ppid, tasks) in processes.items():
        base = root / str(pid)
        (base / "task").mkdir(parents=True, exist_ok=True)
        (base / "stat").write_text(stat_line(pid, name, ppid, 0, 0))
        (base / "status").write_text(f"Name:\t{name}\nThreads:\t{len(tasks)}\n"
                                     "Cpus_allowed_list:\t0-1\n")
        for tid, (ticks, allowed) in tasks.items():
            task = base / "task" / str(tid)
            task.mkdir(exist_ok=True)
            (task / "stat").write_text(stat_line(tid, name, ppid, ticks, 0))
            (task / "status").write_text(f"Name:\t{name}\nCpus_allowed_list:\t{allowed}\n")
    (root / "self").mkdir(exist_ok=True)  # not a process: skipped


def vllm_tree(root: Path, worker_ticks: tuple[int, int], allowed: tuple[str, str]) -> None:
    fake_proc(root, {
        100: ("api_server", 1, {100: (10, "0-1"), 101: (0, "0-1")}),
        200: ("EngineCore", 100, {200: (5, "0-1")}),
        300: ("VllmWorker", 200, {300: (worker_ticks[0], allowed[0]),
                                  301: (worker_ticks[1], allowed[1]), 302: (1, "0-1")}),
        999: ("unrelated", 1, {999: (10_000, "0-1")}),
    })


def test_occupancy_finds_the_worker_and_its_busy_threads(tmp_path):
    vllm_tree(tmp_path, (0, 0), ("0", "1"))
    before = procstat.snapshot(100, tmp_path)
    assert {pid for pid, _ in before} == {100, 200, 300}  # the unrelated process is left out
    vllm_tree(tmp_path, (950, 900), ("0", "1"))  # 10 s at 100 ticks/s: 0.95 and 0.90 cores
    occ = procstat.occupancy(before, procstat.snapshot(100, tmp_path), wall_s=10.0,
                             ticks_per_s=100)
    assert occ is not None and occ.pid == 300 and occ.process == "VllmWorker"
    assert occ.threads == 3
    assert [(tid, round(share, 2)) for tid, share, _ in occ.busy] == [(300, 0.95), (301, 0.9)]
    assert occ.cpus == {0, 1} and occ.computes_on(2)
    assert occ.describe() == "VllmWorker: 2 of 3 threads busy (0.95 on 0, 0.90 on 1)"


def test_a_bound_team_with_unequal_shares_still_counts_both_cores(tmp_path):
    """Small batches leave the second OpenMP thread little to do: pinned to its own
    CPU it still counts; a helper thread allowed on every CPU does not make a second
    core where the team is pinned to one."""
    vllm_tree(tmp_path, (0, 0), ("0", "1"))
    before = procstat.snapshot(100, tmp_path)
    vllm_tree(tmp_path, (830, 120), ("0", "1"))
    (tmp_path / "100" / "task" / "100" / "stat").write_text(stat_line(100, "api", 1, 60, 0))
    occ = procstat.occupancy(before, procstat.snapshot(100, tmp_path), 10.0, ticks_per_s=100)
    assert occ is not None and occ.pinned == {0, 1} and occ.computes_on(2)
    assert occ.describe() == ("VllmWorker: 2 of 3 threads busy (0.83 on 0, 0.12 on 1); "
                              "rest 0.05 cores")
    vllm_tree(tmp_path, (0, 0), ("1", "0-1"))
    before = procstat.snapshot(100, tmp_path)
    vllm_tree(tmp_path, (830, 400), ("1", "0-1"))  # a poller beside a one-thread team
    occ = procstat.occupancy(before, procstat.snapshot(100, tmp_path), 10.0, ticks_per_s=100)
    assert occ is not None and len(occ.busy) == 2 and not occ.computes_on(2)


def test_unpinned_threads_count_one_core_each(tmp_path):
    vllm_tree(tmp_path, (0, 0), ("0-1", "0-1"))
    before = procstat.snapshot(100, tmp_path)
    vllm_tree(tmp_path, (500, 450), ("0-1", "0-1"))
    occ = procstat.occupancy(before, procstat.snapshot(100, tmp_path), 10.0, ticks_per_s=100)
    assert occ is not None and occ.pinned == frozenset() and occ.computes_on(2)
    assert not occ.computes_on(3)


def test_nothing_ran(tmp_path):
    vllm_tree(tmp_path, (0, 0), ("0", "1"))
    snap = procstat.snapshot(100, tmp_path)
    assert procstat.occupancy(snap, snap, 5.0, ticks_per_s=100) is None


def test_alternating_order():
    order = compare.alternating(["evalpipe", "lm-eval", "vllm"], 2)
    assert order == [(0, "evalpipe"), (0, "lm-eval"), (0, "vllm"),
                     (1, "evalpipe"), (1, "lm-eval"), (1, "vllm")]


def test_median_and_range():
    assert compare.median_range([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert compare.median_range([4.0, 2.0]) == (3.0, 2.0, 4.0)
    with pytest.raises(ValueError):
        compare.median_range([])


def test_same_replies_by_mode():
    ours = {"q1": ["call", "answer 42"], "q2": ["7"], "q3": ["x"]}
    theirs = {"q1": ["call", "answer 41"], "q2": ["7"]}  # q3 not answered: different
    assert compare.same_replies(ours, theirs) == (1, 3)
    assert compare.same_replies(ours, theirs, "first") == (2, 3)
    assert compare.same_replies(ours, {"q1": ["other", "answer 42"]}, "last") == (1, 3)
    with pytest.raises(ValueError):
        compare.same_replies(ours, theirs, "some")


def test_summary_ratios_are_taken_per_round_and_parity_printed_beside_them():
    runs = [Run("evalpipe", 0, 10.0, questions=4, prompt_tokens=80, completion_tokens=20),
            Run("vllm", 0, 12.0, questions=4, prompt_tokens=80, completion_tokens=20,
                parity=(4, 4)),
            Run("evalpipe", 1, 20.0, questions=4, prompt_tokens=80, completion_tokens=20,
                parity=(4, 4)),
            Run("vllm", 1, 30.0, questions=4, prompt_tokens=80, completion_tokens=20,
                parity=(3, 4)),
            Run("lm-eval", 0, error="exit 1: boom"), Run("lm-eval", 1, error="exit 1: boom")]
    rows = {r["system"]: r for r in compare.summary(runs)}
    assert rows["evalpipe"]["wall"] == "15.0 (10.0-20.0)"
    assert rows["evalpipe"]["ratio"] == "1.00x"
    # per round 1.2x and 1.5x: the ratio of the medians (25/15 = 1.67x) is not printed
    assert rows["vllm"]["ratio"] == "**1.35x** (1.20-1.50)"
    assert rows["vllm"]["parity"] == "3-4/4 conversations"
    assert rows["vllm"]["runs"] == "2/2"
    assert rows["lm-eval"]["runs"] == "0/2" and rows["lm-eval"]["wall"] == "-"
    assert "exit 1: boom" in rows["lm-eval"]["note"]


def test_markdown_table_escapes_pipes():
    table = compare.markdown([{"system": "a|b", "wall": "1.0 (1.0)"}])
    lines = table.splitlines()
    assert lines[0].startswith("| system | runs ok | wall s, median (range)")
    assert len(lines) == 3 and "a\\|b" in lines[2]
    assert lines[2].count(" | ") == len(compare.COLUMNS) - 1


def test_peers_started_at_their_best(tmp_path):
    import peer_runs

    cmd, env = peer_runs.vllm_command(tmp_path / "python", "/m", "smollm2-135m", 8000, 160,
                                      kv_gib=4)
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"  # no core kept for the front end
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and "OMP_NUM_THREADS" not in env
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    assert cmd[cmd.index("--max-num-seqs") + 1] == "160"
    cmd, _ = peer_runs.llamacpp_command(tmp_path / "python", "/m.gguf", "m", 8001, threads=2)
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags["--n_threads"] == flags["--n_threads_batch"] == "2"
    assert flags["--logits_all"] == "False" and flags["--interrupt_requests"] == "False"


def test_concurrency_levels():
    import argparse

    import bench_peers

    assert bench_peers.clamp("16,64,160", 64) == [16, 64]
    args = argparse.Namespace(vllm_concurrency="64,160", vllm_stream_on=None)
    levels = bench_peers.vllm_levels(args, 160)
    assert [(lv.concurrency, lv.stream) for lv in levels] == [(64, False), (160, False),
                                                              (160, True)]
    assert levels[2].row("vllm") == "vllm c160 stream on"
    args.vllm_stream_on = "none"
    assert [(lv.concurrency, lv.stream) for lv in bench_peers.vllm_levels(args, 160)] == [
        (64, False), (160, False)]


def test_each_system_at_its_best_against_the_other_at_its_best():
    """With rows at two dtypes, the line under a table sets the fastest vLLM row of each
    round against the fastest evalpipe row of the same round."""
    runs = [Run("evalpipe", 0, 10.0), Run("evalpipe bfloat16", 0, 8.0),
            Run("vllm c16 stream off", 0, 16.0), Run("vllm bfloat16 c16 stream off", 0, 12.0),
            Run("evalpipe", 1, 11.0), Run("evalpipe bfloat16", 1, 10.0),
            Run("vllm c16 stream off", 1, 13.0), Run("vllm bfloat16 c16 stream off", 1, 15.0),
            Run("llama.cpp c4 stream off", 1, 5.0)]
    line = compare.best_against_best(runs, "evalpipe", "vllm")
    # round 1: 12 / 8 = 1.50; round 2: 13 / 10 = 1.30
    assert "**1.40x** (1.30-1.50)" in line
    assert "(vllm bfloat16 c16 stream off, vllm c16 stream off)" in line
    assert "(evalpipe bfloat16)" in line
    assert compare.best_against_best(runs[:2], "evalpipe", "vllm") is None


def test_a_bfloat16_row_says_whose_replies_it_is_counted_against():
    runs = [Run("evalpipe", 0, 10.0, questions=4), Run("evalpipe bfloat16", 0, 8.0, questions=4,
                                                      parity=(3, 4),
                                                      parity_against="evalpipe float32")]
    rows = {r["system"]: r for r in compare.summary(runs)}
    assert rows["evalpipe bfloat16"]["parity"] == "3/4 conversations (against evalpipe float32)"
    assert rows["evalpipe bfloat16"]["ratio"] == "**0.80x** (0.80)"


def test_vllm_runs_at_the_dtype_asked_for(tmp_path):
    import bench_peers
    import peer_runs

    cmd, _ = peer_runs.vllm_command(tmp_path / "python", "/m", "m", 8000, 16, kv_gib=4,
                                    dtype="bfloat16")
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"
    assert bench_peers.named("vllm", "bfloat16") == "vllm bfloat16"
    assert bench_peers.named("evalpipe", "float32") == "evalpipe"
    assert peer_runs.Level(16, False).row("vllm bfloat16") == "vllm bfloat16 c16 stream off"


def test_the_dtype_run_reads_wall_time_and_peak_memory_from_time_v():
    import bench_dtypes

    report = ("\tCommand being timed: \"python -m evalpipe run\"\n"
              "\tElapsed (wall clock) time (h:mm:ss or m:ss): 7:41.52\n"
              "\tMaximum resident set size (kbytes): 9437184\n")
    assert bench_dtypes.time_v(report) == (461.52, 9.0)
    hours = report.replace("7:41.52", "1:02:03.5")
    assert bench_dtypes.time_v(hours)[0] == 3723.5
    with pytest.raises(ValueError):
        bench_dtypes.time_v("no report")


def test_a_workload_runtime_takes_the_batch_cap_asked_for_or_a_run_s_default():
    """bench_peers runs evalpipe with the batch cap a user's run gets unless told one."""
    from workloads import build, runtime

    from evalpipe.backends.base import GenerationSettings

    w = build("W1", 2, 8)
    assert runtime(None, w).generation.batch_size == GenerationSettings().batch_size
    assert runtime(None, w, 16).generation.batch_size == 16
    assert runtime(None, w).generation.max_new_tokens == 8
