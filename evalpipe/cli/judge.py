"""evalpipe judge: grade a run's free-form answers with a model, and measure the judge."""

from __future__ import annotations

import json

import click

from evalpipe.cli.common import echo, handle_errors, write_output


def _settings(judge_file: str | None, model: str | None, run_dir: str | None):
    """The judge section: from --judge FILE (a YAML holding `judge:`), --model ID, or the
    run's own config."""
    from evalpipe.config import parse_config
    from evalpipe.errors import InputError

    section, source = None, "<config>"
    if judge_file:
        import yaml

        with open(judge_file, encoding="utf-8") as f:
            raw = yaml.safe_load(f.read()) or {}
        section, source = (raw.get("judge", raw) if isinstance(raw, dict) else raw), judge_file
    elif model:
        section = {"model": model}
    elif run_dir:
        from evalpipe.store import RunStore

        section = RunStore(run_dir).read_manifest().config.judge
        source = f"{run_dir}/manifest.json"
    if section:
        return parse_config({"questions": ["-"], "judge": section}, source=source).judge
    raise InputError("no judge given", field="--judge",
                     expected="--judge FILE, --model ID, or a run whose config has `judge:`")


@click.command()
@click.argument("run_dir", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--judge", "judge_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML file with a `judge:` section (model entry, use, max_new_tokens).")
@click.option("--model", help="A model id (alias, folder or .gguf) for the judge.")
@click.option("--use", type=click.Choice(["undecided", "all"]), default=None,
              help="Judge where the rules abstain (default) or every free-form answer.")
@click.option("--agreement", is_flag=True,
              help="Measure the judge on a labelled set: Cohen's kappa and raw agreement, "
                   "with the rules' beside it (written to RUN_DIR/judge.json with a run).")
@click.option("--labels", type=click.Path(exists=True, dir_okay=False),
              help="The labelled set (default evalpipe/scoring/labels/grading_labels.jsonl).")
@click.option("--split", help="Only the labelled replies of this split (a row's `split`, e.g. "
                             "dev or frozen).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N labelled replies.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Write the measurement (judge.json's content, every item's judgement "
                   "included) to this file.")
@handle_errors
def judge(run_dir, judge_file, model, use, agreement, labels, split, limit, out):
    """Grade RUN_DIR's free-form answers with a model-graded judge (where the rules
    abstain, or all with --use all), record judgements.jsonl and re-score the run; with
    --agreement, print the judge's agreement with a labelled set next to the rules'.

    Exit 1 when every request to the judge failed, 4 when it answered but gave no
    verdict on any reply it was asked about (judgements, scores and judge.json are
    written first); 0 when at least one verdict came back, or nothing needed one."""
    from evalpipe.cache import GenerationCache
    from evalpipe.errors import InputError
    from evalpipe.judge import Judge, could_not_judge, judge_agreement, judge_run, summary
    from evalpipe.runner import agreement_line, score_run
    from evalpipe.scoring.agreement import GRADING as LABELS
    from evalpipe.scoring.agreement import load_labels
    from evalpipe.store import RunStore

    if run_dir is None and not agreement:
        raise InputError("nothing to do", field="RUN_DIR",
                         expected="a run directory, or --agreement")
    settings = _settings(judge_file, model, run_dir)
    cache = GenerationCache()
    grader = Judge(settings.model, settings.max_new_tokens, cache)
    failures = []
    if run_dir is not None:
        counts = judge_run(run_dir, grader, use or settings.use, echo=echo)
        score_run(RunStore(run_dir))
        echo(f"judged {counts['judged']} answers ({summary(counts)}); wrote "
             f"{run_dir}/judgements.jsonl and re-scored")
        failures.append(could_not_judge(counts, run_dir))
    if agreement:
        path = labels or settings.labels or str(LABELS)
        # a row that repeats an earlier sample whole (`duplicate_of`) would count twice
        rows = [r for r in load_labels(path) if not r.get("duplicate_of")
                and (split is None or r.get("split") == split)][:limit]
        if not rows:
            raise InputError("no labelled replies to measure on", file=path, field="split",
                             expected=f"rows whose split is {split!r}" if split else
                             "a labelled reply")
        measured = judge_agreement(grader, rows)
        echo(agreement_line(measured))
        echo(f"the judge on {measured['labels']} labelled replies: "
             f"{summary(measured['judge'])}")
        record = {**measured, "labels_path": path, "split": split}
        if run_dir is not None:
            RunStore(run_dir).write_json("judge.json", record)
            echo(f"wrote {run_dir}/judge.json")
        if out:
            write_output(json.dumps(record, ensure_ascii=False, indent=1) + "\n", out)
        failures.append(could_not_judge(measured["judge"], path))
    failure = next((f for f in failures if f is not None), None)
    if failure is not None:
        raise failure
