#!/bin/bash
# The rows re-measured after a structural change (issue 25: one dispatch, one writer seam)
# and the Go host beside the standalone binary (issue 28): 40,000 pods, 16 LISTs and 16
# watch-lists in JSON and protobuf against `listwatch serve`, then 16 LISTs and 16
# watch-lists (JSON) and idle watches against the Go example host (go/listwatch/example).
# Results in loadtest/results/rows-*.json. Needs: cargo build --release -p listwatch-cli
# -p listwatch-loadtest (and, for the Go rows, Go on PATH: scripts/test installs it).
# Usage: loadtest/scripts/rows.sh [standalone|go|all]
set -u
cd "$(dirname "$0")/../.."
T="${CARGO_TARGET_DIR:-target}"
what="${1:-all}"
ulimit -n 20000 2>/dev/null || true
wait_ready() { until curl -sf "http://$1/readyz" >/dev/null 2>&1; do sleep 0.5; done; sleep 5; }
run_rows() { # $1 addr, $2 pid, $3 label
  local LT="$T/release/listwatch-loadtest --url http://$1 --pid $2 --expect 40000"
  $LT --scenario list --clients 1 --out /tmp/warm.json >/dev/null
  for s in list watchlist; do
    $LT --scenario "$s" --clients 16 --out "loadtest/results/rows-$3-$s-16.json" | tail -1
    [ "$3" = standalone ] && $LT --scenario "$s" --clients 16 --protobuf --out "loadtest/results/rows-$3-$s-16-protobuf.json" | tail -1
  done
}
if [ "$what" != go ]; then
  "$T/release/listwatch" serve --load ../shared/data/pods-40k.ndjson.gz --listen 127.0.0.1:18080 --log-level warn &
  PID=$!
  wait_ready 127.0.0.1:18080
  run_rows 127.0.0.1:18080 $PID standalone
  "$T/release/listwatch-loadtest" --url http://127.0.0.1:18080 --pid $PID --scenario idle-watchers --clients 10000 --hold 10 --h2-streams-per-conn 100 --out loadtest/results/rows-standalone-idle-10000.json | tail -1
  echo "standalone threads: $(grep Threads /proc/$PID/status)"
  kill $PID; wait $PID 2>/dev/null
fi
if [ "$what" != standalone ]; then
  zcat ../shared/data/pods-40k.ndjson.gz > /tmp/pods-40k.ndjson
  go/listwatch/example/run --listen 127.0.0.1:18082 --load /tmp/pods-40k.ndjson &
  PID=$!
  wait_ready 127.0.0.1:18082
  run_rows 127.0.0.1:18082 $PID go
  # net/http serves no h2c: one HTTP/1.1 connection a watch, as many as the open-file
  # limit allows for both ends.
  "$T/release/listwatch-loadtest" --url http://127.0.0.1:18082 --pid $PID --scenario idle-watchers --clients 8000 --hold 10 --out loadtest/results/rows-go-idle-8000-http1.json | tail -1
  echo "go host threads: $(grep Threads /proc/$PID/status)"
  kill $PID; wait $PID 2>/dev/null
fi
