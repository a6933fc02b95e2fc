#!/bin/bash
# Issue 26's load rows: listwatch in front of an upstream apiserver (here listwatch on its
# embedded store with 40,000 pods, standing in for kube-apiserver). 64 clients LIST pods
# through the front (`--source apiserver`): what the upstream sees (its request counters
# before and after) and the front's memory; then ConfigMap creates passed through the front
# against the same creates sent to the upstream directly: 10,000 small ones and 200 of 1 MB,
# in ROUNDS alternating rounds (direct, front) so that the machine's drift hits both alike.
# Two layouts: "shared" (upstream, front and harness on all of this machine's cores) and
# "apart" (the upstream pinned to CPU 0, the front to CPU 1, the harness on both: the
# upstream is another machine in any real deployment). Needs `taskset` (util-linux), python3 and
# cargo build --release -p listwatch-cli -p listwatch-loadtest.
# Usage: loadtest/scripts/gateway.sh   (results in loadtest/results/gateway-*)
set -u
cd "$(dirname "$0")/../.."
T="${CARGO_TARGET_DIR:-target}"
UP=127.0.0.1:18180 FRONT=127.0.0.1:18181
LW="$T/release/listwatch" LT="$T/release/listwatch-loadtest"
R=loadtest/results ROUNDS="${ROUNDS:-9}"
SUMMARY=$R/gateway-writes.tsv
wait_ready() { until curl -sf "http://$1/readyz" >/dev/null 2>&1; do sleep 0.5; done; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
cpu_s() { awk '{printf "%.2f", ($14+$15)/100}' "/proc/$1/stat"; }
upstream_requests() { # the upstream's pods LIST/WATCH counters and its open pods watches
  curl -s "http://$UP/metrics" | grep -E '^apiserver_(request_total\{verb="(LIST|WATCH)"|registered_watchers\{)[^}]*resource="pods"' || echo "(no pods LIST or WATCH requests counted)"; }
settle() { # until neither server spends CPU (the front may still be applying the last round)
  local a b
  while a="$(cpu_s $UPID) $(cpu_s $FPID)"; sleep 0.5; b="$(cpu_s $UPID) $(cpu_s $FPID)"; [ "$a" != "$b" ]; do :; done
}
start() { # $1: CPU list for the upstream, $2: for the front ("" = not pinned)
  pin() { [ -n "$1" ] && echo "taskset -c $1"; }
  $(pin "$1") "$LW" serve --load ../shared/data/pods-40k.ndjson.gz --listen $UP --log-level warn &
  UPID=$!
  wait_ready $UP
  $(pin "$2") "$LW" serve --source apiserver --upstream http://$UP --authorization-mode AlwaysAllow --listen $FRONT --log-level warn &
  FPID=$!
  wait_ready $FRONT
  sleep 3
}
echo -e "layout\trows\tround\troute\tduration_s\tupstream_cpu_s\tfront_cpu_s" > $SUMMARY
for layout in shared apart; do
  if [ $layout = shared ]; then start "" ""; else start 0 1; fi
  if [ $layout = shared ]; then
    echo "upstream, pods requests before the LISTs:"; upstream_requests
    $LT --url http://$FRONT --pid $FPID --scenario list --clients 64 --expect 40000 --out $R/gateway-list-64.json | tail -1
    echo "upstream, pods requests after 64 LISTs through the front:"; upstream_requests
  fi
  for round in $(seq "$ROUNDS"); do
    for route in direct front; do
      addr=$UP pid=$UPID; [ $route = front ] && addr=$FRONT pid=$FPID
      for rows in small 1mb; do
        args="--writes 10000"; [ $rows = 1mb ] && args="--writes 200 --body-kib 1000"
        out=$R/gateway-writes-$rows-$layout-$route.json
        settle
        u0=$(cpu_s $UPID) f0=$(cpu_s $FPID)
        $LT --url http://$addr --pid $pid --scenario writes --clients 8 $args --namespace $rows-$layout-$route-$round --out $out >/dev/null 2>&1
        d=$(grep -o '"duration_s": *[0-9.]*' $out | grep -o '[0-9.]*$')
        echo -e "$layout\t$rows\t$round\t$route\t$d\t$(minus "$(cpu_s $UPID)" $u0)\t$(minus "$(cpu_s $FPID)" $f0)" | tee -a $SUMMARY
      done
    done
  done
  kill $FPID $UPID; wait 2>/dev/null
done
# Per layout and rows: the median of each round's front / direct, and the median times.
python3 - "$SUMMARY" <<'PY' | tee $R/gateway-writes-medians.txt
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for layout in ("shared", "apart"):
    for kind in ("small", "1mb"):
        t = {(x["round"], x["route"]): float(x["duration_s"]) for x in rows
             if x["layout"] == layout and x["rows"] == kind}
        rounds = sorted({r for r, _ in t})
        ratio = statistics.median(t[r, "front"] / t[r, "direct"] for r in rounds)
        med = {route: statistics.median(t[r, route] for r in rounds) for route in ("direct", "front")}
        print(f"{layout:6} {kind:5} direct {med['direct']:.2f} s  front {med['front']:.2f} s  "
              f"front/direct {ratio:.2f}x  (medians of {len(rounds)} rounds)")
PY
