#!/usr/bin/env python3
"""Renders docs/BENCHMARKS.md from a run's results.json (scripts/bench/run.sh) and copies it and
its charts to docs/bench/. Called by scripts/bench/report.sh DIR."""
import json
import os
import shutil
import statistics
import sys

ABOUT = {
    "engine": ("CPU forward pass", "pp512 (one 512-token prefill) and tg128 (128 decode steps) tokens/s per "
               "synthetic model, beside the read bandwidth measured in the same run; decode as a fraction of its "
               "memory roofline (bandwidth / weight bytes per token). Each run keeps the best of its internal "
               "repetitions (`--reps`)."),
    "engine_1b": ("CPU forward pass, 1B-class models", "as above on the synthetic 1B-class Llama shape (F32 is "
                  "~4.4 GB, read once per decode token): one pp512 and one tg128 per run; the spread is across "
                  "runs."),
    "bandwidth": ("Kernel roofline", "decode matvec (4096x4096 unless stated) GB/s per weight type at 1 and N "
                  "threads vs the read bandwidth probed between the timings; prefill (batch 64) speedup per token."),
    "batching": ("Continuous batching", "aggregate decode tokens/s with 1/4/16/64 concurrent sequences "
                 "(synthetic 110M Q8_0), vs batch 1."),
    "residency": ("Residency across turns", "multi-turn agents sharing a 256-token system prompt, each turn "
                  "appending the model's 16 output tokens and a 64-token tool result (quick: stories260K, 8 jobs x 4 "
                  "turns; full: synthetic 15M Q8_0, 16 x 8). Three variants of the same workload: *resident* (KV "
                  "pinned in memory across the tool call, prefix reuse on), *spill to disk* (every pause announces "
                  "a 1 h wait, so the job's KV is written to the disk tier with a checksum and restored from the "
                  "file at the next turn; files in a temp dir, so reads may come from the page cache) and "
                  "*re-prefill* (prefix reuse off: every turn recomputes the whole conversation). Token counts are "
                  "exact; computed tokens/turn counts continuation turns."),
    "grammar": ("Constrained decoding", "grammar mask cost per decode step on the 32k llama-spm vocabulary "
                "(microseconds)."),
    "sampler": ("Host sampling", "the host's cost per token of picking it from one sequence's row of logits "
                "(greedy, temperature, top-p, top-k; a grammar mask that allows everything) at 32k and 128k "
                "vocabularies, vs a full sort of the row (what temperature sampling did before it sorted only the "
                "prefix it walks). A decode step pays it once per sequence (microseconds)."),
    "queue": ("Job queue end to end", "one all-in-one `agentqd` (embedded redis-server, temp data dir, "
              "loopback, rate limit off) and `scripts/bench/loadgen.py`: trivial jobs (1 output token on "
              "stories260K; they end `incomplete` = truncated at max_tokens_per_turn, which is their success) "
              "submitted by 4 keep-alive clients through HTTP -> SQLite -> Redis -> worker; jobs/s = jobs / (last "
              "finished_at - first created_at), vs the no-op floor GET /healthz/s from the same clients; then "
              "open-loop submits at a fixed rate and their latency percentiles (quick: 200 jobs, then 20 req/s for "
              "5 s = 100 requests, so p99 is about the max; full: 500 jobs, then 50 req/s for 10 s). The \"node "
              "client\" figures (since session 25; `scripts/bench/queue_node.mjs jobs` and `healthz`): as many jobs "
              "as the same run's BullMQ baseline (5,000 quick, 20,000 full) from 16 keep-alive connections, "
              "first submit (client clock) to last finished_at, after as many jobs from the same client (warm, "
              "as BullMQ's adds and end to end are measured the second time each since session 34), and the "
              "/healthz floor from the same 16. "
              "Durability as run (`durability` in the JSON line, read from the live instance): "
              "DURABILITY."),
}
CHARTS = {
    "batching": ("batching.png", "tokens/s vs batch size"),
    "residency": ("residency.png", "computed tokens per turn, with and without residency"),
    "bandwidth": ("kernels.png", "kernel GB/s per weight type vs measured bandwidth"),
    "queue": ("queue.png", "submit latency percentiles at a fixed rate, and jobs/s vs the no-op floor"),
    "engine": ("engine.png", "decode tokens/s per model and weight type vs the bandwidth roofline"),
}
STATUS = {"ok": "complete", "failed": "**FAILED**", "timeout": "**TIMED OUT**", "skipped": "**SKIPPED**"}


def durability(b):
    """One line from the queue run's durability object (first run; they are the same every run)."""
    d = next((r.get("durability") for r in b["runs"] if r.get("durability")), None)
    if not d:
        return "not recorded by this run"
    save = d.get("redis_save")
    return (f"SQLite journal_mode={d.get('sqlite_journal_mode')}, synchronous={d.get('sqlite_synchronous')} "
            f"(each SQLite commit is fsynced); embedded redis-server appendonly="
            f"{d.get('redis_appendonly')}, appendfsync={d.get('redis_appendfsync')}, "
            f"save={save!r}{' (no RDB snapshots)' if save == '' else ''}")


def fmt(x):
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 100):
        return f"{int(x)}"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    if a >= 0.01 or a == 0:
        return f"{x:.3f}"
    return f"{x:.2g}"


def cell(s):
    if s["n"] == 1 or s["min"] == s["max"]:
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def engine_table(runs, w):
    """Per model: pp512 and tg128 tokens/s, read bandwidth and roofline fraction (median, min-max over runs)."""
    by = {}
    for r in runs:
        for m in r.get("results", []):
            by.setdefault((m["model"], m["type"]), []).append(m)
    if not by:
        return
    w("")
    w("| model | weights | pp512 tokens/s | tg128 tokens/s | read bandwidth GB/s | decode / roofline | "
      "decode / roofline, CPU clock |")
    w("|---|---|---|---|---|---|---|")
    for (model, typ), ms in by.items():
        def sp(f):
            v = [f(m) for m in ms]
            return cell({"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)})
        w(f"| {model} | {typ} | {sp(lambda m: m['pp512_tokens_per_s'])} | {sp(lambda m: m['tg128_tokens_per_s'])} | "
          f"{sp(lambda m: m['bandwidth_gb_per_s'])} | {sp(lambda m: m['roofline_fraction'])} | "
          f"{sp(lambda m: m.get('cpu_clock', {}).get('roofline_fraction', float('nan')))} |")


def main():
    d = sys.argv[1]
    docs = sys.argv[2] if len(sys.argv) > 2 else "docs"
    res = json.load(open(os.path.join(d, "results.json")))
    m = res["meta"]
    os.makedirs(os.path.join(docs, "bench"), exist_ok=True)
    shutil.copy(os.path.join(d, "results.json"), os.path.join(docs, "bench", "results.json"))
    L = []
    w = L.append
    w("# Benchmarks")
    w("")
    w("<!-- Generated by scripts/bench/report.sh from results.json; edit the scripts, not this file. -->")
    w("")
    dirty = ""
    if m["dirty"]:
        files = m.get("dirty_files") or []
        dirty = f" (with uncommitted changes{': ' + ', '.join(f'`{f}`' for f in files) if files else ''})"
    w(f"Numbers from commit `{m['commit']}`{dirty}, "
      f"run {m['date']} in `--{m['mode']}` mode. Every figure is the median of the repetitions with the "
      "spread (min–max) in brackets; a ratio compares a figure with its baseline **from the same run**, "
      "so machine drift cancels out of it more than out of the raw figures.")
    w("")
    sections = m.get("sections") or []
    bad = [x for x in sections if x["status"] != "ok"]
    if bad:
        w("> **This run is incomplete.** " + "; ".join(
            f"`{x['name']}` {STATUS.get(x['status'], x['status']).strip('*').lower()}: {x['reason']}" for x in bad) +
          ". Its figures below are missing or cover only the repetitions that finished; see *Sections*.")
        w("")
    w("## Summary")
    w("")
    w("| benchmark | figure vs same-run baseline | ratio, median (min–max) |")
    w("|---|---|---|")
    for name, b in res["benches"].items():
        items = list(b["ratios"].items())
        if name.startswith("engine"):  # every model's wall-clock roofline fraction (CPU-clock ones below)
            items = [(k, e) for k, e in items if k.endswith("decode vs bandwidth roofline")]
        if name == "bandwidth":  # every type at the most threads ("q8_0 x2: ..."); 1 thread below
            xs = [k.split(":")[0].rsplit(" x", 1)[-1] for k, _ in items]
            top = max((int(x) for x in xs if x.isdigit()), default=None)
            items = [(k, e) for k, e in items if top is None or k.split(":")[0].endswith(f" x{top}")]
        for k, e in items[: 8 if name.startswith("engine") or name == "bandwidth" else 4]:
            w(f"| {name} | {k}: {fmt(e['figure']['median'])} vs {fmt(e['baseline']['median'])} {e['unit']} | "
              f"{cell(e['ratio'])} |")
    w("")
    w("## Machine")
    w("")
    w(f"- CPU: {m['cpu_model']}, `nproc` = {m['nproc']}")
    w(f"- load average (1/5/15 min) at start: {m['loadavg_start']}, at end: {m['loadavg_end']}")
    note = os.environ.get("AGENTQ_BENCH_NOTE")
    if note:
        w(f"- {note}")
    try:
        busy = float(m["loadavg_start"].split()[0]) > 0.5 * m["nproc"] or float(m["loadavg_end"].split()[0]) > 0.5 * m["nproc"]
    except (AttributeError, ValueError, IndexError):
        busy = False
    if busy:
        w("- **The host was shared and busy** (load average above half the core count): wall-clock figures are "
          "pessimistic and noisy; token counts are exact, and the CPU-clock figures and same-run ratios are the "
          "more robust ones.")
    w("")
    w("## Reproduce")
    w("")
    w("```sh")
    w(f"scripts/bench/run.sh --{m['mode']} --out /tmp/bench --report   # = the commands below, then report.sh")
    w("```")
    w("")
    w("| benchmark | repetitions | command |")
    w("|---|---|---|")
    for c in m["commands"]:
        w(f"| {c['bench']} | {c['repetitions']} | `{c['command']}` |")
    w("")
    if sections:
        total = sum(x["wall_s"] for x in sections)
        w("")
        w(f"### Sections (wall time {fmt(total)} s in all)")
        w("")
        w("| section | status | repetitions | wall time s | limit per repetition s | idle-box estimate s | note |")
        w("|---|---|---|---|---|---|---|")
        for x in sections:
            w(f"| {x['name']} | {STATUS.get(x['status'], x['status'])} | {x['reps_done']}/{x['reps_planned']} | "
              f"{fmt(x['wall_s'])} | {x['limit_s']} | {x['reps_planned'] * x['est_s']} | {x['reason']} |")
        w("")
        w("`models` writes the synthetic GGUFs once (`scripts/bench/model.sh`, cached under `$AGENTQ_BENCH_DIR`); "
          "a section that fails or runs past its limit is recorded here and the run goes on.")
        w("")
    w("run.sh runs each command under `nice -n 10` (`AGENTQ_BENCH_NICE`), repetitions back to back. "
      "Tools: `build/bin/agentq-bench_*` (sources in `engine/tools/`), `agentqd` + `scripts/bench/loadgen.py` for "
      "the queue; every command ends in one JSON line, collected verbatim under `benches.<name>.runs` in "
      "results.json ([docs/bench/results.json](bench/results.json) for this page), which also holds every figure's "
      "median/min/max.")
    by_name = {x["name"]: x for x in sections}
    for name, b in res["benches"].items():
        title, about = ABOUT.get(name, (name, ""))
        if name == "queue":
            about = about.replace("DURABILITY", durability(b))
        w("")
        w(f"## {title} (`{name}`)")
        w("")
        w(about + f" Wall time per repetition: {', '.join(fmt(x) for x in b['wall_s'])} s.")
        x = by_name.get(name)
        if x and x["status"] != "ok":
            w("")
            w(f"**Incomplete** ({STATUS.get(x['status'], x['status']).strip('*').lower()}, {x['reps_done']} of "
              f"{x['reps_planned']} repetitions): {x['reason']}.")
        if b["ratios"]:
            w("")
            w("| figure vs same-run baseline | figure | baseline | unit | ratio |")
            w("|---|---|---|---|---|")
            for k, e in b["ratios"].items():
                w(f"| {k} | {cell(e['figure'])} | {cell(e['baseline'])} | {e['unit']} | **{cell(e['ratio'])}** |")
        if name.startswith("engine"):
            engine_table(b["runs"], w)
        if name in CHARTS:
            png, caption = CHARTS[name]
            src = os.path.join(d, "charts", png)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(docs, "bench", png))
                w("")
                w(f"![{caption}](bench/{png})")
        w("")
        w("<details><summary>every figure</summary>")
        w("")
        w("| figure | median (min–max) |")
        w("|---|---|")
        for k, s in b["figures"].items():
            w(f"| `{k}` | {cell(s)} |")
        w("")
        w("</details>")
    for x in sections:  # sections that produced nothing still get their heading, with the reason
        if x["name"] != "models" and x["name"] not in res["benches"]:
            title, about = ABOUT.get(x["name"], (x["name"], ""))
            w("")
            w(f"## {title} (`{x['name']}`)")
            w("")
            w(f"**Not measured** ({STATUS.get(x['status'], x['status']).strip('*').lower()}): {x['reason']}.")
    w("")
    with open(os.path.join(docs, "BENCHMARKS.md"), "w") as f:
        f.write("\n".join(L))
    print(os.path.join(docs, "BENCHMARKS.md"))


if __name__ == "__main__":
    main()
