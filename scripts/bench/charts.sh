#!/usr/bin/env bash
# Charts from a benchmark run's results.json (scripts/bench/run.sh) with gnuplot, as PNG in
# DIR/charts/: batching.png (tokens/s vs batch size), residency.png (computed tokens per turn,
# resident vs spill to disk vs re-prefill), kernels.png (matvec GB/s per weight type vs measured
# bandwidth), queue.png (submit latency percentiles; jobs/s vs the /healthz floor), engine.png
# (decode tokens/s per model vs its bandwidth roofline, 110M and 1B runs).
#   scripts/bench/charts.sh DIR          (needs gnuplot: apt-get install gnuplot-nox)
set -euo pipefail
dir="$1"
mkdir -p "$dir/charts"
python3 - "$dir" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
res = json.load(open(os.path.join(d, "results.json")))
b = res["benches"]
med = statistics.median
def write(name, rows):
    with open(os.path.join(d, "charts", name), "w") as f:
        for r in rows:
            f.write(" ".join(str(x) for x in r) + "\n")
if "batching" in b:
    runs = b["batching"]["runs"]
    cs = sorted(runs[0]["scaling"], key=int)
    base = med([r["scaling"]["1"] for r in runs]) if "1" in cs else None
    rows = []
    for c in cs:
        v = [r["scaling"][c] for r in runs]
        rows.append((c, med(v), min(v), max(v), base if base else "NaN"))
    write("batching.dat", rows)
if "residency" in b:
    runs = [r for r in b["residency"]["runs"] if r.get("computed_tokens_by_turn")]
    if runs:
        rows = []
        for t in range(len(runs[0]["computed_tokens_by_turn"])):
            a = [r["computed_tokens_by_turn"][t] for r in runs]
            p = [r["computed_tokens_by_turn_reprefill"][t] for r in runs]
            n = [r["prompt_tokens_by_turn"][t] for r in runs]
            s = [r["computed_tokens_by_turn_spill"][t] for r in runs if r.get("computed_tokens_by_turn_spill")]
            spill = (med(s), min(s), max(s)) if s else ("NaN", "NaN", "NaN")
            rows.append((t + 1, med(a), min(a), max(a), med(p), min(p), max(p), med(n), *spill))
        write("residency.dat", rows)
        rows = []
        for label, k in (("resident", "wall_s_resident"), ("spill to disk", "wall_s_spill"),
                         ("re-prefill", "wall_s_reprefill")):
            v = [r[k] for r in runs if r.get(k)]
            if v:
                rows.append(('"' + label + '"', med(v), min(v), max(v)))
        write("residency_wall.dat", rows)
if "bandwidth" in b:
    runs = b["bandwidth"]["runs"]
    threads = sorted(runs[0]["bandwidth_gbps"], key=int)
    types = []
    for m in runs[0]["matvec"]:
        if m["type"] not in types:
            types.append(m["type"])
    rows = []
    for t in types:
        row = [t]
        for th in threads:
            g = [m["gbps"] for r in runs for m in r["matvec"] if m["type"] == t and str(m["threads"]) == th]
            row += [med(g), min(g), max(g)]
        for th in threads:
            row.append(med([r["bandwidth_gbps"][th] for r in runs]))
        rows.append(row)
    write("kernels.dat", rows)
    with open(os.path.join(d, "charts", "kernels.threads"), "w") as f:
        f.write(" ".join(threads) + "\n")
if "queue" in b:
    runs = b["queue"]["runs"]
    rows = []
    for p in ("p50", "p90", "p99", "max"):
        v = [r["latency"][p + "_ms"] for r in runs if p + "_ms" in r.get("latency", {})]
        if v:
            rows.append((p, med(v), min(v), max(v)))
    write("queue_latency.dat", rows)
    rate = [r["latency"]["rate_per_s"] for r in runs]
    rows = []
    for label, key in (("jobs/s", lambda r: r["throughput"]["jobs_per_s"]),
                       ("submits/s", lambda r: r["throughput"]["submit_per_s"]),
                       ("healthz/s (floor)", lambda r: r["healthz_per_s"])):
        v = [key(r) for r in runs]
        rows.append(('"' + label + '"', med(v), min(v), max(v)))
    write("queue_rate.dat", rows)
    with open(os.path.join(d, "charts", "queue.rate"), "w") as f:
        f.write(f"{med(rate):g}\n")
engine = [r for name in ("engine", "engine_1b") for r in b.get(name, {}).get("runs", [])]
if engine:
    by = {}
    for r in engine:
        for m in r.get("results", []):
            e = by.setdefault(m["model"], {"tg": [], "roof": []})
            e["tg"].append(m["tg128_tokens_per_s"])
            e["roof"].append(m["bandwidth_gb_per_s"] * 1e9 / m["weight_bytes_per_token"])
    write("engine.dat", [(k.replace("llama-", ""), med(e["tg"]), min(e["tg"]), max(e["tg"]), med(e["roof"]))
                         for k, e in by.items()])
PY

# NOTE: PNG (pngcairo when there, else libgd png): renders the same everywhere a Markdown file is read.
if gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo; then
  term="set terminal pngcairo size 800,450 font 'sans,10' noenhanced"
else
  term="set terminal png size 800,450 noenhanced"
fi
c="$dir/charts"
if [ -s "$c/batching.dat" ]; then
  gnuplot <<EOF
$term
set output '$c/batching.png'
set title 'Decode throughput vs batch size (median, min-max bars)'
set xlabel 'concurrent sequences'
set ylabel 'aggregate tokens/s'
set logscale x 2
set key top left
set grid
set yrange [0:*]
plot '$c/batching.dat' using 1:2:3:4 with yerrorlines lw 2 pt 7 title 'measured', \
     '' using 1:5 with lines dt 2 lw 2 lc rgb 'gray' title 'batch 1 (baseline)'
EOF
fi
if [ -s "$c/residency.dat" ]; then
  gnuplot <<EOF
$term
set output '$c/residency.png'
set multiplot layout 1,2
set size 0.66,1
set origin 0,0
set title 'Computed tokens per turn (mean over jobs; median of runs)'
set xlabel 'turn'
set ylabel 'tokens computed'
set key at graph 0.98, 0.5 right
set grid
set xtics 1
set yrange [0:*]
plot '$c/residency.dat' using 1:5:6:7 with yerrorlines lw 2 pt 7 title 're-prefill (no residency)', \
     '' using 1:2:3:4 with yerrorlines lw 2 pt 5 title 'resident KV + prefix reuse', \
     '' using 1:9:10:11 with yerrorlines lw 2 pt 9 dt 3 title 'resident, spilled to disk and restored', \
     '' using 1:8 with lines dt 2 lc rgb 'gray' title 'prompt length (re-prefill computes all of it)'
set size 0.34,1
set origin 0.66,0
set title 'workload wall time, s'
unset xlabel
unset ylabel
set xtics auto rotate by -20
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.6 border -1
set key off
plot '$c/residency_wall.dat' using 2:3:4:xtic(1) lc rgb '#4477aa'
unset multiplot
EOF
fi
if [ -s "$c/kernels.dat" ]; then
  read -r -a th <"$c/kernels.threads"
  n=${#th[@]}
  plots=""
  for i in $(seq 0 $((n - 1))); do
    col=$((2 + 3 * i))
    plots+="'$c/kernels.dat' using $col:$((col + 1)):$((col + 2)):xtic(1) title 'matvec ${th[$i]} thread(s)', "
  done
  for i in $(seq 0 $((n - 1))); do
    col=$((2 + 3 * n + i))
    plots+="'$c/kernels.dat' using 0:$col with lines lw 2 dt 2 title 'read bandwidth ${th[$i]} thread(s)', "
  done
  gnuplot <<EOF
$term
set output '$c/kernels.png'
set title 'Decode matvec GB/s per weight type vs measured read bandwidth'
set ylabel 'GB/s'
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.6 border -1
set key outside bottom center horizontal
set grid ytics
set yrange [0:*]
plot ${plots%, }
EOF
fi
if [ -s "$c/queue_latency.dat" ]; then
  rate=$(cat "$c/queue.rate")
  gnuplot <<EOF
$term
set output '$c/queue.png'
set multiplot layout 1,2 title 'Job queue end to end (median, min-max bars)'
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.6 border -1
set grid ytics
set yrange [0:*]
set key off
set title 'submit latency at $rate req/s (ms)'
plot '$c/queue_latency.dat' using 2:3:4:xtic(1) lc rgb '#4477aa'
set title 'rates (per s, log scale)'
set logscale y
set yrange [1:*]
plot '$c/queue_rate.dat' using 2:3:4:xtic(1) lc rgb '#aa7744'
unset multiplot
EOF
fi
if [ -s "$c/engine.dat" ]; then
  gnuplot <<EOF
$term
set output '$c/engine.png'
set title 'Decode tokens/s (tg128) per model vs its bandwidth roofline (median, min-max bars)'
set ylabel 'tokens/s (log scale)'
set logscale y
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.6 border -1
set grid ytics
set key outside bottom center horizontal
set xtics rotate by -30
plot '$c/engine.dat' using 2:3:4:xtic(1) title 'measured', \
     '' using 0:5 with points pt 7 ps 1.5 lc rgb 'black' title 'roofline (read bandwidth / weight bytes per token)'
EOF
fi
ls "$c"/*.png 2>/dev/null >&2 || true
