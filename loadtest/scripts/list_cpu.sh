#!/bin/bash
# Server CPU (utime + stime from /proc) for N concurrent LISTs of the 40,000 pods, protobuf
# then JSON, three rounds, with the shared-item counters: issue 27's 8-informer figure.
# usage: loadtest/scripts/list_cpu.sh [clients=8] [port=18080]
# Needs: cargo build --release -p listwatch-cli -p listwatch-loadtest
set -e
n=${1:-8}; port=${2:-18080}
cd "$(dirname "$0")/../.."
./target/release/listwatch serve --load ../shared/data/pods-40k.ndjson.gz --listen 127.0.0.1:$port --log-level warn > /tmp/list-cpu-$port.log 2>&1 &
PID=$!
trap 'kill $PID' EXIT
until curl -sf http://127.0.0.1:$port/readyz >/dev/null; do sleep 0.2; done
field() { awk -v f="$1" '{print $f}' /proc/$PID/stat; }
ticks=$(getconf CLK_TCK)
for round in 1 2 3; do
  for enc in protobuf json; do
    flag=; [ $enc = protobuf ] && flag=--protobuf
    u0=$(field 14); s0=$(field 15)
    ./target/release/listwatch-loadtest --url http://127.0.0.1:$port --scenario list --clients $n \
      --expect 40000 $flag --out /tmp/list-cpu-$port.json > /dev/null 2>&1
    u1=$(field 14); s1=$(field 15)
    shared=$(curl -s http://127.0.0.1:$port/metrics | awk '/^listwatch_shared_protobuf_item_hits/ {print $2}')
    echo "round $round, $n $enc LISTs: server CPU $(( (u1 - u0 + s1 - s0) * 1000 / ticks )) ms (system $(( (s1 - s0) * 1000 / ticks )) ms), shared hits so far $shared"
  done
done
