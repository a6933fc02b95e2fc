#!/bin/bash
# Issue 27's figures for two `listwatch` binaries, alternated in one run (issue 51): 64
# LISTs of the 40,000 pods in JSON and in protobuf, the kubelet storm (5,000 nodes over
# HTTP/2, 150,000 pods, then 1,000 pod writes/s) and the protobuf fan-out per event (churn,
# 1,000 watchers, 1,000 writes/s asked). Each run gets a fresh server on 127.0.0.1, started
# for it and stopped after it, and every run is measured by the same harness, so only the
# server differs. Rounds go scenario by scenario, before then after, RUNS times; the load
# average is recorded beside every run (the machine is shared).
#
# Usage (from anywhere):
#   BEFORE=/path/to/old/listwatch AFTER=/path/to/new/listwatch loadtest/scripts/before-after.sh
# Optional: LOADTEST (the harness; default: listwatch-loadtest beside $AFTER), RUNS (2),
# SCENARIOS ("list64-json list64-protobuf storm churn-protobuf"; churn-json also known),
# DATA (../shared/data/pods-40k.ndjson.gz), OUT (raw reports, default /tmp/before-after;
# they keep per-client arrays and stay out of git), SUMMARY (the summary TSV and JSON are
# written as $SUMMARY.tsv and $SUMMARY.json; default
# loadtest/results/house-before-after/summary), PORT (18280: before uses PORT+1, after
# PORT+2), FIRST_ROUND (1; more appends further rounds to $OUT/runs.tsv), SUMMARIZE_ONLY
# (1: only summarize the runs $OUT/runs.tsv lists), BEFORE_LABEL / AFTER_LABEL (what the
# summary calls the binaries, e.g. their commits; default their paths).
# Needs: cargo build --release -p listwatch-cli -p listwatch-loadtest (the harness is built
# once, beside AFTER; BEFORE needs only listwatch-cli).
set -u
: "${BEFORE:?BEFORE=path to the old listwatch binary}"
: "${AFTER:?AFTER=path to the new listwatch binary}"
BEFORE=$(realpath "$BEFORE") AFTER=$(realpath "$AFTER")
LOADTEST=$(realpath "${LOADTEST:-$(dirname "$AFTER")/listwatch-loadtest}")
cd "$(dirname "$0")/../.."
RUNS="${RUNS:-2}"
SCENARIOS="${SCENARIOS:-list64-json list64-protobuf storm churn-protobuf}"
DATA="${DATA:-../shared/data/pods-40k.ndjson.gz}"
OUT="${OUT:-/tmp/before-after}"
SUMMARY="${SUMMARY:-loadtest/results/house-before-after/summary}"
PORT="${PORT:-18280}"
mkdir -p "$OUT" "$(dirname "$SUMMARY")"
ulimit -n 20000 || { echo "the storm needs ulimit -n 20000" >&2; exit 1; }
LOG="$OUT/runs.tsv"
[ -f "$LOG" ] || printf 'scenario\tside\tround\tport\tstart_utc\tload_before\tload_after\treport\n' > "$LOG"

load() { cut -d' ' -f1-3 /proc/loadavg; }

# $1 binary, $2 port, $3 what (pods: load the 40,000 pods; empty: the storm's server)
start_server() {
  local args=(serve --listen "127.0.0.1:$2" --log-level warn)
  if [ "$3" = pods ]; then
    args+=(--load "$DATA")
  else
    # The README's storm server: anonymous nodes that do not retry, so the caps are lifted.
    args+=(--max-requests-inflight 5000 --max-lists-per-user 0 --response-buffer-mib 700)
  fi
  "$1" "${args[@]}" > "$OUT/server-$2.log" 2>&1 &
  PID=$!
  local i=0
  until curl -sf "http://127.0.0.1:$2/readyz" > /dev/null 2>&1; do
    sleep 0.5
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 $PID 2> /dev/null; then
      echo "server on $2 did not become ready" >&2
      return 1
    fi
  done
  sleep 5 # the load's transient pages settle before the idle RSS is read
}

stop_server() {
  kill "$PID" 2> /dev/null
  wait "$PID" 2> /dev/null
}

# $1 scenario, $2 side, $3 round
run_one() {
  local scen=$1 side=$2 round=$3 bin port what=pods out
  if [ "$side" = before ]; then bin=$BEFORE; port=$((PORT + 1)); else bin=$AFTER; port=$((PORT + 2)); fi
  [ "$scen" = storm ] && what=
  out="$OUT/$scen-$side-$round.json"
  local t0 l0 l1
  t0=$(date -u +%FT%TZ)
  start_server "$bin" "$port" "$what" || { stop_server; return 1; }
  l0=$(load)
  local LT=("$LOADTEST" --url "http://127.0.0.1:$port" --pid "$PID" --out "$out")
  case $scen in
    list64-json) "${LT[@]}" --scenario list --clients 64 --expect 40000 ;;
    list64-protobuf) "${LT[@]}" --scenario list --clients 64 --expect 40000 --protobuf ;;
    churn-protobuf) "${LT[@]}" --scenario churn --clients 1000 --write-rate 1000 --hold 10 --namespace c15 --protobuf ;;
    churn-json) "${LT[@]}" --scenario churn --clients 1000 --write-rate 1000 --hold 10 --namespace c13 ;;
    storm) "${LT[@]}" --scenario kubelet-storm --protobuf --h2 --clients 5000 --pods-from "$DATA" \
      --pods 150000 --write-rate 1000 --hold 10 --namespace storm ;;
    *) echo "unknown scenario $scen" >&2 ;;
  esac > "$OUT/$scen-$side-$round.log" 2>&1
  l1=$(load)
  stop_server
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$scen" "$side" "$round" "$port" "$t0" "$l0" "$l1" "$out" >> "$LOG"
  echo "$t0 $scen $side round $round: load $l0 -> $l1 ($(tail -c 300 "$OUT/$scen-$side-$round.log" | tr -d '\r' | tail -1))"
}

# SUMMARIZE_ONLY=1: summarize what $OUT/runs.tsv already lists (an interrupted run).
if [ -z "${SUMMARIZE_ONLY:-}" ]; then
  for round in $(seq "${FIRST_ROUND:-1}" "$RUNS"); do
    for scen in $SCENARIOS; do
      run_one "$scen" before "$round"
      run_one "$scen" after "$round"
    done
  done
fi

python3 - "$LOG" "$SUMMARY" "${BEFORE_LABEL:-$BEFORE}" "${AFTER_LABEL:-$AFTER}" "$LOADTEST" << 'EOF'
"""Summarizes the raw reports: one row a run, the figures issue 27 cites, and per scenario
the mean of each figure per side and after/before."""
import csv, json, sys

log, summary, before, after, harness = sys.argv[1:6]
rows = list(csv.DictReader(open(log), delimiter="\t"))
mib = lambda kib: None if kib is None else round(kib / 1024, 1)


def figures(scen, r):
    f = {"complete": r.get("complete"), "duration_s": round(r["duration_s"], 2),
         "server_cpu_s": r.get("server_cpu_s") and round(r["server_cpu_s"], 2),
         "idle_mib": mib(r.get("idle_rss_kib")), "peak_minus_idle_mib": mib(r.get("peak_minus_idle_kib"))}
    if scen.startswith("list"):
        fb = r.get("first_byte") or {}
        f["first_byte_seen_p50_ms"] = fb.get("seen_p50_ms") and round(fb["seen_p50_ms"], 1)
        f["first_byte_seen_max_ms"] = fb.get("seen_max_ms") and round(fb["seen_max_ms"], 1)
    elif scen.startswith("churn"):
        c = r["churn"]
        f.update(writes=c["writes"], delivered_events=c["delivered_events"],
                 server_cpu_us_per_event=round(c["server_cpu_us_per_event"], 3),
                 p99_ms=round(c["p99_ms"], 1), every_watcher_every_event=c["every_watcher_saw_every_event"])
    elif scen == "storm":
        k = r["kubelet"]
        clients = r.get("per_client") or []
        synced = sum(1 for c in clients if c.get("seconds", 0) > 0) if isinstance(clients, list) else None
        f.update(nodes=k["nodes"], synced_nodes=synced, sync_p50_s=round(k["sync_s_p50"], 2),
                 sync_max_s=round(k["sync_s_max"], 2),
                 connected_minus_idle_mib=mib(k["connected_rss_kib"] - r["idle_rss_kib"]) if k.get("connected_rss_kib") else None,
                 sync_peak_minus_idle_mib=mib(k.get("sync_peak_minus_idle_kib")),
                 sync_peak_minus_connected_mib=mib(k.get("sync_peak_minus_connected_kib")),
                 server_cpu_ms_per_node_list=k.get("server_cpu_ms_per_node_list") and round(k["server_cpu_ms_per_node_list"], 2),
                 churn_writes=k["churn_writes"], churn_events=k["churn_events"],
                 churn_server_cpu_us_per_event=k.get("server_cpu_us_per_event") and round(k["server_cpu_us_per_event"], 1),
                 every_node_got_its_events=k["every_node_got_its_events"])
    return f


runs = []
for row in rows:
    try:
        rep = json.load(open(row["report"]))
    except (OSError, ValueError) as e:
        runs.append(dict(scenario=row["scenario"], side=row["side"], round=int(row["round"]), error=str(e)))
        continue
    runs.append(dict(scenario=row["scenario"], side=row["side"], round=int(row["round"]),
                     start_utc=row["start_utc"], load_before=row["load_before"], load_after=row["load_after"],
                     **figures(row["scenario"], rep)))

means = {}
for scen in dict.fromkeys(r["scenario"] for r in runs):
    m = {}
    for side in ("before", "after"):
        ok = [r for r in runs if r["scenario"] == scen and r["side"] == side and "error" not in r]
        keys = [k for k in (ok[0] if ok else {}) if isinstance(ok[0][k], (int, float)) and not isinstance(ok[0][k], bool) and k != "round"]
        m[side] = {k: round(sum(r[k] for r in ok if r.get(k) is not None) / max(1, sum(1 for r in ok if r.get(k) is not None)), 3) for k in keys}
        m[side]["runs"] = len(ok)
    m["after_over_before"] = {k: round(m["after"][k] / m["before"][k], 3)
                              for k in m["before"] if k != "runs" and m["after"].get(k) and m["before"][k]}
    means[scen] = m

json.dump(dict(before=before, after=after, harness=harness, runs=runs, means=means),
          open(summary + ".json", "w"), indent=1)
keys = []
for r in runs:
    keys += [k for k in r if k not in keys]
with open(summary + ".tsv", "w") as t:
    t.write("\t".join(keys) + "\n")
    for r in runs:
        t.write("\t".join("" if r.get(k) is None else str(r[k]) for k in keys) + "\n")
for scen, m in means.items():
    print(scen, json.dumps(m["after_over_before"]))
EOF
