//! Transcoding throughput over real stored values: every protobuf pod in the storage
//! corpus (`shared/reference/storage/`), transcoded again and again for a few seconds.
//! `cargo run --release -p listwatch-protobuf --example ingest_rate`

use std::io::BufRead;
use std::time::{Duration, Instant};

use listwatch_protobuf::{JsonWriter, Schema, storage_to_json};

fn main() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference/storage/etcd-1.36-default.jsonl.gz");
    let file = std::fs::File::open(&path).expect("storage corpus beside the repository");
    let lines = std::io::BufReader::new(flate2::read::GzDecoder::new(file)).lines();
    let mut values = Vec::new();
    for line in lines {
        let o: serde_json::Value = serde_json::from_str(&line.expect("line")).expect("json");
        let key = o["key"].as_str().unwrap_or_default();
        if key.starts_with("/registry/pods/") && o["encoding"] == "protobuf" {
            let b64 = o["value_b64"].as_str().unwrap_or_default();
            values.push({
                let mut v = Vec::new();
                listwatch_protobuf::encode::base64_into(b64.as_bytes(), &mut v).expect("base64");
                v
            });
        }
    }
    let schema = Schema::kubernetes();
    let mut writer = JsonWriter::for_storage(schema);
    let mut out = Vec::new();
    let (mut objects, mut pb_bytes, mut json_bytes) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        for v in &values {
            out.clear();
            storage_to_json(&mut writer, schema, v, &mut out).expect("transcode");
            objects += 1;
            pb_bytes += v.len() as u64;
            json_bytes += out.len() as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} pods: {:.0} objects/s, {:.1} MB/s protobuf in, {:.1} MB/s JSON out (avg {} B pb -> {} B JSON)",
        values.len(),
        objects as f64 / secs,
        pb_bytes as f64 / secs / 1e6,
        json_bytes as f64 / secs / 1e6,
        pb_bytes / objects.max(1),
        json_bytes / objects.max(1)
    );
}
