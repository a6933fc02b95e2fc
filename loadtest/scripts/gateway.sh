#!/bin/bash
# Issue 26's load rows: listwatch in front of an upstream apiserver (here listwatch on its
# embedded store with 40,000 pods, standing in for kube-apiserver). 64 clients LIST pods
# through the front (`--source apiserver`): what the upstream sees (its request counters
# before and after) and the front's memory; then ConfigMap creates passed through the front
# against the same creates sent to the upstream directly: 10,000 small ones and 200 of 1 MB.
# Needs: cargo build --release -p listwatch-cli -p listwatch-loadtest.
# Usage: loadtest/scripts/gateway.sh   (results in loadtest/results/gateway-*.json)
set -u
cd "$(dirname "$0")/../.."
T="${CARGO_TARGET_DIR:-target}"
UP=127.0.0.1:18180 FRONT=127.0.0.1:18181
LW="$T/release/listwatch" LT="$T/release/listwatch-loadtest"
wait_ready() { until curl -sf "http://$1/readyz" >/dev/null 2>&1; do sleep 0.5; done; }
upstream_requests() { # the upstream's pods LIST/WATCH counters and its open pods watches
  curl -s "http://$UP/metrics" | grep -E '^apiserver_(request_total\{verb="(LIST|WATCH)"|registered_watchers\{)[^}]*resource="pods"' || echo "(no pods LIST or WATCH requests counted)"; }
"$LW" serve --load ../shared/data/pods-40k.ndjson.gz --listen $UP --log-level warn &
UPID=$!
wait_ready $UP
"$LW" serve --source apiserver --upstream http://$UP --listen $FRONT --log-level warn &
FPID=$!
wait_ready $FRONT
sleep 3
echo "upstream, pods requests before the LISTs:"; upstream_requests
$LT --url http://$FRONT --pid $FPID --scenario list --clients 64 --expect 40000 --out loadtest/results/gateway-list-64.json | tail -1
echo "upstream, pods requests after 64 LISTs through the front:"; upstream_requests
for n in direct front; do
  addr=$UP pid=$UPID; [ $n = front ] && addr=$FRONT pid=$FPID
  $LT --url http://$addr --pid $pid --scenario writes --clients 8 --writes 10000 --namespace small-$n --out loadtest/results/gateway-writes-small-$n.json | tail -1
  $LT --url http://$addr --pid $pid --scenario writes --clients 8 --writes 200 --body-kib 1000 --namespace big-$n --out loadtest/results/gateway-writes-1mb-$n.json | tail -1
done
kill $FPID $UPID; wait 2>/dev/null
