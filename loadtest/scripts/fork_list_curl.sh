#!/bin/bash
# fork_list_curl.sh NAME PORT PID ACCEPT [CLIENTS] [RUN_DIR]: CLIENTS (16) concurrent curl LISTs of
# all pods from the kube-apiserver (or fork) on 127.0.0.1:PORT whose process is PID, as the admin of
# RUN_DIR (/tmp/k8s-run-16543: run.sh's), with Accept: ACCEPT; its RSS sampled every 100 ms.
# One line: wall time until the last response ended, idle and peak RSS, and each response's
# status and size (counted: a response cut short shows a smaller size).
set -u
name=$1 port=$2 pid=$3 accept=$4 n=${5:-16} R=${6:-/tmp/k8s-run-16543}
TOKEN=$(cut -d, -f1 "$R/tokens.csv") tmp=$(mktemp -d)
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
idle=$(rss)
(while :; do rss; sleep 0.1; done) >"$tmp/rss" 2>/dev/null &
S=$!
t0=$(date +%s.%N) P=""
for i in $(seq "$n"); do
  curl -s -A fork-bench --cacert "$R/ca.pem" -H "Authorization: Bearer $TOKEN" -H "Accept: $accept" \
    -o /dev/null -w "%{http_code} %{size_download}\n" "https://127.0.0.1:$port/api/v1/pods" >"$tmp/c-$i" &
  P="$P $!"
done
wait $P
t1=$(date +%s.%N)
kill $S
peak=$(sort -n "$tmp/rss" | tail -1)
echo "$name $accept clients=$n time=$(echo "$t1 - $t0" | bc)s idle=$((idle / 1024))MiB peak=$((peak / 1024))MiB peak-idle=$(((peak - idle) / 1024))MiB responses: $(cat "$tmp"/c-* | sort | uniq -c | tr -s ' \n' ' ')"
rm -rf "$tmp"
