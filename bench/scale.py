"""Every scale figure of issue 26 from one run, then docs/benchmarks.md from it.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/scale.py [--sizes 10000,100000,1000000]
        [--duration 10] [--workers CORES] [--cache /tmp/ans-bench-scale] [--skip STEP,...]

    .venv/bin/python bench/scale.py --sizes 10000 --duration 2    # smoke (~5 min)

Runs, one after another, each as a subprocess with ``OPENBLAS_NUM_THREADS=1``:

``load``
    ``bench/load.py --agents SIZES --levels 1,16 --workers W --connections 16`` (W:
    ``--workers``, default the number of cores; the floor runs with as many
    processes): ratio ours/floor at c=16 per size, c=1 p50/p99, cold start, peak
    RSS and the RSS/PSS of the process tree -> ``bench/results/load.json``.
``scaling``
    ``bench/workers_scaling.py --agents 10000 --rounds R --workers W``: 1 and W
    workers back to back in each of R rounds (``--scaling-rounds``, default 5;
    alternating which goes first), ANS and the floor, at c=16: the median round
    is the 1 -> W figure and gives the workers = 1 ratio (same ``--cache``, so
    the import is reused) -> ``workers_scaling.json``. One pair of runs minutes
    apart (this step until 2026-11-27) read 1.9x where five rounds gave a
    median of 1.61x.
``visibility``
    ``bench/workers_visibility.py --workers W``: ACTIVATE on one worker ->
    visible in a DISCOVER on another -> ``workers-visibility.json``.
``pg_nodes``
    ``bench/pg_nodes.py --workers W``: ACTIVATE on one node -> visible on
    another over PostgreSQL -> ``pg_nodes.json``; exit 2 (PostgreSQL
    unreachable) is recorded as "not measured", not a failure of the run.
``profile``
    ``bench/query_profile.py --agents P --label scale --http-duration 8``:
    server CPU per DISCOVER over HTTP/2, c=1 -> ``query_profile-scale.json``
    (P: ``--profile-agents``, default 100k when ``--sizes`` has it, else the
    smallest size).

``--skip STEP,...`` leaves a step out and keeps its existing results file (the
page says it is from an earlier run). Writes ``bench/results/scale.json``
(commit, time, machine, per step its command, exit code, wall time and the
results file it wrote), prints each step's command and a one-line summary, then
runs ``bench/report.py`` (the section "Issue 26: every core and every replica"
comes from bench/report_scale.py) and prints the targets, met or not. Exit 1
when a step failed (other than ``pg_nodes`` exit 2), never on a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from report_scale import dig  # bench/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
STEPS = ("load", "scaling", "visibility", "pg_nodes", "profile")
NOT_MEASURED_EXIT = {"pg_nodes": 2}  # the script's "PostgreSQL is unreachable"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def steps(args: argparse.Namespace) -> list[tuple[str, list[str], str]]:
    """(name, argv relative to the project root, results file) of every step."""
    w, cache = args.workers, shlex.quote(str(args.cache))
    common = (
        f"--connections 16 --duration {args.duration:g} --activate-agents 300 "
        f"--reuse-import --no-h2load --cache {cache}"
    )
    table = [
        ("load", f"bench/load.py --agents {args.sizes} --levels 1,16 --workers {w} {common}",
         "load.json"),
        ("scaling", f"bench/workers_scaling.py --agents 10000 --rounds {args.scaling_rounds} "
         f"--duration {args.duration:g} --workers {w} --cache {cache}",
         "workers_scaling.json"),
        ("visibility", f"bench/workers_visibility.py --workers {w} --cache {cache}",
         "workers-visibility.json"),
        ("pg_nodes", f"bench/pg_nodes.py --workers {w}", "pg_nodes.json"),
        ("profile", f"bench/query_profile.py --agents {args.profile_agents} --label scale "
         f"--http-duration 8 --cache {cache}", "query_profile-scale.json"),
    ]  # fmt: skip
    return [
        (name, [*shlex.split(cmd), "--out", f"bench/results/{out}"], f"bench/results/{out}")
        for name, cmd, out in table
    ]


def interrupted(signum: int, frame: Any) -> None:
    """SIGTERM to the driver ends the step's process group as Ctrl-C does."""
    raise KeyboardInterrupt(f"signal {signum}")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """End the process group this driver created for a step (the script and the
    servers it started): SIGINT (the scripts clean up), then SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None and not group_alive(proc.pid):
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and (proc.poll() is None or group_alive(proc.pid)):
            time.sleep(0.2)


def run_step(argv: list[str]) -> int:
    """Run one bench script in its own process group (so an interrupt reaches its
    servers too, and only them); its output goes straight to ours."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        stop_group(proc)
        raise


def read(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


def kept_record(
    name: str,
    results: str,
    command: str,
    kept: dict[str, Any] | None,
    earlier: dict[str, Any],
    earlier_at: str | None,
) -> dict[str, Any]:
    """The record of a skipped step whose results file ``kept`` stays. The file
    says when and how it was written, which may be after the earlier scale run
    (the step's script run by hand, e.g. ``load.py --keep-other-sizes`` for some
    sizes); without that, the earlier run's record of the step."""
    if kept and kept.get("generated_at"):
        return {
            "name": name,
            "command": kept.get("command") or command,
            "results": results,
            "wrote": True,
            "skipped": True,
            "kept_from": kept["generated_at"],
        }
    rec = {**earlier, "name": name, "results": results, "skipped": True}
    rec.setdefault("command", command)
    rec.setdefault("kept_from", earlier.get("started_at") or earlier_at)
    return rec


def summary(name: str, data: dict[str, Any] | None) -> str:
    """One line of the step's headline figures."""
    if data is None:
        return "no results"
    if name == "scaling":
        rounds = data.get("rounds") or []
        ratios = [r.get("ans_ratio") for r in rounds if r.get("ans_ratio") is not None]
        spread = f" ({min(ratios)}-{max(ratios)}x)" if ratios else ""
        return (
            f"1 -> {data.get('workers')} workers: ANS median {data.get('median_ans_ratio')}x"
            f"{spread} over {len(rounds)} rounds, floor {data.get('median_floor_ratio')}x"
        )
    if name == "load":
        parts = []
        for n, s in data.get("sizes", {}).items():
            lv = s.get("levels", {})
            bits = [f"c=16 ratio {dig(lv, '16', 'ratio')} ({dig(lv, '16', 'ours', 'rps')} req/s)"]
            if "1" in lv:
                bits.append(
                    f"c=1 p50 {dig(lv, '1', 'ours', 'p50_ms')} / p99 "
                    f"{dig(lv, '1', 'ours', 'p99_ms')} ms"
                )
            if s.get("memory"):
                bits.append(f"PSS {s['memory']['pss_total_mb']} MB")
            if s.get("problems"):
                bits.append(f"{len(s['problems'])} problems")
            parts.append(f"{n}: " + ", ".join(bits))
        return f"workers {dig(data, 'settings', 'workers')}; " + "; ".join(parts)
    if name == "visibility":
        d = data.get("discover_after_200_ms", {})
        return (
            f"workers {data.get('workers')}: visible on another worker p50 {d.get('p50')} / "
            f"p99 {d.get('p99')} / max {d.get('max')} ms (n={d.get('n')}), "
            f"{len(data.get('errors') or [])} errors"
        )
    if name == "pg_nodes":
        d = data.get("visible_on_b_after_a_200_ms", {})
        return (
            f"visible on the other node p50 {d.get('p50')} / p99 {d.get('p99')} / max "
            f"{d.get('max')} ms ({data.get('agents')} agents)"
        )
    parts = []
    for n, s in data.get("sizes", {}).items():
        parts.append(
            f"{n}: server CPU per DISCOVER over HTTP/2 "
            f"{dig(s, 'http', 'ans', 'cpu_us_per_request')} µs (floor "
            f"{dig(s, 'http', 'floor', 'cpu_us_per_request')} µs), in process "
            f"{s.get('cpu_us_mean')} µs"
        )
    return "; ".join(parts)


def write_run(run: dict[str, Any]) -> None:
    (RESULTS / "scale.json").write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    print(
        f"\n[scale] wrote bench/results/scale.json ({run['started_at']} .. {run['finished_at']})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes",
        default="10000,100000,1000000",
        help="catalog sizes of the main load run (CI/smoke: 10000)",
    )
    ap.add_argument("--duration", type=float, default=10.0, help="timed s per level (10)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench-scale")
    ap.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="ans serve --workers (default: the number of cores)",
    )
    ap.add_argument(
        "--profile-agents",
        type=int,
        default=None,
        help="query_profile size (100000 if --sizes has it, else the smallest)",
    )
    ap.add_argument("--scaling-rounds", type=int, default=5,
                    help="alternated rounds of the 1 -> W workers step (5)")
    ap.add_argument("--skip", default="", help=f"steps to leave out: {','.join(STEPS)}")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if args.profile_agents is None:
        args.profile_agents = 100_000 if 100_000 in sizes else min(sizes)
    skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    if skip - set(STEPS):
        ap.error(f"unknown step(s) {sorted(skip - set(STEPS))}; steps: {', '.join(STEPS)}")
    signal.signal(signal.SIGTERM, interrupted)
    # even when started in the background (SIGINT ignored, which the steps would inherit)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, str(BENCH))
    from load import machine  # commit (with -dirty), cores, CPU, packages

    before = read(RESULTS / "scale.json") or {}  # what a skipped step keeps
    earlier = {s["name"]: s for s in before.get("steps", [])}
    earlier_at = before.get("started_at")
    run: dict[str, Any] = {
        "benchmark": "issue 26 scale targets (bench/scale.py)",
        "command": "bench/scale.py " + shlex.join(sys.argv[1:] if argv is None else argv),
        "started_at": now(),
        "machine": machine(),
        "settings": {
            "sizes": sizes,
            "duration_s": args.duration,
            "workers": args.workers,
            "cache": str(args.cache),
            "profile_agents": args.profile_agents,
        },
        "steps": [],
    }
    failed = []
    for name, cmd, results in steps(args):
        command = shlex.join(cmd)
        if name in skip:
            kept = read(ROOT / results)
            rec = kept_record(name, results, command, kept, earlier.get(name, {}), earlier_at)
            run["steps"].append(rec)
            print(f"\n[scale] {name}: skipped, keeping {results} (from {rec['kept_from']}): "
                  f"{summary(name, kept)}", flush=True)  # fmt: skip
            continue
        print(f"\n[scale] {name}: OPENBLAS_NUM_THREADS=1 python {command}", flush=True)
        t_start, started = time.time(), now()
        t0 = time.perf_counter()
        try:
            code = run_step(cmd)
        except KeyboardInterrupt:
            # what ran so far is recorded (the page must not take a file this
            # run overwrote for an earlier run's); the rest is not measured
            run["steps"].append({"name": name, "command": command, "started_at": started,
                                 "exit_code": "interrupted", "results": results,
                                 "wrote": False, "reason": "interrupted"})  # fmt: skip
            run["finished_at"], run["interrupted"] = now(), True
            write_run(run)
            print(f"\n[scale] interrupted during {name}: its process group is ended; "
                  "docs/benchmarks.md left as it was", file=sys.stderr)  # fmt: skip
            return 130
        wall = round(time.perf_counter() - t0, 1)
        out = ROOT / results
        wrote = out.is_file() and out.stat().st_mtime >= t_start
        rec = {
            "name": name,
            "command": command,
            "started_at": started,
            "exit_code": code,
            "wall_s": wall,
            "results": results,
            "wrote": wrote,
        }
        if NOT_MEASURED_EXIT.get(name) == code:
            rec["reason"] = f"exit {code}: PostgreSQL unreachable"
        elif code != 0:
            failed.append(name)
        run["steps"].append(rec)
        line = summary(name, read(out) if wrote else None)
        print(
            f"[scale] {name}: exit {code}, {wall} s, "
            f"{results if wrote else 'wrote nothing'}: {rec.get('reason') or line}",
            flush=True,
        )
    run["finished_at"] = now()
    write_run(run)
    load = next(s for s in run["steps"] if s["name"] == "load")
    if load.get("wrote") or (load.get("skipped") and (ROOT / load["results"]).is_file()):
        r = subprocess.run([sys.executable, "bench/report.py"], cwd=ROOT)
        if r.returncode != 0:
            failed.append("report")
    else:
        print("[scale] load.json is not from this run: docs/benchmarks.md left as it was")
        failed.append("report")
    from report_scale import text

    print("\n[scale] issue 26 targets (docs/benchmarks.md):")
    print(text(RESULTS))
    if failed:
        print(f"\n[scale] failed steps: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
