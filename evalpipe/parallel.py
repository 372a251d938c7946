"""Data parallelism: split a run's questions across processes, merge the parts.

`accelerate launch --num_processes N -m evalpipe run ...` (or torchrun) starts
N copies of the run, each with RANK / WORLD_SIZE (or LOCAL_RANK /
LOCAL_WORLD_SIZE) in its environment. Every rank loads its own model copy,
runs its round-robin shard of the questions for every cell, and appends its
samples to `samples.part{rank}.jsonl` in the shared run directory; when it is
done it writes `part{rank}.done`. Rank 0 waits for every marker, merges the
parts into samples.jsonl in the canonical order (cell order, then question
order as in questions.jsonl) and scores the run as usual.

Every rank must agree on the run id: `shared_run_id` takes EVALPIPE_RUN_ID
when the launcher sets it, else rank 0 picks one and writes it to a small
rendezvous file that the other ranks wait for (named from the config hash and
the launch's own coordinates, so two launches never read each other's).

`Shard` is what a run asks of all this: this process's share of the questions,
where its samples go, the run id every rank agrees on, and, on rank 0, waiting for
the parts and merging them. Alone (world 1) it is the whole run and each of its
steps is a no-op, so the runner never asks how many processes there are.

Nothing here imports torch or accelerate: the environment is all it needs.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from evalpipe import jsonl
from evalpipe.errors import InfraError, InputError
from evalpipe.identity import sample_key
from evalpipe.records import Manifest
from evalpipe.store import read_run_file, run_name_problem

T = TypeVar("T")
RUN_ID_ENV = "EVALPIPE_RUN_ID"


def rank_world(environ: dict[str, str] | None = None) -> tuple[int, int]:
    """(rank, world size) from what torchrun / accelerate set; (0, 1) when alone.

    RANK and WORLD_SIZE are global across machines; LOCAL_RANK and
    LOCAL_WORLD_SIZE are the fallback for launchers that set only those."""
    env = os.environ if environ is None else environ

    def read(name: str) -> int | None:
        value = env.get(name)
        if value is None or value == "":
            return None
        try:
            return int(value)
        except ValueError:
            raise InputError(f"environment variable {name}={value!r} is not an integer",
                             field=name, expected="an integer set by the launcher") from None

    rank, world = read("RANK"), read("WORLD_SIZE")
    if rank is None or world is None:
        local_rank, local_world = read("LOCAL_RANK"), read("LOCAL_WORLD_SIZE")
        rank = rank if rank is not None else local_rank
        world = world if world is not None else local_world
    if rank is None and world is None:
        return 0, 1
    rank, world = rank or 0, world or 1
    if world < 1 or not 0 <= rank < world:
        raise InputError(f"rank {rank} is not within a world of {world} processes",
                         field="RANK/WORLD_SIZE", expected="0 <= RANK < WORLD_SIZE")
    return rank, world


def shard(items: Sequence[T], rank: int, world: int) -> list[T]:
    """This rank's items: every world-th one starting at rank (round-robin, so
    each rank gets a similar mix of suites and lengths). Deterministic: every rank
    computes the same split from the same list."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} not in a world of {world}")
    return list(items[rank::world])


def part_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / f"samples.part{rank}.jsonl"


def done_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / f"part{rank}.done"


def append_part(run_dir: str | Path, rank: int, samples: Iterable[dict[str, Any]]) -> int:
    """Append whole records to this rank's part and fsync (evalpipe.jsonl)."""
    return jsonl.append(part_path(run_dir, rank), samples)


def repair_part(run_dir: str | Path, rank: int) -> None:
    """Cut a torn last line (from a killed rank) off this rank's part, so that
    appends continue on a clean line. Call before a rank appends on resume."""
    jsonl.repair(part_path(run_dir, rank))


def mark_done(run_dir: str | Path, rank: int, count: int | None = None,
              token: str | None = None) -> None:
    """Tell rank 0 that this rank's part is complete (written after the last fsync).
    `token` (the launch key) lets rank 0 ignore markers left by an earlier launch."""
    path = done_path(run_dir, rank)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"rank": rank, "samples": count, "token": token,
                               "pid": os.getpid(), "time": time.time()}) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def _is_done(run_dir: str | Path, rank: int, token: str | None) -> bool:
    path = done_path(run_dir, rank)
    if not path.is_file():
        return False
    if token is None:
        return True
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("token") == token
    except (OSError, ValueError):
        return False


def wait_for_parts(run_dir: str | Path, world: int, timeout: float | None = None,
                   poll_s: float = 0.5, token: str | None = None) -> list[int]:
    """Wait until every rank has written its done marker (with this launch's
    `token`, when given); returns the ranks still missing when `timeout` (seconds;
    None = forever) ran out, [] when all are done."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        missing = [r for r in range(world) if not _is_done(run_dir, r, token)]
        if not missing or (deadline is not None and time.monotonic() >= deadline):
            return missing
        time.sleep(poll_s)


def read_records(path: Path) -> list[dict[str, Any]]:
    """Complete JSON lines of a part; a torn last line (a killed rank) is dropped."""
    return jsonl.read(path)


def done_pairs(run_dir: str | Path) -> set[tuple[str, str, int]]:
    """(cell_id, question_id, repeat) already written, in samples.jsonl or in any
    part: what a resumed rank must not run again."""
    run_dir = Path(run_dir)
    pairs = set()
    for path in [run_dir / "samples.jsonl", *sorted(run_dir.glob("samples.part*.jsonl"))]:
        pairs |= {sample_key(s) for s in read_records(path)}
    return pairs


def merge_parts(run_dir: str | Path, world: int,
                cell_order: Sequence[str] | None = None, keep_parts: bool = False) -> int:
    """Merge samples.jsonl (if any, from an earlier resume) and every
    samples.part*.jsonl into samples.jsonl, in cell order, then repeat, then question
    order, one record per (cell, question, repeat) (the first seen wins). Written to a temp
    file and renamed, so a crash leaves the old file and the parts intact.
    Returns the number of samples written.

    cell_order: the cell ids in grid order (config.cells()); defaults to the order
    of manifest.json's "cells", then first appearance."""
    run_dir = Path(run_dir)
    target = run_dir / "samples.jsonl"
    parts = sorted(set(range(world)) | _part_ranks(run_dir))
    records = read_records(target)
    for rank in parts:
        records += read_records(part_path(run_dir, rank))
    questions = _question_order(run_dir)
    cells = {cid: i for i, cid in enumerate(cell_order or _manifest_cells(run_dir))}
    seen_cells: dict[str, int] = {}
    unique: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in records:
        key = sample_key(r)
        if key not in unique:
            unique[key] = r
            seen_cells.setdefault(r["cell_id"], len(seen_cells))

    def order(key: tuple[str, str, int]):
        cell, question, repeat = key
        return (cells.get(cell, len(cells) + seen_cells[cell]), repeat,
                questions.get(question, len(questions)), question)

    ordered = [unique[k] for k in sorted(unique, key=order)]
    tmp = run_dir / ".samples.jsonl.merge"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(map(jsonl.dumps, ordered)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    if not keep_parts:
        for rank in parts:
            part_path(run_dir, rank).unlink(missing_ok=True)
            done_path(run_dir, rank).unlink(missing_ok=True)
    return len(ordered)


def _part_ranks(run_dir: Path) -> set[int]:
    ranks = set()
    for path in run_dir.glob("samples.part*.jsonl"):
        digits = path.name[len("samples.part"):-len(".jsonl")]
        if digits.isdigit():
            ranks.add(int(digits))
    return ranks


def _question_order(run_dir: Path) -> dict[str, int]:
    path = run_dir / "questions.jsonl"
    if not path.is_file():
        return {}
    order: dict[str, int] = {}
    for record in jsonl.read(path):
        order.setdefault(str(record.get("id") if isinstance(record, dict) else record),
                         len(order))
    return order


def _manifest_cells(run_dir: Path) -> list[str]:
    try:
        return list(read_run_file(run_dir / "manifest.json", Manifest).cells)
    except (OSError, InputError):
        return []


# -- agreeing on the run id ---------------------------------------------------------------------

def launch_key(config_hash: str, environ: dict[str, str] | None = None) -> str:
    """A name that every rank of one launch computes alike and another launch does
    not: the config hash, the rendezvous address, the elastic run id, and on a
    single machine the launcher's pid (every rank is its child)."""
    env = os.environ if environ is None else environ
    parts = [config_hash, env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", ""),
             env.get("TORCHELASTIC_RUN_ID", "")]
    world, local_world = env.get("WORLD_SIZE"), env.get("LOCAL_WORLD_SIZE")
    if world is None or world == local_world:  # one machine: same parent process
        parts.append(str(os.getppid()))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def shared_run_id(out_root: str | Path, config_hash: str, make_run_id, rank: int, world: int,
                  timeout: float = 600.0, poll_s: float = 0.2) -> str:
    """The run id every rank uses. EVALPIPE_RUN_ID wins when set; alone (world 1)
    it is `make_run_id()`; otherwise rank 0 calls `make_run_id()` and publishes it
    in out_root/.rendezvous/<launch key>.json, which the other ranks wait for."""
    if os.environ.get(RUN_ID_ENV):
        given = os.environ[RUN_ID_ENV]
        problem = run_name_problem(given)
        if problem:  # it becomes the run directory's name
            raise InputError(problem, field=RUN_ID_ENV, expected="a plain folder name")
        return given
    if world <= 1:
        return make_run_id()
    folder = Path(out_root) / ".rendezvous"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{launch_key(config_hash)}.json"
    if rank == 0:
        run_id = make_run_id()
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"run_id": run_id, "time": time.time()}), encoding="utf-8")
        os.replace(tmp, path)
        return run_id
    # A file older than this process (minus slack for a slow start) is a leftover.
    oldest = _process_start() - 120.0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if float(data.get("time", 0)) >= oldest:
                return data["run_id"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(poll_s)
    raise InfraError(f"rank {rank}: rank 0 did not publish the run id in {path} within "
                     f"{timeout:g} s (set {RUN_ID_ENV} to give every rank the same id)")


def _process_start() -> float:
    try:
        return os.stat(f"/proc/{os.getpid()}").st_ctime
    except OSError:
        return _IMPORTED


_IMPORTED = time.time()


def forget_run_id(out_root: str | Path, config_hash: str) -> None:
    """Rank 0 removes the rendezvous file once the run is merged."""
    path = Path(out_root) / ".rendezvous" / f"{launch_key(config_hash)}.json"
    path.unlink(missing_ok=True)


# -- a run's share --------------------------------------------------------------------------------

Write = Callable[[Iterable[dict[str, Any]]], Any]


@dataclass(frozen=True)
class Shard:
    """This process's share of one run (rank 0 of 1 when it runs alone)."""

    rank: int = 0
    world: int = 1
    token: str | None = None  # the launch key, under data parallelism

    @classmethod
    def from_environment(cls, config_hash: str) -> Shard:
        rank, world = rank_world()
        return cls(rank, world, launch_key(config_hash) if world > 1 else None)

    @property
    def alone(self) -> bool:
        return self.world == 1

    @property
    def helper(self) -> bool:
        """A rank other than 0: it writes its part only; rank 0 writes the rest."""
        return self.rank > 0

    def run_id(self, out_root: Path, config_hash: str, make_run_id: Callable[[], str]) -> str:
        return shared_run_id(out_root, config_hash, make_run_id, self.rank, self.world)

    def refuse_an_earlier_run(self, run_dir: Path) -> None:
        """A new run never appends to an earlier run's directory (a reused
        EVALPIPE_RUN_ID): that is --resume's job. This launch's ranks share the
        directory; an earlier launch's manifest names another launch."""
        manifest = run_dir / "manifest.json"
        if self.alone:
            earlier = run_dir.exists()
        elif not self.helper:
            earlier = manifest.exists()
        else:
            try:
                earlier = read_run_file(manifest, Manifest).launch != self.token
            except (OSError, InputError):  # no manifest yet: rank 0 has not begun
                earlier = False
        if earlier:
            raise InputError(f"run directory {run_dir} exists already: a new run does not "
                             "append to an earlier one", field=RUN_ID_ENV,
                             expected=f"a new {RUN_ID_ENV}, or --resume {run_dir} to continue "
                             "that run")

    def questions(self, items: Sequence[T]) -> list[T]:
        return shard(items, self.rank, self.world)

    def writer(self, run_dir: Path, alone: Write) -> Write:
        """Where this process's samples go: its part file, or `alone` when it is the run."""
        if self.alone:
            return alone
        return lambda samples: append_part(run_dir, self.rank, samples)

    def begin(self, run_dir: Path, manifest: Manifest | None = None) -> None:
        """Before the first sample: cut a torn line off this rank's part (a killed
        rank), and on rank 0 record the launch in the manifest it begins with."""
        if self.alone:
            return
        if manifest is not None:
            manifest.world_size, manifest.launch = self.world, self.token
        run_dir.mkdir(parents=True, exist_ok=True)
        repair_part(run_dir, self.rank)

    def done(self, run_dir: Path, count: int | None = None) -> None:
        """This rank's part is complete."""
        if not self.alone:
            mark_done(run_dir, self.rank, count, token=self.token)

    def merge(self, run_dir: Path, out_root: Path, config_hash: str,
              cell_order: Sequence[str], timeout: float) -> int | None:
        """Rank 0, once its own part is done: wait up to `timeout` seconds for every
        rank's, merge them into samples.jsonl; the samples merged (None alone)."""
        if self.alone:
            return None
        self.done(run_dir)
        missing = wait_for_parts(run_dir, self.world, token=self.token, timeout=timeout)
        if missing:
            raise InfraError(f"ranks {missing} did not finish their share of {run_dir}; "
                             "their parts are kept: continue with --resume")
        merged = merge_parts(run_dir, self.world, cell_order=cell_order)
        forget_run_id(out_root, config_hash)
        return merged

