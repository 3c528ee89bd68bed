"""The report of `benchmarks.client_throughput`: its rows, each client path's one-core
ceiling, and whether that ceiling keeps up with what eight fast replicas ask (issue 37 item 5:
keep the hand-written HTTP path only if its margin over aiohttp matters there).

    python -m benchmarks.client_throughput --report   # rewrite the .md from the JSON
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"

TOP_RUNG = "cache_ggr_dedup_pushdown"
DEMAND = RESULTS / "queries_h200.json"
"""The Q1-Q5 ladder on the simulator's H200 + llama-3-8b profile (`python -m benchmarks.queries
--gpu H200 --model llama-3-8b`): what one fast replica asks of the client."""


def ceilings(rows: Sequence[dict]) -> dict[str, tuple[float, float]]:
    """Per client path, the lowest and highest `client_bound_rps` over the rows: the rates one
    core of client sustains."""
    out: dict[str, tuple[float, float]] = {}
    for r in rows:
        lo, hi = out.get(r["client_path"], (float("inf"), 0.0))
        out[r["client_path"]] = (min(lo, r["client_bound_rps"]), max(hi, r["client_bound_rps"]))
    return out


def replica_demand(queries: dict, replicas: int) -> list[tuple[str, float]]:
    """Per query and table at the ladder's top rung, the requests/s `replicas` replicas ask of
    the client: requests / one replica's simulated engine seconds, times `replicas` (the
    fleet's near-linear scaling, `benchmarks/results/fleet.md`)."""
    return [
        (f"{r['query']} {r['dataset']}", replicas * r["n_requests"] / r["engine_time_s"])
        for r in queries["results"]
        if r["rung"] == TOP_RUNG and r["engine_time_s"] > 0
    ]


def markdown(result: dict, demand: dict | None = None, replicas: int = 8) -> str:
    """One line per row (requests/s, client CPU per request, the CPU shares); then each
    path's one-core ceiling against what `replicas` fast replicas ask (`demand`, the H200
    ladder's result, when there is one)."""
    lines = [
        "# Client throughput: one client process over N replicas",
        "",
        "| backend | client path | N | req/s | client CPU ms/req | client-bound req/s "
        "| client CPU share | servers CPU share | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['backend']} | {r['client_path']} | {r['replicas']} | {r['requests_per_s']} "
            f"| {r['client_cpu_ms_per_request']} | {r['client_bound_rps']} "
            f"| {r['client_cpu_share']} | {r['servers_cpu_share']} | {r['errors']} |"
        )
    bounds = ceilings(result["rows"])
    ranges = "; ".join(f"{p} {lo:,.0f}-{hi:,.0f}" for p, (lo, hi) in sorted(bounds.items()))
    lines += ["", f"One core of client sustains (client-bound req/s over all rows): {ranges}."]
    if demand is None:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        f"## What {replicas} fast replicas ask of the client",
        "",
        f"Requests/s of {replicas} simulated H200 + llama-3-8b replicas on Q1-Q5 at the ladder's "
        f"top rung (`{DEMAND.name}`, run at {str(demand.get('commit'))[:7]}: requests / one "
        f"replica's simulated engine seconds x {replicas}), against each path's ceiling "
        "(keeps up at its lowest / its highest):",
        "",
        "| query | req/s asked | " + " | ".join(f"{p} keeps up" for p in sorted(bounds)) + " |",
        "|---|---|" + "---|" * len(bounds),
    ]
    for name, rps in replica_demand(demand, replicas):
        keeps = " | ".join(
            "/".join("yes" if bound >= rps else "no" for bound in bounds[p]) for p in sorted(bounds)
        )
        lines.append(f"| {name} | {rps:,.0f} | {keeps} |")
    return "\n".join(lines) + "\n"


def write_report(out: Path, result: dict) -> str:
    """Write `markdown(result, ...)` next to `out` (`.md`); the H200 demand read from
    `DEMAND` when it exists."""
    demand = json.loads(DEMAND.read_text(encoding="utf-8")) if DEMAND.exists() else None
    text = markdown(result, demand)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    return text
