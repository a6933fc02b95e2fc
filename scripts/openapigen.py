#!/usr/bin/env python3
"""Writes the OpenAPI annotations listwatch serves with its built-in types
(crates/openapi/schema/annotations.json), from the same two published crates
scripts/schemagen.py reads, both generated from Kubernetes' Go types:

- k8s-openapi (one Kubernetes minor, its `schemars` impls): each type's OpenAPI definition
  name, description and `required` list, and each property's description — the text
  kube-apiserver's own OpenAPI documents carry;
- k8s-pb (prost messages, their doc comments keep the Go markers): `+listType`,
  `+listMapKey`, `+patchStrategy`, `+patchMergeKey`, `+mapType` and `+structType`, which
  kube-apiserver publishes as `x-kubernetes-*` extensions.

The structure (properties, types, which message a field holds) is not repeated here: the
server builds it from crates/protobuf/schema/kube.json, and this file is keyed by that
table's message names and JSON field names.

Usage: scripts/gen-openapi. Parsing is textual and fails loudly on what it does not know.
"""
import io
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from schemagen import pb_modules, snake_norm, type_files  # noqa: E402

SCHEMA_IMPL = re.compile(
    r'impl crate::schemars::JsonSchema for (\w+) \{\s*fn schema_name\(\) -> std::borrow::Cow<\'static, str> \{\s*"([^"]+)"\.into\(\)\s*\}'
    r'\s*fn json_schema\(__gen: &mut crate::schemars::SchemaGenerator\) -> crate::schemars::Schema \{\s*crate::schemars::json_schema!\(',
    re.S,
)
SUBSCHEMA = re.compile(r'__gen\.subschema_for::<crate::([\w:]+)>\(\)')
DESC_INSERT = re.compile(r'insert\("description"\.into\(\), ("(?:[^"\\]|\\.)*")\.into\(\)\)', re.S)
MARKER = re.compile(r'^\s*///\s*\+(listType|listMapKey|patchStrategy|patchMergeKey|mapType|structType)=(\S+)\s*$')
PROST_FIELD = re.compile(r'#\[prost\([^\]]*tag = "(\d+)"[^\]]*\)\]')
STRUCT_LINE = re.compile(r'^pub struct (\w+) \{')


def rust_string(lit):
    """The value of a Rust string literal (the escapes k8s-openapi's generator writes)."""
    body = lit[1:-1]
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        n = body[i + 1]
        if n in '"\\\'':
            out.append(n)
            i += 2
        elif n in "ntr0":
            out.append({"n": "\n", "t": "\t", "r": "\r", "0": "\0"}[n])
            i += 2
        elif n == "u":
            end = body.index("}", i)
            out.append(chr(int(body[i + 3:end], 16)))
            i = end + 1
        elif n == "\n":
            # A line continuation: the newline and the next line's leading blanks go.
            i += 2
            while i < len(body) and body[i] in " \t\n":
                i += 1
        else:
            raise SystemExit(f"unknown escape \\{n} in a string literal")
    return "".join(out)


def macro_to_json(text, start):
    """Converts the `json_schema!({...})` body at `start` (its `{`) into a JSON value; each
    Rust expression `( … subschema_for::<T>() … )` becomes {"$ref": "T", "description"?}."""
    out = []
    i = start
    depth = 0
    while True:
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(json.dumps(rust_string(text[i:j + 1])))
            i = j + 1
        elif c == "(":
            level = 0
            j = i
            while True:
                if text[j] == '"':
                    j += 1
                    while text[j] != '"':
                        j += 2 if text[j] == "\\" else 1
                elif text[j] == "(":
                    level += 1
                elif text[j] == ")":
                    level -= 1
                    if level == 0:
                        break
                j += 1
            expr = text[i:j + 1]
            m = SUBSCHEMA.search(expr)
            if not m:
                raise SystemExit(f"unknown expression in a schema: {expr[:120]}")
            value = {"$ref": m.group(1).replace("::", "/")}
            d = DESC_INSERT.search(expr)
            if d:
                value["description"] = rust_string(d.group(1))
            out.append(json.dumps(value))
            i = j + 1
        elif text.startswith("__gen.", i):
            m = SUBSCHEMA.match(text, i)
            if not m:
                raise SystemExit(f"unknown expression in a schema: {text[i:i + 120]}")
            out.append(json.dumps({"$ref": m.group(1).replace("::", "/")}))
            i = m.end()
        elif c in "{[":
            depth += 1
            out.append(c)
            i += 1
        elif c in "}]":
            # Rust allows a trailing comma; JSON does not.
            while out and out[-1].strip() == "":
                out.pop()
            if out and out[-1] == ",":
                out.pop()
            depth -= 1
            out.append(c)
            i += 1
            if depth == 0:
                return json.loads("".join(out))
        else:
            out.append(c)
            i += 1


def parse_openapi(root):
    """{"mod/RustName": {"name", "schema"}} for every type with a schemars impl."""
    types = {}
    for mod, text in type_files(root):
        for m in SCHEMA_IMPL.finditer(text):
            schema = macro_to_json(text, m.end())
            types[mod + "/" + m.group(1)] = {"name": m.group(2), "schema": schema}
    return types


def parse_markers(root):
    """{"mod/Message": ({tag: {marker: [values]}}, {struct marker: value})} from k8s-pb's
    doc comments."""
    out = {}
    for mod, text in pb_modules(root):
        pending = {}
        current = None
        for line in io.StringIO(text):
            m = MARKER.match(line)
            if m:
                pending.setdefault(m.group(1), []).append(m.group(2))
                continue
            s = STRUCT_LINE.match(line)
            if s:
                current = mod + "/" + s.group(1)
                out[current] = ({}, {k: v[0] for k, v in pending.items()})
                pending = {}
                continue
            p = PROST_FIELD.search(line)
            if p and current:
                if pending:
                    out[current][0][int(p.group(1))] = pending
                pending = {}
                continue
            if not line.strip().startswith("///") and not line.strip().startswith("#["):
                pending = {}
    return out


def field_ext(markers):
    ext = {}
    if "listType" in markers:
        ext["x-kubernetes-list-type"] = markers["listType"][0]
    if "listMapKey" in markers:
        ext["x-kubernetes-list-map-keys"] = markers["listMapKey"]
    if "patchStrategy" in markers:
        ext["x-kubernetes-patch-strategy"] = markers["patchStrategy"][0]
    if "patchMergeKey" in markers:
        ext["x-kubernetes-patch-merge-key"] = markers["patchMergeKey"][0]
    if "mapType" in markers:
        ext["x-kubernetes-map-type"] = markers["mapType"][0]
    return ext


def main():
    pb_root, oa_root, table_path, out = sys.argv[1:5]
    oa = parse_openapi(oa_root)
    markers = parse_markers(pb_root)
    table = json.load(open(table_path))
    by_norm = {}
    for key, t in oa.items():
        mod, name = key.rsplit("/", 1)
        by_norm[(mod, snake_norm(name))] = t
    types = {}
    missing = 0
    for msg in table["messages"]:
        full = msg["name"]
        mod, name = full.rsplit("/", 1)
        t = by_norm.get((mod, snake_norm(name)))
        fmarks, smarks = markers.get(full, ({}, {}))
        entry = {}
        props = {}
        if t is not None:
            s = t["schema"]
            entry["name"] = t["name"]
            if s.get("description"):
                entry["description"] = s["description"]
            if s.get("required"):
                entry["required"] = s["required"]
            props = s.get("properties", {})
        elif "apiVersion" in msg:
            missing += 1
        struct_type = smarks.get("structType") or smarks.get("mapType")
        if struct_type:
            entry["x-kubernetes-map-type"] = struct_type
        fields = {}
        for f in msg["fields"]:
            fe = {}
            d = props.get(f["json"], {}).get("description")
            if d:
                fe["description"] = d
            fe.update(field_ext(fmarks.get(f["tag"], {})))
            if fe:
                fields[f["json"]] = fe
        # Go's inline TypeMeta has no protobuf field: its two members are kept from the
        # OpenAPI definition (the server adds them to the kinds that have them).
        have = {f["json"] for f in msg["fields"]}
        for member in ("apiVersion", "kind"):
            d = props.get(member, {}).get("description")
            if member not in have and d:
                fields[member] = {"description": d, "typeMeta": True}
        if fields:
            entry["fields"] = fields
        if entry:
            types[full] = entry
    source = sys.argv[5] if len(sys.argv) > 5 else ""
    json.dump({"source": source, "types": types}, open(out, "w"), separators=(",", ":"), sort_keys=True)
    print(f"{len(types)} types annotated, {missing} served-version types without a k8s-openapi definition", file=sys.stderr)


if __name__ == "__main__":
    main()
