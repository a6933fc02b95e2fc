//! JSON → protobuf rate of [`ProtoEncoder`] over the 40,000-pod data set, one core: what
//! answering a protobuf LIST by transcoding per request costs (docs/memory.md).
//! `cargo run --release -p listwatch-protobuf --example encode_rate [path.ndjson.gz [pods [rounds]]]`
//! (under callgrind: `… encode_rate <path> 2000 2` and
//! `--toggle-collect='listwatch_protobuf::encode::ProtoEncoder::message'`).
use std::io::BufRead;
use std::time::Instant;

use listwatch_protobuf::{ProtoEncoder, Schema};

fn main() {
    let arg = |n: usize| std::env::args().nth(n);
    let pods: usize = arg(2).and_then(|a| a.parse().ok()).unwrap_or(usize::MAX);
    let rounds: usize = arg(3).and_then(|a| a.parse().ok()).unwrap_or(5);
    let path = arg(1).unwrap_or_else(|| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/pods-40k.ndjson.gz"
        )
        .into()
    });
    let file = std::fs::File::open(&path).expect("data set");
    let lines: Vec<Vec<u8>> = std::io::BufReader::new(flate2::read::GzDecoder::new(file))
        .lines()
        .take(pods)
        .map(|l| l.expect("line").into_bytes())
        .collect();
    let json_bytes: usize = lines.iter().map(Vec::len).sum();
    let schema = Schema::kubernetes();
    let id = schema.kind("v1", "Pod").expect("Pod");
    let mut enc = ProtoEncoder::new(schema);
    let mut out = Vec::with_capacity(1 << 20);
    let mut pb_bytes = 0usize;
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        pb_bytes = 0;
        for l in &lines {
            out.clear();
            enc.message(id, l, &mut out).expect("encode");
            pb_bytes += out.len();
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "{} pods, JSON {:.1} MB -> protobuf {:.1} MB ({:.2}x) in {:.3} s: {:.0} pods/s, {:.0} MB/s of JSON read",
        lines.len(),
        json_bytes as f64 / 1e6,
        pb_bytes as f64 / 1e6,
        pb_bytes as f64 / json_bytes as f64,
        best,
        lines.len() as f64 / best,
        json_bytes as f64 / 1e6 / best
    );
    // FNV-1a over every byte written: equal digests before and after a change to the
    // encoder mean it writes the same bytes for the whole data set.
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    for l in &lines {
        out.clear();
        enc.message(id, l, &mut out).expect("encode");
        for &c in &out {
            digest = (digest ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("output digest {digest:016x}");
}
