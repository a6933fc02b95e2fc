//! The harness itself, run in CI on small data: every scenario against a real listwatch
//! server, and the JSON report's invariants (every client got every object; churn events
//! arrive complete and in RV order).

use std::process::Command;

use listwatch_core::builtin_resources;
use listwatch_server::{App, ServerConfig, serve};
use listwatch_sources::{EmbeddedSource, Registry, demo};
use listwatch_store::StoreConfig;

const PODS: usize = 1200;

/// An app over PODS demo pods and a listener for it on 127.0.0.1.
async fn seeded() -> (std::sync::Arc<App>, tokio::net::TcpListener) {
    let registry = Registry::new(builtin_resources(), 1, &StoreConfig::default());
    let source = EmbeddedSource::new(registry);
    let pods = source
        .registry()
        .get("", "v1", "pods")
        .expect("pods")
        .clone();
    source.seed(&pods, demo::demo_pods(PODS, 7)).expect("seed");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    (App::embedded(source, ServerConfig::default()), listener)
}

async fn server() -> std::net::SocketAddr {
    let (app, listener) = seeded().await;
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(app, listener, std::future::pending()));
    addr
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
    assert!(status.success(), "{args:?}");
    let report = serde_json::from_slice(&std::fs::read(&out).expect("report")).expect("json");
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
            let mut args = vec![
                "--url",
                &url,
                "--scenario",
                scenario,
                "--clients",
                "3",
                "--expect",
                &pods,
            ];
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
            let mut args = vec![
                "--url",
                &url,
                "--scenario",
                scenario,
                "--clients",
                "2",
                "--expect",
                &pods,
            ];
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
    let r = run(&[
        "--url",
        &url,
        "--scenario",
        "relist-storm",
        "--clients",
        "4",
        "--expect",
        &pods,
    ])
    .await;
    assert_eq!(r["complete"], true);
    let r = run(&[
        "--url",
        &url,
        "--scenario",
        "slow-readers",
        "--clients",
        "2",
        "--read-rate-kib",
        "64",
        "--hold",
        "1",
    ])
    .await;
    assert_eq!(r["complete"], true);
    let objects = r["objects_per_client"].as_array().expect("objects");
    assert!(
        objects
            .iter()
            .all(|o| o.as_u64().is_some_and(|o| o > 0 && o < PODS as u64)),
        "{objects:?}"
    );
    let r = run(&[
        "--url",
        &url,
        "--scenario",
        "idle-watchers",
        "--clients",
        "20",
        "--hold",
        "1",
    ])
    .await;
    assert_eq!(r["complete"], true);
    assert!(r["bytes_per_watcher"].is_number());
    let r = run(&[
        "--url",
        &url,
        "--scenario",
        "churn",
        "--clients",
        "5",
        "--write-rate",
        "100",
        "--hold",
        "2",
    ])
    .await;
    assert_eq!(r["complete"], true, "{}", r["churn"]);
    assert_eq!(r["churn"]["in_order"], true);
    assert_eq!(r["churn"]["every_watcher_saw_every_event"], true);
    assert!(r["churn"]["writes"].as_u64().is_some_and(|w| w > 50));
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
        let mut args = vec![
            "--url",
            &url,
            "--token",
            "tok",
            "--scenario",
            "watchlist",
            "--clients",
            "2",
            "--expect",
            &pods,
        ];
        args.extend(trust);
        let report = run(&args).await;
        assert_eq!(report["complete"], true, "{trust:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
