//! The harness itself, run in CI on small data: every scenario against a real listwatch
//! server, and the JSON report's invariants (every client got every object; churn events
//! arrive complete and in RV order, JSON and protobuf; every kubelet-storm node gets its
//! pods and its churn).

use std::process::Command;

use listwatch_server::{App, ServerConfig, serve};
use listwatch_sources::demo;

const PODS: usize = 1200;

/// An app over PODS demo pods and a listener for it on 127.0.0.1.
async fn seeded() -> (std::sync::Arc<App>, tokio::net::TcpListener) {
    let (source, pods) = demo::pods_source();
    source.seed(&pods, demo::demo_pods(PODS, 7)).expect("seed");
    let (listener, _) = listwatch_testkit::listen_local().await;
    (App::embedded(source, ServerConfig::default()), listener)
}

async fn server() -> std::net::SocketAddr {
    let (app, listener) = seeded().await;
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(app, listener, std::future::pending()));
    addr
}

/// `--url URL --scenario SCENARIO --clients CLIENTS`, then `more`: what every run names.
fn scenario_args<'a>(
    url: &'a str,
    scenario: &'a str,
    clients: &'a str,
    more: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["--url", url, "--scenario", scenario, "--clients", clients];
    args.extend_from_slice(more);
    args
}

/// The numbers in the JSON array `v` (`what` names it when it is no array).
fn counts(v: &serde_json::Value, what: &str) -> Vec<u64> {
    v.as_array()
        .expect(what)
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect()
}

/// Runs the harness binary with `args` (plus --pid and --out) and returns its report.
async fn run(args: &[&str]) -> serde_json::Value {
    let name: String = args
        .join("_")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let out = std::env::temp_dir().join(format!("lw-loadtest-{}-{name}.json", std::process::id()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_listwatch-loadtest"));
    cmd.args(args)
        .args(["--pid", &std::process::id().to_string(), "--out"])
        .arg(&out);
    let status = tokio::task::spawn_blocking(move || cmd.status())
        .await
        .expect("join")
        .expect("run harness");
    let written = std::fs::read(&out).unwrap_or_default();
    // An incomplete run still writes its report: show what it says.
    let report: serde_json::Value = serde_json::from_slice(&written).unwrap_or_default();
    let mut summary = report.clone();
    if let Some(o) = summary.as_object_mut() {
        o.remove("rss_samples_kib");
    }
    assert!(status.success(), "{args:?}: {summary}");
    // Every run with RSS samples also draws its chart next to the report.
    let png = out.with_extension("png");
    assert!(
        std::fs::read(&png).is_ok_and(|b| b.starts_with(b"\x89PNG")),
        "chart {png:?} written"
    );
    let _ = std::fs::remove_file(out);
    let _ = std::fs::remove_file(png);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_watchlist_scenarios_report_complete_runs() {
    let url = format!("http://{}", server().await);
    let pods = PODS.to_string();
    for scenario in ["list", "list-paged", "list-consistent", "watchlist"] {
        for gzip in [false, true] {
            let mut args = scenario_args(&url, scenario, "3", &["--expect", &pods]);
            if gzip {
                args.push("--gzip");
            }
            let report = run(&args).await;
            assert_eq!(report["complete"], true, "{scenario}");
            assert_eq!(report["clients"], 3);
            let objects = report["objects_per_client"].as_array().expect("objects");
            assert!(
                objects.iter().all(|o| o.as_u64() == Some(PODS as u64)),
                "{scenario}: {objects:?}"
            );
            assert!(report["peak_rss_kib"].as_u64().is_some_and(|p| p > 0));
            // The server is this process: its CPU is read around the run.
            assert!(report["server_cpu_s"].as_f64().is_some(), "{scenario}");
            let fb = &report["first_byte"];
            let (head, first) = (
                fb["headers_max_ms"].as_f64().unwrap_or(0.0),
                fb["first_byte_max_ms"].as_f64().unwrap_or(0.0),
            );
            assert!(
                head > 0.0 && first >= fb["headers_p50_ms"].as_f64().unwrap_or(f64::MAX),
                "{scenario}: {fb}"
            );
            let wire = report["total_wire_bytes"].as_u64().unwrap_or(0);
            assert!(wire > 0);
            if gzip && scenario != "list-paged" {
                // Compressed on the wire: far fewer bytes than ~4.4 KiB per decoded pod.
                assert!(wire < 3 * PODS as u64 * 1000, "{scenario}: {wire}");
            }
        }
    }
}

/// The protobuf and PartialObjectMetadata forms of the list and watch-list scenarios count
/// every object (the protobuf counters read the wire format, not JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_and_metadata_only_scenarios_count_every_object() {
    let url = format!("http://{}", server().await);
    let pods = PODS.to_string();
    let mut wire = std::collections::BTreeMap::new();
    for scenario in ["list", "watchlist"] {
        for form in [
            &[][..],
            &["--protobuf"][..],
            &["--metadata-only"][..],
            &["--protobuf", "--metadata-only"][..],
        ] {
            let mut args = scenario_args(&url, scenario, "2", &["--expect", &pods]);
            args.extend_from_slice(form);
            let report = run(&args).await;
            assert_eq!(report["complete"], true, "{scenario} {form:?}");
            assert_eq!(report["protobuf"], form.contains(&"--protobuf"));
            wire.insert(
                (scenario, form.join(" ")),
                report["total_wire_bytes"].as_u64().unwrap_or(0),
            );
        }
    }
    // Pages of protobuf: the continue token is read from the protobuf ListMeta.
    let args = scenario_args(&url, "list-paged", "2", &["--protobuf", "--expect", &pods]);
    let report = run(&args).await;
    assert_eq!(report["complete"], true);
    let pages = (PODS as u64).div_ceil(500);
    assert!(
        report["per_client"]
            .as_array()
            .expect("clients")
            .iter()
            .all(|c| c["requests"].as_u64() == Some(pages)),
        "{}",
        report["per_client"]
    );
    for scenario in ["list", "watchlist"] {
        let w = |f: &str| wire[&(scenario, f.to_string())];
        // Protobuf is smaller than JSON, metadata smaller than whole objects.
        assert!(w("--protobuf") < w(""), "{scenario}: {wire:?}");
        assert!(w("--metadata-only") < w(""), "{scenario}: {wire:?}");
        assert!(
            w("--protobuf --metadata-only") < w("--metadata-only"),
            "{scenario}: {wire:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storms_slow_readers_idle_watchers_and_churn() {
    let url = format!("http://{}", server().await);
    let pods = PODS.to_string();
    let r = run(&scenario_args(
        &url,
        "relist-storm",
        "4",
        &["--expect", &pods],
    ))
    .await;
    assert_eq!(r["complete"], true);
    let slow = ["--read-rate-kib", "64", "--hold", "1"];
    let r = run(&scenario_args(&url, "slow-readers", "2", &slow)).await;
    assert_eq!(r["complete"], true);
    let objects = r["objects_per_client"].as_array().expect("objects");
    assert!(
        objects
            .iter()
            .all(|o| o.as_u64().is_some_and(|o| o > 0 && o < PODS as u64)),
        "{objects:?}"
    );
    // Held 2 s: the settled figure is read from the RSS samples of the last third; the
    // ramped run starts its watches over 1 s and holds each for 3.
    let ramped = ["--ramp-seconds", "1", "--hold", "3"];
    for form in [
        &["--hold", "2"][..],
        &["--hold", "2", "--protobuf"][..],
        &ramped[..],
    ] {
        let r = run(&scenario_args(&url, "idle-watchers", "20", form)).await;
        assert_eq!(r["complete"], true, "{form:?}");
        assert!(r["bytes_per_watcher"].is_number());
        assert!(r["settled_bytes_per_watcher"].is_number(), "{form:?}");
        let held = r["duration_s"].as_f64().unwrap_or(0.0);
        // A ramped watch starts late and is still held its full time.
        let least = if form == &ramped[..] { 3.9 } else { 1.9 };
        assert!(held >= least, "{form:?}: {held} s");
    }
    // Each churn in its own namespace: the second's watchers start from its own RV.
    for (ns, form) in [("churn-json", &[][..]), ("churn-pb", &["--protobuf"][..])] {
        let churn = [
            "--namespace",
            ns,
            "--full-decode-every",
            "2",
            "--write-rate",
            "100",
            "--hold",
            "2",
        ];
        let mut args = scenario_args(&url, "churn", "5", &churn);
        args.extend_from_slice(form);
        let r = run(&args).await;
        let c = &r["churn"];
        assert_eq!(r["complete"], true, "{form:?}: {c}");
        assert_eq!(c["protobuf"], !form.is_empty());
        assert_eq!(c["in_order"], true);
        assert_eq!(c["every_watcher_saw_every_event"], true);
        assert_eq!(c["full_decode_mismatches"], 0);
        let writes = c["writes"].as_u64().unwrap_or(0);
        assert!(writes > 50, "{c}");
        // Every watcher got every write (events may include none but these).
        assert_eq!(c["delivered_events"].as_u64(), Some(5 * writes), "{c}");
        assert!(
            c["server_cpu_us_per_event"]
                .as_f64()
                .is_some_and(|us| us > 0.0),
            "{c}"
        );
    }
}

/// Kubelets after an apiserver restart: every node's watch-list (protobuf, field-selected by
/// node) gets exactly the pods put on it, then exactly the churn written on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_storm_gives_every_node_its_pods_then_its_churn() {
    let url = format!("http://{}", server().await);
    // 25 pods in the file, 60 asked for: the file is cycled, pods renamed per round.
    let file = std::env::temp_dir().join(format!("lw-kubelet-pods-{}.ndjson", std::process::id()));
    let mut ndjson = Vec::new();
    for p in demo::demo_pods(25, 3) {
        ndjson.extend_from_slice(&p);
        ndjson.push(b'\n');
    }
    std::fs::write(&file, ndjson).expect("write pods");
    let pods_from = file.display().to_string();
    // Each node on an HTTP/2 connection of its own, as kubelets speak to kube-apiserver.
    let storm = [
        "--h2",
        "--protobuf",
        "--pods-from",
        &pods_from,
        "--pods",
        "60",
        "--write-rate",
        "60",
        "--hold",
        "1",
    ];
    let r = run(&scenario_args(&url, "kubelet-storm", "7", &storm)).await;
    let _ = std::fs::remove_file(file);
    let k = &r["kubelet"];
    assert_eq!(r["complete"], true, "{k}");
    assert_eq!(k["pods"], 60);
    let expected = counts(&k["expected"], "expected");
    assert_eq!(expected.len(), 7);
    assert_eq!(k["received"], k["expected"]);
    // Each node's initial pods (round-robin: 60 over 7 nodes is 9 or 8), then its churn.
    let initial = counts(&r["objects_per_client"], "objects");
    assert_eq!(initial, [9, 9, 9, 9, 8, 8, 8]);
    let churn = k["churn_writes"].as_u64().unwrap_or(0);
    assert!(churn > 20, "{k}");
    assert_eq!(expected.iter().sum::<u64>(), 60 + churn);
    assert!(
        k["server_cpu_ms_per_node_list"]
            .as_f64()
            .is_some_and(|ms| ms >= 0.0),
        "{k}"
    );
    assert!(r["peak_minus_idle_kib"].is_u64());
}

/// Writes as fast as answered: every create acknowledged, the body the size asked for, and
/// the objects there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_all_acknowledged_at_the_body_size_asked() {
    let addr = server().await;
    let url = format!("http://{addr}");
    let more = ["--writes", "40", "--body-kib", "64", "--namespace", "wr"];
    let r = run(&scenario_args(&url, "writes", "4", &more)).await;
    let w = &r["writes"];
    assert_eq!(r["complete"], true, "{w}");
    assert_eq!(w["writes"], 40);
    assert_eq!(w["errors"], 0);
    assert!(
        w["body_bytes"].as_u64().is_some_and(|b| b > 64 * 1024),
        "{w}"
    );
    let list = listwatch_testkit::get_with(addr, "/api/v1/namespaces/wr/configmaps", &[]).await;
    let list: serde_json::Value = serde_json::from_slice(&list.body).expect("a list");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_targets_with_a_ca_file_or_skip_verify_and_a_token() {
    use std::sync::Arc;

    let dir = std::env::temp_dir().join(format!("lw-loadtest-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    let (cert_pem, key_pem, tokens) = (dir.join("c.pem"), dir.join("k.pem"), dir.join("t.csv"));
    std::fs::write(&cert_pem, cert.pem()).expect("write");
    std::fs::write(&key_pem, key.serialize_pem()).expect("write");
    std::fs::write(&tokens, "tok,loadtest,1\n").expect("write");

    let (app, listener) = seeded().await;
    let addr = listener.local_addr().expect("addr");
    let options = listwatch_server::ServeOptions {
        tls: Some(listwatch_auth::tls::tls_config(&cert_pem, &key_pem, None).expect("tls")),
        authenticator: Some(Arc::new(
            listwatch_auth::authn::Authenticator::from_token_file(&tokens, false).expect("tokens"),
        )),
        ..Default::default()
    };
    tokio::spawn(listwatch_server::serve_with(
        app,
        listener,
        options,
        std::future::pending(),
    ));
    let url = format!("https://{addr}");
    let pods = PODS.to_string();
    let ca = cert_pem.display().to_string();
    for trust in [
        ["--ca-file", ca.as_str()],
        ["--insecure-skip-tls-verify", "--gzip"],
    ] {
        let mut args = scenario_args(
            &url,
            "watchlist",
            "2",
            &["--token", "tok", "--expect", &pods],
        );
        args.extend(trust);
        let report = run(&args).await;
        assert_eq!(report["complete"], true, "{trust:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
