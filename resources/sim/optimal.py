"""A lower bound on mean relQuery latency: InferMax's constraint formulation on coarse time steps.

InferMax (`infermax_cost_scheduling.txt` §5) finds optimal schedules by a constraint problem
over batches j and requests i (tokens processed c_ij, KV held m_ij, token generated g_ij,
eviction e_ij; per-batch budget sum c <= C and KV sum m <= M; batch time from the §3.2 cost
model). Indexed by batch, it needs one set of variables per iteration; here time is cut into
slots of `step_s` seconds (the issue's "coarse time steps") and the batch constraints are
summed over the n_s iterations a slot holds. Per slot s (a mixed-integer program, HiGHS):

- x[j,s] >= 0 prompt tokens of prefix node j first computed in s. Nodes are the prompts'
  full KV blocks merged into a trie (prefix sharing: a relQuery's shared instruction, and any
  prefix shared across relQueries, is computed once) plus each request's own tail; D[j,s] = 1
  once node j is complete; a child's tokens need its parent complete (same slot allowed);
- y[r,s] >= 0 decode steps of request r (o_r - 1 of them after its prompt, whose last
  iteration gives the first token), only once r's last node is complete, at most n_s per slot;
  F[r,s] = 1 once r has finished;
- time: f n_s + sum_j (a + 2 b m_j) x[j,s] + sum_r (a + d L_r) y[r,s] <= step_s, where m_j is
  the context before node j (prefill attention c^2 + 2mc >= 2mc per token) and L_r the prompt
  (a decode reads >= L_r KV entries);
- iterations: n_s >= x[j,s] / tokens(j) (work in a slot takes at least one iteration there);
- budget: sum x + sum y <= C n_s; decodes: sum y <= max_num_seqs n_s; KV: every decode step
  holds the request's prompt in one iteration, so sum_r L_r y[r,s] <= M n_s;
- arrival: nothing of a request before its arrival (work in the arrival's slot fits after it);
- completion: C_R >= start of the slot where a request of R finishes, plus that request's own
  work in that slot; C_R >= arrival + the request's time alone on the engine (`alone_s`).

Objective: min sum_R (C_R - arrival_R). Every schedule the simulated engine can run (any
policy, any chunking, eviction and recompute, prefix cache of any size) maps onto a feasible
point of this program with no larger objective: evicted work and recomputes only add tokens,
per-iteration costs are at least the linear terms kept, and a request finishing inside slot s
finishes no earlier than the slot start plus its own work there. So `OptimalResult.bound_s`
(HiGHS's proven dual bound, equal to the optimum when solved) is a lower bound on the mean
latency of every policy; it is exact for relQueries that never overlap (`alone_s`), and within
about one step per relQuery of the engine's optimum otherwise (tests check both).

HiGHS is imported lazily (`highspy`, pinned in pyproject.toml).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from resources.sim.answers import output_token_count, placeholder_answer
from resources.sim.block_cache import BLOCK_SIZE, block_hashes
from resources.sim.cost_model import CostCoefficients
from resources.sim.relquery import RelQuery

__all__ = ["OptimalResult", "RequestSpec", "alone_s", "optimal_mean_latency", "request_specs"]


@dataclass(frozen=True)
class RequestSpec:
    """One request as the program sees it."""

    relquery: int
    """Index of its relQuery (0..N-1)."""
    arrival_s: float
    prompt_len: int
    num_output: int
    """Output tokens it generates (>= 1)."""
    hashes: tuple[int, ...] = ()
    """Chained hashes of its prompt's full blocks (shared prefixes share hashes)."""


@dataclass(frozen=True)
class OptimalResult:
    """The program's solution (seconds)."""

    bound_s: float
    """Proven lower bound on mean relQuery latency (the optimum when `optimal`)."""
    value_s: float
    """Mean latency of the best point found (equals `bound_s` when `optimal`)."""
    optimal: bool
    status: str
    step_s: float
    num_slots: int
    solve_s: float
    completion_s: list[float] = field(default_factory=list)
    """Per relQuery, C_R of the best point found."""


def request_specs(relqueries: Sequence[RelQuery], engine) -> list[RequestSpec]:
    """The requests of `relqueries` as `engine` (a `SimulatedEngine`) would serve them: its
    tokenizer, its output lengths and its block hashes (as `SimulatedEngine._simulate`)."""
    tok = engine.tokenizer
    max_len = engine.deployment.model.max_model_len
    out = []
    for i, rq in enumerate(relqueries):
        for req in rq.requests:
            ids = tok.encode(req.prompt)
            answer = placeholder_answer(req.prompt, req.output, req.max_tokens)
            n_out = output_token_count(answer, req.output, req.max_tokens, tok)
            n_out = min(n_out, max_len - len(ids))
            hashes = tuple(block_hashes(ids)) if engine.enable_prefix_caching else ()
            out.append(RequestSpec(i, rq.arrival_s, len(ids), n_out, hashes))
    return out


def alone_s(spec: RequestSpec, coef: CostCoefficients, cached_tokens: int = 0) -> float:
    """Seconds `spec` takes alone on an idle engine with `cached_tokens` of its prompt cached:
    one prefill iteration, then one decode iteration per further token (the engine's cost)."""
    length, h = spec.prompt_len, cached_tokens
    t = coef.batch_time(length - h, length * length - h * h, 0, 1)
    for j in range(1, spec.num_output):
        t += coef.batch_time(1, 0, length + j - 1, 0)
    return t


class _Program:
    """A sparse MILP assembled row by row (CSR), solved by HiGHS."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.cost: list[float] = []
        self.integer: list[int] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []
        self.starts: list[int] = []
        self.index: list[int] = []
        self.value: list[float] = []

    def var(self, lb=0.0, ub=np.inf, cost=0.0, binary=False) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.cost.append(cost)
        if binary:
            self.integer.append(len(self.lb) - 1)
        return len(self.lb) - 1

    def row(self, terms: dict[int, float], lo=-np.inf, hi=np.inf) -> None:
        self.row_lo.append(lo)
        self.row_hi.append(hi)
        self.starts.append(len(self.index))
        self.index.extend(terms)
        self.value.extend(terms.values())

    def solve(self, time_limit_s: float):
        import highspy

        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(time_limit_s))
        h.setOptionValue("threads", 1)
        n = len(self.lb)
        h.addVars(n, np.array(self.lb), np.array(self.ub))
        h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array(self.cost))
        h.addRows(
            len(self.row_lo),
            np.array(self.row_lo),
            np.array(self.row_hi),
            len(self.index),
            np.array(self.starts, dtype=np.int32),
            np.array(self.index, dtype=np.int32),
            np.array(self.value),
        )
        if self.integer:
            k = len(self.integer)
            h.changeColsIntegrality(
                k,
                np.array(self.integer, dtype=np.int32),
                np.array([highspy.HighsVarType.kInteger] * k),
            )
        h.run()
        info = h.getInfo()
        status = h.modelStatusToString(h.getModelStatus())
        values = np.array(h.getSolution().col_value)
        bound = info.mip_dual_bound if self.integer else info.objective_function_value
        return status, info.objective_function_value, bound, values


def _prefix_nodes(specs: Sequence[RequestSpec]):
    """The prompts' prefix trie with single-child chains of the same requests merged: per
    node [tokens, context before it, parent or -1, requests through it]; per request its last
    node. Keys are chained block hashes (equal hash, equal prefix) and each request's own tail."""
    users: dict[tuple, set[int]] = {}
    parent_of: dict[tuple, tuple | None] = {}
    children: dict[tuple | None, set[tuple]] = {}
    paths: list[list[tuple]] = []
    for r, s in enumerate(specs):
        path = [("b", hv) for hv in s.hashes] + [("own", r)]
        for prev, key in zip([None, *path], path, strict=False):
            users.setdefault(key, set()).add(r)
            parent_of[key] = prev
            children.setdefault(prev, set()).add(key)
        paths.append(path)
    node_of: dict[tuple, int] = {}
    nodes: list[list] = []
    last: list[int] = []
    for r, path in enumerate(paths):
        context = 0
        for key in path:
            tokens = BLOCK_SIZE if key[0] == "b" else specs[r].prompt_len - context
            if key not in node_of:
                up = parent_of[key]
                if up is not None and len(children[up]) == 1 and users[up] == users[key]:
                    node_of[key] = node_of[up]  # one chain, same requests: one node
                    nodes[node_of[key]][0] += tokens
                else:
                    parent = node_of[up] if up is not None else -1
                    node_of[key] = len(nodes)
                    nodes.append([tokens, context, parent, frozenset(users[key])])
            context += tokens
        last.append(node_of[path[-1]])
    return nodes, last


def optimal_mean_latency(
    specs: Sequence[RequestSpec],
    coef: CostCoefficients,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    kv_tokens: int,
    step_s: float,
    horizon_s: float,
    time_limit_s: float = 60.0,
) -> OptimalResult:
    """Solve the program of the module docstring for `specs` (see there). `horizon_s` should
    exceed the makespan of some schedule (a policy's): a relQuery unfinished at the horizon
    counts as finishing there, which keeps the result a lower bound whatever the horizon."""
    if step_s <= 0 or horizon_s <= 0:
        raise ValueError(f"step_s and horizon_s must be > 0, got {step_s} and {horizon_s}")
    if not specs:
        raise ValueError("optimal_mean_latency needs at least one request, got none")
    t0 = time.perf_counter()
    a, b, d, f = coef.a, coef.b, coef.d, coef.f
    num_rq = max(s.relquery for s in specs) + 1
    arrival = [min(s.arrival_s for s in specs if s.relquery == q) for q in range(num_rq)]
    num_slots = int(np.ceil(horizon_s / step_s))
    nodes, last = _prefix_nodes(specs)
    shared = [
        sum(nodes[j][0] for j in _ancestors(nodes, last[r]) if len(nodes[j][3]) > 1)
        for r in range(len(specs))
    ]
    p = _Program()
    n_it = [p.var() for _ in range(num_slots)]
    comp = [p.var(cost=1.0) for _ in range(num_rq)]
    first_slot = [int(min(specs[r].arrival_s for r in who) // step_s) for _, _, _, who in nodes]
    x: dict[tuple[int, int], int] = {}
    done: dict[tuple[int, int], int] = {}
    for j, (tokens, context, parent, who) in enumerate(nodes):
        start = min(specs[r].arrival_s for r in who)
        cum: dict[int, float] = {}
        for s in range(first_slot[j], num_slots):
            x[j, s] = p.var(ub=tokens)
            cum[x[j, s]] = 1.0
            done[j, s] = p.var(ub=1.0, binary=True)
            p.row({**cum, done[j, s]: -tokens}, lo=0.0)  # complete only once all computed
            if s > first_slot[j]:
                p.row({done[j, s]: 1.0, done[j, s - 1]: -1.0}, lo=0.0)
            if parent >= 0:
                p.row({x[j, s]: 1.0, done[parent, s]: -tokens}, hi=0.0)
                p.row({done[j, s]: 1.0, done[parent, s]: -1.0}, hi=0.0)
            if tokens:  # any of its tokens in s means at least one iteration in s
                p.row({n_it[s]: float(tokens), x[j, s]: -1.0}, lo=0.0)
            if s * step_s < start:  # the arrival's slot: work fits after the arrival
                p.row({x[j, s]: a + 2 * b * context}, hi=(s + 1) * step_s - start)
        p.row(cum, hi=tokens)
    # decode steps, completion
    y: dict[tuple[int, int], int] = {}
    for r, spec in enumerate(specs):
        q, leaf, steps = spec.relquery, last[r], spec.num_output - 1
        p.row({comp[q]: 1.0}, lo=arrival[q] + alone_s(spec, coef, shared[r]))
        cum = {}
        fin_prev = None
        for s in range(first_slot[leaf], num_slots):
            own = {x[leaf, s]: a + 2 * b * nodes[leaf][1]}
            if steps:
                y[r, s] = p.var(ub=steps)
                cum[y[r, s]] = 1.0
                p.row({y[r, s]: 1.0, done[leaf, s]: -steps}, hi=0.0)
                p.row({y[r, s]: 1.0, n_it[s]: -1.0}, hi=0.0)
                fin = p.var(ub=1.0, binary=True)
                p.row({**cum, fin: -steps}, lo=0.0)
                p.row({fin: 1.0, done[leaf, s]: -1.0}, hi=0.0)
                if fin_prev is not None:
                    p.row({fin: 1.0, fin_prev: -1.0}, lo=0.0)
                own[y[r, s]] = a + d * spec.prompt_len + f
                if s * step_s < spec.arrival_s:
                    p.row(own, hi=(s + 1) * step_s - spec.arrival_s)
            else:
                fin = done[leaf, s]
            # C_q >= s*step + own work in s if r finishes in slot s (fin - fin_prev = 1);
            # big-M = (s + 1) * step makes the row void otherwise
            big = (s + 1) * step_s
            row = {comp[q]: 1.0, fin: -big}
            if fin_prev is not None:
                row[fin_prev] = big
            for v, c in own.items():
                row[v] = row.get(v, 0.0) - c
            p.row(row, lo=s * step_s - big)
            fin_prev = fin
        if steps:
            p.row(cum, hi=steps)
        # unfinished at the horizon: C_q >= horizon
        p.row({comp[q]: 1.0, fin_prev: num_slots * step_s}, lo=num_slots * step_s)
    # per-slot time, budget, decode slots and KV
    by_slot_x: dict[int, list[tuple[int, int]]] = {}
    for (j, s), v in x.items():
        by_slot_x.setdefault(s, []).append((j, v))
    by_slot_y: dict[int, list[tuple[int, int]]] = {}
    for (r, s), v in y.items():
        by_slot_y.setdefault(s, []).append((r, v))
    for s in range(num_slots):
        xs, ys = by_slot_x.get(s, []), by_slot_y.get(s, [])
        timing = {n_it[s]: f}
        budget = {n_it[s]: -float(max_num_batched_tokens)}
        for j, v in xs:
            timing[v] = a + 2 * b * nodes[j][1]
            budget[v] = 1.0
        seqs = {n_it[s]: -float(max_num_seqs)}
        kv = {n_it[s]: -float(kv_tokens)}
        for r, v in ys:
            timing[v] = a + d * specs[r].prompt_len
            budget[v] = 1.0
            seqs[v] = 1.0
            kv[v] = float(specs[r].prompt_len)
        p.row(timing, hi=step_s)
        p.row(budget, hi=0.0)
        if ys:
            p.row(seqs, hi=0.0)
            p.row(kv, hi=0.0)
    status, value, bound, sol = p.solve(time_limit_s)
    total_arrival = sum(arrival)
    if sol.size == 0 or not np.isfinite(value):
        raise RuntimeError(f"HiGHS found no solution ({status}); raise time_limit_s or step_s")
    return OptimalResult(
        bound_s=(bound - total_arrival) / num_rq,
        value_s=(value - total_arrival) / num_rq,
        optimal=status == "Optimal",
        status=status,
        step_s=step_s,
        num_slots=num_slots,
        solve_s=time.perf_counter() - t0,
        completion_s=[float(sol[c]) for c in comp],
    )


def _ancestors(nodes, j: int) -> list[int]:
    out = []
    while j >= 0:
        out.append(j)
        j = nodes[j][2]
    return out
