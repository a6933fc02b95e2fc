#!/usr/bin/env python3
"""Which protobuf fields Go's generated marshalers always write.

Reads the Go API types (k8s.io/api, apimachinery, apiextensions-apiserver, kube-aggregator at
a release tag, from local git checkouts) and prints, for every struct field with a protobuf
tag, whether the Go field is a pointer, a slice or map, or a plain value. gogo-generated code
writes plain values (strings, numbers, bools, structs) even when zero, pointers only when set,
slices and maps once per element: JSON -> protobuf needs that to produce kube-apiserver's
bytes. Also what the `json` tag says: `omitempty` / `omitzero` (kube-apiserver's JSON leaves the
field out when empty) or neither (always serialized). Output:
{"<k8s-pb message name>": {"<field number>": [json name, "pointer"|"plain"|"many", "omitempty"|"omitzero"|""]}}.

Usage: scripts/gopresence.py TAG REPO_DIR:PREFIX [REPO_DIR:PREFIX ...] > presence.json
where PREFIX is the k8s-pb module prefix for that repository (api, apimachinery, ...).
"""
import json
import re
import subprocess
import sys

FIELD = re.compile(r'^\s*(\w+)?\s+([^\s`]+)\s+`([^`]*)`')
EMBED = re.compile(r'^\s*([\w.*]+)\s+`([^`]*)`')
PROTO = re.compile(r'protobuf:"(\w+),(\d+),(\w+)')


def files(repo, tag):
    out = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", tag],
                         check=True, capture_output=True, text=True).stdout.split()
    for path in out:
        if path.endswith(".go") and not path.endswith("_test.go") and "/pkg/apis/" in "/" + path \
                or re.match(r"^[a-z0-9]+/v[0-9a-z]+/types[a-z_]*\.go$", path):
            if "generated" in path or "zz_" in path:
                continue
            yield path


def struct_lines(repo, tag):
    """(package dir, struct name, line) for every line inside a struct of the API types."""
    for path in files(repo, tag):
        text = subprocess.run(["git", "-C", repo, "show", f"{tag}:{path}"], check=True,
                              capture_output=True, text=True).stdout
        pkg = path.rsplit("/", 1)[0]
        current = None
        for line in text.splitlines():
            m = re.match(r"^type (\w+) struct \{", line)
            if m:
                current = m.group(1)
                continue
            if current is None:
                continue
            if line.startswith("}"):
                current = None
                continue
            yield pkg, current, line


def scan(repo, tag, prefix, result):
    for pkg, current, line in struct_lines(repo, tag):
        m = FIELD.match(line)
        go_type = None
        if m and m.group(1):
            go_type, tags = m.group(2), m.group(3)
        else:
            e = EMBED.match(line)
            if e:
                go_type, tags = e.group(1), e.group(2)
        if go_type is None:
            continue
        p = PROTO.search(tags)
        if not p:
            continue
        number = p.group(2)
        if go_type.startswith("*"):
            presence = "pointer"
        elif go_type.startswith("[]") or go_type.startswith("map["):
            presence = "many"
        else:
            presence = "plain"
        j = re.search(r'json:"([^"]*)"', tags)
        parts = j.group(1).split(",") if j else [""]
        omit = "omitzero" if "omitzero" in parts else "omitempty" if "omitempty" in parts else ""
        name = f"{prefix}/{pkg}/{current}"
        result.setdefault(name, {})[number] = [parts[0], presence, omit]


def collect(scan_one):
    """Runs `scan_one(repo, tag, prefix, result)` over the command line's TAG REPO:PREFIX…"""
    tag = sys.argv[1]
    result = {}
    for spec in sys.argv[2:]:
        repo, prefix = spec.split(":")
        scan_one(repo, tag, prefix, result)
    return tag, result


def main():
    _, result = collect(scan)
    json.dump(result, sys.stdout, indent=0, sort_keys=True)


if __name__ == "__main__":
    main()
