#!/usr/bin/env bash
# The client-go informer matrix (loadtest/README.md, "Informers"): 1, 8 and 32 informers
# sharing one client (client-go's default limiter, 5/s burst 10) in LIST and watch-list
# mode, and a relist storm of 32 clients, against a server already running at $URL with
# the 40,000 pods loaded (its PID in $PID). Reports go to loadtest/results/informers-*.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
URL=${URL:-http://127.0.0.1:8080}
PID=${PID:?set PID to the server process id}
LT=target/release/listwatch-loadtest
out=loadtest/results
for n in 1 8 32; do
  $LT --url "$URL" --pid "$PID" --scenario informers --clients 1 --informers $n --gzip \
    --expect 40000 --out $out/informers-$n.json
done
for n in 1 8; do
  $LT --url "$URL" --pid "$PID" --scenario informers-watchlist --clients 1 --informers $n --gzip \
    --expect 40000 --out $out/informers-watchlist-$n.json
done
# 32 stores of 40,000 typed Pods do not fit in 24 GiB when they fill at the same pace
# (watch-list) or are all full at once (the relist): decode everything, keep the keys.
$LT --url "$URL" --pid "$PID" --scenario informers-watchlist --clients 1 --informers 32 --gzip \
  --discard-objects --expect 40000 --out $out/informers-watchlist-32.json
$LT --url "$URL" --pid "$PID" --scenario informers-relist --clients 32 --informers 1 --gzip \
  --discard-objects --expect 40000 --out $out/informers-relist-32.json
