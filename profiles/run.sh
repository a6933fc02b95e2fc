#!/usr/bin/env bash
# Heap profiles of the server with dhat: baseline (4,000 demo pods, no requests), 4 LISTs,
# 4 watch-lists, 4 paged LISTs; 4 LISTs and 4 watch-lists in protobuf, 4 protobuf
# PartialObjectMetadata LISTs. Writes profiles/dhat-<name>.json.gz and prints the summary.
# (dhat records a backtrace per allocation, so the 40k-pod data set is impractically slow here.)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p listwatch-loadtest
cargo build --release -p listwatch-cli --features dhat-heap --target-dir target/dhat
work=$(mktemp -d)
run() {
  local name=$1; shift
  # DHAT_AT=N writes the profile N s after start (LISTWATCH_DHAT_SECONDS), while requests
  # are still open, instead of at exit.
  (cd "$work" && LISTWATCH_DHAT_SECONDS="${DHAT_AT:-}" exec "$OLDPWD/target/dhat/release/listwatch" serve --demo-pods 4000 --listen 127.0.0.1:18090 --log-level warn) &
  local pid=$!
  until curl -s -o /dev/null 127.0.0.1:18090/readyz; do sleep 0.2; done
  if [ $# -gt 0 ]; then ./target/release/listwatch-loadtest --url http://127.0.0.1:18090 "$@" > /dev/null; fi
  kill -INT "$pid"; wait "$pid" || true
  gzip -9 -c "$work/dhat-heap.json" > "profiles/dhat-$name.json.gz"
}
run base
run list4 --scenario list --clients 4 --expect 4000
run watchlist4 --scenario watchlist --clients 4 --expect 4000
run paged4 --scenario list-paged --clients 4 --expect 4000
run list4-protobuf --scenario list --clients 4 --expect 4000 --protobuf
run watchlist4-protobuf --scenario watchlist --clients 4 --expect 4000 --protobuf
run list4-metadata-protobuf --scenario list --clients 4 --expect 4000 --protobuf --metadata-only
# 2,000 idle watches over 4 HTTP/2 connections, profiled 30 s after start, mid-hold.
DHAT_AT=30 run idle-watchers-h2-2000 --scenario idle-watchers --clients 2000 --h2-streams-per-conn 500 --hold 40
# The same watches arriving over 20 s, as in a running cluster (h2 sizes its slabs by bursts).
DHAT_AT=30 run idle-watchers-h2-2000-ramp20 --scenario idle-watchers --clients 2000 --h2-streams-per-conn 500 --hold 40 --ramp-seconds 20
python3 profiles/summarize.py
