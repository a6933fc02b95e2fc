#!/usr/bin/env bash
# dhat heap profile of a small kubelet storm over HTTP/2: 500 nodes, 15,000 pods (the
# 40k-pod file cycled), each node's protobuf watch-list on a connection of its own, then a
# slow churn (2 writes/s) that keeps every watch open. The profile is written DHAT_AT s after
# the server starts (default 170: past the pods' creation, ~100 s under dhat, and the
# storm), so its t-end is every node's connection and watch held open. Writes
# profiles/dhat-kubelet-storm-h2-500.json.gz and prints the live heap per node by owner.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p listwatch-loadtest
cargo build --release -p listwatch-cli --features dhat-heap --target-dir target/dhat
work=$(mktemp -d)
at=${DHAT_AT:-170}
(cd "$work" && LISTWATCH_DHAT_SECONDS=$at exec "$OLDPWD/target/dhat/release/listwatch" serve --listen 127.0.0.1:18092 --log-level warn) &
pid=$!
until curl -s -o /dev/null 127.0.0.1:18092/readyz; do sleep 0.2; done
./target/release/listwatch-loadtest --url http://127.0.0.1:18092 --pid "$pid" --h2 \
  --scenario kubelet-storm --protobuf --clients 500 --pods-from ../shared/data/pods-40k.ndjson.gz \
  --pods 15000 --write-rate 2 --hold 240 --namespace storm --out "$work/storm.json" > /dev/null &
load=$!
until [ -s "$work/dhat-heap.json" ]; do sleep 1; done
sleep 2
kill "$load" "$pid" 2>/dev/null || true
gzip -9 -c "$work/dhat-heap.json" > profiles/dhat-kubelet-storm-h2-500.json.gz
python3 profiles/by_owner.py profiles/dhat-kubelet-storm-h2-500.json.gz 500
