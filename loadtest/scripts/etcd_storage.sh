#!/bin/bash
# 40,000 pods in a fresh local etcd, stored as kube-apiserver stores them (protobuf or JSON),
# then listwatch following it: time to ready, RSS, 16 LISTs and 16 watch-lists.
# usage: loadtest/scripts/etcd_storage.sh <protobuf|json> <port>   (uses port..port+2)
# Needs: etcd on PATH; cargo build --release -p listwatch-cli --features etcd -p listwatch-loadtest
#        && cargo build --release -p listwatch-etcd --example put_objects
set -e
enc=$1; port=$2; peer=$((port+1)); lw=$((port+2))
dir=/tmp/etcd-$enc; rm -rf $dir
ETCD_UNSUPPORTED_ARCH= timeout 1500 etcd --name m0 --data-dir $dir --listen-client-urls http://127.0.0.1:$port --advertise-client-urls http://127.0.0.1:$port --listen-peer-urls http://127.0.0.1:$peer --initial-advertise-peer-urls http://127.0.0.1:$peer --initial-cluster m0=http://127.0.0.1:$peer --quota-backend-bytes 4294967296 --experimental-watch-progress-notify-interval=100ms > /tmp/etcd-$enc.log 2>&1 &
sleep 2
cd "$(dirname "$0")/../.."
./target/release/examples/put_objects http://127.0.0.1:$port $enc ../shared/data/pods-40k.ndjson.gz
t0=$(date +%s.%N)
./target/release/listwatch serve --source etcd --etcd-endpoints http://127.0.0.1:$port --listen 127.0.0.1:$lw --log-level warn > /tmp/lw-$enc.log 2>&1 &
PID=$!
until curl -sf http://127.0.0.1:$lw/readyz >/dev/null; do sleep 0.05; done
t1=$(date +%s.%N)
echo "ready after $(echo "$t1 - $t0" | bc) s"
sleep 3
echo "idle RSS: $(grep VmRSS /proc/$PID/status)"
for s in list watchlist; do
./target/release/listwatch-loadtest --url http://127.0.0.1:$lw --pid $PID --scenario $s --clients 16 --expect 40000 --out loadtest/results/etcd-$enc-$s-16.json | tail -3
done
echo "RSS after: $(grep VmRSS /proc/$PID/status)"
kill $PID
