//! The other way to read stored protobuf, measured for docs/protobuf.md: materialise typed
//! structs (prost's `k8s-pb` Pod) and serialize typed JSON (`k8s-openapi`'s Pod). There is
//! no published conversion between the two crates' types, so this times the two halves on
//! the same 301 corpus pods — a lower bound for the typed pipeline — beside our
//! schema-driven transcoder.
//! `cargo run --release -p listwatch-protobuf --features typed-compare --example typed_rate`

use std::io::BufRead;
use std::time::{Duration, Instant};

use listwatch_protobuf::{JsonWriter, Schema, envelope, storage_to_json};
use prost::Message;

fn rate(label: &str, n: usize, mut f: impl FnMut()) {
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        f();
        rounds += 1;
    }
    let per_s = (rounds * n as u64) as f64 / start.elapsed().as_secs_f64();
    println!("{label}: {per_s:.0} pods/s");
}

fn main() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference/storage/etcd-1.36-default.jsonl.gz");
    let file = std::fs::File::open(&path).expect("storage corpus beside the repository");
    let mut pbs = Vec::new();
    let mut jsons = Vec::new();
    for line in std::io::BufReader::new(flate2::read::GzDecoder::new(file)).lines() {
        let o: serde_json::Value = serde_json::from_str(&line.expect("line")).expect("json");
        if o["key"]
            .as_str()
            .unwrap_or("")
            .starts_with("/registry/pods/")
            && o["encoding"] == "protobuf"
        {
            let b64 = o["value_b64"].as_str().unwrap_or_default();
            pbs.push(decode_b64(b64));
            jsons.push(o["served"][0]["json"].clone());
        }
    }
    let n = pbs.len();
    let schema = Schema::kubernetes();
    let mut w = JsonWriter::for_storage(schema);
    let mut out = Vec::new();
    rate(
        "schema-driven transcoder (protobuf -> JSON bytes)",
        n,
        || {
            for v in &pbs {
                out.clear();
                storage_to_json(&mut w, schema, v, &mut out).expect("transcode");
            }
        },
    );
    rate("typed, half 1: prost decode into k8s-pb Pod", n, || {
        for v in &pbs {
            let env = envelope(v).expect("envelope");
            let pod = k8s_pb::api::core::v1::Pod::decode(env.raw).expect("prost");
            std::hint::black_box(pod);
        }
    });
    let typed: Vec<k8s_openapi::api::core::v1::Pod> = jsons
        .iter()
        .map(|j| serde_json::from_value(j.clone()).expect("typed pod"))
        .collect();
    rate(
        "typed, half 2: serialize k8s-openapi Pod to JSON",
        n,
        || {
            for p in &typed {
                out.clear();
                serde_json::to_writer(&mut out, p).expect("serialize");
            }
        },
    );
}

fn decode_b64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::new();
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
