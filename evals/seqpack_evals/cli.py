"""``seqpack eval``: build the eval dataset, run an agent on it, score the runs, write a benchmark page."""

from __future__ import annotations

import argparse
import sys

from seqpack.faces.cli._output import add_json_flag, print_json, table

NAME = "eval"
HELP = "skill evals: build the task set, run an agent (with or without the skill), score, report"


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the ``eval`` subcommands."""
    sub = p.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", parser_class=type(p))

    r = sub.add_parser("run", help="run an agent command on each task in a fresh working directory")
    r.add_argument("--agent-cmd", required=True,
                   help="agent command line (split like a shell would, never run by one); the prompt goes to stdin "
                        "and replaces {prompt}; {workdir}, {skill_dir} and {nonce_seed} are filled too")
    mode = r.add_mutually_exclusive_group(required=True)
    mode.add_argument("--with-skill", dest="mode", action="store_const", const="skill",
                      help="install the skill into .claude/skills and .agents/skills of each working directory")
    mode.add_argument("--baseline", dest="mode", action="store_const", const="baseline",
                      help="run without the skill (the comparison run)")
    r.add_argument("--out", required=True, help="run directory to create (must be new or empty)")
    r.add_argument("--tasks", type=_csv, default=None, help="comma-separated task ids (default: all)")
    r.add_argument("--bucket", type=_csv, default=None,
                   help="only these buckets (explicit,implicit,contextual,near_miss)")
    r.add_argument("--timeout", type=float, default=600.0,
                   help="seconds per task before the agent is killed (default 600)")
    r.add_argument("--skill-dir", default=None, help="the skill folder (default: skills/megatron-sequence-packing)")
    r.add_argument("--tasks-file", default=None, help="tasks.json to use (default: the checkout's evals/tasks.json)")
    r.add_argument("--seed", type=int, default=0, help="seed of the per-task canary values (default 0)")
    _sandbox_arguments(r)
    add_json_flag(r)

    bn = sub.add_parser("bench", help="paired repeated runs with and without the skill; writes OUT/benchmark.json")
    bn.add_argument("--agent-cmd", required=True, help="agent command line, as for eval run")
    bn.add_argument("--out", required=True, help="benchmark directory to create (must be new or empty)")
    bn.add_argument("--repeats", type=int, default=3, help="rounds of paired runs (at least 3; default 3)")
    bn.add_argument("--tasks", type=_csv, default=None, help="comma-separated task ids (default: all)")
    bn.add_argument("--bucket", type=_csv, default=None, help="only these buckets")
    bn.add_argument("--timeout", type=float, default=600.0, help="seconds per task (default 600)")
    bn.add_argument("--skill-dir", default=None, help="the skill folder (default: skills/megatron-sequence-packing)")
    bn.add_argument("--tasks-file", default=None, help="the answer key (default: the checkout's evals/tasks.json)")
    bn.add_argument("--seed", type=int, default=0, help="seed of the canary values (default 0)")
    bn.add_argument("--skip-outcome", action="store_true",
                    help="score without the outcome tasks that need the upstream lane (see eval score)")
    _sandbox_arguments(bn)
    add_json_flag(bn)

    s = sub.add_parser("score", help="score the transcripts of a run directory; writes RUN_DIR/scores.json")
    s.add_argument("run_dir", help="a directory written by seqpack eval run")
    s.add_argument("--judge-cmd", default=None,
                   help="optional judge: gets the task and answer as JSON on stdin, prints JSON scores")
    s.add_argument("--judge-timeout", type=float, default=120.0, help="seconds per judge call (default 120)")
    s.add_argument("--tasks-file", default=None,
                   help="the answer key (default: the tasks.json the run recorded in run.json)")
    s.add_argument("--skip-outcome", action="store_true",
                   help="leave the outcome tasks that need the upstream lane ungraded and out of every score (without "
                        "it a missing lane is an error); the report says how many were skipped")
    add_json_flag(s)

    rep = sub.add_parser("report", help="write a BENCHMARK-style markdown page from scored runs")
    rep.add_argument("run_dir", help="the scored with-skill run")
    rep.add_argument("--baseline", default=None, help="a scored baseline run, for the uplift columns")
    rep.add_argument("--out", required=True, help="markdown file to write (e.g. BENCHMARK.md); an existing file is "
                                                  "replaced only with --overwrite and only when eval report wrote it")
    rep.add_argument("--overwrite", action="store_true", help="replace a page eval report wrote before")
    rep.add_argument("--title", default=None, help="page title")
    rep.add_argument("--live-slot", action="store_true",
                     help="add an empty 'live agent runs' table (for a page built from reference runs)")
    add_json_flag(rep)

    b = sub.add_parser("build", help="regenerate evals/tasks.json and evals/files from the code")
    b.add_argument("--evals-dir", default=None, help="target folder (default: the checkout's evals/)")
    b.add_argument("--check", action="store_true",
                   help="only check that the committed files are current (exit 1 if not)")
    add_json_flag(b)

    ex = sub.add_parser("export", help="write the tasks in the plain agentskills.io shape (evals.json + files/)")
    ex.add_argument("--out", required=True, help="folder to write, e.g. skills/megatron-sequence-packing/evals")
    ex.add_argument("--bucket", type=_csv, default=None, help="only these buckets")
    ex.add_argument("--tasks-file", default=None, help="tasks.json to read (default: the checkout's evals/tasks.json)")
    add_json_flag(ex)

    adv = sub.add_parser("adversarial", help="score adversarial answers (empty, stuffing, wrong, paraphrased, "
                                             "partial, right with a dangerous extra) and print the tables")
    adv.add_argument("--tasks-file", default=None, help="tasks.json to read (default: the checkout's evals/tasks.json)")
    adv.add_argument("--answers", default=None,
                     help="hand-written answers (default: evals/adversarial.json next to the task set)")
    add_json_flag(adv)

    env = sub.add_parser("env", help="make the product environment the sandboxed agents use (the seqpack wheel in a "
                                     "new virtual environment); eval run --product-env reuses it")
    env.add_argument("--out", required=True, help="folder to create")
    env.add_argument("--wheel", default=None, help="a built seqpack wheel (default: build one from this checkout)")
    add_json_flag(env)

    ls = sub.add_parser("list", help="list the tasks")
    ls.add_argument("--bucket", type=_csv, default=None, help="only these buckets")
    ls.add_argument("--tasks-file", default=None, help="tasks.json to read (default: the checkout's evals/tasks.json)")
    add_json_flag(ls)


def _sandbox_arguments(p: argparse.ArgumentParser) -> None:
    """The options that say how the agents are confined (:mod:`seqpack_evals.sandbox`)."""
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the agents WITHOUT the bubblewrap sandbox (debugging only: they can read the run and "
                        "the answer key; the run records it and every report prints it)")
    p.add_argument("--no-network", action="store_true", help="no network inside the sandbox (default: on, for "
                                                             "hosted agents' APIs)")
    p.add_argument("--sandbox-ro", action="append", default=[], metavar="PATH",
                   help="also let the agent read PATH (its own program, say); recorded in the run (repeatable)")
    p.add_argument("--product-env", default=None, help="a product environment made by seqpack eval env (default: "
                                                       "make one for the run from --wheel or this checkout)")
    p.add_argument("--wheel", default=None, help="the seqpack wheel to install for the agents (default: built from "
                                                 "this checkout)")
    p.add_argument("--work-root", default=None, help="where the working directories are made (default: a new "
                                                     "temporary folder; never inside --out)")
    p.add_argument("--keep-workdirs", action="store_true", help="leave the working directories after the run")


def _run_options(args: argparse.Namespace):
    from seqpack_evals.runner import RunOptions

    return RunOptions(sandbox=not args.no_sandbox, network=not args.no_network, read_only=args.sandbox_ro,
                      product_env=args.product_env, wheel=args.wheel, work_root=args.work_root,
                      keep_workdirs=args.keep_workdirs)


def _progress(i: int, n: int, task_id: str) -> None:
    if i < n:
        print(f"[{i + 1}/{n}] {task_id}", file=sys.stderr, flush=True)


def _seconds(name: str, value: float) -> float:
    from seqpack.core.arguments import positive_float

    return positive_float(name, value, maximum=7 * 86400.0, field=name.lstrip("-").replace("-", "_"))


def _run(args: argparse.Namespace) -> int:
    from seqpack_evals.runner import run_eval
    from seqpack_evals.tasks import load_tasks

    _seconds("--timeout", args.timeout)

    dataset = load_tasks(args.tasks_file)
    tasks = dataset.select(args.tasks, args.bucket)
    summary = run_eval(dataset, tasks, args.agent_cmd, args.out, mode=args.mode, timeout=args.timeout,
                       skill_dir=args.skill_dir, seed=args.seed, progress=None if args.json else _progress,
                       options=_run_options(args))
    if args.json:
        print_json(summary.to_dict())
        return 0
    where = "in the bubblewrap sandbox" if summary.sandbox.get("enabled") else "WITHOUT the sandbox (--no-sandbox)"
    print(f"ran {summary.tasks} task(s) ({summary.mode}, {where}) into {summary.run_dir}: {summary.completed} "
          f"finished, {len(summary.timed_out)} timed out, {len(summary.failed)} exited non-zero")
    for w in summary.warnings:
        print(f"warning: {w}")
    print(f"next: seqpack eval score {summary.run_dir}")
    return 0


def _score(args: argparse.Namespace) -> int:
    from seqpack_evals.scoring import DIMENSIONS, score_run

    _seconds("--judge-timeout", args.judge_timeout)

    result = score_run(args.run_dir, judge_cmd=args.judge_cmd, judge_timeout=args.judge_timeout,
                       tasks_file=args.tasks_file, skip_outcome=args.skip_outcome)
    s = result.summary
    if args.json:
        print_json(result.to_dict())
        return 0
    rows = [["overall", f"{s['overall']:.1f}%"]] + [[d, f"{s['dimensions'][d]:.1f}%"] for d in DIMENSIONS]
    print(f"{result.run.get('mode')} run, {s['tasks']} task(s), {s['passed']} passed"
          + (f"; {len(result.skipped_outcome)} outcome task(s) skipped (--skip-outcome)" if result.skipped_outcome
             else ""))
    print(table(["dimension", "score"], rows))
    print(f"wrote {args.run_dir}/scores.json")
    return 0


def _report(args: argparse.Namespace) -> int:
    from seqpack_evals.report import write_report

    result, reasons = write_report(args.run_dir, args.out, args.baseline, title=args.title,
                                   live_slot=args.live_slot, overwrite=args.overwrite)
    if args.json:
        print_json({"out": args.out, "verdict": result, "reasons": reasons})
    else:
        print(f"wrote {args.out}: verdict {result} ({'; '.join(reasons)})")
    return 0


def _build(args: argparse.Namespace) -> int:
    from seqpack_evals.dataset import diff_dataset, write_dataset

    if args.check:
        stale = diff_dataset(args.evals_dir)
        if args.json:
            print_json({"up_to_date": not stale, "stale": stale})
        elif stale:
            print("stale (rebuild with: seqpack eval build):\n" + "\n".join(f"  {p}" for p in stale))
        else:
            print("evals are up to date with the code")
        return 1 if stale else 0
    dataset = write_dataset(args.evals_dir)
    counts = {}
    for t in dataset.tasks:
        counts[t.bucket] = counts.get(t.bucket, 0) + 1
    if args.json:
        print_json({"tasks": len(dataset.tasks), "by_bucket": counts, "evals_dir": str(dataset.root)})
    else:
        print(f"wrote {len(dataset.tasks)} tasks to {dataset.root}/tasks.json "
              f"({', '.join(f'{k} {v}' for k, v in counts.items())})")
    return 0


def _list(args: argparse.Namespace) -> int:
    from seqpack_evals.tasks import load_tasks

    tasks = load_tasks(args.tasks_file).select(None, args.bucket)
    if args.json:
        print_json([t.to_dict() for t in tasks])
        return 0
    print(table(["id", "bucket", "expected_script", "files", "rules"],
                [[t.id, t.bucket, t.expected_script or "-", len(t.files), ",".join(t.rule_ids) or "-"] for t in tasks]))
    return 0


def _export(args: argparse.Namespace) -> int:
    from seqpack_evals.tasks import export_agentskills, load_tasks

    dataset = load_tasks(args.tasks_file)
    tasks = dataset.select(None, args.bucket)
    target = export_agentskills(dataset, args.out, tasks)
    if args.json:
        print_json({"evals_json": str(target), "tasks": len(tasks)})
    else:
        print(f"wrote {len(tasks)} task(s) to {target}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from seqpack_evals.bench import run_benchmark, table
    from seqpack_evals.tasks import load_tasks

    dataset = load_tasks(args.tasks_file)
    tasks = dataset.select(args.tasks, args.bucket)
    doc = run_benchmark(dataset, tasks, args.agent_cmd, args.out, repeats=args.repeats, timeout=args.timeout,
                        skill_dir=args.skill_dir, seed=args.seed, options=_run_options(args),
                        skip_outcome=args.skip_outcome,
                        progress=None if args.json else (lambda m: print(m, file=sys.stderr, flush=True)))
    if args.json:
        print_json(doc)
        return 0
    print(table(doc))
    print(f"wrote {args.out}/benchmark.json ({doc['repeats']} repeats, {doc['overall']['skill']['tasks']} tasks)")
    return 0


def _env(args: argparse.Namespace) -> int:
    from seqpack_evals.sandbox import build_product_env

    env = build_product_env(args.out, wheel=args.wheel)
    if args.json:
        print_json(env.to_dict())
    else:
        print(f"made the product environment {env.root} ({env.wheel}); use it with: seqpack eval run --product-env "
              f"{args.out} ...")
    return 0


def _adversarial(args: argparse.Namespace) -> int:
    from pathlib import Path

    from seqpack_evals.adversarial import generated_suite, hand_written_suite, table, violations
    from seqpack_evals.tasks import load_tasks

    dataset = load_tasks(args.tasks_file)
    answers = args.answers or str(Path(dataset.root) / "adversarial.json")
    hand = hand_written_suite(dataset, answers)
    generated = generated_suite(dataset)
    broken = violations(hand) + violations(generated)
    if args.json:
        print_json({"hand_written": [r.to_dict() for r in hand], "generated": [r.to_dict() for r in generated],
                    "violations": broken})
    else:
        print(f"Hand-written answers ({answers}):\n")
        print(table(hand))
        print(f"\nGenerated answers, every task of {dataset.root / 'tasks.json'}:\n")
        print(table(generated))
        print("\nrequired outcomes: " + ("all met" if not broken else "; ".join(broken)))
    return 1 if broken else 0


def run(args: argparse.Namespace) -> int:
    """Dispatch to the eval subcommand."""
    from seqpack.core.errors import UsageError

    handlers = {"run": _run, "score": _score, "report": _report, "build": _build, "export": _export, "list": _list,
                "adversarial": _adversarial, "bench": _bench, "env": _env}
    if not getattr(args, "eval_command", None):
        raise UsageError("give an eval subcommand: run, bench, score, report, env, build, export, list or adversarial "
                         "(see seqpack eval --help)")
    return handlers[args.eval_command](args)
