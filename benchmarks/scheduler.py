"""relQuery scheduling policies on the simulated engine (relserve.txt §5, Fig. 9, 11, 12), and
their gap to the optimum (infermax_cost_scheduling.txt §5).

    python -m benchmarks.scheduler [--rates 0.35,0.5,0.7] [--gpu A100-40GB] [--model opt-13b]
                                   [--seeds 0,1,2] [--num-relqueries 100] [--small-rates 2,4,8]
                                   [--small-seeds 0,1] [--no-optimum] [--json PATH]

1. Large workloads: every policy (`fcfs`, `vllm-v1`, `sarathi`, `static-priority`, `relserve`,
   `relserve-v1`) serves the same seeded workloads (`benchmarks.lib.workload`: 100 relQueries
   from five templates, 1-100 requests each, Poisson arrivals) at each rate, on a fresh engine
   each time: mean, p50, p99 and max relQuery latency, waiting / core / tail (Eq. 2) and the
   scheduling overhead, means over seeds.
2. Tail sweep: `relserve` and `relserve-v1` at several tail deadlines (`UpdaterConfig.
   tail_deadline_s`): the mean-p99 frontier, and the deadline a default should take (lowest
   mean at the highest rate with p99 no worse than FCFS's at every rate).
3. Starvation: `relserve` at several thresholds (Eq. 13): mean and max latency, max unit
   waiting, and whether every relQuery respected the bound of `policies.updater`.
4. Gap to the optimum: small seeded workloads (8 relQueries of 1-3 requests) at three loads,
   every policy's mean latency over the lower bound of `resources.sim.optimal` (HiGHS).

Writes JSON (default `benchmarks/results/scheduler.json`), markdown (`scheduler.md`) and a
plot (`scheduler.png`: mean latency against load, and the mean-p99 frontier).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks.lib.provenance import write_result
from benchmarks.lib.workload import TEMPLATES, WorkloadConfig, generate_workload
from benchmarks.scheduler_report import markdown, plot
from resources.sim import ApproxTokenizer, SimulatedEngine
from resources.sim.policies import RelServeConfig, RelServePolicy, RelServeV1Policy
from resources.sim.policies.base import ScheduleContext
from resources.sim.policies.relserve_v1 import DEFAULT_TAIL_DEADLINE_S
from resources.sim.policies.updater import UpdaterConfig, max_iteration_s

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_JSON = RESULTS / "scheduler.json"
POLICY_NAMES = ("fcfs", "vllm-v1", "sarathi", "static-priority", "relserve", "relserve-v1")
DEFAULT_RATES = (0.35, 0.5, 0.7)
SMALL_RATES = (2.0, 4.0, 8.0)
SMALL = {"num_relqueries": 8, "max_requests": 3}
OPTIMUM_STEP_S = 0.5
OPTIMUM_TIME_LIMIT_S = 30.0
STARVATION_THRESHOLDS = (None, 2.0, 1.0, 0.5)
TAIL_DEADLINES = {
    "relserve": (None, 60.0, 50.0, 40.0),
    "relserve-v1": (None, 60.0, 50.0, 45.0, 40.0, 35.0),
}


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def make_policy(name: str, tail: float | None = None, threshold: float | None = None):
    """A policy by name; for the RelServe family, with a tail deadline / starvation threshold
    (`relserve-v1` without either argument is its default)."""
    if name == "relserve":
        cfg = UpdaterConfig(tail_deadline_s=tail, starvation_threshold_s=threshold)
        return RelServePolicy(RelServeConfig(updater=cfg))
    if name == "relserve-v1" and (tail, threshold) != (None, None):
        return RelServeV1Policy(
            UpdaterConfig(tail_deadline_s=tail, starvation_threshold_s=threshold)
        )
    return name


def run_one(policy, workload, gpu: str, model: str, tokenizer) -> dict:
    """Serve `workload` with `policy` on a fresh engine; the figures of one run."""
    engine = SimulatedEngine(gpu, model, policy, tokenizer=tokenizer)
    result = engine.run_workload(workload)
    ok = [r for rq in result.relqueries for r in rq.responses if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    out = result.summary().as_dict()
    out.update(
        scheduler_overhead_s=result.scheduler_s,
        makespan_s=result.makespan_s,
        sim_wall_s=result.wall_time_s,
        num_iterations=result.num_iterations,
        num_preemptions=result.num_preemptions,
        token_hit_rate=sum(r.cached_tokens for r in ok) / prompt if prompt else 0.0,
        avg_prompt_tokens=prompt / len(ok) if ok else 0.0,
    )
    overhead = result.policy_overhead
    if "arranger_s" in overhead:
        dpu_aba = overhead["updater_s"] + overhead["arranger_s"]
        out.update(
            updater_arranger_s=dpu_aba,
            updater_arranger_pct_of_simulated=100 * dpu_aba / result.makespan_s,
            updater_arranger_pct_of_wall=100 * dpu_aba / result.wall_time_s,
        )
    return out, result, engine


def _mean(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if isinstance(rows[0][k], int | float)]
    return {k: float(np.mean([r[k] for r in rows])) for k in keys}


def worst_iteration_s(engine: SimulatedEngine) -> float:
    """`updater.max_iteration_s` for `engine`'s limits and cost model."""
    return max_iteration_s(
        ScheduleContext(
            pool=engine._pool,
            max_num_seqs=engine.max_num_seqs,
            max_num_batched_tokens=engine.max_num_batched_tokens,
            coefficients=engine.coefficients,
        )
    )


def large_workloads(args, tokenizer) -> tuple[dict, dict, dict, dict]:
    """Sections 1-3: per policy and rate the means over seeds (and per-seed rows), the tail
    sweep and the starvation table."""
    rates = args.rates
    workloads = {
        (r, s): generate_workload(
            WorkloadConfig(rate=r, num_relqueries=args.num_relqueries, seed=s)
        )
        for r in rates
        for s in args.seeds
    }

    def over_seeds(policy_factory, rate):
        return [
            run_one(policy_factory(), workloads[(rate, s)], args.gpu, args.model, tokenizer)
            for s in args.seeds
        ]

    policies: dict[str, dict] = {}
    for name in POLICY_NAMES:
        policies[name] = {"rate": {}}
        for rate in rates:
            rows = [row for row, _, _ in over_seeds(lambda n=name: make_policy(n), rate)]
            policies[name]["rate"][str(rate)] = {**_mean(rows), "per_seed": rows}
            m = policies[name]["rate"][str(rate)]
            print(
                f"rate {rate:<5} {name:16s} mean {m['mean_latency_s']:7.2f} p99 "
                f"{m['p99_latency_s']:7.2f} max {m['max_latency_s']:7.2f} s",
                flush=True,
            )
    tail: dict[str, list[dict]] = {}
    for name, deadlines in TAIL_DEADLINES.items():
        tail[name] = []
        for d in deadlines:
            entry = {"tail_deadline_s": d, "rate": {}}
            for rate in rates:
                factory = (lambda n=name, d=d: make_policy(n, tail=d)) if d else None
                if name == "relserve-v1" and d is None:
                    factory = lambda: RelServeV1Policy(UpdaterConfig())  # noqa: E731
                if factory is None:  # relserve without a tail rule: its main-table row
                    m = policies[name]["rate"][str(rate)]
                else:
                    m = _mean([row for row, _, _ in over_seeds(factory, rate)])
                entry["rate"][str(rate)] = {
                    k: m[k]
                    for k in ("mean_latency_s", "p50_latency_s", "p99_latency_s", "max_latency_s")
                }
            tail[name].append(entry)
            print(f"tail {name} deadline {d}: {entry['rate']}", flush=True)
    starvation: dict[str, list[dict]] = {}
    for rate in rates:
        starvation[str(rate)] = []
        for threshold in STARVATION_THRESHOLDS:
            runs = over_seeds(lambda t=threshold: make_policy("relserve", threshold=t), rate)
            rows = [row for row, _, _ in runs]
            violations = 0
            if threshold is not None:
                for _, result, eng in runs:
                    it = worst_iteration_s(eng)
                    violations += sum(
                        t.waiting_s > max(threshold * t.num_requests, it) + 1e-9
                        for t in result.timings
                    )
            entry = {
                "threshold_s_per_request": threshold,
                "mean_latency_s": float(np.mean([r["mean_latency_s"] for r in rows])),
                "p99_latency_s": float(np.mean([r["p99_latency_s"] for r in rows])),
                "max_latency_s": float(np.mean([r["max_latency_s"] for r in rows])),
                "max_unit_waiting_s": float(max(r["max_unit_waiting_s"] for r in rows)),
                "relqueries_past_bound": violations,
            }
            starvation[str(rate)].append(entry)
            print(f"rate {rate} starvation threshold {threshold}: {entry}", flush=True)
    return policies, tail, starvation, workloads


def choose_tail_default(tail: list[dict], fcfs: dict, rates: list[float]) -> float | None:
    """The deadline with the lowest mean at the highest rate among those whose p99 is no
    worse than FCFS's at every rate (None if none is)."""
    top = str(rates[-1])
    ok = [
        e
        for e in tail
        if e["tail_deadline_s"] is not None
        and all(
            e["rate"][str(r)]["p99_latency_s"] <= fcfs["rate"][str(r)]["p99_latency_s"]
            for r in rates
        )
    ]
    if not ok:
        return None
    return min(ok, key=lambda e: e["rate"][top]["mean_latency_s"])["tail_deadline_s"]


def gap_to_optimum(args, tokenizer) -> dict:
    """Section 4: per small rate and seed, every policy's mean latency and the optimum."""
    from resources.sim.optimal import optimal_mean_latency, request_specs

    out: dict[str, list[dict]] = {}
    for rate in args.small_rates:
        out[str(rate)] = []
        for seed in args.small_seeds:
            wl = generate_workload(WorkloadConfig(rate=rate, seed=seed, **SMALL))
            means, makespan, budget = {}, 0.0, 0
            for name in POLICY_NAMES:
                row, _, eng = run_one(make_policy(name), wl, args.gpu, args.model, tokenizer)
                means[name] = row["mean_latency_s"]
                makespan = max(makespan, row["makespan_s"])
                budget = max(budget, eng.max_num_batched_tokens)
            eng = SimulatedEngine(args.gpu, args.model, "fcfs", tokenizer=tokenizer)
            opt = optimal_mean_latency(
                request_specs(wl, eng),
                eng.coefficients,
                max_num_batched_tokens=budget,
                max_num_seqs=eng.max_num_seqs,
                kv_tokens=eng.num_kv_blocks * 16,
                step_s=OPTIMUM_STEP_S,
                horizon_s=makespan + 2.0,
                time_limit_s=OPTIMUM_TIME_LIMIT_S,
            )
            entry = {
                "seed": seed,
                "num_requests": sum(len(rq.requests) for rq in wl),
                "policies": means,
                "optimum_bound_s": opt.bound_s,
                "optimum_best_found_s": opt.value_s,
                "solver_status": opt.status,
                "solve_s": opt.solve_s,
                "num_slots": opt.num_slots,
            }
            out[str(rate)].append(entry)
            print(f"small rate {rate} seed {seed}: {entry}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=_floats, default=list(DEFAULT_RATES))
    parser.add_argument("--gpu", default="A100-40GB")
    parser.add_argument("--model", default="opt-13b")
    parser.add_argument("--seeds", type=_ints, default=[0, 1, 2])
    parser.add_argument("--num-relqueries", type=int, default=100)
    parser.add_argument("--small-rates", type=_floats, default=list(SMALL_RATES))
    parser.add_argument("--small-seeds", type=_ints, default=[0, 1])
    parser.add_argument("--no-optimum", action="store_true", help="skip section 4 (HiGHS)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    args.rates = sorted(args.rates)
    if not args.rates or not args.seeds:
        parser.error("need at least one rate and one seed")
    tokenizer = ApproxTokenizer()
    t_start = time.perf_counter()
    policies, tail, starvation, workloads = large_workloads(args, tokenizer)
    optimum = None if args.no_optimum else gap_to_optimum(args, tokenizer)
    rates = args.rates
    top = str(rates[-1])
    fcfs_top = policies["fcfs"]["rate"][top]["per_seed"]
    sizes = [len(rq.requests) for rq in workloads[(rates[-1], args.seeds[0])]]
    source = "llm_assets.data.movies"
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
        "fcfs_saturated_throughput_relqueries_per_s": float(
            np.mean([args.num_relqueries / r["makespan_s"] for r in fcfs_top])
        ),
        "small_workloads": {**SMALL, "rates": args.small_rates, "seeds": args.small_seeds},
        "optimum": {"step_s": OPTIMUM_STEP_S, "time_limit_s": OPTIMUM_TIME_LIMIT_S},
        "relserve_v1_default_tail_deadline_s": DEFAULT_TAIL_DEADLINE_S,
        "benchmark_wall_s": None,
    }
    out = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "workload": workload,
        "policies": policies,
        "highest_rate": rates[-1],
        "tail_sweep": tail,
        "tail_default_from_sweep": {
            name: choose_tail_default(entries, policies["fcfs"], rates)
            for name, entries in tail.items()
        },
        "starvation_tradeoff": starvation,
        "gap_to_optimum": optimum,
    }
    workload["benchmark_wall_s"] = time.perf_counter() - t_start
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, out, indent=2, sort_keys=True)
    md = args.json.with_suffix(".md")
    md.write_text(markdown(out))
    png = args.json.with_suffix(".png")
    plot(out, png)
    print(md.read_text())
    print(f"wrote {args.json}, {md}, {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
