"""Turn the load benchmark's results JSON into docs/benchmarks.md and its plot.

    .venv/bin/python bench/report.py [--results bench/results/load.json] [--docs docs]

(``bench/scale.py`` runs it after its steps; the issue-26 section comes from
bench/report_scale.py and the results files bench/results/scale.json names.)

Writes ``docs/benchmarks.md`` (figures per catalog size and concurrency, ours
beside the floor, the machine, the commands, the issue's targets against what
was measured) and ``docs/benchmarks-latency.png``: p50/p90/p99 latency (ms,
log y) against catalog size (log x) at concurrency 1 and 16, ours vs floor
(matplotlib, Agg backend). Everything comes from the results file, so the page
matches what ``bench/load.py`` printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLOT_NAME = "benchmarks-latency.png"


def fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        text = f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    elif isinstance(v, int):
        text = f"{v:,}"
    else:
        text = str(v)
    return text + unit


def size_label(n: int) -> str:
    """1M, 100k, 10k; a count that is not round (a catalog plus the agents the
    load bench ACTIVATEd into it) keeps its exact figure beside the nearest label."""
    for unit, suffix in ((1_000_000, "M"), (1000, "k")):
        if n >= unit:
            label = f"{n / unit:.3g}{suffix}"
            return label if n % unit == 0 else f"~{label} ({n:,})"
    return str(n)


def plot(results: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(int(n) for n, s in results["sizes"].items() if s.get("levels"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    styles = {"p50_ms": ("-", "o"), "p90_ms": ("--", "s"), "p99_ms": (":", "^")}
    for ax, c in zip(axes, ("1", "16"), strict=True):
        for who, color in (("ours", "tab:blue"), ("floor", "tab:gray")):
            for key, (style, marker) in styles.items():
                xs, ys = [], []
                for n in sizes:
                    lv = results["sizes"][str(n)]["levels"].get(c)
                    if lv and lv[who].get(key):
                        xs.append(n)
                        ys.append(lv[who][key])
                if xs:
                    ax.plot(xs, ys, style, marker=marker, color=color,
                            label=f"{'ANS' if who == 'ours' else 'floor'} {key[:3]}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes, [size_label(n) for n in sizes])
        ax.set_xlabel("registered agents")
        ax.set_title(f"DISCOVER latency, concurrency {c}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("latency (ms)")
    axes[1].legend(fontsize=8, loc="best")
    m = results["machine"]
    fig.suptitle(f"ANS vs floor ({m['cores']} cores, {m['cpu']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def carried_note(results: dict[str, Any]) -> list[str]:
    """A sentence naming the sizes carried over from an earlier run (load.py
    --keep-other-sizes), with that run's command and time."""
    runs: dict[tuple[str, str], list[str]] = {}
    for n, s in results["sizes"].items():
        c = s.get("carried_from")
        if c:
            runs.setdefault((str(c.get("command")), str(c.get("generated_at"))), []).append(n)
    return [
        f"The {', '.join(size_label(int(n)) for n in ns)} rows were not re-measured in "
        f"this run: they come from `{cmd}` at {at}, an earlier commit."
        for (cmd, at), ns in runs.items()
    ]


def engine_note(client: str) -> str:
    """What the client's connection engine means for the ratios (bench/h2client.py)."""
    if "--engine raw" in client:
        return (
            " The client writes its own HTTP/2 frames (bench/h2raw.py, ~35-50 µs of CPU a "
            "request against the floor, ~165 µs against ANS at c=16, half of it system "
            "time); runs before 2026-11-27 07:19 UTC used the `h2` library's engine "
            "(~200-340 µs a request), which held the floor to what the client left of "
            "the 2 cores, so their ratios are higher and their 1 -> 2 workers figure lower."
        )
    return ""


def params_note(results: dict[str, Any]) -> str:
    """What the load's DISCOVER parameters were (bench/load.py ``params``)."""
    for size in results["sizes"].values():
        p = size.get("params")
        if p:
            return (f"{p['queries']:,} queries of the catalog generator's mix "
                    f"({p['distinct_intents']:,} distinct intents, `{p['file']}`)")
    return "the catalog's `queries.jsonl` (an older run: cycled, not drawn)"


def markdown(results: dict[str, Any], plot_name: str) -> str:
    import report_scale  # imports this module: bench/ is on sys.path when run as a script

    m = results["machine"]
    st = results["settings"]
    workers = st.get("workers") or 1
    rss_who = " (supervisor)" if workers > 1 else ""
    lines = [
        "# Benchmarks",
        "",
        "How fast ANS answers DISCOVER at a given catalog size on one small machine, "
        "always next to a **floor** measured in the same run: a minimal hypercorn app "
        "served exactly like ANS (h2c, same hypercorn settings) that answers every "
        "DISCOVER with a fixed, real signed ANS answer. The ratio ours/floor is what "
        "survives noisy machines.",
        "",
        "## Command",
        "",
        "```sh",
        "make install",
        "OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/scale.py   # every issue-26 figure in one "
        "run (workers = cores): bench/results/scale.json, this page",
        ".venv/bin/python bench/scale.py --sizes 10000 --duration 2   # smoke (~5 min); "
        "--skip STEP,... re-runs part",
        "OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/load.py --agents 10000,100000,1000000"
        "   # bench/results/load.json (~25 min; --agents 10000,100000: ~4 min)",
        "OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/index_scale.py --queries 120 "
        "--data-dir /tmp/ans-bench/run-N/data \\",
        "    --queries-file /tmp/ans-bench/catalog-synth-N-s1/queries.jsonl "
        "--out bench/results/index_scale-N.json   # N = 100000, 1000000",
        ".venv/bin/python bench/report.py          # writes this page and the plot",
        ".venv/bin/python bench/load.py --quick    # CI: 10k, 2 s/level, c=1,16;"
        " fails on errors only",
        "```",
        "",
        f"These figures: `{results['command']}` at {results['generated_at']}, "
        f"commit `{m['git_commit']}`.",
        *carried_note(results),
        *report_scale.section(),
        "",
        "## Method",
        "",
        f"- Catalog: `{st['catalog_source']}` (`--seed {st['seed']}`), loaded with the "
        "import method named below; the server runs with "
        f"`{st['server_config'].replace(chr(10), ' ')}` (no rate limit) and trusts the "
        "catalog's governance key.",
        f"- Server: `ans serve --workers {workers}`; the floor with as many processes.",
        f"- Load: {st['client']}, its own process; closed loop at fixed concurrency "
        f"{', '.join(map(str, st['levels']))}; {st['warmup_s']} s warm-up, then "
        f"{st['duration_s']} s timed; each request's parameters drawn at random from "
        f"{params_note(results)}. Every completion in the timed period is recorded."
        + engine_note(st["client"]),
        "- Floor: `bench/floor_app.py`, same hypercorn config, reads the request body, "
        "answers with the ANS answer captured at the start of the run (same size, same "
        "headers). Ours and floor alternate per level.",
        f"- ACTIVATE throughput: {st['activate_agents']} fresh agents, signed before the "
        "clock starts, at concurrency 16. ACTIVATE→visibility: for "
        f"{st['visibility_agents']} unique agents, the time from the ACTIVATE 200 to the "
        "first DISCOVER answer that lists the agent.",
        "- Cold start: spawn of `ans serve` to the first 200 on `GET /healthz`. "
        "Peak RSS: `VmHWM` of the server process at the end.",
        "- A sample of DISCOVER answers per level is verified against the server's "
        "`/.well-known/jwks.json` (ES256 signature and `query_digest`).",
        "",
        f"![latency vs catalog size]({plot_name})",
        "",
        "## DISCOVER: ANS vs floor",
        "",
        "| agents | c | ANS req/s | p50 ms | p90 ms | p99 ms | floor req/s | floor p50 | "
        "floor p99 | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, s in results["sizes"].items():
        for c, lv in s.get("levels", {}).items():
            o, f = lv["ours"], lv["floor"]
            lines.append(
                f"| {size_label(int(n))} | {c} | {fmt(o['rps'])} | {fmt(o['p50_ms'])} | "
                f"{fmt(o['p90_ms'])} | {fmt(o['p99_ms'])} | {fmt(f['rps'])} | "
                f"{fmt(f['p50_ms'])} | {fmt(f['p99_ms'])} | {fmt(lv['ratio'])} |"
            )
    lines += [
        "",
        "## Loading, ACTIVATE, memory",
        "",
        "| agents | import | import agents/s | cold start s | ACTIVATE/s (c=16) | "
        f"visible p50 / max ms | peak RSS MB{rss_who} | answer bytes | signatures checked |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, s in results["sizes"].items():
        imp = s.get("import", {})
        vis = s.get("visibility", {})
        sig = s.get("signatures", {})
        lines.append(
            f"| {size_label(int(n))} | {imp.get('method', '-')} | {fmt(imp.get('agents_per_s'))} "
            f"| {fmt(s.get('cold_start_s'))} | {fmt(s.get('activate', {}).get('rps'))} | "
            f"{fmt(vis.get('p50_ms'))} / {fmt(vis.get('max_ms'))} | {fmt(s.get('peak_rss_mb'))} "
            f"| {fmt(s.get('response_bytes'))} | {sig.get('checked', 0)} "
            f"({sig.get('failed', 0)} failed) |"
        )
    lines += [
        "",
        "## Targets (issue 5)",
        "",
        "| target | goal | measured | at | |",
        "|---|---|---:|---|---|",
    ]
    index = index_results(results)
    big = index.get(max(index)) if index else None
    for t in results["targets"]:
        if "recall" in t["target"] and big and big["recall_at_50"]["mean"] is not None:
            rec = big["recall_at_50"]["mean"]
            t = {**t, "measured": rec, "met": rec >= 0.98,
                 "at": f"{size_label(big['agents'])} (bench/index_scale.py)"}
        if "peak RSS" in t["target"] and workers > 1 and t["measured"] is not None:
            # VmHWM of the supervisor alone: one process of workers + 1
            t = {**t, "target": f"{t['target']} (supervisor only, workers = {workers})",
                 "met": "whole server: issue 26's memory rows"}
        met = {True: "met", False: "**not met**", None: "not measured here"}.get(
            t["met"], t["met"])
        lines.append(f"| {t['target']} | {t['goal']} | {fmt(t['measured'])} | {t['at']} | {met} |")
    if index:
        lines += [
            "",
            "## Capability index: approximate vs exhaustive (in-process, no HTTP)",
            "",
            "`bench/index_scale.py --data-dir DATA --queries-file CAT/queries.jsonl` loads the "
            "snapshot `ans import` wrote and, for every catalog query with an intent and "
            "no `capability_domains`, compares the top 50 by capability_match_score of the "
            "default (approximate) path with `exhaustive=True` (every agent scored).",
            "",
            "| agents | mode | recall@50 mean | min | queries >= 0.9 | matcher p50 / p99 ms | "
            "capability_domains p50 / p99 ms | snapshot load s | RSS after load MB |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for n in sorted(index):
            r = index[n]
            rc, qm, qd = r["recall_at_50"], r["query_ms"], r["query_ms_capability_domains"]
            lines.append(
                f"| {size_label(n)} | {r['index']['mode']} ({r['index']['index']}) | "
                f"{fmt(rc['mean'])} | {fmt(rc['min'])} | {fmt(rc.get('share_at_least_0.9'))} | "
                f"{fmt(qm['p50'])} / {fmt(qm['p99'])} | {fmt(qd['p50'])} / {fmt(qd['p99'])} | "
                f"{fmt(r.get('snapshot_load_s'))} | {fmt(r.get('rss_mb_after_load'))} |"
            )
    if results.get("problems"):
        lines += ["", "## Errors in this run", ""]
        lines += [f"- {p}" for p in results["problems"]]
    lines += profile_section()
    pk = m["packages"]
    lines += [
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores; RAM {m['ram_gb']} GB; {m['os']}",
        f"- Python {m['python']}; " + ", ".join(f"{k} {v}" for k, v in pk.items() if v),
        "- `h2load` cross-check: "
        + (m["h2load"] if m.get("h2load") else "not available (nghttp2-client not installed)"),
        "- The machine is shared (other benchmarks may run at the same time); the "
        "floor is measured in the same run for that reason.",
        "",
    ]
    return "\n".join(lines)


def profile_section() -> list[str]:
    """Server CPU per DISCOVER before/after, from bench/query_profile.py's results
    (query_profile-before.json and -after.json, one run each, taken back to back)."""
    runs = {}
    for name in ("before", "after"):
        f = ROOT / "bench" / "results" / f"query_profile-{name}.json"
        if f.is_file():
            runs[name] = json.loads(f.read_text(encoding="utf-8"))
    if not runs:
        return []
    lines = [
        "",
        "## DISCOVER: server CPU per query (bench/query_profile.py)",
        "",
        "500 distinct MetaTool intents, `limit` 10, c=1: the CPU of the `ans serve` process "
        "per DISCOVER over HTTP/2 (from /proc), the floor's the same way, and the in-process "
        "`AnsApp.answer` per query (thread CPU). Stage by stage: "
        "[query-profile.md](query-profile.md). The two runs were taken back to back on a "
        "shared machine: compare them with each other and with their floor.",
        "",
        "| run | commit | agents | server CPU over HTTP/2 µs | floor µs | in process µs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, r in runs.items():
        for n, s in r["sizes"].items():
            http = s.get("http") or {}
            lines.append(
                f"| {name} | `{r['commit']}` | {size_label(int(n))} | "
                f"{fmt((http.get('ans') or {}).get('cpu_us_per_request'))} | "
                f"{fmt((http.get('floor') or {}).get('cpu_us_per_request'))} | "
                f"{fmt(s.get('cpu_us_mean'))} |"
            )
    return lines


def index_results(results: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """bench/index_scale.py results (from --data-dir runs) for the sizes of this run."""
    out: dict[int, dict[str, Any]] = {}
    for n in results["sizes"]:
        f = ROOT / "bench" / "results" / f"index_scale-{n}.json"
        if f.is_file():
            r = json.loads(f.read_text(encoding="utf-8"))
            if "snapshot_load_s" in r:
                out[int(n)] = r
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "load.json")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs")
    args = ap.parse_args(argv)
    results = json.loads(args.results.read_text(encoding="utf-8"))
    args.docs.mkdir(parents=True, exist_ok=True)
    plot(results, args.docs / PLOT_NAME)
    (args.docs / "benchmarks.md").write_text(markdown(results, PLOT_NAME), encoding="utf-8")
    print(f"wrote {args.docs / 'benchmarks.md'} and {args.docs / PLOT_NAME}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
