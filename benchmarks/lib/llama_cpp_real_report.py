"""The markdown of `python -m benchmarks.llama_cpp --model ...` (`markdown_real`): per model
a table of every rung (tokens, cached tokens as the project and the server count them, hit
rate, the one-slot rule and the simulator on the server's own token ids, prefill / decode /
engine / wall seconds, speed-up, the answers' agreement with the written order and the floor),
the agreement split by whether a row's prompt changed, and where real weights change the
random-weight run's speed-ups and why, computed from the figures (`benchmarks.lib.
llama_cpp_real` measures them; `--render` writes this again from a saved JSON).
"""

from __future__ import annotations


def _share(a: dict | None) -> str:
    if a is None or a["rate"] is None:
        return "n/a"
    return f"{a['rate']:.1%} [{a['lo']:.0%}, {a['hi']:.0%}] of {a['n']}"


def _answers(a: dict) -> str:
    if "counts" in a:
        return ", ".join(f"{k} {v}" for k, v in a["counts"].items())
    if "mean" in a:
        mean = "n/a" if a["mean"] is None else f"{a['mean']:.2f}"
        return f"mean {mean}, {a['parsed']}/{a['answered']} parse"
    return f"{a['distinct']} distinct of {a['answered']}"


def _shape(shape: dict) -> str:
    bos = {True: "BOS added", False: "no BOS", None: "BOS unknown"}[shape.get("add_bos")]
    return f"{shape['layers']} layers x {shape['width']}, vocabulary {shape['vocab']:,}, {bos}"


def _random_costs(reference: dict) -> dict | None:
    """The random-weight model's prefill rate, estimated from its Q4 pair (the engine seconds
    the two orders differ by over the prompt tokens they computed differently: the decode
    work is the same in both), and the share of its Q1 engine seconds that prefill took."""
    jobs = reference.get("jobs", {})
    q4, q1 = jobs.get("q4_job"), jobs.get("q1_job")
    if not q4:
        return None
    saved = q4["computed_tokens"]["original"] - q4["computed_tokens"]["ggr"]
    gained = q4["engine_time_s_median"]["original"] - q4["engine_time_s_median"]["ggr"]
    if saved <= 0 or gained <= 0:
        return None
    per_token = gained / saved
    out = {"prefill_tokens_per_s": 1 / per_token}
    if q1:
        prefill = q1["computed_tokens"]["original"] * per_token
        engine = q1["engine_time_s_median"]["original"]
        out["q1_prefill_share"] = prefill / engine
        if engine > prefill:  # the rest, per-request overheads included, on decoding
            out["decode_tokens_per_s"] = q1["output_tokens"] / (engine - prefill)
    return out


def _ratios(result: dict) -> dict[str, float]:
    """Model -> how many prompt tokens one output token costs (prefill rate / decode rate,
    from the written order of the first job), the random-weight model's as `random`."""
    out = {}
    for name, entry in result["models"].items():
        for figures in entry["jobs"].values():
            o = figures["rungs"]["original"]
            if o["prefill_tokens_per_s"]:
                out[name] = o["prefill_tokens_per_s"] / o["decode_tokens_per_s"]
                break
    costs = _random_costs(result.get("random_weight_reference") or {}) or {}
    if "decode_tokens_per_s" in costs:
        out["random"] = costs["prefill_tokens_per_s"] / costs["decode_tokens_per_s"]
    return out


def _row(job: str, rung: str, m: dict, output: str) -> str:
    same = "=" if m["cached_tokens"] == m["server_cached_tokens"] else "!="
    rule = m["one_slot_rule"]
    agree = "(reference)" if rung == "original" else _share(m["vs_original"])
    if output == "number" and rung != "original":
        diff = m["vs_original"]["mean_abs_diff"]
        agree += "" if diff is None else f", mean abs diff {diff:.2f}"
    return (
        f"| {job.removesuffix('_job')} | {rung} | {m['requests']} "
        f"| {m['prompt_tokens']} | {m['output_tokens_per_request']:.1f} "
        f"| {m['cached_tokens'][0]} {same} {m['server_cached_tokens'][0]} "
        f"| {m['hit_rate']:.1%} "
        f"| {rule['hit_rate']:.1%} ({rule['requests_equal']}/{m['requests']}) "
        f"| {m['sim']['hit_rate']:.1%} / {m['sim_one_slot']['hit_rate']:.1%} "
        f"| {m['prefill_s_median']} | {m['decode_s_median']} "
        f"| {m['engine_time_s_median']} | {m['wall_s_median']} "
        f"| {m['speedup']['measured']:.2f}x ({m['speedup']['sim_one_slot']:.2f}x) "
        f"| {agree} | {_share(m['rerun_agreement'])} | {_answers(m['answers'])} |"
    )


def _split(a: dict, key: str) -> str:
    part = a.get(key)
    return "n/a" if not part or not part["n"] else _share(part)


def markdown_real(result: dict) -> str:
    n_other = len(result.get("uncommitted_elsewhere", []))
    elsewhere = (
        "no other tracked file differed from it"
        if not n_other
        else f"{n_other} other tracked files differed from it: others' work in progress in the "
        "shared tree, listed in the JSON"
    )
    lines = [
        f"# llama.cpp `llama-server` (llama-cpp-python {result['llama_cpp_python']}) with real "
        "weights: the savings and the answers",
        "",
        f"Command: `{result['command']}` at commit `{result['commit']}` ({elsewhere}). "
        f"{result['rows']} rows of movies_small.csv; one slot, {result['threads']} CPU "
        f"thread(s), one request in flight, host prompt cache off, `--swa-full`; each rung run "
        f"{result['repeats']} times, interleaved, each on a fresh server (times: medians). "
        f"Machine: {result['cpus']} CPUs shared with other engineers' tests, load average "
        f"(1/5/15 min) {'/'.join(map(str, result['load_average_start']))} at the start and "
        f"{'/'.join(map(str, result['load_average_end']))} at the end; the whole run took "
        f"{result['total_s'] / 60:.1f} min. Sim: {result['sim_deployment']['gpu']} + "
        f"{result['sim_deployment']['model']}, one sequence at a time, fed the server's own "
        "token ids for each request (so the real model's tokenizer and chat template, not "
        "Llama 3's tokenizer), with its default KV cache (`sim`) or one the size of the slot "
        "(`sim 1-slot`). Q2 is left out to keep the run near 20 minutes (`--jobs q2_job` runs "
        "it with its pushdown rung); no Q1/Q4 rung adds dedup because these rows hold no "
        "duplicate inputs.",
        "",
        "Columns: `cached` is the project's count (`llm_outputs`) and the server's "
        "`llamacpp:prompt_tokens_cached_total` over the run; `one-slot rule` is the prediction "
        "from the server's own token ids (`/apply-template` for a chat model, then `/tokenize` "
        "with special tokens as the server adds them; requests predicted exactly); `prefill s` "
        "/ `decode s` are the server's `prompt_seconds_total` / "
        "`tokens_predicted_seconds_total`; `engine s` the engine's measured makespan, `wall s` "
        "the whole pipeline run; `speed-up` is the written order's engine s over the rung's "
        "(in brackets the sim's, on the 1-slot cache); `agreement` the share of rows whose "
        "answer equals the written order's (Q4: as numbers), Wilson 95% interval; `floor` the "
        "same rung sent twice, each time to a fresh server.",
    ]
    for name, entry in result["models"].items():
        how = "chat template (/chat/completions)" if entry["use_chat"] else "plain completion"
        lines += [
            "",
            f"## {name} (`{entry['file']}`, {entry['bytes'] / 2**20:.0f} MiB, "
            f"{_shape(entry['shape'])}; {how})",
            "",
            "| query | rung | requests | prompt tok | out tok/req | cached: project = server "
            "| hit rate | one-slot rule | sim / sim 1-slot | prefill s | decode s | engine s "
            "| wall s | speed-up (sim) | agreement with written | floor (rerun) | answers |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for job, figures in entry["jobs"].items():
            for rung, m in figures["rungs"].items():
                lines.append(_row(job, rung, m, figures["output"]))
        lines.append("")
        for job, figures in entry["jobs"].items():
            for rung, m in figures["rungs"].items():
                if rung == "original":
                    continue
                a = m["vs_original"]
                n_same = (a.get("same_prompt") or {}).get("n", 0)
                lines.append(
                    f"- {job.removesuffix('_job')} {rung} vs the written order: rows sent the "
                    f"very same prompt ({n_same} of {a['n']}: only the row order, and so the "
                    f"cached prefix, differ) agree {_split(a, 'same_prompt')}; rows whose prompt "
                    f"changed (fields moved) {_split(a, 'changed_prompt')}; the floor (written "
                    f"order twice) {_share(figures['rungs']['original']['rerun_agreement'])}."
                )
    lines += _why(result)
    return "\n".join(lines) + "\n"


def _why(result: dict) -> list[str]:
    """Where real weights change the random-weight speed-ups, and why, from the figures."""
    reference = result.get("random_weight_reference") or {}
    costs = _random_costs(reference) if reference else None
    lines = ["", "## Against the random-weight run (`llama_cpp.md`)", ""]
    shape = reference.get("shape") or {}
    if costs:
        q1 = costs.get("q1_prefill_share")
        lines.append(
            f"- random weights ({shape.get('layers')} layers x {shape.get('width')}, the Llama 3 "
            f"vocabulary of {shape.get('vocab'):,}): prefill about "
            f"{costs['prefill_tokens_per_s']:.0f} tokens/s (estimated from its Q4 pair: engine "
            "s saved / prompt tokens no longer computed)"
            + ("" if q1 is None else f", so prefill was about {q1:.0%} of its Q1 engine s")
            + (
                f", the rest (decoding and per-request work) about "
                f"{costs['decode_tokens_per_s']:.0f} output tokens/s"
                if "decode_tokens_per_s" in costs
                else ""
            )
            + "."
        )
    for job in sorted({j for e in result["models"].values() for j in e["jobs"]}):
        parts = []
        for name, entry in result["models"].items():
            rungs = entry["jobs"].get(job, {}).get("rungs", {})
            if "ggr" not in rungs:
                continue
            g, o = rungs["ggr"], rungs["original"]
            prefill = o["prefill_tokens_per_s"]
            parts.append(
                f"{name} {g['speedup']['measured']:.2f}x (prefill "
                f"{'n/a' if prefill is None else f'{prefill:.0f}'} tokens/s, decode "
                f"{o['decode_tokens_per_s']:.0f} tokens/s, decode "
                f"{o['decode_s_median'] / max(o['engine_time_s_median'], 1e-9):.0%} of the "
                f"written order's engine s, {o['output_tokens_per_request']:.1f} output "
                "tokens/request)"
            )
        ref = reference.get("jobs", {}).get(job)
        was = (
            f"random weights {ref['speedup']:.2f}x ({ref['output_tokens_per_request']:.1f} "
            "output tokens/request)"
            if ref
            else "no random-weight figure"
        )
        lines.append(f"- {job.removesuffix('_job')}: GGR speed-up {'; '.join(parts)}; {was}.")
    ratios = _ratios(result)
    price = (
        "one output token costs as much as "
        + ", ".join(
            f"{v:.0f} prompt tokens with "
            + ("the random-weight model (estimated)" if k == "random" else k)
            for k, v in ratios.items()
        )
        + " (prefill rate / decode rate above)"
        if ratios
        else "see the rates above"
    )
    gaps = [
        (m["hit_rate"] - m["sim_one_slot"]["hit_rate"]) * 100
        for e in result["models"].values()
        for f in e["jobs"].values()
        for m in f["rungs"].values()
    ]
    sim_gap = f"{min(gaps):.1f}-{max(gaps):.1f} points" if gaps else "a few points"
    same_lengths = all(
        abs(f["rungs"]["original"]["output_tokens_per_request"] - ref["output_tokens_per_request"])
        < 0.25
        for e in result["models"].values()
        for job, f in e["jobs"].items()
        if (ref := (result.get("random_weight_reference") or {}).get("jobs", {}).get(job))
    )
    lengths = (
        "The output lengths are not what differs between random and real weights here: each "
        "query's output tokens per request are the same with every model (out tok/req: Q1's "
        "answers run to its 16-token limit, Q4's numbers take about 3)."
        if same_lengths
        else "Output lengths differ between random and real weights (out tok/req above) and "
        "move decode time with them."
    )
    lines += [
        "",
        "Reading. GGR removes prompt tokens only (prefill); the decoding is the same work in "
        "both orders, so a query's speed-up is bounded by how much of its engine time prefill "
        f"takes. {lengths} What differs is the price of a prompt token "
        f"against an output token: {price}. The random-weight model has a few thin layers and "
        "Llama 3's large vocabulary, so a prompt token costs almost nothing while each output "
        "token pays the vocabulary-wide output layer and sampling: its Q1 was decode-bound and "
        "GGR's saving was inside the run-to-run spread. The real models' many layers make a "
        "prompt token dear, so prefill dominates Q4 and a large share of Q1, and GGR's "
        "hit-rate gain turns into a real speed-up on both queries; the dearer a model's output "
        "tokens against its prompt tokens (Gemma 3, with its 262k vocabulary, against "
        "SmolLM2), the closer its Q1 is to decode-bound and the less GGR gains. The "
        f"simulator's 1-slot hit rates are {sim_gap} under the measured ones (16-token "
        "blocks); its speed-ups are for an L4 running Llama-3-8B, where prefill is cheap "
        "against decode, so compare its hit rates, not its seconds.",
        "",
        "Answers. The floor, the written order sent twice to fresh servers, is exact: greedy "
        "decoding on one slot repeats itself when the cache history repeats. GGR's answers "
        "differ from the written order's far more often, and not only where GGR moved fields: "
        "rows whose prompt is byte-identical in both runs (most of Q1, where GGR keeps the "
        "written field order) differ too, because the same prompt computed partly from a "
        "reused prefix is not computed with the same floating-point operations as the whole "
        "prompt in one batch, and these small models' greedy decoding flips on near-ties "
        "(and a 16-token text answer differs if any token does). So for reordering, the floor "
        "that matters is the same prompts in another order (the `same prompt` split above), "
        "not the same requests twice.",
    ]
    for name, entry in result["models"].items():
        for job, figures in entry["jobs"].items():
            m = figures["rungs"]["original"]
            if figures["output"] == "number" and m["spec_violations"] > m["requests"] / 2:
                lines[-1] += (
                    f" {name} answers {job.removesuffix('_job')} outside its range in "
                    f"{m['spec_violations']} of {m['requests']} requests (mean answer "
                    f"{m['answers']['mean']:.1f}; the `answers_obey_output_spec` check fails: "
                    "llama.cpp's number grammar does not encode the range), so its agreement "
                    "there compares those raw numbers."
                )
    return lines
