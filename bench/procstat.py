"""Which threads of a process tree really computed, and on which CPUs, from /proc.

A server's settings say how many threads it should use; its worker's threads and
their CPU affinity say how many it did. Two snapshots of every thread of a process
tree (`/proc/<pid>/task/<tid>/stat` for CPU time, `.../status` for Cpus_allowed_list),
one before a timed run and one after it, while the processes are alive, give each
thread's share of a core over the run. The worker is the process that used the most
CPU; its busy threads (those that used at least BUSY of a core: idle helpers and
pollers use almost none) and the CPUs they were allowed on are what the table prints.
An OpenMP team bound by its runtime shows as threads pinned to one CPU each; such a
team's second thread may use far less than its first where the work between parallel
regions is serial (small batches), so the cores a pinned team computed on are its
distinct pinned CPUs, however unequal their shares.

Standard library only: the harness children import it from their own venvs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
BUSY = 0.05  # a busy thread used at least this share of a core over the run


def parse_status(text: str) -> dict[str, str]:
    """The `Key:\tvalue` lines of /proc/<pid>/status."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def cpu_list(spec: str) -> frozenset[int]:
    """A kernel CPU list ("0-3,8,10-11") as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def format_cpus(cpus: frozenset[int]) -> str:
    """The inverse of cpu_list: {0, 1, 2, 5} -> "0-2,5"."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def cpu_ticks(stat_text: str) -> int:
    """utime + stime (clock ticks) from a /proc/.../stat line; the command name in
    parentheses may hold spaces, so fields are counted after its closing one."""
    fields = stat_text[stat_text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def parent_pid(stat_text: str) -> int:
    return int(stat_text[stat_text.rindex(")") + 2:].split()[1])


@dataclass(frozen=True)
class TaskSample:
    pid: int
    tid: int
    process: str  # the process's command name
    ticks: int
    allowed: frozenset[int]
    threads: int  # the process's thread count (its status' Threads)


def tree(root: int, proc: Path = PROC) -> list[int]:
    """`root` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(parent_pid((entry / "stat").read_text()), []).append(
                    int(entry.name))
            except (OSError, ValueError):
                continue  # gone meanwhile
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def snapshot(root: int, proc: Path = PROC) -> dict[tuple[int, int], TaskSample]:
    """Every thread of the process tree under `root`: CPU ticks, allowed CPUs."""
    out = {}
    for pid in tree(root, proc):
        base = proc / str(pid)
        try:
            status = parse_status((base / "status").read_text())
            tids = [int(t.name) for t in (base / "task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            task = base / "task" / str(tid)
            try:
                ticks = cpu_ticks((task / "stat").read_text())
                allowed = cpu_list(parse_status((task / "status").read_text())
                                   ["Cpus_allowed_list"])
            except (OSError, KeyError):
                continue
            out[(pid, tid)] = TaskSample(pid, tid, status.get("Name", "?"), ticks, allowed,
                                         int(status.get("Threads", "0")))
    return out


@dataclass(frozen=True)
class Occupancy:
    """What the worker of a process tree used over one run."""

    pid: int
    process: str
    threads: int  # the worker's threads (busy or not)
    busy: tuple[tuple[int, float, frozenset[int]], ...]  # (tid, cores used, allowed CPUs)
    others_cores: float  # cores the rest of the tree used (a server's front end)

    @property
    def cpus(self) -> frozenset[int]:
        """The CPUs the worker's busy threads were allowed on."""
        return frozenset().union(*(allowed for _, _, allowed in self.busy))

    @property
    def pinned(self) -> frozenset[int]:
        """The CPUs of busy threads pinned to one CPU each (a bound OpenMP team)."""
        return frozenset(next(iter(a)) for _, _, a in self.busy if len(a) == 1)

    def computes_on(self, cores: int) -> bool:
        """Did the worker compute on at least `cores` cores: busy threads pinned to that
        many distinct CPUs, or, where none is pinned, that many busy threads allowed
        together on that many CPUs?"""
        if self.pinned:
            return len(self.pinned) >= cores
        return len(self.busy) >= cores and len(self.cpus) >= cores

    def describe(self) -> str:
        """E.g. "VllmWorker: 2 of 27 threads busy (0.93 cores on CPU 0, 0.91 on 1); rest
        0.12 cores": each busy thread's share of a core and the CPUs it was allowed on."""
        per_thread = ", ".join(f"{share:.2f} on {format_cpus(allowed)}"
                               for _, share, allowed in self.busy)
        line = f"{self.process}: {len(self.busy)} of {self.threads} threads busy ({per_thread})"
        return line + (f"; rest {self.others_cores:.2f} cores" if self.others_cores >= 0.005
                       else "")


def occupancy(before: dict[tuple[int, int], TaskSample],
              after: dict[tuple[int, int], TaskSample], wall_s: float,
              ticks_per_s: float | None = None) -> Occupancy | None:
    """The worker (the process that used the most CPU between the snapshots) and its
    busy threads; None when nothing ran."""
    hz = ticks_per_s or os.sysconf("SC_CLK_TCK")
    used: dict[tuple[int, int], float] = {}
    for key, task in after.items():
        start = before[key].ticks if key in before else 0  # a thread born during the run
        used[key] = (task.ticks - start) / hz / wall_s
    per_process: dict[int, float] = {}
    for (pid, _), share in used.items():
        per_process[pid] = per_process.get(pid, 0.0) + share
    if not per_process or max(per_process.values()) <= 0:
        return None
    worker = max(per_process, key=per_process.__getitem__)
    tasks = [t for key, t in after.items() if key[0] == worker]
    busy = tuple(sorted(((t.tid, used[(t.pid, t.tid)], t.allowed) for t in tasks
                         if used[(t.pid, t.tid)] >= BUSY), key=lambda b: -b[1]))
    return Occupancy(worker, tasks[0].process, tasks[0].threads, busy,
                     sum(v for pid, v in per_process.items() if pid != worker))


def online_cpus() -> frozenset[int]:
    """The CPUs this process may run on (what "all cores" means here)."""
    return frozenset(os.sched_getaffinity(0))
