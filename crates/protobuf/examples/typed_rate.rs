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
            pbs.push({
                let mut v = Vec::new();
                listwatch_protobuf::encode::base64_into(b64.as_bytes(), &mut v).expect("base64");
                v
            });
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
