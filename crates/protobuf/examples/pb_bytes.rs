//! How many api-roundtrip fixtures our JSON → protobuf reproduces byte for byte (the #16
//! wire question). `cargo run -p listwatch-protobuf --example pb_bytes`
fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference/api-roundtrip-1.36");
    let schema = listwatch_protobuf::Schema::kubernetes();
    let mut w = listwatch_protobuf::ProtoWriter::new(schema);
    let (mut same, mut total) = (0, 0);
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json") && !n.contains("after_roundtrip"))
        .collect();
    names.sort();
    for n in names {
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(&n)).expect("read")).expect("json");
        let Ok(pb) = w.storage_value(&json) else {
            continue;
        };
        let want = std::fs::read(dir.join(n.replace(".json", ".pb"))).expect("pb");
        total += 1;
        if pb == want {
            same += 1;
        } else if std::env::args().any(|a| a == "-v") {
            println!("differs: {n} ({} vs {} bytes)", pb.len(), want.len());
        }
    }
    println!("{same} of {total} byte-identical");
}
