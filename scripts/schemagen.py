#!/usr/bin/env python3
"""Writes listwatch's Kubernetes schema table (crates/protobuf/schema/kube.json) from two
published crates that are both generated from Kubernetes' Go types:

- k8s-pb (prost messages): every protobuf message, its field numbers and wire types, which
  message a field holds, repeated / map;
- k8s-openapi (serde types, one Kubernetes minor): each field's JSON name and whether it is
  required (no `omitempty` in Go: always serialized).

Usage: scripts/gen-schema (finds both crates with `cargo metadata`). Parsing is textual and
fails loudly on anything it does not recognise, so a new crate release cannot drift silently.
"""
import json
import os
import re
import sys

PB_ATTR = re.compile(r'#\[prost\(([^\]]*?)\)\]\s*pub\s+(?:r#)?(\w+)\s*:\s*([^;]*?),\s*(?=(?:///|#\[prost|\}|\Z))', re.S)
STRUCT = re.compile(r'^pub struct (\w+) \{(?:\}|\n(.*?)^\})', re.S | re.M)
RESOURCE = re.compile(r'impl crate::Resource for (\w+) \{\s*const API_VERSION: &\'static str = "([^"]*)";.*?const KIND: &\'static str = "([^"]*)";', re.S)
DOC_OPTIONAL = re.compile(r'\+optional')

# Modules without a resource of their own, whose group is not learnt from an impl Resource.
EXTRA_GROUPS = {
    "api/admission/v1": "admission.k8s.io",
    "api/admission/v1beta1": "admission.k8s.io",
    "api/imagepolicy/v1alpha1": "imagepolicy.k8s.io",
    "api/apidiscovery/v2": "apidiscovery.k8s.io",
    "api/apidiscovery/v2beta1": "apidiscovery.k8s.io",
    "api/core/v1": "",
    "apimachinery/pkg/apis/meta/v1": "meta.k8s.io",
    "apimachinery/pkg/apis/meta/v1beta1": "meta.k8s.io",
}


def snake_norm(name):
    return name.replace("_", "").lower()


def resolve(mod, ty):
    """Resolves a prost type path relative to module `mod` ("api/core/v1") to "mod/Name"."""
    ty = ty.strip().rstrip(",").strip()
    for wrap in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        while ty.startswith(wrap):
            ty = ty[len(wrap):-1].strip().rstrip(",").strip()
    parts = [p for p in ty.split("::") if p]
    base = mod.split("/")
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    if parts and parts[0] == "crate":
        base = []
        parts = parts[1:]
    return "/".join(base + parts[:-1]) + "/" + parts[-1]


def pb_modules(root):
    """Each k8s-pb module below `root`: its directory relative to `root` and its mod.rs."""
    for dirpath, _, files in os.walk(root):
        if "mod.rs" in files:
            with open(os.path.join(dirpath, "mod.rs")) as f:
                yield os.path.relpath(dirpath, root), f.read()


def parse_pb(root):
    messages = {}
    groups = {}
    kinds = {}
    for mod, text in pb_modules(root):
        for m in RESOURCE.finditer(text):
            av = m.group(2)
            groups[mod] = av.rsplit("/", 1)[0] if "/" in av else ""
            kinds[mod + "/" + m.group(1)] = m.group(3)
        for sm in STRUCT.finditer(text):
            name, body = sm.group(1), sm.group(2) or ""
            fields = []
            pos = 0
            for fm in PB_ATTR.finditer(body):
                doc = body[pos:fm.start()]
                pos = fm.end()
                attr, rname, rty = fm.group(1), fm.group(2), fm.group(3)
                tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
                fd = {"tag": tag, "rust": rname, "optional_doc": bool(DOC_OPTIONAL.search(doc))}
                mm = re.match(r'btree_map = "(\w+), (\w+)"', attr)
                if mm:
                    fd["map"] = True
                    key, val = mm.group(1), mm.group(2)
                    assert key == "string", (mod, name, rname)
                    if val == "message":
                        inner = re.search(r'BTreeMap<\s*::prost::alloc::string::String,\s*(.*)>\s*$', rty, re.S).group(1)
                        fd["type"] = "message"
                        fd["message"] = resolve(mod, inner)
                    else:
                        fd["type"] = val
                else:
                    kind = attr.split(",")[0].strip()
                    if kind.startswith("bytes"):
                        kind = "bytes"
                    fd["type"] = kind
                    fd["repeated"] = " repeated" in attr
                    if kind == "message":
                        fd["message"] = resolve(mod, rty)
                fields.append(fd)
            messages[mod + "/" + name] = fields
    return messages, groups, kinds


SER_OPT = re.compile(r'if let Some\(value\) = &self\.(?:r#)?(\w+) \{\s*crate::serde::ser::SerializeStruct::serialize_field\(&mut state, "([^"]+)"', re.S)
SER_REQ = re.compile(r'serialize_field\(&mut state, "([^"]+)", &self\.(?:r#)?(\w+)\)')
OA_STRUCT = re.compile(r'^pub struct (\w+) \{', re.M)


def type_files(root):
    """(module path, text) of each k8s-openapi type file (one type per file) under root."""
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".rs") and f != "mod.rs":
                yield os.path.relpath(dirpath, root), open(os.path.join(dirpath, f)).read()


def parse_openapi(root):
    """{"mod/Name": {norm_rust_field: (json_name, required)}}, plus a global name table."""
    types = {}
    names = {}
    for mod, text in type_files(root):
        sm = OA_STRUCT.search(text)
        if not sm:
            continue
        fields = {}
        for m in SER_OPT.finditer(text):
            fields[snake_norm(m.group(1))] = (m.group(2), False)
            names.setdefault(m.group(1), m.group(2))
            names.setdefault(snake_norm(m.group(1)), m.group(2))
        for m in SER_REQ.finditer(text):
            fields[snake_norm(m.group(2))] = (m.group(1), True)
            names.setdefault(m.group(2), m.group(1))
            names.setdefault(snake_norm(m.group(2)), m.group(1))
        types[mod + "/" + sm.group(1)] = fields
    return types, names


def covers(messages, msg, cand):
    """Whether every field of `msg` is a JSON field of `cand`, directly or through a nested
    inline struct (Go's `json:",inline"` may nest)."""
    for x in messages.get(msg, []):
        if snake_norm(x["rust"]) in cand:
            continue
        if x["type"] == "message" and not x.get("repeated") and not x.get("map") and covers(messages, x["message"], cand):
            continue
        return False
    return bool(messages.get(msg))


def plausible(candidate, rust):
    """prost puts `_` at every lower→upper boundary of the proto name, so the original has at
    least that many capitals (`subresource` cannot be `sub_resource`'s, `targetWWNs` can be
    `target_ww_ns`'s)."""
    if candidate and sum(c.isupper() for c in candidate) >= rust.count("_"):
        return candidate
    return None


def camel(rust):
    parts = rust.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


SPECIAL = {
    "apimachinery/pkg/apis/meta/v1/Time": "time",
    "apimachinery/pkg/apis/meta/v1/MicroTime": "microtime",
    "apimachinery/pkg/apis/meta/v1/Duration": "duration",
    "apimachinery/pkg/apis/meta/v1/FieldsV1": "raw",
    "apimachinery/pkg/runtime/RawExtension": "raw",
    "apimachinery/pkg/api/resource/Quantity": "quantity",
    "apimachinery/pkg/util/intstr/IntOrString": "intorstring",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1/Json": "raw",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1beta1/Json": "raw",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1/JsonSchemaPropsOrBool": "orbool",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1beta1/JsonSchemaPropsOrBool": "orbool",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1/JsonSchemaPropsOrArray": "orarray",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1beta1/JsonSchemaPropsOrArray": "orarray",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1/JsonSchemaPropsOrStringArray": "orstringarray",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1beta1/JsonSchemaPropsOrStringArray": "orstringarray",
}


def main():
    pb_root, oa_root, out = sys.argv[1], sys.argv[2], sys.argv[3]
    messages, groups, kinds = parse_pb(pb_root)
    groups.update({k: v for k, v in EXTRA_GROUPS.items() if k not in groups})
    # Versions no longer served have no impl Resource; they share their directory's group.
    by_dir = {mod.rsplit("/", 1)[0]: g for mod, g in groups.items()}
    by_dir.setdefault("api/extensions", "extensions")
    for full in messages:
        mod = full.rsplit("/", 1)[0]
        if mod not in groups and mod.rsplit("/", 1)[0] in by_dir:
            groups[mod] = by_dir[mod.rsplit("/", 1)[0]]
    oa, names = parse_openapi(oa_root)
    overlay = json.load(open(os.path.join(os.path.dirname(out), "overlay.json")))
    # Go's own view of each field (scripts/gopresence.py over the 1.36 API types): pointer
    # scalars, and the plain fields gogo's marshalers write even when zero.
    presence = {k.lower(): v for k, v in json.load(open(os.path.join(os.path.dirname(out), "presence.json"))).items()}
    def overlay_field(f):
        return dict(f, optional_doc=True)
    for name, fields in overlay["messages"].items():
        assert name not in messages, f"overlay message {name} is in k8s-pb now: drop it from the overlay"
        messages[name] = [overlay_field(f) for f in fields]
    for name, fields in overlay["fields"].items():
        have = {f["tag"] for f in messages[name]}
        for f in fields:
            assert f["tag"] not in have, f"overlay field {name} #{f['tag']} is in k8s-pb now"
            messages[name].append(overlay_field(f))
    # Struct name -> openapi types in any module, for versions k8s-openapi no longer carries.
    by_name = {}
    for full, fields in oa.items():
        by_name.setdefault(full.rsplit("/", 1)[1], []).append(fields)

    index = {name: i for i, name in enumerate(sorted(messages))}
    json_flags = {k: dict(v) for k, v in overlay["json"].items() if k != "comment"}
    for k in json_flags:
        assert k in messages, f"overlay json: no message {k}"
    table = []
    unresolved = 0
    for full in sorted(messages):
        fields = messages[full]
        mod, name = full.rsplit("/", 1)
        oaf = oa.get(full)
        candidates = [oaf] if oaf is not None else by_name.get(name, [])
        out_fields = []
        wrapper = len(fields) == 1 and fields[0]["rust"] == "items" and fields[0].get("repeated") and not name.endswith("List") and name not in by_name
        for fd in fields:
            norm = snake_norm(fd["rust"])
            json_name, required = None, None
            for c in candidates:
                if norm in c:
                    json_name, required = c[norm]
                    break
            inline = False
            if json_name is None and fd["type"] == "message" and not fd.get("repeated") and not fd.get("map"):
                inner = messages.get(fd["message"], [])
                # Go's `json:",inline"`: the nested struct's fields appear in the parent.
                if candidates and inner and covers(messages, fd["message"], candidates[0]):
                    inline = True
            if json_name is None:
                # Same Rust field name elsewhere (k8s-openapi and k8s-pb split words alike
                # for most names), else the camel-case of the Rust name.
                json_name = names.get(fd["rust"]) or plausible(names.get(norm), fd["rust"]) or camel(fd["rust"])
                if not inline and candidates:
                    unresolved += 1
                    print(f"guessed {full}.{fd['rust']} -> {json_name}", file=sys.stderr)
            if required is None:
                # No JSON type to ask: Go pointers (messages) are omitempty by convention;
                # scalars follow the `+optional` marker.
                required = fd["type"] != "message" and not fd["optional_doc"]
            flag = json_flags.get(full, {}).pop(json_name, None)
            if flag == "always":
                required = True
            if fd["type"] == "message" and fd["message"] not in index:
                raise SystemExit(f"{full}.{fd['rust']}: unknown message {fd['message']}")
            f = {"tag": fd["tag"], "json": json_name, "type": fd["type"]}
            if fd.get("repeated"):
                f["repeated"] = True
            if fd.get("map"):
                f["map"] = True
            if required:
                f["required"] = True
            if inline:
                f["inline"] = True
            if flag in ("pointer", "omitzero", "typemeta"):
                f[flag] = True
            elif flag and flag.startswith("default="):
                f["default"] = flag[len("default="):]
            elif flag not in (None, "always"):
                raise SystemExit(f"{full}.{json_name}: unknown overlay flag {flag}")
            go = presence.get(full.lower(), {}).get(str(fd["tag"]))
            if go is not None and flag != "always" and not inline:
                # Go's own json tag decides what its encoder writes for an empty value:
                # without omitempty/omitzero the field is always there (zero, "", null);
                # a plain struct is always there whatever its tag (omitempty never omits a
                # struct; named map types such as ResourceList read as "plain" but are maps).
                if go[1] == "plain" and fd["type"] == "message" and not fd.get("repeated") and not fd.get("map"):
                    required = True
                else:
                    required = go[2] == ""
                if required:
                    f["required"] = True
                else:
                    f.pop("required", None)
            if go is not None and not fd.get("repeated") and not fd.get("map"):
                if go[1] == "pointer" and fd["type"] not in ("message", "bytes"):
                    f["pointer"] = True
                elif go[1] == "plain":
                    f["plain"] = True
            if fd["type"] == "message":
                f["message"] = index[fd["message"]]
            out_fields.append(f)
        group = groups.get(mod)
        entry = {"name": full, "fields": out_fields}
        if full in SPECIAL:
            entry["special"] = SPECIAL[full]
        elif wrapper:
            entry["special"] = "list"
        if group is not None:
            version = mod.rsplit("/", 1)[1]
            entry["apiVersion"] = f"{group}/{version}" if group else version
            if kinds.get(full, name) != name:
                entry["kind"] = kinds[full]
        table.append(entry)
    left = {k: v for k, v in json_flags.items() if v}
    assert not left, f"overlay json names fields the table does not have: {left}"
    extra_kinds = []
    for alias, target in overlay["aliases"].items():
        mod, kind = alias.rsplit("/", 1)
        version = mod.rsplit("/", 1)[1]
        group = groups[mod]
        extra_kinds.append({"apiVersion": f"{group}/{version}" if group else version, "kind": kind, "message": index[target]})
    json.dump({"source": sys.argv[4] if len(sys.argv) > 4 else "", "messages": table, "kinds": extra_kinds}, open(out, "w"), separators=(",", ":"))
    print(f"{len(table)} messages, {sum(len(m['fields']) for m in table)} fields, {unresolved} JSON names guessed", file=sys.stderr)


if __name__ == "__main__":
    main()
