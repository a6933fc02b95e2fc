#!/bin/bash
# Issue 50's first side-by-side: the listwatch fork of kube-apiserver and the unmodified
# kube-apiserver, both running at once on one etcd (mutual TLS) holding 40,000 pods loaded
# through kube-apiserver; 16 concurrent LISTs of all pods (JSON, then protobuf) against each,
# with the server's RSS sampled (peak − idle) and the time until every client had 40,000.
# Needs ../shared/k8s (its build.sh), curl, bc, python3. The servers stay up afterwards:
# ../shared/k8s/run.sh stop 16543; kill "$(cat /tmp/k8s-run-16543/plain.pid)".
# Usage: loadtest/scripts/fork.sh [CLIENTS]   (results appended to loadtest/results/fork-list.txt)
set -eu
cd "$(dirname "$0")/../.."
CLIENTS=${1:-16} OUT=loadtest/results/fork-list.txt
FORK_PORT=16543 ETCD_PORT=16579 PLAIN_PORT=16544
R=/tmp/k8s-run-$FORK_PORT
FORK=$(go/kube-apiserver-listwatch/build.sh | tail -1)
if ! curl -s --max-time 2 --cacert $R/ca.pem -H "Authorization: Bearer $(cut -d, -f1 $R/tokens.csv 2>/dev/null)" \
  https://127.0.0.1:$FORK_PORT/readyz 2>/dev/null | grep -qx ok; then
  KUBE_APISERVER=$FORK ETCD_TLS=1 ../shared/k8s/run.sh $FORK_PORT $ETCD_PORT >/dev/null
fi
TOKEN=$(cut -d, -f1 $R/tokens.csv)
# The unmodified kube-apiserver with the fork's own flags (run.sh's), on another port.
if [ ! -s $R/plain.pid ] || ! kill -0 "$(cat $R/plain.pid)" 2>/dev/null; then
  mapfile -t ARGS < <(tr '\0' '\n' </proc/"$(cat $R/apiserver.pid)"/cmdline | tail -n +2 |
    sed "s/^--secure-port=.*/--secure-port=$PLAIN_PORT/")
  /tmp/k8s-bin/kube-apiserver "${ARGS[@]}" </dev/null >$R/plain.log 2>&1 &
  echo $! >$R/plain.pid
  until curl -s --max-time 2 --cacert $R/ca.pem -H "Authorization: Bearer $TOKEN" \
    https://127.0.0.1:$PLAIN_PORT/readyz | grep -qx ok; do sleep 1; done
fi
pods=$(curl -s --cacert $R/ca.pem -H "Authorization: Bearer $TOKEN" -H "Accept: application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io" \
  "https://127.0.0.1:$FORK_PORT/api/v1/pods" | grep -o '"kind":"PartialObjectMetadata"' | wc -l)
[ "$pods" -ge 40000 ] || python3 loadtest/scripts/kube_load.py https://127.0.0.1:$PLAIN_PORT "$TOKEN" $R/ca.pem ../shared/data/pods-40k.ndjson.gz 8
sleep 10 # both idle
for t in "fork $FORK_PORT $(cat $R/apiserver.pid)" "kube-apiserver $PLAIN_PORT $(cat $R/plain.pid)"; do
  set -- $t
  for accept in application/json application/vnd.kubernetes.protobuf; do
    loadtest/scripts/fork_list_curl.sh "$1" "$2" "$3" "$accept" "$CLIENTS" $R | tee -a $OUT
    sleep 20 # let the Go heap settle before the next row
  done
done
