//! Writes objects (NDJSON, optionally gzipped) into etcd the way kube-apiserver stores them:
//! under their resource's key, without `resourceVersion`, as protobuf (its default) or JSON.
//! For load tests of the etcd source:
//!
//! `cargo run --release -p listwatch-etcd --example put_objects -- http://127.0.0.1:2379 protobuf pods-40k.ndjson.gz`

use std::io::BufRead;
use std::time::Instant;

use listwatch_protobuf::{ProtoEncoder, Schema};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, endpoint, encoding, path] = &args[..] else {
        return Err("usage: put_objects <etcd url> <protobuf|json> <file.ndjson[.gz]>".into());
    };
    let file = std::fs::File::open(path)?;
    let reader: Box<dyn std::io::Read> = if path.ends_with(".gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let resources = listwatch_core::builtin_resources();
    let mut writer = ProtoEncoder::new(Schema::kubernetes());
    let client = etcd_client::Client::connect([endpoint.as_str()], None).await?;
    let start = Instant::now();
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut inflight = tokio::task::JoinSet::new();
    for line in std::io::BufReader::new(reader).lines() {
        let mut obj: serde_json::Value = serde_json::from_str(&line?)?;
        if let Some(m) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("resourceVersion");
        }
        let av = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let info = resources
            .iter()
            .find(|r| r.api_version() == av && r.kind == kind)
            .ok_or(format!("no resource for {av} {kind}"))?;
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let key = format!("{}{}", info.etcd_prefix, info.key(ns, name));
        let value = match encoding.as_str() {
            "protobuf" => writer.storage_value(&serde_json::to_vec(&obj)?)?,
            _ => serde_json::to_vec(&obj)?,
        };
        n += 1;
        bytes += value.len() as u64;
        let mut kv = client.kv_client();
        inflight.spawn(async move { kv.put(key, value, None).await.map(|_| ()) });
        if inflight.len() >= 64
            && let Some(r) = inflight.join_next().await
        {
            r??;
        }
    }
    while let Some(r) = inflight.join_next().await {
        r??;
    }
    println!(
        "{n} objects, {:.1} MB as {encoding}, written in {:.1} s",
        bytes as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
