#!/usr/bin/env bash
# Issue 49 item 4 and issue 50's rows: listwatch side by side with an unmodified kube-apiserver
# 1.36, in one run, on one etcd (mutual TLS) holding the same 40,000 pods. Four servers:
#   kube-apiserver  ../shared/k8s/run.sh's, restarted from its own command line with its
#                   in-flight limits raised (64 LISTs and 5,000 watch-lists at once)
#   fork            go/kube-apiserver-listwatch (kube-apiserver with listwatch inside), the
#                   same command line on another port (as loadtest/scripts/fork.sh runs it)
#   lw-etcd         listwatch serve --source etcd on the cluster's etcd, writes passed to
#                   kube-apiserver (--upstream)
#   lw-gateway      listwatch serve --source apiserver in front of kube-apiserver
# Rows, each against the four in turn (listwatch-loadtest; full reports in /tmp/versus):
# 16 and 64 LISTs (JSON, protobuf); 8 client-go informers in 4 modes; 10,000 idle watchers;
# churn (1,000 writes/s, 1,000 watchers); a relist storm; the gateway's consistent-read proof
# (issue 49 item 3); the kubelet storm (5,000 nodes over HTTP/2 on the same pods).
# Writes small summaries to loadtest/results/versus/ and regenerates
# docs/versus-kube-apiserver.md (loadtest/scripts/versus.py render).
#
# Usage: loadtest/scripts/versus.sh        (~1-2 h on 2 cores; everything it starts it stops)
# Smaller, to try it: VERSUS_PODS=2000 VERSUS_NODES=250 VERSUS_WATCHERS=1000 loadtest/scripts/versus.sh
# Other knobs: VERSUS_ROWS (subset of "lists storm idle churn relist proof informers"),
# VERSUS_TARGETS (subset of the four), VERSUS_FORK (a fork binary already built),
# VERSUS_NO_BUILD=1 (use the binaries in the target dir as they are),
# VERSUS_MEM_FLOOR_MIB (a run is stopped when the machine's MemAvailable falls below it:
# default 2500; kube-apiserver's 64 JSON LISTs can take more memory than the machine has),
# VERSUS_ETCD_DATA=DIR (reuse a loaded etcd: DIR/etcd is copied in instead of loading the
# pods through kube-apiserver, ~8 min; when DIR holds none, the run loads and saves one there),
# VERSUS_RESTART=1 (every target is restarted after each of its rows, and after dying in
# one: a Go heap grown by one row, handed back over minutes, neither starves the next row of
# another server nor counts in its own next idle, and listwatch's allocator keeps no pages an
# earlier row grew; every row's peak − idle is from a fresh start), VERSUS_FORK_ARGS (flags added to the fork's,
# e.g. --listwatch-chunk-bytes=65536).
# Needs ../shared/k8s (its build.sh run once), python3, curl, cargo and protoc.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
PODS=${VERSUS_PODS:-40000} NODES=${VERSUS_NODES:-5000} WATCHERS=${VERSUS_WATCHERS:-10000}
CHURN_WATCHERS=${VERSUS_CHURN_WATCHERS:-1000} CHURN_RATE=${VERSUS_CHURN_RATE:-1000}
# The informer rows (16 runs of minutes each) last: a run cut short still has the rest.
ROWS=${VERSUS_ROWS:-lists storm idle churn relist proof informers}
TARGETS=${VERSUS_TARGETS:-kube-apiserver fork lw-etcd lw-gateway}
MEM_FLOOR_MIB=${VERSUS_MEM_FLOOR_MIB:-2500}
# VERSUS_PORT_BASE and VERSUS_WORK let a second run share the machine (ports and work dir).
KPORT=${VERSUS_PORT_BASE:-18643}
EPORT=$((KPORT + 1000)) FPORT=$((KPORT + 1)) LEPORT=$((KPORT + 2)) LGPORT=$((KPORT + 3))
K8S=$REPO/../shared/k8s R=/tmp/k8s-run-$KPORT W=${VERSUS_WORK:-/tmp/versus} OUT=loadtest/results/versus
export VERSUS_WORK=$W VERSUS_RUN_DIR=$R VERSUS_FORK_PORT=$FPORT
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release
LW=$BIN/listwatch LT=$BIN/listwatch-loadtest PY="python3 loadtest/scripts/versus.py"
# Limits: kube-apiserver's defaults (400 / 200) refuse most of 64 LISTs and 5,000
# watch-lists, and its 60 s request timeout cut all of 16 concurrent JSON LISTs of the
# 40,000 pods on this (shared, loaded) machine in a first run: both raised, so that its rows
# measure its times. listwatch's are lifted the same way (loadtest/README.md's storm).
KAS_LIMITS=(--max-requests-inflight=5000 --max-mutating-requests-inflight=1000 --request-timeout=10m)
LW_LIMITS=(--max-requests-inflight 5000 --max-lists-per-user 0)
ulimit -n "$(ulimit -Hn)" # 5,000 storm connections each side

log() { echo "versus: $(date -u +%H:%M:%S) $*" >&2; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu_s() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat" 2>/dev/null || echo 0; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }
mem_available_mib() { awk '/^MemAvailable/ {print int($2 / 1024)}' /proc/meminfo; }
ready() { # ready PORT: /readyz answers ok to the admin
  [ "$(curl -s --max-time 5 --cacert "$R/ca.pem" -H "Authorization: Bearer $TOKEN" \
    "https://127.0.0.1:$1/readyz" 2>/dev/null)" = ok ]
}
wait_ready() { # wait_ready NAME PORT PID [SECONDS]
  local i
  for i in $(seq 1 $((${4:-300} * 2))); do
    ready "$2" && { log "$1 ready (pid $3)"; return 0; }
    kill -0 "$3" 2>/dev/null || { log "$1 exited: see $W/logs/$1.log"; tail -5 "$W/logs/$1.log" >&2; return 1; }
    sleep 0.5
  done
  log "$1 not ready in ${4:-300} s"; return 1
}
# settle NAME PID: wait (at most 3 min) until the server is idle, under 5 % of a core over
# 5 s, so that its idle RSS is idle. kube-apiserver and the fork are ready before their own
# informers synced: the Node authorizer's pod informer decodes all 40,000 pods after /readyz
# says ok (half of them were still arriving 30 s later on a loaded machine), and a row begun
# then counted that informer's growth and its decoding's garbage in the row's peak − idle.
settle() {
  local i a b
  for i in $(seq 1 36); do
    a=$(cpu_s "$2"); sleep 5; b=$(cpu_s "$2")
    if awk -v a="$a" -v b="$b" 'BEGIN { exit !(b - a < 0.25) }'; then
      [ "$i" = 1 ] || log "$1 settled after $((i * 5)) s"
      return 0
    fi
  done
  log "$1 still busy after 180 s (last 5 s: $a -> $b CPU s)"
}
kas() { # kas METHOD PATH [BODY]: a request to kube-apiserver as the admin
  curl -s --cacert "$R/ca.pem" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -X "$1" "https://127.0.0.1:$KPORT$2" ${3:+-d "$3"} -o /dev/null -w '%{http_code}'
}
namespace() { # namespace NAME: with the `default` service account no controller makes here
  kas POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$1\"}}" >/dev/null
  kas POST "/api/v1/namespaces/$1/serviceaccounts" '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}' >/dev/null
}

PIDS=() # what this script started besides run.sh's etcd and kube-apiserver
LT_PID="" SAMPLER=""
cleanup() {
  local p
  for p in $LT_PID $SAMPLER "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  "$K8S/run.sh" stop $KPORT >/dev/null 2>&1 || true
}
trap cleanup EXIT

build() {
  if [ -z "${VERSUS_NO_BUILD:-}" ]; then
    log "building listwatch (etcd source) and the load generator"
    # One package at a time: built together their features unify into a third variant of
    # the shared crates, and every alternation would rebuild them.
    cargo build --release -p listwatch-loadtest >&2
    cargo build --release -p listwatch-cli --features etcd >&2
  fi
  if [ -n "${VERSUS_FORK:-}" ]; then
    FORK=$VERSUS_FORK
  elif [[ " $TARGETS " == *" fork "* ]]; then
    log "building the fork (go/kube-apiserver-listwatch/build.sh)"
    FORK=$(FORK_WORK=/tmp/versus-fork/src go/kube-apiserver-listwatch/build.sh | tail -1)
  else
    FORK=""
  fi
}

start_cluster() { # etcd and kube-apiserver by run.sh, then kube-apiserver again with the limits raised
  "$K8S/run.sh" stop $KPORT >/dev/null 2>&1 || true
  log "starting etcd (mutual TLS) and kube-apiserver"
  ETCD_TLS=1 "$K8S/run.sh" $KPORT $EPORT >/dev/null
  TOKEN=$(cut -d, -f1 $R/tokens.csv)
  local old; old=$(cat $R/apiserver.pid)
  mapfile -t KAS_ARGS < <(tr '\0' '\n' </proc/"$old"/cmdline | tail -n +2)
  mapfile -t ETCD_ARGS < <(tr '\0' '\n' </proc/"$(cat $R/etcd.pid)"/cmdline | tail -n +2)
  stop_pid "$old"
  start_kas
}

stop_pid() { # stop_pid PID: SIGTERM, SIGKILL after 30 s
  local i
  kill "$1" 2>/dev/null || return 0
  for i in $(seq 1 150); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$1" 2>/dev/null || true
}

start_kas() {
  /tmp/k8s-bin/kube-apiserver "${KAS_ARGS[@]}" "${KAS_LIMITS[@]}" </dev/null >>$W/logs/kube-apiserver.log 2>&1 &
  KPID=$!; echo $KPID >$R/apiserver.pid # run.sh stop ends it
  wait_ready kube-apiserver $KPORT $KPID
}

# swap_etcd save|restore: etcd's data directory copied out after loading, or in instead of
# loading (VERSUS_ETCD_DATA); etcd and kube-apiserver are stopped around the copy.
swap_etcd() {
  local epid; epid=$(cat $R/etcd.pid)
  stop_pid "$KPID"; stop_pid "$epid"
  if [ "$1" = save ]; then
    rm -rf "$ETCD_DATA/etcd"; mkdir -p "$ETCD_DATA"; cp -a $R/etcd "$ETCD_DATA/etcd"
  else
    rm -rf $R/etcd; cp -a "$ETCD_DATA/etcd" $R/etcd
  fi
  /tmp/k8s-bin/etcd "${ETCD_ARGS[@]}" </dev/null >>$R/etcd.log 2>&1 &
  echo $! >$R/etcd.pid
  local i
  for i in $(seq 1 120); do
    curl -s --max-time 2 --cacert $R/etcd-ca.pem --cert $R/apiserver-etcd-client.pem --key $R/apiserver-etcd-client.key \
      https://127.0.0.1:$EPORT/health | grep -q '"health":"true"' && break
    sleep 0.5
  done
  start_kas
}

start_fork() { # the fork, with kube-apiserver's command line on its own port
  local args; mapfile -t args < <(printf '%s\n' "${KAS_ARGS[@]}" "${KAS_LIMITS[@]}" ${VERSUS_FORK_ARGS:-} | sed "s/^--secure-port=.*/--secure-port=$FPORT/")
  "$FORK" "${args[@]}" </dev/null >>$W/logs/fork.log 2>&1 &
  FPID=$!; PIDS+=("$FPID")
  wait_ready fork $FPORT $FPID
}

restart() { # restart TARGET: after one of its rows (VERSUS_RESTART=1), or after it died in one
  log "restarting $1"
  case $1 in
    kube-apiserver) stop_pid "$KPID"; start_kas ;;
    fork) stop_pid "$FPID"; start_fork ;;
    lw-etcd) stop_pid "$LEPID"; start_lw lw-etcd ;;
    lw-gateway) stop_pid "$LGPID"; start_lw lw-gateway ;;
  esac
}

ETCD_DATA=${VERSUS_ETCD_DATA:-}
load_pods() {
  $PY pods ../shared/data/pods-40k.ndjson.gz $W/pods.ndjson.gz "$PODS" "$NODES"
  local ns t
  if [ -n "$ETCD_DATA" ] && [ -f "$ETCD_DATA/loaded" ] && [ "$(cat "$ETCD_DATA/loaded")" = "$PODS $NODES" ]; then
    log "reusing the etcd of $ETCD_DATA ($PODS pods, loaded before in $(cat "$ETCD_DATA/load_s") s)"
    swap_etcd restore
    LOAD_S=$(cat "$ETCD_DATA/load_s")
    # What an earlier run's churn, storm and proof left beside the loaded pods.
    for ns in versus-proof $(for t in kube-apiserver fork lw-etcd lw-gateway; do echo versus-churn-$t versus-storm-$t; done); do
      kas DELETE "/api/v1/namespaces/$ns/pods?gracePeriodSeconds=0" >/dev/null
    done
  else
    log "loading $PODS pods through kube-apiserver (spec.nodeName over $NODES storm nodes)"
    local t0=$SECONDS
    python3 loadtest/scripts/kube_load.py https://127.0.0.1:$KPORT "$TOKEN" $R/ca.pem $W/pods.ndjson.gz 8 >&2
    LOAD_S=$((SECONDS - t0))
    for ns in versus-idle $(for t in kube-apiserver fork lw-etcd lw-gateway; do echo versus-churn-$t versus-storm-$t; done); do namespace "$ns"; done
    if [ -n "$ETCD_DATA" ]; then
      log "saving the loaded etcd to $ETCD_DATA"
      swap_etcd save
      echo "$PODS $NODES" >"$ETCD_DATA/loaded"; echo "$LOAD_S" >"$ETCD_DATA/load_s"
    fi
  fi
}

start_listwatch() { # both listwatch targets, TLS with kube-apiserver's serving certificate, kubeadm's files
  local common=(--tls-cert-file $R/apiserver.pem --tls-private-key-file $R/apiserver.key
    --client-ca-file $R/ca.pem --token-auth-file $R/tokens.csv --authorization-mode Node,RBAC
    --upstream https://127.0.0.1:$KPORT --upstream-kubeconfig $R/kubeconfig
    --proxy-client-cert-file $R/front-proxy-client.pem --proxy-client-key-file $R/front-proxy-client.key
    "${LW_LIMITS[@]}" --log-level warn)
  LW_ETCD_ARGS=(serve --source etcd --etcd-servers https://127.0.0.1:$EPORT --etcd-cafile $R/etcd-ca.pem
    --etcd-certfile $R/apiserver-etcd-client.pem --etcd-keyfile $R/apiserver-etcd-client.key
    --listen 127.0.0.1:$LEPORT "${common[@]}")
  LW_GW_ARGS=(serve --source apiserver --listen 127.0.0.1:$LGPORT "${common[@]}")
  if [[ " $TARGETS " == *" lw-etcd "* ]]; then start_lw lw-etcd; fi
  if [[ " $TARGETS " == *" lw-gateway "* ]]; then start_lw lw-gateway; fi
}

start_lw() { # start_lw lw-etcd|lw-gateway: one listwatch target (its log appended to)
  case $1 in
    lw-etcd)
      "$LW" "${LW_ETCD_ARGS[@]}" </dev/null >>$W/logs/lw-etcd.log 2>&1 &
      LEPID=$!; PIDS+=("$LEPID")
      wait_ready lw-etcd $LEPORT $LEPID ;;
    lw-gateway)
      "$LW" "${LW_GW_ARGS[@]}" </dev/null >>$W/logs/lw-gateway.log 2>&1 &
      LGPID=$!; PIDS+=("$LGPID")
      wait_ready lw-gateway $LGPORT $LGPID ;;
  esac
}

target() { # target NAME: sets PORT and PID
  case $1 in
    kube-apiserver) PORT=$KPORT PID=$KPID ;;
    fork) PORT=$FPORT PID=$FPID ;;
    lw-etcd) PORT=$LEPORT PID=$LEPID ;;
    lw-gateway) PORT=$LGPORT PID=$LGPID ;;
  esac
}

# run_row ROW TARGET LOADTEST-ARGS...: one loadtest run against one target. For the listwatch
# targets kube-apiserver's RSS and CPU are sampled meanwhile (the upstream's share). Stopped
# when the machine runs short of memory (other sessions share it), and recorded so.
declare -A DEAD=()
run_row() {
  local row=$1 t=$2; shift 2
  target "$t"
  if [ -n "${DEAD[$t]:-}" ]; then $PY aborted "$row" "$t" "${DEAD[$t]}"; return; fi
  grep -q "^$row	" $W/commands.tsv 2>/dev/null ||
    printf '%s\t%s\n' "$row" "listwatch-loadtest --url https://127.0.0.1:PORT --ca-file ca.pem --token TOKEN --pid PID $*" >>$W/commands.tsv
  local rep=$W/reports/$row-$t.json samples="" up_cpu=0 guard=""
  rm -f "$rep"
  sleep 3 # the previous run's connections closed, its buffers freed
  # After kube-apiserver's big LISTs Go hands its heap back over minutes: wait (at most 2 min)
  # for room, so the next run is not stopped for memory another server still holds.
  local i
  for i in $(seq 1 120); do [ "$(mem_available_mib)" -gt $((MEM_FLOOR_MIB * 2)) ] && break; sleep 1; done
  settle "$t" "$PID"
  [[ $t != lw-* ]] || settle kube-apiserver "$KPID" # the upstream feeds the listwatch targets
  if [[ $t == lw-* ]]; then
    samples=$W/reports/$row-$t.upstream-rss
    (while :; do rss_kib $KPID; sleep 0.1; done) >"$samples" 2>/dev/null &
    SAMPLER=$!
    up_cpu=$(cpu_s $KPID)
  fi
  log "$row against $t (load $(loadavg), MemAvailable $(mem_available_mib) MiB)"
  "$LT" --url https://127.0.0.1:$PORT --ca-file $R/ca.pem --token "$TOKEN" --pid "$PID" "$@" \
    --out "$rep" >$W/logs/$row-$t.log 2>&1 &
  LT_PID=$!
  while kill -0 $LT_PID 2>/dev/null; do
    if [ "$(mem_available_mib)" -lt "$MEM_FLOOR_MIB" ]; then
      guard="stopped: the machine's MemAvailable fell below $MEM_FLOOR_MIB MiB with $t at $(($(rss_kib "$PID") / 1024)) MiB RSS"
      log "$row $t: $guard"
      kill $LT_PID 2>/dev/null || true
      break
    fi
    sleep 0.5
  done
  wait $LT_PID || true
  LT_PID=""
  loadavg >>$W/load.txt
  if [ -n "$SAMPLER" ]; then
    kill $SAMPLER 2>/dev/null || true; wait $SAMPLER 2>/dev/null || true
    SAMPLER=""
    up_cpu=$(awk -v a="$(cpu_s $KPID)" -v b="$up_cpu" 'BEGIN { printf "%.2f", a - b }')
  fi
  $PY extract "$row" "$t" "$rep" $samples ${samples:+$up_cpu}
  [ -z "$guard" ] || $PY aborted "$row" "$t" "$guard"
  if ! kill -0 "$PID" 2>/dev/null; then
    $PY aborted "$row" "$t" "$t exited during $row (see its log; dmesg for the OOM killer)"
    log "$t exited during $row"
    # With restarts, the next row starts it afresh; without, its later rows are not run.
    if [ -n "${VERSUS_RESTART:-}" ]; then
      restart "$t" || DEAD[$t]="$t did not come back after a restart (see its log)"
    else
      DEAD[$t]="$t exited during $row (see its log)"
    fi
  elif [ -n "${VERSUS_RESTART:-}" ]; then
    restart "$t" || DEAD[$t]="$t did not come back after a restart (see its log)"
  fi
}

row_lists() {
  local nf n form t
  # 64 JSON LISTs last: kube-apiserver may take more memory than the machine has for them.
  for nf in 16-json 16-protobuf 64-protobuf 64-json; do for t in $TARGETS; do
    n=${nf%-*} form=${nf#*-}
    run_row list-$n-$form $t --scenario list --clients $n --expect "$PODS" $([ $form = json ] || echo --protobuf)
  done; done
}

row_informers() { # one client, 8 informers sharing client-go's rate limiter, gzip as Go asks
  local mode form t
  for mode in list watchlist; do for form in json protobuf; do for t in $TARGETS; do
    run_row informers-$mode-$form $t --scenario $([ $mode = list ] && echo informers || echo informers-watchlist) \
      --clients 1 --informers 8 --gzip --discard-objects --expect "$PODS" $([ $form = json ] || echo --protobuf)
  done; done; done
}

row_idle() {
  local t
  for t in $TARGETS; do
    run_row idle-watchers $t --scenario idle-watchers --clients "$WATCHERS" --hold 20 \
      --h2-streams-per-conn 200 --namespace versus-idle
  done
}

row_relist() {
  local t
  for t in $TARGETS; do run_row relist-storm $t --scenario relist-storm --clients 16 --expect "$PODS"; done
}

row_proof() { # issue 49 item 3: the gateway's consistent reads of the idle pods
  [[ " $TARGETS " == *" lw-gateway "* ]] || return 0
  printf '%s\t%s\n' proof "python3 loadtest/scripts/versus.py proof https://127.0.0.1:$LGPORT https://127.0.0.1:$KPORT TOKEN ca.pem 4 8" >>$W/commands.tsv
  log "proof: 4 bursts of 8 consistent LISTs through the gateway"
  $PY proof https://127.0.0.1:$LGPORT https://127.0.0.1:$KPORT "$TOKEN" $R/ca.pem 4 8 ||
    log "proof row failed"
  # Its pods would be counted by the rows after it, which expect exactly the loaded pods.
  kas DELETE "/api/v1/namespaces/versus-proof/pods?gracePeriodSeconds=0" >/dev/null
  loadavg >>$W/load.txt
}

row_churn() {
  local t
  for t in $TARGETS; do
    run_row churn $t --scenario churn --clients "$CHURN_WATCHERS" --write-rate "$CHURN_RATE" --hold 10 \
      --namespace versus-churn-$t
  done
}

row_storm() { # the pods are there already (spec.nodeName set at load): every node watch-lists its own
  local t
  for t in $TARGETS; do
    run_row kubelet-storm $t --scenario kubelet-storm --h2 --protobuf --clients "$NODES" \
      --pods-from $W/pods.ndjson.gz --pods "$PODS" --pods-exist --write-rate 1000 --hold 10 \
      --namespace versus-storm-$t
    # The churn may leave pods on the nodes mid-cycle: the next target's nodes must not see them.
    kas DELETE "/api/v1/namespaces/versus-storm-$t/pods?gracePeriodSeconds=0" >/dev/null
  done
}

write_meta() {
  python3 - "$@" <<'PY'
import json, os, sys, platform
W = os.environ["VERSUS_WORK"]
started, ended, dur, commit, load_start, pods, nodes, load_s = sys.argv[1:9]
cmds = {}
for line in open(f"{W}/commands.tsv"):
    k, v = line.rstrip("\n").split("\t", 1)
    cmds.setdefault(k, v)
loads = [float(x) for x in open(f"{W}/load.txt").read().split()] if os.path.exists(f"{W}/load.txt") else []
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))) / 2**20
flags = json.load(open(f"{W}/flags.json"))
command = os.environ.get("VERSUS_COMMAND", "loadtest/scripts/versus.sh")
partial = bool(os.environ.get("VERSUS_ROWS") or os.environ.get("VERSUS_TARGETS"))
path = "loadtest/results/versus/meta.json"
if partial and os.path.exists(path):
    # A partial run replaces only its rows' columns: the earlier run's description stays,
    # and this run is listed beside it (rows, targets, times, load) for the doc to name.
    meta = json.load(open(path))
    run = {"started": started, "ended": ended, "duration_min": round(float(dur) / 60, 1),
           "commit": commit, "command": command, "rows": os.environ.get("VERSUS_ROWS", "all"),
           "targets": os.environ.get("VERSUS_TARGETS", "all"), "load_start": load_start,
           "load_end": open("/proc/loadavg").read().split()[0],
           "load_max": max(loads) if loads else None}
    meta["partial_runs"] = [r for r in meta.get("partial_runs", []) if r["started"] != started] + [run]
    for t in (os.environ.get("VERSUS_TARGETS") or " ".join(flags["targets"])).split():
        meta.setdefault("targets", {})[t] = flags["targets"][t]
    for k, v in cmds.items():
        meta.setdefault("commands", {}).setdefault(k, v)
    meta.setdefault("flags", {}).update(flags["flags"])
    json.dump(meta, open(path, "w"), indent=1, sort_keys=True)
    sys.exit(0)
meta = {
    "command": command,
    "started": started, "ended": ended, "duration_min": round(float(dur) / 60, 1),
    "commit": commit, "machine": f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}",
    "load_start": load_start, "load_end": open("/proc/loadavg").read().split()[0],
    "load_max": max(loads) if loads else None, "pods": int(pods), "nodes": int(nodes),
    "load_s": int(load_s), "commands": cmds, "flags": flags["flags"], "targets": flags["targets"],
    "notes": flags.get("notes", []),
}
json.dump(meta, open(path, "w"), indent=1, sort_keys=True)
PY
}

write_flags() { # what each server ran with, for the doc
  python3 - "$FORK" "${KAS_LIMITS[*]}" "${LW_ETCD_ARGS[*]:-}" "${LW_GW_ARGS[*]:-}" <<'PY'
import json, os, sys
fork, limits, etcd, gw = sys.argv[1:5]
run = os.environ["VERSUS_RUN_DIR"]
tidy = lambda s: s.replace(run + "/", "").replace(run, ".")
json.dump({
    "targets": {
        "kube-apiserver": "/tmp/k8s-bin/kube-apiserver (v1.36.2, ../shared/k8s/build.sh) with run.sh's kubeadm flags + " + limits,
        "fork": (fork or "not run") + " (go/kube-apiserver-listwatch/build.sh) with the same flags, --secure-port=" + os.environ.get("VERSUS_FORK_PORT", "18644")
            + (" " + os.environ["VERSUS_FORK_ARGS"] if os.environ.get("VERSUS_FORK_ARGS") else ""),
        "lw-etcd": "listwatch " + tidy(etcd),
        "lw-gateway": "listwatch " + tidy(gw),
    },
    "flags": {
        "kube-apiserver and the fork": "run.sh's flags (Node,RBAC, NodeRestriction, front proxy, service accounts, etcd over mutual TLS, protobuf storage, watch cache on) + " + limits
            + "; the fork adds its own defaults: kube-apiserver's watch cache off for the resources listwatch serves, listwatch's per-user caps off, its LIST cap = the two in-flight limits, 16 KiB chunks (docs/embedding-go.md)"
            + (" and " + os.environ["VERSUS_FORK_ARGS"] if os.environ.get("VERSUS_FORK_ARGS") else ""),
        "listwatch (both)": "--max-requests-inflight 5000 --max-lists-per-user 0 (what loadtest/README.md's storm lifts); TLS with kube-apiserver's serving certificate; the admin token from run.sh's tokens.csv (--token-auth-file), Node,RBAC from the followed objects; writes passed to kube-apiserver as the front proxy",
    },
}, open(os.environ["VERSUS_WORK"] + "/flags.json", "w"), indent=1)
PY
}

main() {
  local started t0 load_start
  started=$(date -u '+%Y-%m-%d %H:%M') t0=$SECONDS load_start=$(loadavg)
  rm -rf $W; mkdir -p $W/reports $W/logs $OUT
  # A partial run (some rows, or some servers) keeps the other rows' and servers' figures.
  [ -n "${VERSUS_ROWS:-}${VERSUS_TARGETS:-}" ] || rm -f $OUT/*.json
  build
  start_cluster
  load_pods
  [[ " $TARGETS " == *" fork "* ]] && start_fork
  start_listwatch
  write_flags
  KPID=$(cat $R/apiserver.pid)
  sleep 10 # every server idle with its caches filled
  local row commit
  commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates loadtest/src || echo ' + uncommitted changes')"
  for row in $ROWS; do
    "row_$row"
    # After every row: a run cut short still leaves a doc of what it measured.
    write_meta "$started" "$(date -u '+%Y-%m-%d %H:%M')" $((SECONDS - t0)) "$commit" \
      "$load_start" "$PODS" "$NODES" "${LOAD_S:-0}"
    $PY render
  done
  log "done in $(((SECONDS - t0) / 60)) min: docs/versus-kube-apiserver.md, loadtest/results/versus/"
}
main
