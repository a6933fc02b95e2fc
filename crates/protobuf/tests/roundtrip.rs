//! Kubernetes' own serialization fixtures (`shared/reference/api-roundtrip-1.36/`): every
//! built-in type with every field set, as protobuf and as JSON. Our protobuf → JSON of each
//! `.pb` must read as its `.json` (member order and `resourceVersion` aside).

use listwatch_protobuf::{JsonWriter, Schema, storage_to_json};
use serde_json::Value;

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
    assert!(
        failed.is_empty(),
        "{} of {} differ:\n{}",
        failed.len(),
        names.len(),
        failed.join("\n")
    );
    assert!(ok > 140, "only {ok} fixtures were compared");
}

/// JSON → protobuf → JSON reads as the JSON again, for every fixture with a kind: the
/// writer kube-apiserver-shaped values are made with in load tests and storage tests.
#[test]
fn every_fixture_survives_json_to_protobuf_and_back() {
    let dir = listwatch_testkit::reference("api-roundtrip-1.36");
    let schema = Schema::kubernetes();
    let mut reader = JsonWriter::new(schema);
    let mut writer = listwatch_protobuf::ProtoEncoder::new(schema);
    let names = fixtures(&dir, ".json");
    let (mut ok, mut failed) = (0, Vec::new());
    for name in &names {
        let json: Value =
            serde_json::from_slice(&std::fs::read(dir.join(name)).expect("read")).expect("json");
        if json["kind"].as_str().unwrap_or_default().is_empty() {
            continue;
        }
        let pb = match writer.storage_value(&serde_json::to_vec(&json).expect("json")) {
            Ok(pb) => pb,
            Err(e) => {
                failed.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut out = Vec::new();
        storage_to_json(&mut reader, schema, &pb, &mut out).expect("read back");
        let got: Value = serde_json::from_slice(&out).expect("json out");
        let diff = listwatch_testkit::json_diff(&got, &json, 5);
        if diff.is_empty() {
            ok += 1;
        } else {
            failed.push(format!("{name}:\n    {}", diff.join("\n    ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} differ:\n{}",
        failed.len(),
        failed.join("\n")
    );
    assert!(ok > 140, "only {ok} compared");
}

/// JSON in, protobuf out: the encoder that answers protobuf clients writes, for every
/// fixture with a kind, exactly the bytes kube-apiserver wrote for the same object.
#[test]
fn every_fixture_encodes_to_kube_apiservers_bytes() {
    let dir = listwatch_testkit::reference("api-roundtrip-1.36");
    let schema = Schema::kubernetes();
    let mut encoder = listwatch_protobuf::ProtoEncoder::new(schema);
    let names = fixtures(&dir, ".json");
    let (mut ok, mut failed) = (0, Vec::new());
    for name in &names {
        // Served objects are compact JSON; the fixtures are indented, and embedded raw JSON
        // (RawExtension) is carried byte for byte.
        let text = compact(&std::fs::read(dir.join(name)).expect("read"));
        let json: Value = serde_json::from_slice(&text).expect("json");
        let (Some(api_version), Some(kind)) = (json["apiVersion"].as_str(), json["kind"].as_str())
        else {
            continue;
        };
        let stem = name.trim_end_matches(".json");
        let want = std::fs::read(dir.join(format!("{stem}.pb"))).expect("read pb");
        let id = schema.kind(api_version, kind).expect("kind in schema");
        let mut got = Vec::new();
        match encoder.envelope(api_version, kind, id, &text, &mut got) {
            Ok(()) if got == want => ok += 1,
            Ok(()) => {
                let at = got
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(want.len()));
                failed.push(format!(
                    "{name}: {} bytes, want {}; first difference at {at}: got {:02x?} want {:02x?}",
                    got.len(),
                    want.len(),
                    &got[at.saturating_sub(8)..(at + 8).min(got.len())],
                    &want[at.saturating_sub(8)..(at + 8).min(want.len())]
                ));
            }
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} differ:\n{}",
        failed.len(),
        failed.len() + ok,
        failed.join("\n")
    );
    assert!(ok > 140, "only {ok} compared");
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
