//! The harness itself, run in CI on small data: every scenario against a real listwatch
//! server, and the JSON report's invariants (every client got every object).

use std::process::Command;

use listwatch_core::builtin_resources;
use listwatch_server::{App, ServerConfig, serve};
use listwatch_sources::{EmbeddedSource, Registry, demo};
use listwatch_store::StoreConfig;

const PODS: usize = 1200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_reports_complete_runs() {
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
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(
        App::embedded(source, ServerConfig::default()),
        listener,
        std::future::pending(),
    ));
    let dir = std::env::temp_dir().join(format!("lw-loadtest-{}", addr.port()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (scenario, gzip) in [
        ("list", false),
        ("list-paged", false),
        ("list-consistent", false),
        ("watchlist", false),
        ("list", true),
        ("watchlist", true),
    ] {
        let out = dir.join(format!("{scenario}-{gzip}.json"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_listwatch-loadtest"));
        cmd.args([
            "--url",
            &format!("http://{addr}"),
            "--scenario",
            scenario,
            "--clients",
            "3",
            "--expect",
            &PODS.to_string(),
        ])
        .args(["--pid", &std::process::id().to_string(), "--out"])
        .arg(&out);
        if gzip {
            cmd.arg("--gzip");
        }
        let status = tokio::task::spawn_blocking(move || cmd.status())
            .await
            .expect("join")
            .expect("run harness");
        assert!(status.success(), "{scenario} gzip={gzip}");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&out).expect("report")).expect("json");
        assert_eq!(report["complete"], true, "{scenario}");
        assert_eq!(report["clients"], 3);
        let objects = report["objects_per_client"].as_array().expect("objects");
        assert!(
            objects.iter().all(|o| o.as_u64() == Some(PODS as u64)),
            "{scenario}: {objects:?}"
        );
        assert!(report["peak_rss_kib"].as_u64().is_some_and(|p| p > 0));
        assert!(report["total_wire_bytes"].as_u64().is_some_and(|b| b > 0));
        if gzip {
            // Compressed on the wire: far fewer bytes than the ~4.4 KiB per pod decoded.
            assert!(
                report["total_wire_bytes"].as_u64().unwrap_or(u64::MAX) < 3 * PODS as u64 * 1000
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
