#!/usr/bin/env python3
"""Strategic-merge-patch metadata of every built-in type, from Go's own API types.

kube-apiserver applies a strategic merge patch by reading each Go struct field's
`patchStrategy:"merge|replace|retainKeys|merge,retainKeys"` and `patchMergeKey:"…"` tags
(apimachinery's strategicpatch, through reflection). This reads the same tags from the Go
sources (k8s.io/api, apimachinery, apiextensions-apiserver, kube-aggregator at a release tag,
from local git checkouts: the files scripts/gopresence.py reads) and, for server-side apply
later, the `+listType` / `+listMapKey` markers above each field. Output, keyed like
presence.json (the k8s-pb message name) and then by JSON field name:
{"<module/Type>": {"<json name>": {"strategy": "merge", "key": "name",
                                   "listType": "map", "listMapKeys": ["name"]}}}
with only the members a field has; fields with none of them are left out.

Usage: scripts/gopatch.py TAG REPO_DIR:PREFIX [REPO_DIR:PREFIX ...] > crates/patch/data/strategies.json
(the same arguments as scripts/gopresence.py).
"""
import json
import re
import sys

from gopresence import EMBED, FIELD, collect, struct_lines

STRATEGY = re.compile(r'patchStrategy:"([^"]*)"')
MERGE_KEY = re.compile(r'patchMergeKey:"([^"]*)"')
JSON = re.compile(r'json:"([^"]*)"')
LIST_TYPE = re.compile(r'^\s*//\s*\+listType=(\w+)')
LIST_MAP_KEY = re.compile(r'^\s*//\s*\+listMapKey=(\w+)')


def scan(repo, tag, prefix, result):
    markers, last = {}, None
    for pkg, current, line in struct_lines(repo, tag):
        if (pkg, current) != last:
            markers, last = {}, (pkg, current)
        lt = LIST_TYPE.match(line)
        if lt:
            markers["listType"] = lt.group(1)
            continue
        lk = LIST_MAP_KEY.match(line)
        if lk:
            markers.setdefault("listMapKeys", []).append(lk.group(1))
            continue
        if line.strip().startswith("//") or not line.strip():
            continue
        # A field line (named or embedded) ends the markers collected above it.
        m = FIELD.match(line)
        tags = m.group(3) if m and m.group(1) else None
        if tags is None:
            e = EMBED.match(line)
            tags = e.group(2) if e else None
        field_markers, markers = markers, {}
        if tags is None:
            continue
        j = JSON.search(tags)
        name = j.group(1).split(",")[0] if j else ""
        if not name or name == "-":
            continue
        entry = dict(field_markers)
        s = STRATEGY.search(tags)
        if s:
            entry["strategy"] = s.group(1)
        k = MERGE_KEY.search(tags)
        if k:
            entry["key"] = k.group(1)
        if entry:
            result.setdefault(f"{prefix}/{pkg}/{current}", {})[name] = entry


def main():
    tag, result = collect(scan)
    json.dump({"source": f"Go API types at {tag} (scripts/gopatch.py)", "types": result},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
