#!/bin/bash
# 40,000 pods: LISTs and watch-lists of 16 and 64 clients in JSON, protobuf, and
# PartialObjectMetadata (JSON and protobuf); the server's idle RSS before and after serving
# both encodings. Results in loadtest/results/{list,watchlist}-{16,64}[-protobuf][-metadata].json.
# Needs: cargo build --release -p listwatch-cli -p listwatch-loadtest
set -u
cd "$(dirname "$0")/../.."
./target/release/listwatch serve --load ../shared/data/pods-40k.ndjson.gz --listen 127.0.0.1:18080 --log-level warn &
PID=$!
until curl -sf http://127.0.0.1:18080/readyz >/dev/null; do sleep 0.5; done
sleep 8
LT="./target/release/listwatch-loadtest --url http://127.0.0.1:18080 --pid $PID --expect 40000"
rss() { grep VmRSS /proc/$PID/status | awk '{print $2}'; }
echo "idle_json_only_kib $(rss)"
$LT --scenario list --clients 1 --out /tmp/warm.json >/dev/null
echo "after_one_json_list_kib $(rss)"
for n in 16 64; do
  for s in list watchlist; do
    $LT --scenario $s --clients $n --out loadtest/results/$s-$n.json | tail -1
    $LT --scenario $s --clients $n --protobuf --out loadtest/results/$s-$n-protobuf.json | tail -1
    $LT --scenario $s --clients $n --metadata-only --out loadtest/results/$s-$n-metadata.json | tail -1
    $LT --scenario $s --clients $n --protobuf --metadata-only --out loadtest/results/$s-$n-protobuf-metadata.json | tail -1
  done
done
sleep 10
echo "idle_both_served_kib $(rss)"
kill $PID
