"""A run from config to scores: its plan (runplan.RunPlan), the engine, the store, scoring."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from evalpipe import parallel
from evalpipe.backends import Backend, ModelEntry, load_backend
from evalpipe.cache import GenerationCache
from evalpipe.config import Cell, JudgeSection, RunConfig
from evalpipe.engine import CellRuntime, Engine
from evalpipe.errors import EvalpipeError, InputError, Interrupted
from evalpipe.health import first_turn_tokens, ignored_tools
from evalpipe.identity import sample_key
from evalpipe.probe import probe_questions, run_probe
from evalpipe.records import (
    SCHEMA_VERSION,
    CellRecord,
    CellSettings,
    Manifest,
    RecordedConfig,
    Repeats,
    Scores,
)
from evalpipe.runplan import ModelCells, RunPlan
from evalpipe.store import (
    RunStore,
    git_commit,
    machine,
    new_run_id,
    now,
    package_versions,
    storage,
)

# Loads the backend of a model entry: evalpipe.backends.load_backend, or a test's stand-in.
BackendFactory = Callable[[ModelEntry], Backend]


def _silent(_: str) -> None:
    pass


def execute_run(config: RunConfig, out_root: Path | None = None, *, resume: Path | None = None,
                use_cache: bool = True, echo: Callable[[str], None] = _silent,
                engine: Engine | None = None, retry_infra: bool = False,
                progress: bool = False, backends: BackendFactory = load_backend) -> Path:
    """Run every cell of the grid and score it; returns the run directory.

    With `resume`, continue a stopped run in place: samples already written are
    kept (a torn last line is cut), and only the missing cell x question pairs run.
    With `retry_infra` as well, the samples that failed for infrastructure reasons
    run again and replace their first attempt in place. Nothing is printed: `echo`
    receives the log lines, and `progress` shows a bar per cell on stderr. `backends`
    loads each model's backend (one model at a time).
    """
    run = Run(config, Path(out_root or "outputs"), resume=resume, retry_infra=retry_infra,
              echo=echo, progress=progress, backends=backends)
    cache = GenerationCache() if use_cache else None
    try:
        return run.execute(engine or Engine(cache.session if cache else None), cache)
    finally:
        if cache is not None:
            cache.close()


class _StopFlag:
    """SIGINT / SIGTERM / SIGHUP while a run generates: the first starts no new
    conversation or turn (requests in flight come back, a local model stops at its next
    decode step, conversations that ended are written), a second one stops at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.signum: int | None = None
        self._saved: dict[int, Any] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # signals reach only it
            for signum in self.SIGNALS:
                self._saved[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise Interrupted(f"{signal.Signals(signum).name} again: stopped at once; continue "
                              "with --resume RUN_DIR", signum)
        self.signum = signum
        print(f"{signal.Signals(signum).name}: no new conversations or turns; finishing the "
              "requests in flight (send it again to stop at once)", file=sys.stderr, flush=True)

    def __bool__(self) -> bool:
        return self.signum is not None


class Run:
    """One run of a config, from its directory to its scores.

    Where samples go is decided once, here: samples.jsonl when alone, this rank's
    part under data parallelism, samples.retry.jsonl while infra errors are re-run.
    The manifest's `status` says where the run stands: running, finished,
    interrupted or failed; outputs/latest moves only to a finished run.
    """

    def __init__(self, config: RunConfig, out_root: Path, *, resume: Path | None = None,
                 retry_infra: bool = False, echo: Callable[[str], None] = _silent,
                 progress: bool = False, backends: BackendFactory = load_backend):
        # Absolute from the start, so that no later change of folder moves what the run
        # writes or reads at its end (the config records its paths as written: its hash).
        out_root, resume = Path(os.path.abspath(out_root)), resume and Path(os.path.abspath(resume))
        self.config, self.out_root, self.echo, self.progress = config, out_root, echo, progress
        self.backends = backends
        judge = config.judge
        self.judge = judge and judge.model_copy(
            update={"labels": judge.labels and os.path.abspath(judge.labels)})
        self.shard = parallel.Shard.from_environment(config.hash())
        if retry_infra and resume is None:
            raise InputError("--retry-infra re-runs the infra errors of an earlier run",
                             field="--retry-infra", expected="--resume RUN_DIR with it")
        if retry_infra and not self.shard.alone:
            raise InputError("--retry-infra runs in one process", field="WORLD_SIZE",
                             expected="a plain `evalpipe run --resume RUN_DIR --retry-infra`")
        self.retry_infra = retry_infra
        self.begun = False
        self.earlier: Manifest | None = None  # the manifest of the run resumed
        if resume is not None:
            self.store = RunStore(resume)
            self.earlier = self.store.read_manifest()
            self.run_id = self.earlier.run_id
            self.plan = RunPlan.of(config, list(self.store.questions().values()))
        else:
            # Bad input fails here, before anything that looks like a run exists.
            self.plan = RunPlan.of(config)
            self.run_id = self.shard.run_id(out_root, config.hash(),
                                            lambda: new_run_id(config.name, config.hash()))
            self.store = RunStore(out_root / self.run_id)
            self.shard.refuse_an_earlier_run(self.store.path)
        self.cells, self.questions = self.plan.cells, self.plan.questions
        self.write = self.shard.writer(self.store.path, self.store.append_retries
                                       if retry_infra else self.store.append_samples)

    def execute(self, engine: Engine, cache: GenerationCache | None) -> Path:
        if self.shard.helper:
            self._execute_helper(engine)
            return self.store.path
        with self.store:
            try:
                self._begin()
                with _StopFlag() as stop:
                    self._generate(engine, stop)
                    if stop:
                        raise Interrupted(f"{signal.Signals(stop.signum).name}: stopped; the "
                                          "samples that finished are written: continue with "
                                          f"--resume {self.store.path}", stop.signum)
                    self._finish(cache)  # a signal now lets the short finish complete
            except Interrupted as exc:
                self._end("interrupted", exc, str(exc))
                raise
            except BaseException as exc:
                self._end("failed", exc, f"{type(exc).__name__}: {exc}")
                raise
        return self.store.path

    # -- rank 0 ----------------------------------------------------------------------------
    def _begin(self) -> None:
        self.done: set[tuple[str, str, int]] = set()
        if self.earlier is not None:
            self.store.fold_retries()  # a retry that was stopped keeps what it re-ran
            self.store.read_samples(repair=True)
            self.done = parallel.done_pairs(self.store.path)  # samples.jsonl and any part
        self.retrying: Counter[str] = Counter()
        self.retry_pairs: set[tuple[str, str, int]] = set()
        if self.retry_infra:
            self.retry_pairs, self.retrying = self._infra_samples()
            self.done -= self.retry_pairs
        seeds = self.plan.seeds
        manifest = self.earlier or self._manifest()
        manifest.repeats = Repeats(requested=self.config.repeats, seeds=seeds)
        self.shard.begin(self.store.path, manifest)
        self.store.begin(manifest, resumed=self.earlier is not None)
        self.begun = True
        if self.earlier is None:
            self.store.write_questions(self.questions)
        if self.config.repeats > len(seeds):
            self.echo(f"repeats: {self.config.repeats} requested, but decoding is greedy "
                      "(temperature 0): every repeat would give the same replies, so each "
                      "question runs once; set generation.temperature > 0 to sample")
        done = len(self.done)
        self.echo(f"run {self.run_id}: {len(self.cells)} cells x {len(self.questions)} questions "
                  + (f"x {len(seeds)} repeats " if len(seeds) > 1 else "")
                  + f"-> {self.store.path}"
                  + (f" (resuming: {done} samples already written)" if done else "")
                  + (f" (retrying {len(self.retry_pairs)} infra errors)" if self.retry_infra
                     else ""))

    def _infra_samples(self) -> tuple[set[tuple[str, str, int]], Counter[str]]:
        """The (cell, question, repeat) samples whose category is infra_error (the scorer's own
        rule), and why they failed: the first line of each error, counted."""
        from evalpipe.scoring.score import score_sample

        questions = {q.id: q for q in self.questions}
        pairs: set[tuple[str, str, int]] = set()
        causes: Counter[str] = Counter()
        for s in self.store.iter_samples():
            q = questions.get(s["question_id"])
            if q is not None and score_sample(s, q)["infra"]:
                pairs.add(sample_key(s))
                causes[(s.get("error") or "unknown").splitlines()[0][:200]] += 1
        return pairs, causes

    def _manifest(self) -> Manifest:
        """A new run's manifest: what runs, where, with what."""
        corpus = self.plan.corpus
        return Manifest(
            run_id=self.run_id, schema_version=SCHEMA_VERSION, status="running",
            config=RecordedConfig.model_validate(self.config.to_dict()),
            config_source=self.config.source, config_hash=self.config.hash(),
            started=now(), versions=package_versions(), git_commit=git_commit(),
            machine=machine(), corpus_version=corpus.version if corpus else None,
            questions=len(self.questions), cells={})

    def _record_cell(self, cell: Cell, runtime: CellRuntime, facts: dict,
                     served: dict | None) -> None:
        self.store.record_cell(cell.id, CellRecord(
            fingerprint=runtime.fingerprint, facets=cell.facets(),
            settings=CellSettings.model_validate(runtime.settings), model=facts,
            **({"served": served} if served is not None else {})))

    def _generate(self, engine: Engine, stop: _StopFlag) -> int:
        return self._run_cells(engine, stop, self.done, on_cell=self._record_cell,
                               after_cell=self._probe if self.config.latency_probe else None,
                               progress=self.progress, warn=self._warn)

    def _warn(self, message: str) -> None:
        """A warning about the run: in its log and in the manifest (reports show it)."""
        self.echo(f"warning: {message}")
        self.store.warn(message)

    def _probe(self, runtime: CellRuntime) -> None:
        """The latency probe of one cell (evalpipe.probe), once per run: probe.jsonl."""
        probed = {r["cell_id"] for r in self.store.iter_records(self.store.probe_path)}
        if runtime.cell_id in probed:
            return  # probed before this run was resumed
        questions = probe_questions(self.questions, self.config.latency_probe)
        self.store.append_probe(run_probe(runtime, questions, self.run_id))

    def _finish(self, cache: GenerationCache | None) -> None:
        store = self.store
        retry = cache_counts = judged = None  # what the last steps found, for the manifest
        merged = self.shard.merge(store.path, self.out_root, self.config.hash(),
                                  [c.id for c in self.cells], timeout=float(os.environ.get(
                                      "EVALPIPE_PART_TIMEOUT", str(24 * 3600))))
        if merged is not None:
            self.echo(f"merged {self.shard.world} parts: {merged} samples")
        else:  # the cells of a model ran together: their samples in the grid's order
            with storage(store.samples_path):
                parallel.merge_parts(store.path, 1, cell_order=[c.id for c in self.cells])
        if self.retry_infra:
            retried = store.fold_retries()
            still = len(self._infra_samples()[0])
            retry = {"time": now(), "retried": retried, "first_causes": dict(self.retrying),
                     "still_infra": still}
            self.echo(f"retried {retried} infra errors; {still} still failed")
        if cache is not None:
            cache_counts = {"hits": cache.hits, "misses": cache.misses, "path": str(cache.path),
                            **({"problem": cache.problem} if cache.problem else {})}
            self.echo(f"generation cache: {cache.hits} replies reused, {cache.misses} generated")
        if self.judge is not None:
            judged = run_judge(store, self.judge, cache, self.echo)
        scores = score_run(store)
        # Each sample once: the groups count it under its suite and again under "all".
        infra = sum(bool(s.get("infra")) for s in scores["samples"])
        if infra:
            self.echo(f"{infra} samples are infra errors (backend, timeout or harness): "
                      f"re-run them with `evalpipe run --resume {store.path} --retry-infra`")
        store.finish(retry=retry, cache=cache_counts, judge=judged)
        store.release()
        _point_latest(store.path)

    def _end(self, status: str, exc: BaseException, error: str) -> None:
        """Say in the manifest how the run ended, with the space kept for it on a full
        disk. If even that fails, an EvalpipeError's one line says so. A resume that
        failed before it began leaves the run's manifest as it was."""
        if not self.begun:
            return
        why = self.store.end(status, error)
        if why is not None and isinstance(exc, EvalpipeError):
            message = (f"{exc}; the manifest could not be marked {status} either ({why}): "
                       "it still says running")
            exc.args = (message,)

    # -- helper ranks ----------------------------------------------------------------------
    def _execute_helper(self, engine: Engine) -> None:
        """A rank other than 0: its round-robin share of every cell into
        samples.part{rank}.jsonl, then a done marker. Rank 0 writes the manifest and
        questions.jsonl, merges the parts and scores."""
        self.shard.begin(self.store.path)
        with _StopFlag() as stop:
            count = self._run_cells(engine, stop, parallel.done_pairs(self.store.path))
        if stop:
            raise Interrupted(f"rank {self.shard.rank}: {signal.Signals(stop.signum).name}",
                              stop.signum)
        self.shard.done(self.store.path, count)

    # -- every rank ------------------------------------------------------------------------
    def _run_cells(self, engine: Engine, stop: _StopFlag, done: set[tuple[str, str, int]], *,
                   on_cell: Callable[[Cell, CellRuntime, dict, dict | None], None] | None = None,
                   after_cell: Callable[[CellRuntime], None] | None = None,
                   progress: bool = False, warn: Callable[[str], None] | None = None) -> int:
        """Generate every (cell, question, repeat) of this shard not yet `done`, one model
        loaded at a time, the repeats one after another (each with its own seed); the cells
        of a model share one generation session, so every decode step serves all their
        rows. Each finished group of one cell's samples is written (the cells' groups
        interleaved, each cell's in question order; _finish puts the file in grid order).
        Returns the count written. Once `stop` is set no conversation or turn starts;
        those in flight finish and are written. After each model, `warn` hears of a cell
        whose backend seems to have ignored its tools (health.py)."""
        mine, seeds = self.shard.questions(self.questions), self.plan.seeds
        count = 0
        for group in self.plan.models():
            todo = {(c.id, r): [q for q in mine if (c.id, q.id, r) not in done]
                    for c in group.cells for r in range(len(seeds))}
            if not any(todo.values()) or stop:
                continue
            backend = self.backends(group.model)
            if (line := backend.log_line()) is not None:  # which path it takes, and why
                self.echo(line)
            facts = backend.describe()
            runtimes = [self.plan.runtime(cell, backend, facts) for cell in group.cells]
            if on_cell is not None:
                served = backend.served_identity()
                for cell, runtime in zip(group.cells, runtimes):
                    on_cell(cell, runtime, facts, served)
            tool_use = _ToolUse(group, runtimes)
            jobs: list = []
            for r, seed in enumerate(seeds):
                # A repeat differs from the first only in its seed (and its number). The
                # engine draws questions as conversations end: lazy, stoppable lists.
                jobs = [(dataclasses.replace(runtime, repeat=r, generation=runtime.generation
                                             .model_copy(update={"seed": seed})),
                         itertools.takewhile(lambda q: not stop, left))
                        for runtime in runtimes if (left := todo[(runtime.cell_id, r)])]
                if not jobs or stop:
                    continue
                bars = [(job.cell_id if len(seeds) == 1 else
                         f"{job.cell_id} #{r + 1}/{len(seeds)}",
                         len(mine) - len(todo[(job.cell_id, r)])) for job, _ in jobs]
                with _progress_bars(bars, len(mine), progress) as advance:
                    for samples in engine.run_cells(jobs, self.run_id, stop=lambda: bool(stop),
                                                    progress=advance):
                        records = [s.to_dict() for s in samples]
                        self.write(records)
                        count += len(samples)
                        tool_use.saw(records)
            if after_cell is not None and not stop:  # the model is still loaded
                for runtime in runtimes:
                    after_cell(runtime)
            if warn is not None:
                for problem in tool_use.ignored():
                    warn(problem)
            # Free this model before the next one loads, so that two are never resident
            # at once (the sizes job's peak memory); its packed layers hold cycles.
            del backend, runtimes, tool_use, jobs
            gc.collect()
        return count


BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} samples [{elapsed}]"


@contextlib.contextmanager
def _progress_bars(bars: list[tuple[str, int]], total: int, shown: bool
                   ) -> Iterator[Callable[[int, int], None]]:
    """One bar per (label, samples done already) on stderr: samples done and time spent,
    no estimate (batched conversations end in waves, so a rate over the first says
    nothing). Yields what the engine calls as conversations end: (job, how many)."""
    with contextlib.ExitStack() as stack:
        drawn = [stack.enter_context(tqdm(total=total, initial=initial, desc=label,
                                          position=i, bar_format=BAR_FORMAT,
                                          dynamic_ncols=True, disable=not shown))
                 for i, (label, initial) in enumerate(bars)]

        def advance(job: int, ended: int) -> None:
            drawn[job].update(ended)

        yield advance


class _ToolUse:
    """Whether one model's backend seems to ignore the tools it is offered: the first
    prompt's tokens of each question in a cell that offers tools, against those of the
    cell of the same retrieval that offers none (health.ignored_tools), when the run has
    such a cell."""

    def __init__(self, group: ModelCells, runtimes: list[CellRuntime]):
        self.cells = group.cells
        self.offered = {rt.cell_id: rt.toolset.schemas() for rt in runtimes}
        self.first_tokens: dict[str, dict[str, int]] = {}  # cell -> question -> tokens

    def saw(self, records: list[dict[str, Any]]) -> None:
        """Samples of one cell, as written."""
        seen = self.first_tokens.setdefault(records[0]["cell_id"], {})
        for qid, tokens in first_turn_tokens(records).items():
            seen.setdefault(qid, tokens)

    def ignored(self) -> list[str]:
        """One line for each cell whose tools seem to have been ignored."""
        def retrieval(cell: Cell) -> str:
            return json.dumps(cell.retrieval.record(), sort_keys=True)

        plain = {retrieval(c): c.id for c in self.cells if not self.offered.get(c.id)}
        out = []
        for cell in self.cells:
            if self.offered.get(cell.id) and self.first_tokens.get(cell.id):
                base = plain.get(retrieval(cell))
                problem = ignored_tools(cell.id, self.first_tokens[cell.id],
                                        self.offered[cell.id],
                                        self.first_tokens.get(base) if base else None)
                if problem:
                    out.append(problem)
        return out


def _point_latest(run_dir: Path) -> None:
    """outputs/latest -> the newest finished run (a relative symlink, replaced atomically)."""
    run_dir = run_dir.resolve()  # resuming through the pointer itself must not loop it
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(run_dir.name)
        os.replace(tmp, link)
    except OSError:
        pass  # a file system without symlinks keeps no pointer; the run is unaffected


def run_judge(store: RunStore, settings: JudgeSection, cache: GenerationCache | None,
              echo: Callable[[str], None] = print) -> dict[str, Any]:
    """The config's judge over a run (evalpipe.judge): judgements.jsonl, and with
    `agreement: true` its measured agreement with the labelled set in judge.json.
    Returns what the manifest records."""
    from evalpipe.judge import Judge, judge_agreement, judge_run
    from evalpipe.scoring.agreement import GRADING as LABELS
    from evalpipe.scoring.agreement import load_labels

    judge = Judge(settings.model, settings.max_new_tokens, cache)
    summary: dict[str, Any] = {"model": settings.model.record(), "use": settings.use,
                               **judge_run(store.path, judge, settings.use, echo)}
    if settings.agreement:
        labels = settings.labels or str(LABELS)
        measured = judge_agreement(judge, load_labels(labels))
        store.write_json("judge.json", {**measured, "labels_path": labels})
        summary["agreement"] = {k: measured[k] for k in ("judge", "rules")}
        echo(agreement_line(measured))
    return summary


def agreement_line(measured: dict[str, Any]) -> str:
    """One line: the judge's and the rules' agreement with the labelled set."""
    def part(name: str, row: dict[str, Any]) -> str:
        if not row["n"]:
            return f"{name}: no verdicts"
        kappa = "n/a" if row["kappa"] is None else f"{row['kappa']:.2f}"
        return (f"{name}: {row['raw_agreement']:.1%} raw, kappa {kappa} on "
                f"{row['n']}/{row['of']} decided")
    return (f"judge agreement with {measured['labels']} labelled replies: "
            f"{part(measured['judge_model'], measured['judge'])}; "
            f"{part('rules', measured['rules'])}")


def score_run(store: RunStore, k: int | None = None) -> Scores:
    """(Re)compute scores.json and table.md from samples.jsonl and questions.jsonl."""
    from evalpipe._report.tables import score_table
    from evalpipe.scoring.run import score_records

    # Samples stream from the file: a long run's raw records are never all in memory.
    scores = score_records(store.read_manifest(), store.questions(),
                           store.iter_samples(), k=k, source=str(store.samples_path),
                           judgements=store.read_judgements())
    store.write_json("scores.json", scores)
    store.write_text("table.md", score_table(scores))
    return scores
