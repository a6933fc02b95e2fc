#!/usr/bin/env bash
# Builds listwatch's container image with buildah, from scratch: the release binary, exactly
# the shared libraries `ldd` names (and the dynamic loader), an /etc/passwd and /etc/group
# naming the non-root user it runs as (65532), and an /etc/nsswitch.conf so host names
# resolve through the /etc/hosts and /etc/resolv.conf the kubelet mounts. Nothing is pulled:
# no base image is needed, and none can be fetched on machines without a registry.
#
#   deploy/image.sh [BINARY]
#
# BINARY (or $LISTWATCH_BINARY): a `listwatch` built with `cargo build --release -p
# listwatch-cli --features etcd`; without one, that build is run here (seconds when it is
# current). $LISTWATCH_IMAGE names the repository (default `localhost/listwatch`);
# $STORAGE_DRIVER picks buildah's storage driver (default: the configured one, else vfs
# where it cannot mount; then stderr says `storage driver vfs`). The image is tagged
# `<version>-<short commit>` and `<version>`; progress goes to stderr, and the last line of
# stdout names the image.
set -euo pipefail

say() { printf 'image.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v buildah >/dev/null 2>&1 || die "buildah is missing (apt-get install buildah)"
command -v ldd >/dev/null 2>&1 || die "ldd is missing (apt-get install libc-bin)"

binary="${1:-${LISTWATCH_BINARY:-}}"
if [ -z "$binary" ]; then
  say "building the release binary (cargo build --release -p listwatch-cli --features etcd)"
  (cd "$repo_root" && cargo build --release -p listwatch-cli --features etcd >&2)
  target_dir="$(cd "$repo_root" && cargo metadata --format-version 1 --no-deps \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
  binary="${target_dir:-$repo_root/target}/release/listwatch"
fi
[ -x "$binary" ] || die "$binary is not an executable"

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo_root/Cargo.toml")"
[ -n "$version" ] || die "no version in $repo_root/Cargo.toml [workspace.package]"
license="$(sed -n '/^\[workspace.package\]/,/^\[/s/^license *= *"\(.*\)"/\1/p' "$repo_root/Cargo.toml")"
commit="$(git -C "$repo_root" rev-parse HEAD 2>/dev/null || echo unknown)"
short="${commit:0:12}"
# A tree with uncommitted changes is not the commit it names.
if [ "$commit" != unknown ] && [ -n "$(git -C "$repo_root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  short="$short-dirty"
fi
name="${LISTWATCH_IMAGE:-localhost/listwatch}"
image="$name:$version-$short"

# The root filesystem, laid out in a staging directory and copied in as one layer.
stage="$(mktemp -d)"
ctr=""
cleanup() {
  [ -n "$ctr" ] && bah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$stage"
}
trap cleanup EXIT

install -D -m 0755 "$binary" "$stage/listwatch"
# Every library the binary links, at the path the loader looks for it (symlinks resolved:
# the file itself is copied), and the loader named in the ELF interpreter.
libs="$(ldd "$binary" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }')"
[ -n "$libs" ] || die "ldd named no libraries for $binary (a static binary needs none: remove this check)"
for lib in $libs; do
  install -D -m 0755 "$(readlink -f "$lib")" "$stage$lib"
done
mkdir -p "$stage/etc" "$stage/tmp"
chmod 1777 "$stage/tmp"
cat >"$stage/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
listwatch:x:65532:65532:listwatch:/nonexistent:/sbin/nologin
EOF
cat >"$stage/etc/group" <<'EOF'
root:x:0:
listwatch:x:65532:
EOF
echo 'hosts: files dns' >"$stage/etc/nsswitch.conf"

# The storage podman and buildah are configured with, unless it cannot mount here; then
# vfs, which podman must be told too (`podman --storage-driver vfs image mount …`).
driver="${STORAGE_DRIVER:-}"
bah() { buildah ${driver:+--storage-driver "$driver"} "$@"; }
if ! ctr="$(bah from --name "listwatch-build-$$" scratch 2>/dev/null)"; then
  [ -z "$driver" ] || die "buildah --storage-driver $driver from scratch failed"
  driver=vfs
  ctr="$(bah from --name "listwatch-build-$$" scratch)"
fi
[ -z "$driver" ] || say "storage driver $driver"

bah copy "$ctr" "$stage" / >/dev/null
created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
bah config \
  --user 65532:65532 \
  --workingdir / \
  --entrypoint '["/listwatch"]' \
  --cmd '["serve"]' \
  --port 6443/tcp \
  --label "org.opencontainers.image.title=listwatch" \
  --label "org.opencontainers.image.description=Kubernetes LIST/WATCH/watch-list server with flat memory" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$commit" \
  --label "org.opencontainers.image.created=$created" \
  --label "org.opencontainers.image.licenses=$license" \
  "$ctr"
bah commit --quiet "$ctr" "$image" >/dev/null
bah tag "$image" "$name:$version"
say "built $image (also tagged $name:$version) from $binary"
echo "$image"
