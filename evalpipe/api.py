"""The public Python API; every CLI command is a thin wrapper over one of these.

    import evalpipe
    result = evalpipe.run("configs/default.yaml", limit=2)
    print(result.table)
    print(evalpipe.report(result.run_dir, "csv"))
    cmp = evalpipe.compare("outputs/run_a", result.run_dir)

`report` and `validate` are implemented in the private evalpipe._report package and
evalpipe._validate module, so that each public name means one thing. Errors are
`evalpipe.errors.EvalpipeError`s (InputError for bad input); nothing here prints
unless given an `echo`, and nothing calls sys.exit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalpipe._report import report
from evalpipe._validate import validate

if TYPE_CHECKING:
    from evalpipe._report.compare import Comparison
    from evalpipe.backends import Backend, ModelEntry
    from evalpipe.config import RunConfig
    from evalpipe.records import Scores

@dataclass(frozen=True)
class RunResult:
    """A finished run (or, on a helper rank of a data-parallel run, its share)."""

    run_dir: Path
    helper_rank: bool = False  # rank > 0: rank 0 merges, scores and writes the table

    @property
    def scores(self) -> Scores:
        """scores.json: per-cell aggregates and every scored sample, read through its
        type (InputError naming the field where it does not fit)."""
        from evalpipe.store import read_scores

        return read_scores(self.run_dir)

    @property
    def table(self) -> str:
        """table.md: the score table `evalpipe run` prints."""
        return (self.run_dir / "table.md").read_text(encoding="utf-8")


def _quiet(_: str) -> None:
    pass


def load(config: str | Path | dict[str, Any] | RunConfig, *, limit: int | None = None,
         models: Sequence[str] | None = None, suites: Sequence[str] | None = None,
         dtype: str | None = None, sets: Iterable[str] = ()) -> RunConfig:
    """A checked RunConfig from a YAML path, a mapping or a RunConfig, with the
    command line's overrides applied (the same path `evalpipe run` takes)."""
    from evalpipe.config import RunConfig, apply_dtype, apply_overrides, load_config, parse_config

    overrides = {"limit": limit, "models": [{"id": m} for m in models] if models else None,
                 "suites": list(suites) if suites else None}
    if isinstance(config, (str, Path)):
        return load_config(config, sets=list(sets), dtype=dtype, **overrides)
    sets = list(sets)
    if isinstance(config, RunConfig) and not (sets or dtype or any(
            v is not None for v in overrides.values())):
        return config  # checked already, and nothing to change
    raw = config.to_dict() if isinstance(config, RunConfig) else dict(config)
    source = config.source if isinstance(config, RunConfig) else "<config>"
    raw.update({k: v for k, v in overrides.items() if v is not None})
    raw = apply_overrides(raw, sets)
    if dtype:
        raw = apply_dtype(raw, dtype)
    return parse_config(raw, source=source)


def run(config: str | Path | dict[str, Any] | RunConfig | None = None, *,
        out: str | Path = "outputs", resume: str | Path | None = None, use_cache: bool = True,
        retry_infra: bool = False, echo: Callable[[str], None] = _quiet,
        progress: bool = False, backends: Callable[[ModelEntry], Backend] | None = None,
        **overrides: Any) -> RunResult:
    """Run a config's grid and score it. `config`: a YAML path, a mapping or a
    RunConfig; `overrides`: limit, models, suites, dtype, sets (as `evalpipe run`).
    With `resume` (a run directory), continue that run with its recorded config; with
    `retry_infra` as well, re-run its infra errors in place. Prints nothing unless
    asked: `echo` receives the run's log lines, `progress=True` draws a bar per cell
    on stderr. `backends` loads the backend of each model entry (default:
    evalpipe.backends.load_backend; a stand-in in tests)."""
    from evalpipe import parallel
    from evalpipe.backends import load_backend
    from evalpipe.config import parse_config
    from evalpipe.errors import InputError
    from evalpipe.runner import execute_run
    from evalpipe.store import RunStore

    if resume is not None:
        given = sorted(k for k, v in overrides.items() if v)
        if given:
            raise InputError("a resumed run keeps its recorded config", field=given[0],
                             expected="no overrides with resume")
        manifest = RunStore(resume).read_manifest()
        cfg = parse_config(manifest.config.as_dict(), source=manifest.config_source or str(resume))
    elif config is None:
        raise TypeError("run() needs a config or resume=")
    else:
        cfg = load(config, **overrides)
    run_dir = execute_run(cfg, Path(out), resume=Path(resume) if resume else None,
                          use_cache=use_cache, echo=echo, retry_infra=retry_infra,
                          progress=progress, backends=backends or load_backend)
    return RunResult(Path(run_dir), helper_rank=parallel.rank_world()[0] > 0)


def score(run_dir: str | Path, *, k: int | None = None) -> Scores:
    """Recompute scores.json and table.md of a run with the current scorer (no model)."""
    from evalpipe.runner import score_run
    from evalpipe.store import RunStore

    store = RunStore(run_dir)
    with store:
        return score_run(store, k=k)


def compare(a: str | Path, b: str | Path, *, threshold: float = 0.02, strict: bool = False,
            resamples: int = 2000, seed: int = 0, allow_partial: bool = False) -> Comparison:
    """Paired comparison of run B against baseline run A; `.regressions` lists what
    the regression gate would fail on. With `strict`, runs that are not the same
    experiment raise CompareRefused, whose `.comparison` is what could be computed."""
    from evalpipe._report.compare import CompareRefused, compare_runs
    from evalpipe._report.load import load_run

    cmp = compare_runs(load_run(a, allow_partial), load_run(b, allow_partial),
                       threshold=threshold, strict=strict, resamples=resamples, seed=seed)
    if cmp.refused:
        raise CompareRefused(cmp)
    return cmp


__all__ = ["RunResult", "compare", "load", "report", "run", "score", "validate"]
