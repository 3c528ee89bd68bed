"""relQuery scheduling policies on the simulated engine (relserve.txt §5, Fig. 9, 11, 12).

    python -m benchmarks.scheduler [--rates 0.35,0.5,0.7] [--gpu A100-40GB] [--model opt-13b]
                                   [--seeds 0,1,2] [--num-relqueries 100] [--json PATH]

Every policy (`fcfs`, `vllm-v1`, `sarathi`, `static-priority`, `relserve`) serves the same seeded
workloads (`resources.sim.workload`: 100 relQueries from five templates, 1-100 requests each,
Poisson arrivals) at each rate, on a fresh engine each time. Per policy and rate it reports the
mean over seeds of: mean, p99 and max relQuery latency, mean waiting / core / tail time (Eq. 2)
and the scheduling overhead (wall seconds inside the policy's `schedule`; for relserve also the
Dynamic Priority Updater and Adaptive Batch Arranger alone, against simulated and wall time).
At the highest rate it adds relserve's ratios to `fcfs` and `static-priority`; at every rate,
relserve's starvation-threshold trade-off (Fig. 12). Writes JSON (default
`benchmarks/results/scheduler.json`), a markdown table (`scheduler.md`) and a plot of mean
latency against load (`scheduler.png`).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from resources.sim import ApproxTokenizer, SimulatedEngine
from resources.sim.policies import RelServeConfig, RelServePolicy
from resources.sim.policies.updater import UpdaterConfig
from resources.sim.workload import TEMPLATES, WorkloadConfig, generate_workload, movie_rows

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_JSON = RESULTS / "scheduler.json"
POLICY_NAMES = ("fcfs", "vllm-v1", "sarathi", "static-priority", "relserve")
DEFAULT_RATES = (0.35, 0.5, 0.7)
STARVATION_THRESHOLDS = (None, 2.0, 1.0, 0.5)
METRICS = (
    "mean_latency_s",
    "p99_latency_s",
    "max_latency_s",
    "mean_waiting_s",
    "mean_core_s",
    "mean_tail_s",
    "scheduler_overhead_s",
)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def run_one(policy, workload, gpu: str, model: str, tokenizer) -> dict:
    """Serve `workload` with `policy` on a fresh engine; the figures of one run."""
    engine = SimulatedEngine(gpu, model, policy, tokenizer=tokenizer)
    result = engine.run_workload(workload)
    summary = result.summary()
    ok = [r for rq in result.relqueries for r in rq.responses if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    out = summary.as_dict()
    out.update(
        scheduler_overhead_s=result.scheduler_s,
        makespan_s=result.makespan_s,
        sim_wall_s=result.wall_time_s,
        num_iterations=result.num_iterations,
        num_preemptions=result.num_preemptions,
        token_hit_rate=sum(r.cached_tokens for r in ok) / prompt if prompt else 0.0,
        num_requests=sum(len(rq.responses) for rq in result.relqueries),
        avg_prompt_tokens=prompt / len(ok) if ok else 0.0,
    )
    overhead = result.policy_overhead
    if "updater_s" in overhead:
        dpu_aba = overhead["updater_s"] + overhead["arranger_s"]
        out.update(
            updater_s=overhead["updater_s"],
            arranger_s=overhead["arranger_s"],
            queue_sort_s=overhead.get("queue_sort_s", 0.0),
            updater_arranger_pct_of_simulated=100 * dpu_aba / result.makespan_s,
            updater_arranger_pct_of_wall=100 * dpu_aba / result.wall_time_s,
        )
    return out


def _mean(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if isinstance(rows[0][k], int | float)]
    return {k: float(np.mean([r[k] for r in rows])) for k in keys}


def capacity(rows: list[dict], num_relqueries: int) -> float:
    """relQueries per second FCFS sustains when saturated (relQueries / makespan)."""
    return float(np.mean([num_relqueries / r["makespan_s"] for r in rows]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=_floats, default=list(DEFAULT_RATES))
    parser.add_argument("--gpu", default="A100-40GB")
    parser.add_argument("--model", default="opt-13b")
    parser.add_argument("--seeds", type=_ints, default=[0, 1, 2])
    parser.add_argument("--num-relqueries", type=int, default=100)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    rates = sorted(args.rates)
    if not rates or not args.seeds:
        parser.error("need at least one rate and one seed")
    tokenizer = ApproxTokenizer()
    t_start = time.perf_counter()

    per_run: dict[str, dict[float, list[dict]]] = {p: {r: [] for r in rates} for p in POLICY_NAMES}
    workloads: dict[tuple[float, int], list] = {}
    for rate in rates:
        for seed in args.seeds:
            cfg = WorkloadConfig(rate=rate, num_relqueries=args.num_relqueries, seed=seed)
            workload = generate_workload(cfg)
            workloads[(rate, seed)] = workload
            for name in POLICY_NAMES:
                row = run_one(name, workload, args.gpu, args.model, tokenizer)
                row["seed"] = seed
                per_run[name][rate].append(row)
                print(
                    f"rate {rate:<5} seed {seed} {name:16s} mean {row['mean_latency_s']:7.2f} s "
                    f"(wait {row['mean_waiting_s']:6.2f} core {row['mean_core_s']:5.2f} "
                    f"tail {row['mean_tail_s']:5.2f}) wall {row['sim_wall_s']:.2f} s",
                    flush=True,
                )

    top = rates[-1]
    policies = {
        name: {
            "rate": {
                str(r): {**_mean(per_run[name][r]), "per_seed": per_run[name][r]} for r in rates
            }
        }
        for name in POLICY_NAMES
    }
    rel = per_run["relserve"][top]
    ratios = {}
    for base in ("fcfs", "static-priority"):
        b = per_run[base][top]
        ratios[f"relserve_over_{base}"] = {
            "mean_of_means": float(
                np.mean([r["mean_latency_s"] for r in rel])
                / np.mean([r["mean_latency_s"] for r in b])
            ),
            "per_seed": [
                x["mean_latency_s"] / y["mean_latency_s"] for x, y in zip(rel, b, strict=True)
            ],
        }

    starvation: dict[str, list[dict]] = {}
    for rate in rates:
        starvation[str(rate)] = []
        for threshold in STARVATION_THRESHOLDS:
            rows = []
            for seed in args.seeds:
                policy = RelServePolicy(
                    RelServeConfig(updater=UpdaterConfig(starvation_threshold_s=threshold))
                )
                rows.append(
                    run_one(policy, workloads[(rate, seed)], args.gpu, args.model, tokenizer)
                )
            entry = {
                "threshold_s_per_request": threshold,
                "mean_latency_s": float(np.mean([r["mean_latency_s"] for r in rows])),
                "max_latency_s": float(np.mean([r["max_latency_s"] for r in rows])),
                "max_unit_waiting_s": float(max(r["max_unit_waiting_s"] for r in rows)),
            }
            starvation[str(rate)].append(entry)
            print(f"rate {rate} starvation threshold {threshold}: {entry}", flush=True)

    fcfs_top = per_run["fcfs"][top]
    sample = workloads[(top, args.seeds[0])]
    sizes = [len(rq.requests) for rq in sample]
    _, source = movie_rows(10, 0)
    workload = {
        "description": (
            "relserve.txt §5.1: per seed, relQueries drawn uniformly from five templates "
            "(filtering, classification, rating, summarization, open question; output limits "
            "5, 10, 5, 50, 100 tokens) over windows of 1-100 consecutive rows of a 10,000-row "
            "movie-review table, Poisson arrivals; the same relQueries at every rate of a seed."
        ),
        "templates": {
            t.kind: {"fields": list(t.fields), "max_tokens": t.max_tokens} for t in TEMPLATES
        },
        "table_source": source,
        "num_relqueries": args.num_relqueries,
        "seeds": args.seeds,
        "rates_relqueries_per_s": rates,
        "gpu": args.gpu,
        "model": args.model,
        "mean_requests_per_relquery_seed0": float(np.mean(sizes)),
        "avg_prompt_tokens": float(np.mean([r["avg_prompt_tokens"] for r in fcfs_top])),
        "fcfs_token_hit_rate": float(np.mean([r["token_hit_rate"] for r in fcfs_top])),
        "fcfs_saturated_throughput_relqueries_per_s": capacity(fcfs_top, args.num_relqueries),
        "rate_choice": (
            "The simulated A100-40GB + OPT-13B serves this mix at about "
            f"{capacity(fcfs_top, args.num_relqueries):.2f} relQueries/s under FCFS when "
            "saturated (100 relQueries / makespan at the highest rate). The paper's highest load "
            "(1.0 relQuery/s, E2E 146.7 s for 100 relQueries in Table 6) is ~1.5x what its "
            "engine sustains; the rates here span the same range relative to the simulated "
            "capacity: the lowest is below it (little queueing), the middle near it, and at the "
            "highest FCFS queues build up (its makespan exceeds the arrival span, waiting "
            "dominates its latency), as in Fig. 9."
        ),
        "baselines": (
            "fcfs = vLLM v0 (FCFS, prefill first, whole prompts, max_num_batched_tokens 2048, "
            "1% watermark); vllm-v1 = decode first + chunked prefill (8192 tokens); sarathi = "
            "the same stall-free batching with a 512-token budget; static-priority = vLLM v0 "
            "under scheduling_policy='priority' (queues by priority, priority preemption) with "
            "Eq. 6-7 computed once at arrival (L1 = alpha_p * tok, L2 = alpha_d * OL from the "
            "Eq. 9 fit; the identity mapping was measured too and is weaker); relserve = the same "
            "v0 priority scheduler with the Updater and Arranger, no starvation threshold."
        ),
        "benchmark_wall_s": None,
    }
    out = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "workload": workload,
        "policies": policies,
        "highest_rate": top,
        "ratios_at_highest_rate": ratios,
        "starvation_tradeoff": starvation,
    }
    workload["benchmark_wall_s"] = time.perf_counter() - t_start
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    md = args.json.with_suffix(".md")
    md.write_text(markdown(out))
    png = args.json.with_suffix(".png")
    plot(out, png)
    print(md.read_text())
    print(f"wrote {args.json}, {md}, {png}")
    return 0


def markdown(out: dict) -> str:
    """The results as markdown tables."""
    pol = out["policies"]
    rates = out["workload"]["rates_relqueries_per_s"]
    lines = [
        f"# relQuery scheduling on simulated {out['workload']['gpu']} + {out['workload']['model']}",
        "",
        f"{out['workload']['num_relqueries']} relQueries per trace, seeds "
        f"{out['workload']['seeds']}; figures are means over seeds (seconds).",
        "",
        "## Mean relQuery latency",
        "",
        "| policy | " + " | ".join(f"{r}/s" for r in rates) + " |",
        "|---" * (len(rates) + 1) + "|",
    ]
    for name, data in pol.items():
        cells = [f"{data['rate'][str(r)]['mean_latency_s']:.2f}" for r in rates]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    top = str(out["highest_rate"])
    lines += [
        "",
        f"## Breakdown at {top} relQueries/s",
        "",
        "| policy | mean | p99 | max | waiting | core | tail | scheduler s | sim wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, data in pol.items():
        d = data["rate"][top]
        lines.append(
            f"| {name} | {d['mean_latency_s']:.2f} | {d['p99_latency_s']:.2f} | "
            f"{d['max_latency_s']:.2f} | {d['mean_waiting_s']:.2f} | {d['mean_core_s']:.2f} | "
            f"{d['mean_tail_s']:.2f} | {d['scheduler_overhead_s']:.3f} | {d['sim_wall_s']:.2f} |"
        )
    r = out["ratios_at_highest_rate"]
    rs = pol["relserve"]["rate"][top]
    lines += [
        "",
        f"relserve / fcfs = {r['relserve_over_fcfs']['mean_of_means']:.3f} "
        f"(target <= {1 / 2.3:.3f}); relserve / static-priority = "
        f"{r['relserve_over_static-priority']['mean_of_means']:.3f} (target <= {1 / 1.4:.3f}).",
        "",
        f"relserve Updater + Arranger: {rs['updater_s'] + rs['arranger_s']:.3f} s = "
        f"{rs['updater_arranger_pct_of_simulated']:.3f}% of simulated time, "
        f"{rs['updater_arranger_pct_of_wall']:.1f}% of the simulator's wall time "
        f"(queue sorting apart: {rs['queue_sort_s']:.3f} s). Share of the simulator's wall "
        "time by rate: "
        + ", ".join(
            f"{rate}/s {pol['relserve']['rate'][str(rate)]['updater_arranger_pct_of_wall']:.1f}%"
            for rate in rates
        )
        + ". These shares move by about +-3 points from run to run on a shared 2-core "
        "machine (the simulator itself takes well under a second per trace).",
        "",
    ]
    lines += gap_analysis(out)
    lines += FIDELITY_NOTES
    lines += [
        "## relserve's starvation threshold (Fig. 12)",
        "",
        "Means over seeds of mean and max latency; max unit waiting is the largest over seeds.",
        "",
        "| rate | threshold (s/request) | mean latency | max latency | max unit waiting |",
        "|---|---|---|---|---|",
    ]
    for rate, rows in out["starvation_tradeoff"].items():
        for row in rows:
            t = row["threshold_s_per_request"]
            lines.append(
                f"| {rate} | {'none' if t is None else t} | {row['mean_latency_s']:.2f} | "
                f"{row['max_latency_s']:.2f} | {row['max_unit_waiting_s']:.3f} |"
            )
    return "\n".join(lines) + "\n"


FIDELITY_NOTES = [
    "## Fidelity of relserve to relserve.txt §4",
    "",
    "Checked equation by equation against `resources/sim/{pem,policies/updater,"
    "policies/arranger}.py`:",
    "",
    "- Eq. 8/12 (priority reuse): PEM runs for relQueries that arrived, run now or ran at the "
    "previous iteration; every other (all-waiting, untouched) relQuery keeps its priority. "
    "As in the paper.",
    "- Eq. 9: L_prefill = alpha_p utok + beta_p, L_decode = alpha_d req + beta_d, least-squares "
    "fit to the engine's cost model. As in the paper.",
    "- Algorithm 1 / Eq. 10: as printed, with `accum` reset at each flush (the listing never "
    "resets it, which would flush after every later request) and running requests kept in "
    "their decode group for the steps they have left (the paper removes the steps already "
    "decoded; removing the requests outright would price a relQuery in its tail at 0 s).",
    "- Eq. 11: cache-miss ratio from 4 waiting requests looked up in the real prefix cache, "
    "drawn with replacement, at every PEM. As in the paper (sample size is a hyperparameter).",
    "- Eq. 13 (starvation, only in the threshold table below): the paper zeroes the priority of "
    "a waiting relQuery whose waiting time / req(R_0) exceeds the threshold. The implementation "
    "also applies it to started relQueries that still have waiting requests (time since "
    "arrival), looks two iterations ahead and keeps priority 0 until the relQuery finishes, "
    "to make the bound hold (documented in `updater.py`); it does not affect the main table.",
    "- Eq. 14-17: m+ / m- from the priority-sorted queues, preemption / internal / "
    "transitional cases, Delta+ and Delta- as printed, with Eq. 16's minus sign restored "
    "(Delta- is a reduction and p runs iff Delta < 0, impossible with a non-negative Delta-).",
    "",
    "No departure affecting the main table was found, so no decision changed in this review. "
    "The overhead work (incremental decoding stats, cached per-relQuery lists, shared "
    "prefix-cache look-ups, bounded arranger decisions) changes no decision either: "
    "`tests/resources/sim/test_relserve_overhead.py` pins per-relQuery latencies, case counts, "
    "iterations and preemptions to those of the implementation before it.",
    "",
]


def gap_analysis(out: dict) -> list[str]:
    """Where relserve's remaining gap to the paper's ratios comes from (the breakdown)."""
    top = str(out["highest_rate"])
    pol = out["policies"]
    r, sp, fc = (pol[n]["rate"][top] for n in ("relserve", "static-priority", "fcfs"))
    lines = [
        f"## Where the remaining gap comes from ({top}/s)",
        "",
        "| policy | mean | waiting | core + tail |",
        "|---|---|---|---|",
    ]
    for name, d in (("fcfs", fc), ("static-priority", sp), ("relserve", r)):
        lines.append(
            f"| {name} | {d['mean_latency_s']:.2f} | {d['mean_waiting_s']:.2f} | "
            f"{d['mean_core_s'] + d['mean_tail_s']:.2f} |"
        )
    run_r = r["mean_core_s"] + r["mean_tail_s"]
    run_sp = sp["mean_core_s"] + sp["mean_tail_s"]
    target_sp = sp["mean_latency_s"] / 1.4
    target_fc = fc["mean_latency_s"] / 2.3
    lines += [
        "",
        f"relserve cuts core + tail from static-priority's {run_sp:.2f} s to {run_r:.2f} s "
        f"({100 * (1 - run_r / run_sp):.0f}% less: the Updater and Arranger at work, as Fig. 11), "
        f"but waiting, {r['mean_waiting_s']:.2f} s against {sp['mean_waiting_s']:.2f} s, is "
        f"{100 * r['mean_waiting_s'] / r['mean_latency_s']:.0f}% of its latency, and waiting is "
        "where static priority already gets most of what shortest-first ordering can give. "
        f"Reaching 1/1.4 of static-priority ({target_sp:.2f} s) at the same waiting time would "
        f"need core + tail of {target_sp - r['mean_waiting_s']:.2f} s, "
        f"{100 * (1 - (target_sp - r['mean_waiting_s']) / run_r):.0f}% below relserve's. "
        f"Against fcfs the gap is {r['mean_latency_s'] - target_fc:.2f} s of "
        f"{r['mean_latency_s']:.2f} s (target {target_fc:.2f} s). As in the paper's Fig. 11, "
        "relserve's edge over static priority is in core and tail time at similar waiting; "
        "here that edge is bounded by the waiting share.",
        "",
    ]
    return lines


def plot(out: dict, path: Path) -> None:
    """Mean latency against load, one line per policy (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = out["workload"]["rates_relqueries_per_s"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, data in out["policies"].items():
        ax.plot(rates, [data["rate"][str(r)]["mean_latency_s"] for r in rates], "o-", label=name)
    ax.set_xlabel("load (relQueries / s)")
    ax.set_ylabel("mean relQuery latency (s)")
    ax.set_title(f"simulated {out['workload']['gpu']} + {out['workload']['model']}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
