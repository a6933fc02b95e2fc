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
            values.push(base64_decode(b64));
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

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= u32::from(val(*c)) << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}
