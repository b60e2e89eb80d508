"""Capability-matching evaluation on the MetaTool split (../shared/data/metatool).

Every one of the 199 tools becomes an agent (same trust tier and behavioral
score for all, so rank order = capability order), signed by a governance key
and registered through the real ACTIVATE path of AnsService. Every evaluation
query is answered by AnsService.discover -- the engine the server uses -- and
a sample is also sent to a real ``ans serve`` over HTTP/2 (agents ACTIVATEd
over the wire too); the two answers must agree, and the server's signature
must verify.

    .venv/bin/python bench/metatool_eval.py            # writes bench/results/metatool.json

Modes: (a) descriptions only, (b) descriptions + the published example tasks,
(c) the multi-tool queries (with examples; descriptions-only shown too).
Recall@k = |gold in top k| / |gold|; nDCG@10 with binary relevance.

Then, under "wire", every single- and multi-tool query goes through a real
server over HTTP/2 (``limit`` 10, ``trust_tier_min`` 2, every signature
verified) in two catalogs: *uniform* (tier 1, behavioral 0.9 for all) and
*mixed* (seeded tier 1-2 and behavioral 0.5-1.0 per agent), with each
relevance gate of ``--gates`` (``calibrated``, the default, and ``floor``, the
gate before calibration).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from ans.governance.keys import SigningKey  # noqa: E402
from ans.governance.signing import sign_document  # noqa: E402
from ans.protocol.messages import (  # noqa: E402
    ActivateRequest,
    DiscoverRequest,
    Identity,
    parse_discover_params,
    query_digest,
)
from ans.protocol.scope import parse_authority_scope  # noqa: E402

from ans.client import AgtpClient, verify_discover_result  # noqa: E402
from ans.config import Config  # noqa: E402
from ans.demo import demo_manifest  # noqa: E402
from ans.index.embedder import BUNDLED_DIM, EMBEDDING_DIMS  # noqa: E402
from ans.matcher import WEIGHTS  # noqa: E402
from ans.server import configure_logging  # noqa: E402
from ans.service import AnsService  # noqa: E402
from ans.text import split_label  # noqa: E402
from ans.wiring import build_service  # noqa: E402
from tools.launcher import start_server, stop_server  # noqa: E402

# the servers' [index] section (--embedding-dims)
INDEX_TOML = ""

GOV = Identity(
    "agtp://gov.metatool.example/agents/platform",
    "eval",
    parse_authority_scope("discovery:register"),
)
ASKER = Identity(
    "agtp://eval.example/agents/orchestrator", "eval", parse_authority_scope("discovery:query")
)
K = 10
FLOOR = float(os.environ.get("EVAL_FLOOR", str(Config().min_capability_match)))
MIXED_SEED = 20261125
TRUST_TIER_MIN = 2


def find_split(explicit: Path | None) -> Path:
    if explicit:
        return explicit
    for parent in [ROOT, *ROOT.parents]:
        cand = parent / "shared" / "data" / "metatool"
        if (cand / "split.json").is_file():
            return cand
    sys.exit("metatool_eval: ../shared/data/metatool/split.json not found (use --data)")


def label_of(tool: str) -> str:
    label = "-".join(split_label(tool).lower().split())
    return "".join(c for c in label if c.isalnum() or c in "._-")[:120]


def mixed_trust(tools: Sequence[str], seed: int = MIXED_SEED) -> dict[str, tuple[int, float]]:
    """A realistic catalog: seeded trust tier 1-2 and behavioral score 0.5-1.0 per agent."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {
        t: (int(rng.integers(1, 3)), round(float(rng.uniform(0.5, 1.0)), 3)) for t in sorted(tools)
    }


def agent_docs(
    data: dict[str, Any],
    descriptions: dict[str, str],
    with_examples: bool,
    trust: dict[str, tuple[int, float]] | None = None,
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool, unsigned manifest, capability document) for every tool; ``trust``
    maps a tool to (tier, behavioral score), default tier 1 and 0.9 for all."""
    out = []
    for tool in sorted(data["examples"]):
        tier, behavioral = (trust or {}).get(tool, (1, 0.9))
        entry = {
            "agent_label": label_of(tool),
            "org_domain": "metatool.example",
            "governance_zone": "zone:public",
            "trust_tier": tier,
            "behavioral_trust_score": behavioral,
            "principal_org": "MetaTool",
            "authority_scope_categories": ["tools:invoke"],
            "supported_methods": ["QUERY"],
            "job_description": descriptions[tool],
        }
        caps: dict[str, Any] = {"supported_methods": ["QUERY"]}
        if with_examples:
            caps["examples"] = [
                {"id": f"ex-{i + 1}", "text": text} for i, text in enumerate(data["examples"][tool])
            ]
        out.append((tool, demo_manifest(entry), caps))
    return out


def make_service(workdir: Path, gov: SigningKey, embedder: Any) -> AnsService:
    jwks = workdir / "gov.jwks.json"
    jwks.write_text(json.dumps({"keys": [gov.public.jwk()]}), encoding="utf-8")
    config = Config(
        data_dir=workdir / "data",
        governance_jwks=(jwks,),
        log_level="error",
        min_capability_match=FLOOR,
    )
    return build_service(config, embedder=embedder).service


def discover(service: AnsService, intent: str, limit: int = K) -> list[tuple[str, float]]:
    params = {"intent": intent, "limit": limit}
    req = DiscoverRequest(
        ASKER, "eval", parse_discover_params(params, service.limits), query_digest(params), params
    )
    result = service.discover(req)
    return [(r["canonical_id"], r["capability_match_score"]) for r in result["results"]]


def metrics(rankings: Iterable[Sequence[str]], golds: Iterable[Sequence[str]]) -> dict[str, float]:
    r1 = r5 = ndcg = 0.0
    n = 0
    for ranked, gold in zip(rankings, golds, strict=True):
        g = set(gold)
        r1 += len(g & set(ranked[:1])) / len(g)
        r5 += len(g & set(ranked[:5])) / len(g)
        dcg = sum(1 / math.log2(i + 2) for i, x in enumerate(ranked[:K]) if x in g)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(len(g), K)))
        ndcg += dcg / ideal
        n += 1
    return {
        "recall@1": round(r1 / n, 4),
        "recall@5": round(r5 / n, 4),
        "ndcg@10": round(ndcg / n, 4),
    }


# -- the real server ---------------------------------------------------------------


def activate_all(
    url: str, gov: SigningKey, docs: list[tuple[str, dict[str, Any], dict[str, Any]]]
) -> dict[str, str]:
    """ACTIVATE every agent over HTTP/2 (exit on any refusal); canonical id -> tool."""
    tool_of: dict[str, str] = {}
    with AgtpClient(
        url, agent_id=GOV.agent_id, principal_id="eval", scope="discovery:register"
    ) as gclient:
        for i, (tool, manifest, caps) in enumerate(docs):
            params = {"manifest": sign_document(manifest, gov, "signature"), "capabilities": caps}
            resp = gclient.call("ACTIVATE", params, task_id=f"act-{i}")
            if resp.status != 200:
                sys.exit(f"metatool_eval: ACTIVATE over HTTP failed: {resp.body}")
            tool_of[manifest["canonical_id"]] = tool
    return tool_of


def http_check(
    workdir: Path,
    gov: SigningKey,
    docs: list[tuple[str, dict[str, Any], dict[str, Any]]],
    queries: list[str],
    service: AnsService,
) -> dict[str, Any]:
    """ACTIVATE every agent and send ``queries`` to a real server over HTTP/2;
    compare each signed answer with the in-process one."""
    # Bulk ACTIVATE and 200 queries from one Agent-ID: no per-Agent-ID rate limit.
    no_limit = workdir / "bench.toml"
    no_limit.write_text(f"[rate_limit]\nenabled = false\n{INDEX_TOML}", encoding="utf-8")
    server = start_server(
        workdir / "http-data",
        "--governance-jwks",
        str(workdir / "gov.jwks.json"),
        "--log-level",
        "warning",
        "--config",
        str(no_limit),
    )
    url = server.url
    agree = verified = 0
    mismatches: list[str] = []
    try:
        activate_all(url, gov, docs)
        with AgtpClient(
            url, agent_id=ASKER.agent_id, principal_id="eval", scope="discovery:query"
        ) as client:
            jwks = client.jwks()
            for i, q in enumerate(queries):
                params = {"intent": q, "limit": K}
                resp = client.discover(params, task_id=f"q-{i}")
                verify_discover_result(resp.result, jwks, params)
                verified += 1
                wire = [
                    (r["canonical_id"], r["capability_match_score"]) for r in resp.result["results"]
                ]
                if wire == discover(service, q):
                    agree += 1
                else:
                    mismatches.append(q)
    finally:
        stop_server(server)
    return {
        "queries": len(queries),
        "signatures_verified": verified,
        "agree": agree,
        "mismatches": mismatches[:5],
    }


def wire_eval(
    workdir: Path,
    gov: SigningKey,
    docs: list[tuple[str, dict[str, Any], dict[str, Any]]],
    queries: dict[str, list[tuple[str, list[str]]]],
    gate: str,
) -> dict[str, Any]:
    """ACTIVATE ``docs`` on a real ``ans serve`` (relevance gate ``gate``) and ask
    every query over HTTP/2 (limit 10, trust_tier_min 2); every answer's
    signature is verified. Metrics per query set, and the client-side p50."""
    config = workdir / f"bench-{gate}.toml"
    config.write_text(
        f'[rate_limit]\nenabled = false\n[discovery]\nrelevance_gate = "{gate}"\n{INDEX_TOML}',
        encoding="utf-8",
    )
    server = start_server(
        workdir / f"wire-{gate}",
        "--governance-jwks",
        str(workdir / "gov.jwks.json"),
        "--log-level",
        "warning",
        "--config",
        str(config),
    )
    out: dict[str, Any] = {"gate": gate}
    try:
        tool_of = activate_all(server.url, gov, docs)
        with AgtpClient(
            server.url, agent_id=ASKER.agent_id, principal_id="eval", scope="discovery:query"
        ) as client:
            jwks = client.jwks()
            times: list[float] = []
            for name, items in queries.items():
                ranked, sizes = [], []
                for i, (q, _) in enumerate(items):
                    params = {"intent": q, "limit": K, "trust_tier_min": TRUST_TIER_MIN}
                    t0 = time.perf_counter()
                    resp = client.discover(params, task_id=f"{name}-{i}")
                    times.append(time.perf_counter() - t0)
                    verify_discover_result(resp.result, jwks, params)
                    ranked.append([tool_of[r["canonical_id"]] for r in resp.result["results"]])
                    sizes.append(resp.result["total_matches"])
                out[name] = metrics(ranked, [g for _, g in items])
                out[name]["mean_total_matches"] = round(sum(sizes) / len(sizes), 2)
                out[name]["signatures_verified"] = len(items)
            times.sort()
            out["client_p50_ms"] = round(1000 * times[len(times) // 2], 3)
    finally:
        stop_server(server)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="folder with split.json and plugin_des.json")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default bench/results/metatool.json (metatool-128.json at 128 dims)",
    )
    ap.add_argument(
        "--embedding-dims",
        type=int,
        choices=EMBEDDING_DIMS,
        default=BUNDLED_DIM,
        help="the bundled embedder's width, in process and in the servers ([index] embedding_dims)",
    )
    ap.add_argument(
        "--http-sample",
        type=int,
        default=200,
        help="how many evaluation queries also go through a real server (0: none)",
    )
    ap.add_argument(
        "--onnx-model",
        type=Path,
        help="measure an optional ONNX sentence embedder instead of wordllama "
        "(bench/onnx_embedder.py; needs onnxruntime and --onnx-tokenizer)",
    )
    ap.add_argument("--onnx-tokenizer", type=Path, help="its tokenizer.json")
    ap.add_argument(
        "--gates",
        default="calibrated,floor",
        help="relevance gates to run through the real server in both trust modes ('' for none)",
    )
    args = ap.parse_args(argv)
    global INDEX_TOML
    INDEX_TOML = f"[index]\nembedding_dims = {args.embedding_dims}\n"
    suffix = "" if args.embedding_dims == BUNDLED_DIM else f"-{args.embedding_dims}"
    if args.out is None:
        args.out = ROOT / "bench" / "results" / f"metatool{suffix}.json"
    if (args.onnx_model is None) != (args.onnx_tokenizer is None):
        ap.error("--onnx-model and --onnx-tokenizer go together")
    if args.onnx_model is not None and args.http_sample:
        ap.error("the HTTP check runs the server's own embedder: use --http-sample 0")

    folder = find_split(args.data)
    data = json.loads((folder / "split.json").read_text(encoding="utf-8"))
    descriptions = json.loads((folder / "plugin_des.json").read_text(encoding="utf-8"))
    from ans.matcher import WordLlamaEmbedder

    configure_logging("error")
    embedder: Any
    if args.onnx_model is not None:
        from onnx_embedder import OnnxSentenceEmbedder  # bench/ is on sys.path

        embedder = OnnxSentenceEmbedder(args.onnx_model, args.onnx_tokenizer)
        embedder_name = f"ONNX {args.onnx_model.name} ({embedder.fingerprint}), optional trial"
        command = (
            f"python bench/metatool_eval.py --http-sample 0 --onnx-model {args.onnx_model.name} "
            f"--onnx-tokenizer {args.onnx_tokenizer.name}"
        )
    else:
        embedder = WordLlamaEmbedder(args.embedding_dims)
        embedder_name = f"wordllama l2_supercat {args.embedding_dims}-d (bundled weights)"
        command = "python bench/metatool_eval.py" + (
            f" --embedding-dims {args.embedding_dims}" if suffix else ""
        )
    gov = SigningKey.generate()
    singles = data["eval_single"]
    multis = data["eval_multi"]
    report: dict[str, Any] = {
        "command": command,
        "split_sha256": hashlib.sha256((folder / "split.json").read_bytes()).hexdigest(),
        "embedder": embedder_name,
        "weights": WEIGHTS,
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
        "sizes": {"agents": len(data["examples"]), "single": len(singles), "multi": len(multis)},
    }
    with tempfile.TemporaryDirectory(prefix="ans-metatool-") as tmp:
        for mode, with_examples in (("descriptions", False), ("examples", True)):
            workdir = Path(tmp) / mode
            workdir.mkdir()
            service = make_service(workdir, gov, embedder)
            docs = agent_docs(data, descriptions, with_examples)
            tool_of = {}
            for i, (tool, manifest, caps) in enumerate(docs):
                signed = sign_document(manifest, gov, "signature")
                service.activate(ActivateRequest(GOV, f"act-{i}", signed, caps))
                tool_of[manifest["canonical_id"]] = tool
            t0 = time.perf_counter()
            ranked_single = [[tool_of[c] for c, _ in discover(service, q)] for q, _ in singles]
            ranked_multi = [[tool_of[c] for c, _ in discover(service, q)] for q, _ in multis]
            elapsed = time.perf_counter() - t0
            key = "a_descriptions_only" if not with_examples else "b_with_examples"
            report[key] = metrics(ranked_single, [[t] for _, t in singles])
            report[f"c_multi_tool_{mode}"] = metrics(ranked_multi, [ts for _, ts in multis])
            report[f"seconds_per_query_{mode}"] = round(elapsed / (len(singles) + len(multis)), 5)
            if with_examples and args.http_sample > 0:
                step = max(1, len(singles) // args.http_sample)
                sample = [q for q, _ in singles[::step]][: args.http_sample]
                report["http_check"] = http_check(workdir, gov, docs, sample, service)
            service.store.close()
        gates = [g for g in args.gates.split(",") if g]
        if gates and args.onnx_model is None:
            # Through the real server: uniform and mixed trust, every gate asked for.
            queries = {
                "single": [(q, [t]) for q, t in singles],
                "multi": [(q, list(ts)) for q, ts in multis],
            }
            tools = sorted(data["examples"])
            trust_modes = {"uniform": None, "mixed": mixed_trust(tools)}
            report["wire"] = {
                "trust_tier_min": TRUST_TIER_MIN,
                "limit": K,
                "mixed_trust": f"seed {MIXED_SEED}: tier 1-2, behavioral 0.5-1.0 per agent",
            }
            for mode, trust in trust_modes.items():
                docs = agent_docs(data, descriptions, True, trust)
                for gate in gates:
                    workdir = Path(tmp) / f"wire-{mode}-{gate}"
                    workdir.mkdir()
                    (workdir / "gov.jwks.json").write_text(
                        json.dumps({"keys": [gov.public.jwk()]}), encoding="utf-8"
                    )
                    got = wire_eval(workdir, gov, docs, queries, gate)
                    report["wire"].setdefault(mode, {})[gate] = got
                    for name in ("single", "multi"):
                        m = got[name]
                        print(
                            f"wire {mode:8s} {gate:10s} {name:6s} R@1 {m['recall@1']:.3f}  "
                            f"R@5 {m['recall@5']:.3f}  nDCG@10 {m['ndcg@10']:.3f}  "
                            f"matches {m['mean_total_matches']}",
                            flush=True,
                        )
    report["c_multi_tool"] = report["c_multi_tool_examples"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for name in (
        "a_descriptions_only",
        "b_with_examples",
        "c_multi_tool",
        "c_multi_tool_descriptions",
    ):
        m = report[name]
        print(
            f"{name:28s} R@1 {m['recall@1']:.3f}  R@5 {m['recall@5']:.3f}  "
            f"nDCG@10 {m['ndcg@10']:.3f}"
        )
    if "http_check" in report:
        h = report["http_check"]
        print(
            f"http check: {h['agree']}/{h['queries']} answers agree, "
            f"{h['signatures_verified']} signatures verified"
        )
    print(f"written to {args.out}")
    ok = (
        "http_check" not in report
        or report["http_check"]["agree"] == report["http_check"]["queries"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
