//! Kubernetes' own serialization fixtures (`shared/reference/api-roundtrip-1.36/`): every
//! built-in type with every field set, as protobuf and as JSON. Our protobuf → JSON of each
//! `.pb` must read as its `.json` (member order and `resourceVersion` aside), and each with
//! every scalar zeroed must read as Go would print it.

use std::collections::HashMap;

use listwatch_protobuf::{
    JsonWriter, Kind, MessageId, ProtoEncoder, Schema, Special, storage_to_json,
};
use serde_json::{Map, Value};

fn strip_rv(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
}

/// The fixture files of `dir` ending in `ext`, sorted (round-tripped variants left out).
fn fixtures(dir: &std::path::Path, ext: &str) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("fixture dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(ext) && !n.contains(".after_roundtrip."))
        .collect();
    names.sort();
    names
}

#[test]
fn every_fixture_reads_as_its_json() {
    let dir = listwatch_testkit::reference("api-roundtrip-1.36");
    let schema = Schema::kubernetes();
    let mut writer = JsonWriter::new(schema);
    let names = fixtures(&dir, ".pb");
    let (mut ok, mut failed) = (0, Vec::new());
    for name in &names {
        let stem = name.trim_end_matches(".pb");
        let pb = std::fs::read(dir.join(name)).expect("read pb");
        let read = |p: std::path::PathBuf| -> Value {
            serde_json::from_slice(&std::fs::read(p).expect("read json")).expect("json")
        };
        let mut want = read(dir.join(format!("{stem}.json")));
        // A type whose decode/encode cycle changes it may also read as its settled form.
        let after = dir.join(format!("{stem}.after_roundtrip.json"));
        let mut settled = after.exists().then(|| read(after));
        let mut out = Vec::new();
        let env = listwatch_protobuf::envelope(&pb);
        let result = match env {
            // WatchEvent's envelope carries no type: name it from the file.
            Ok(e) if e.kind.is_empty() => {
                let (gv, kind) = stem.rsplit_once('.').expect("group.version.Kind");
                let gv = gv.strip_prefix("core.").unwrap_or(gv);
                let (g, v) = gv.rsplit_once('.').unwrap_or(("", gv));
                let av = if g.is_empty() {
                    v.to_string()
                } else {
                    format!("{g}/{v}")
                };
                let id = schema.kind(&av, kind).expect("fixture kind in schema");
                writer.write_message(id, e.raw, None, &mut out).map(|_| ())
            }
            _ => storage_to_json(&mut writer, schema, &pb, &mut out).map(|_| ()),
        };
        match result {
            Err(e) => failed.push(format!("{stem}: {e}")),
            Ok(_) => match serde_json::from_slice::<Value>(&out) {
                Err(e) => failed.push(format!("{stem}: invalid JSON out: {e}")),
                Ok(mut got) => {
                    strip_rv(&mut got);
                    strip_rv(&mut want);
                    let mut diff = listwatch_testkit::json_diff(&got, &want, 5);
                    if let Some(s) = settled.as_mut() {
                        strip_rv(s);
                        if listwatch_testkit::json_diff(&got, s, 5).is_empty() {
                            diff.clear();
                        }
                    }
                    if diff.is_empty() {
                        ok += 1;
                    } else {
                        failed.push(format!("{stem}:\n    {}", diff.join("\n    ")));
                    }
                }
            },
        }
    }
    for (id, tag) in &writer.unknown_seen {
        eprintln!("unknown field {} #{tag}", schema.message(*id).name);
    }
    eprintln!(
        "{ok} of {} fixtures equal; unknown fields skipped: {}",
        names.len(),
        writer.unknown_fields
    );
    assert_all_alike(ok, &failed);
}

/// JSON → protobuf → JSON reads as the JSON again, for every fixture with a kind: the
/// writer kube-apiserver-shaped values are made with in load tests and storage tests.
#[test]
fn every_fixture_survives_json_to_protobuf_and_back() {
    let schema = Schema::kubernetes();
    let mut reader = JsonWriter::new(schema);
    let mut writer = ProtoEncoder::new(schema);
    compare_json_fixtures(|_, name, bytes| {
        let json: Value = serde_json::from_slice(bytes).expect("json");
        if json["kind"].as_str().unwrap_or_default().is_empty() {
            return None;
        }
        Some(compare_through_protobuf(
            &mut writer,
            &mut reader,
            name,
            &json,
            &json,
            5,
        ))
    });
}

/// JSON in, protobuf out: the encoder that answers protobuf clients writes, for every
/// fixture with a kind, exactly the bytes kube-apiserver wrote for the same object.
#[test]
fn every_fixture_encodes_to_kube_apiservers_bytes() {
    let schema = Schema::kubernetes();
    let mut encoder = ProtoEncoder::new(schema);
    compare_json_fixtures(|dir, name, bytes| {
        // Served objects are compact JSON; the fixtures are indented, and embedded raw JSON
        // (RawExtension) is carried byte for byte.
        let text = compact(bytes);
        let json: Value = serde_json::from_slice(&text).expect("json");
        let (Some(api_version), Some(kind)) = (json["apiVersion"].as_str(), json["kind"].as_str())
        else {
            return None;
        };
        let stem = name.trim_end_matches(".json");
        let want = std::fs::read(dir.join(format!("{stem}.pb"))).expect("read pb");
        let id = schema.kind(api_version, kind).expect("kind in schema");
        let mut got = Vec::new();
        Some(
            match encoder.envelope(api_version, kind, id, &text, &mut got) {
                Ok(()) if got == want => Ok(()),
                Ok(()) => {
                    let at = got
                        .iter()
                        .zip(&want)
                        .position(|(a, b)| a != b)
                        .unwrap_or(got.len().min(want.len()));
                    Err(format!(
                        "{name}: {} bytes, want {}; first difference at {at}: got {:02x?} want {:02x?}",
                        got.len(),
                        want.len(),
                        &got[at.saturating_sub(8)..(at + 8).min(got.len())],
                        &want[at.saturating_sub(8)..(at + 8).min(want.len())]
                    ))
                }
                Err(e) => Err(format!("{name}: {e}")),
            },
        )
    });
}

/// Runs `compare` on every JSON fixture (the fixtures' folder, its name, its bytes: `None`
/// when it is not one to compare, else whether it came out alike) and asserts that all
/// compared came out alike ([`assert_all_alike`]).
fn compare_json_fixtures(
    mut compare: impl FnMut(&std::path::Path, &str, &[u8]) -> Option<Result<(), String>>,
) {
    let dir = listwatch_testkit::reference("api-roundtrip-1.36");
    let (mut ok, mut failed) = (0, Vec::new());
    for name in fixtures(&dir, ".json") {
        let bytes = std::fs::read(dir.join(&name)).expect("read");
        match compare(&dir, &name, &bytes) {
            Some(Ok(())) => ok += 1,
            Some(Err(e)) => failed.push(e),
            None => {}
        }
    }
    assert_all_alike(ok, &failed);
}

/// Fails listing every fixture that differed, or when too few (140 at most) were compared.
fn assert_all_alike(ok: usize, failed: &[String]) {
    listwatch_testkit::assert_no_differences(failed, ok + failed.len(), 141);
}

/// `json` encoded as kube-apiserver stores it (protobuf) and read back as JSON.
fn through_protobuf(
    encoder: &mut ProtoEncoder,
    reader: &mut JsonWriter,
    json: &Value,
) -> Result<Value, String> {
    let pb = encoder
        .storage_value(&serde_json::to_vec(json).map_err(|e| e.to_string())?)
        .map_err(|e| format!("encode: {e}"))?;
    let mut out = Vec::new();
    storage_to_json(reader, Schema::kubernetes(), &pb, &mut out)
        .map_err(|e| format!("read back: {e}"))?;
    serde_json::from_slice(&out).map_err(|e| format!("json out: {e}"))
}

/// Whether `json` sent through protobuf and back (fixture `name`) reads as `want`; the error
/// names the fixture and at most `limit` paths that differ.
fn compare_through_protobuf(
    encoder: &mut ProtoEncoder,
    reader: &mut JsonWriter,
    name: &str,
    json: &Value,
    want: &Value,
    limit: usize,
) -> Result<(), String> {
    let got = through_protobuf(encoder, reader, json).map_err(|e| format!("{name}: {e}"))?;
    let diff = listwatch_testkit::json_diff(&got, want, limit);
    if diff.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}:\n    {}", diff.join("\n    ")))
    }
}

/// `text` without the whitespace between JSON tokens (member order kept).
fn compact(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for &c in text {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if !c.is_ascii_whitespace() {
            in_string = c == b'"';
            out.push(c);
        }
    }
    out
}

// Go's zero values: for every api-roundtrip fixture, a copy with every string, number and
// boolean set to its zero value goes JSON → protobuf → JSON, and must read as what Go's
// `encoding/json` would print for that object. The expectation is derived from Go's own
// struct tags (`schema/presence.json`, generated by scripts/gopresence.py from the API
// types), not from the schema the transcoder uses: a plain field without `omitempty` is
// written even when zero (`"name": ""`), one with `omitempty` is left out, a set pointer is
// written whatever its value, a struct is always written.

/// Go's view of a field: (json name, "plain" | "pointer" | "many", "omitempty" | "omitzero" | "").
type GoField = (String, String, String);

fn presence() -> HashMap<String, HashMap<u32, GoField>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/presence.json");
    let raw: HashMap<String, HashMap<String, GoField>> =
        serde_json::from_slice(&std::fs::read(path).expect("presence.json")).expect("json");
    raw.into_iter()
        .map(|(m, fields)| {
            let fields = fields
                .into_iter()
                .filter_map(|(tag, f)| Some((tag.parse().ok()?, f)))
                .collect();
            (m.to_lowercase(), fields)
        })
        .collect()
}

struct Zeroer<'a> {
    schema: &'a Schema,
    go: &'a HashMap<String, HashMap<u32, GoField>>,
    /// Fields the Go types do not describe (left as they are).
    unknown: usize,
}

impl Zeroer<'_> {
    /// Zeroes every scalar of `v` (a `id` message) in place, and returns what Go would
    /// print for the zeroed object.
    fn message(&mut self, id: MessageId, v: &mut Value) -> Value {
        let msg = self.schema.message(id);
        if msg.special != Special::None {
            // Custom marshalers (Time, Quantity, raw JSON…): kept as they are.
            return v.clone();
        }
        let Value::Object(obj) = v else {
            return v.clone();
        };
        let go = self.go.get(&msg.name.to_lowercase());
        let mut want = Map::new();
        for field in &msg.fields {
            if field.inline {
                // Go's `json:",inline"`: the nested struct's members live in this object.
                if let Kind::Message(inner) = field.kind {
                    let mut inner_obj = Value::Object(std::mem::take(obj));
                    let inner_want = self.message(inner, &mut inner_obj);
                    *obj = match inner_obj {
                        Value::Object(o) => o,
                        _ => Map::new(),
                    };
                    if let Value::Object(w) = inner_want {
                        want.extend(w);
                    }
                }
                continue;
            }
            let name = &*field.json;
            let Some(value) = obj.get_mut(name) else {
                continue;
            };
            if matches!(name, "apiVersion" | "kind") && field.kind == Kind::String {
                // The envelope's type, not a field to zero.
                want.insert(name.to_string(), value.clone());
                continue;
            }
            let Some((_, shape, tag)) = go.and_then(|g| g.get(&field.tag)) else {
                self.unknown += 1;
                want.insert(name.to_string(), value.clone());
                continue;
            };
            let omitempty = tag == "omitempty";
            let out = match (field.kind, value) {
                (_, Value::Null) => None,
                (Kind::Message(inner), Value::Array(items)) => Some(Value::Array(
                    items.iter_mut().map(|i| self.message(inner, i)).collect(),
                )),
                (Kind::Message(inner), Value::Object(map)) if field.map => {
                    let mut w = Map::new();
                    for (k, item) in map.iter_mut() {
                        w.insert(k.clone(), self.message(inner, item));
                    }
                    Some(Value::Object(w))
                }
                (Kind::Message(inner), item) => Some(self.message(inner, item)),
                (_, Value::Array(items)) => {
                    items.iter_mut().for_each(zero_scalar);
                    Some(Value::Array(items.clone()))
                }
                (_, Value::Object(map)) => {
                    map.values_mut().for_each(zero_scalar);
                    Some(Value::Object(map.clone()))
                }
                (_, scalar) => {
                    zero_scalar(scalar);
                    // A plain zero with omitempty is left out; a pointer is set, so written.
                    (shape == "pointer" || !omitempty).then(|| scalar.clone())
                }
            };
            if let Some(out) = out {
                want.insert(name.to_string(), out);
            }
        }
        Value::Object(want)
    }
}

fn zero_scalar(v: &mut Value) {
    *v = match v {
        Value::String(_) => Value::String(String::new()),
        Value::Number(_) => Value::from(0),
        Value::Bool(_) => Value::Bool(false),
        _ => return,
    };
}

#[test]
fn every_type_at_its_zero_values_reads_as_go_writes_it() {
    let dir = listwatch_testkit::reference("api-roundtrip-1.36");
    let schema = Schema::kubernetes();
    let go = presence();
    let mut encoder = ProtoEncoder::new(schema);
    let mut reader = JsonWriter::new(schema);
    let names = fixtures(&dir, ".json");
    let (mut ok, mut failed, mut unknown) = (0, Vec::new(), 0);
    for name in &names {
        let mut json: Value =
            serde_json::from_slice(&std::fs::read(dir.join(name)).expect("read")).expect("json");
        let (Some(av), Some(kind)) = (
            json["apiVersion"].as_str().map(str::to_string),
            json["kind"].as_str().map(str::to_string),
        ) else {
            continue;
        };
        let id = schema.kind(&av, &kind).expect("kind in schema");
        let mut z = Zeroer {
            schema,
            go: &go,
            unknown: 0,
        };
        let mut want = z.message(id, &mut json);
        // The type (Go's inline TypeMeta) travels in the protobuf envelope.
        want["apiVersion"] = Value::from(av.clone());
        want["kind"] = Value::from(kind.clone());
        unknown += z.unknown;
        match compare_through_protobuf(&mut encoder, &mut reader, name, &json, &want, 8) {
            Ok(()) => ok += 1,
            Err(e) => failed.push(e),
        }
    }
    eprintln!(
        "{ok} of {} zeroed fixtures as Go writes them; {unknown} fields without Go tags kept",
        ok + failed.len()
    );
    assert_all_alike(ok, &failed);
}
