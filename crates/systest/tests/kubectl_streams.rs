//! Issue 26: kubectl's streaming commands — `logs` (and `-f`), `exec` (stdin, exit codes),
//! `attach`, `port-forward`, `cp` both ways — with every kubectl found, against a
//! kubeconfig naming only a front listwatch. The front follows a test upstream (kubelet/
//! mod.rs) that serves pods' `log` and the WebSocket upgrades itself and proxies the
//! rest to listwatch on its embedded store, where the pod objects live. The same steps run
//! straight against the test upstream too, so a failure through the front is the front's.

mod common;
mod kubelet;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{answered, front, get_expecting, json, kubectls, request, start};
use listwatch_server::ServerConfig;
use listwatch_testkit::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// Every kubectl run ends within this (a hang fails the test, never stalls it).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// Creates pod `default/web` (one container) on the embedded store at `store` and marks it
/// Running through the status subresource, as kubelet would: kubectl refuses to exec
/// into, attach to or forward to a pod that is not running.
async fn running_pod(store: SocketAddr) {
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    });
    let path = "/api/v1/namespaces/default/pods";
    answered(store, "POST", path, Some(&pod.to_string()), 201).await;
    let mut pod = json(&get_expecting(store, &format!("{path}/web"), 200).await.body);
    pod["status"] = serde_json::json!({"phase": "Running"});
    answered(
        store,
        "PUT",
        &format!("{path}/web/status"),
        Some(&pod.to_string()),
        200,
    )
    .await;
    let stored = json(
        &request(store, "GET", &format!("{path}/web"), None)
            .await
            .body,
    );
    assert_eq!(stored["status"]["phase"], "Running", "{stored}");
}

/// An echo server on 127.0.0.1 (the "container's" port for port-forward): each connection
/// gets back what it sent, and is closed when the client half-closes.
async fn echo_server() -> u16 {
    let (listener, addr) = listwatch_testkit::listen_local().await;
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr.port()
}

struct Kubectl {
    bin: PathBuf,
    /// `--server` and whatever else reaching it takes (`--certificate-authority`).
    server: Vec<String>,
    dir: PathBuf,
}

impl Kubectl {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("KUBECONFIG", "/dev/null")
            .args(&self.server)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl with `stdin` as its input; `(exit code, stdout, stderr)`.
    async fn run_with(&self, args: &[&str], stdin: Option<&[u8]>) -> (i32, Vec<u8>, String) {
        let mut cmd = self.cmd(args);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("stdin");
            pipe.write_all(input).await.expect("write stdin");
            drop(pipe);
        }
        let out = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} still running after {RUN_LIMIT:?}"))
            .expect("kubectl output");
        (
            out.status.code().unwrap_or(-1),
            out.stdout,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs kubectl, asserting success; its stdout.
    async fn run(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run_with(args, None).await;
        assert_eq!(code, 0, "{} {args:?}: {err}", self.bin.display());
        String::from_utf8(out).expect("utf8 stdout")
    }
}

/// `kubectl logs`, and `logs -f` reading lines as they arrive: the first line is there
/// well before the stream ends, and kubectl exits 0 when the upstream ends it.
async fn logs(k: &Kubectl) {
    let all: String = (1..=kubelet::LOG_LINES).map(kubelet::log_line).collect();
    assert_eq!(k.run(&["logs", "web"]).await, all);

    let mut child = k
        .cmd(&["logs", "-f", "web"])
        .spawn()
        .expect("kubectl logs -f");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let started = Instant::now();
    let mut seen = Vec::new();
    let read_all = async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            seen.push((line, started.elapsed()));
        }
    };
    tokio::time::timeout(RUN_LIMIT, read_all)
        .await
        .expect("logs -f ends when the upstream ends the log");
    let status = tokio::time::timeout(RUN_LIMIT, child.wait())
        .await
        .expect("kubectl exits")
        .expect("status");
    assert!(status.success(), "logs -f: {status}");
    let texts: Vec<String> = seen.iter().map(|(l, _)| format!("{l}\n")).collect();
    assert_eq!(texts.concat(), all);
    // Streamed, not buffered to the end: the lines came LOG_INTERVAL apart.
    let spread = seen[seen.len() - 1].1 - seen[0].1;
    let want = kubelet::LOG_INTERVAL * (kubelet::LOG_LINES as u32 - 2);
    assert!(spread >= want, "lines arrived within {spread:?}: {seen:?}");
}

/// `exec`: stdout, stdin through `cat` to its EOF, a non-zero exit code as kubectl's own.
async fn exec(k: &Kubectl) {
    assert_eq!(k.run(&["exec", "web", "--", "echo", "hi"]).await, "hi\n");

    let input = b"first line\nsecond line, no newline at the end";
    let (code, out, err) = k
        .run_with(&["exec", "-i", "web", "--", "cat"], Some(input))
        .await;
    assert_eq!(code, 0, "exec -i cat: {err}");
    assert_eq!(out, input);

    let (code, out, err) = k
        .run_with(
            &["exec", "web", "--", "sh", "-c", "echo to-err >&2; exit 3"],
            None,
        )
        .await;
    assert_eq!(code, 3, "exec exit 3: {err}");
    assert!(out.is_empty(), "{out:?}");
    assert!(err.contains("to-err"), "stderr came through: {err}");
}

/// `exec`, `attach` and `port-forward` when the upstream refuses the WebSocket upgrade, as
/// an apiserver or kubelet before 1.30 does: kubectl falls back to SPDY/3.1 (remotecommand
/// v4, `portforward.k8s.io`) — what kubectl before 1.30 (1.31 for port-forward) speaks
/// from the start — and that upgrade reaches the test upstream too (through a front:
/// passed through as it came).
async fn over_spdy(k: &Kubectl, kl: &kubelet::Kubelet, echo: u16) {
    use std::sync::atomic::Ordering::Relaxed;
    let count = |what: &str| kl.served.lock().iter().filter(|s| *s == what).count();
    let before = ["exec-spdy", "attach-spdy", "portforward-spdy"].map(count);
    kl.refuse_websocket.store(true, Relaxed);
    exec(k).await;
    attach(k).await;
    port_forward(k, echo).await;
    kl.refuse_websocket.store(false, Relaxed);
    let after = ["exec-spdy", "attach-spdy", "portforward-spdy"].map(count);
    assert_eq!(
        after[0] - before[0],
        3,
        "each exec fell back to SPDY upstream"
    );
    assert_eq!(after[1] - before[1], 1, "attach fell back to SPDY upstream");
    assert_eq!(
        after[2] - before[2],
        1,
        "port-forward fell back to SPDY upstream"
    );
}

/// `attach`: the process's stdout lines, then kubectl exits 0 with it.
async fn attach(k: &Kubectl) {
    let out = k.run(&["attach", "web"]).await;
    let want: String = (1..=kubelet::ATTACH_LINES)
        .map(kubelet::attach_line)
        .collect();
    assert_eq!(out, want);
}

/// `port-forward web 0:<echo port>`: the local port kubectl picks carries TCP round trips,
/// two connections in turn.
async fn port_forward(k: &Kubectl, echo: u16) {
    let target = format!("0:{echo}");
    let mut child = k
        .cmd(&["port-forward", "pod/web", &target])
        .spawn()
        .expect("kubectl port-forward");
    let mut out = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stderr = child.stderr.take().expect("stderr");
    let local: u16 = loop {
        let line = tokio::time::timeout(RUN_LIMIT, out.next_line())
            .await
            .expect("port-forward announces its port");
        let Ok(Some(line)) = line else {
            let mut err = String::new();
            let _ = stderr.read_to_string(&mut err).await;
            panic!("port-forward ended: {err}");
        };
        // "Forwarding from 127.0.0.1:PORT -> ECHO"
        if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
            let port = rest.split_whitespace().next().unwrap_or("");
            assert!(line.ends_with(&format!("-> {echo}")), "{line}");
            break port.parse().expect("a port");
        }
    };
    for round in 0..2 {
        let message = format!("round {round} through the tunnel\n").repeat(100);
        let trip = async {
            let mut c = tokio::net::TcpStream::connect(("127.0.0.1", local))
                .await
                .expect("connect to the forwarded port");
            c.write_all(message.as_bytes()).await.expect("write");
            c.shutdown().await.expect("half-close");
            let mut back = String::new();
            c.read_to_string(&mut back).await.expect("read");
            back
        };
        let back = tokio::time::timeout(RUN_LIMIT, trip)
            .await
            .expect("round trip within the limit");
        assert_eq!(back, message, "round {round}");
    }
    child.kill().await.expect("stop port-forward");
}

/// Bytes that survive only an intact copy: every byte value, NULs and newlines included.
fn payload(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// `kubectl cp` into the pod and back out; the "container's" files are under `root` (the
/// same absolute paths on this machine).
async fn cp(k: &Kubectl, root: &Path, kubelet: &kubelet::Kubelet) {
    let inbox = root.join("in");
    std::fs::create_dir_all(&inbox).expect("in dir");
    let sent = payload(7, 200 * 1024 + 13);
    let local = k.dir.join("upload.bin");
    std::fs::write(&local, &sent).expect("local file");
    let remote = format!("default/web:{}", inbox.join("upload.bin").display());
    k.run(&["cp", &local.display().to_string(), &remote]).await;
    let arrived = std::fs::read(inbox.join("upload.bin")).expect("the file arrived");
    assert!(arrived == sent, "uploaded bytes differ");

    let outbox = root.join("out");
    std::fs::create_dir_all(&outbox).expect("out dir");
    let there = payload(11, 150 * 1024 + 5);
    std::fs::write(outbox.join("download.bin"), &there).expect("remote file");
    let back = k.dir.join("download.bin");
    let remote = format!("default/web:{}", outbox.join("download.bin").display());
    k.run(&["cp", &remote, &back.display().to_string()]).await;
    let got = std::fs::read(&back).expect("the file came back");
    assert!(
        got == there,
        "downloaded bytes differ ({} vs {})",
        got.len(),
        there.len()
    );
    // Both ways went through tar in the "container", as against a real kubelet.
    let commands = kubelet.commands.lock().clone();
    assert!(
        commands
            .iter()
            .filter(|c| c.first().map(String::as_str) == Some("tar"))
            .count()
            >= 2,
        "{commands:?}"
    );
}

/// Every step with kubectl `bin` against `server` (the front, or the test upstream),
/// reached with `args` (`--server …`).
async fn streams(
    bin: PathBuf,
    server: SocketAddr,
    args: &[String],
    echo: u16,
    root: &Path,
    kl: &kubelet::Kubelet,
) {
    let dir = root.join(format!(
        "kubectl-{}-{}",
        server.port(),
        bin.display().to_string().replace('/', "_")
    ));
    std::fs::create_dir_all(&dir).expect("scratch");
    let k = Kubectl {
        bin,
        server: args.to_vec(),
        dir,
    };
    let started = Instant::now();
    logs(&k).await;
    exec(&k).await;
    attach(&k).await;
    port_forward(&k, echo).await;
    over_spdy(&k, kl, echo).await;
    cp(&k, root, kl).await;
    eprintln!(
        "  {} against {args:?}: {:?}",
        k.bin.display(),
        started.elapsed()
    );
}

fn plain(server: SocketAddr) -> Vec<String> {
    vec!["--server".into(), format!("http://{server}")]
}

/// The embedded store with the running pod, the test upstream in front of it, an echo
/// server and a scratch directory.
async fn setup(name: &str) -> (common::TestServer, kubelet::Kubelet, u16, TempDir) {
    let store = start(0, ServerConfig::default()).await;
    running_pod(store.addr).await;
    let kl = kubelet::start(store.addr).await;
    let echo = echo_server().await;
    (store, kl, echo, TempDir::new(name))
}

/// Every kubectl found that streams over WebSocket by default (exec, attach and cp from
/// 1.30, port-forward from 1.31). Older ones speak only SPDY, which `over_spdy` has the
/// newer ones fall back to; none is installed here to try, so they are left out, said so.
fn every_kubectl() -> Vec<PathBuf> {
    let bins = kubectls();
    if std::env::var_os("LISTWATCH_EXTRA_KUBECTL").is_some() {
        assert!(bins.len() >= 2, "only {bins:?} found");
    }
    let bins: Vec<PathBuf> = bins
        .into_iter()
        .filter(|b| {
            let minor = client_minor(b);
            if minor < 31 {
                eprintln!(
                    "  {} is 1.{minor}: streams over SPDY, left out",
                    b.display()
                );
            }
            minor >= 31
        })
        .collect();
    assert!(!bins.is_empty(), "no kubectl 1.31 or newer");
    bins
}

/// The client's minor version (`"32+"` is 32).
fn client_minor(bin: &Path) -> u32 {
    let out = std::process::Command::new(bin)
        .args(["version", "--client", "-o", "json"])
        .output()
        .expect("kubectl version");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    let minor = v["clientVersion"]["minor"].as_str().unwrap_or("0");
    minor.trim_end_matches('+').parse().unwrap_or(0)
}

/// The control: the steps straight against the test upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_streams_against_the_test_upstream() {
    let (_store, kl, echo, root) = setup("streams-direct").await;
    for bin in every_kubectl() {
        kl.served.lock().clear();
        streams(bin, kl.addr, &plain(kl.addr), echo, &root, &kl).await;
        assert_all_served(&kl);
    }
}

/// Issue 26: the steps with a kubeconfig naming only a front listwatch (apiserver source +
/// gateway) whose upstream is the test upstream; what it served itself shows each stream
/// really crossed the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_streams_through_a_front_listwatch() {
    let (_store, kl, echo, root) = setup("streams-front").await;
    let front = front(kl.addr).await;
    for bin in every_kubectl() {
        kl.served.lock().clear();
        streams(bin, front, &plain(front), echo, &root, &kl).await;
        assert_all_served(&kl);
    }
}

/// The same through a front serving TLS with ALPN h2 and http/1.1, as a deployed front
/// would: kubectl's ordinary requests may go over HTTP/2, its WebSocket upgrades dial
/// their own HTTP/1.1 connection, and both must work on the one listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_streams_through_a_front_listwatch_over_tls() {
    let (_store, kl, echo, root) = setup("streams-tls").await;
    let ca = common::tls::Ca::new("streams-ca");
    let leaf = ca.server();
    let cert = common::tls::write(&root, "front.crt", &leaf.cert_pem);
    let key = common::tls::write(&root, "front.key", &leaf.key_pem);
    let ca_file = common::tls::write(&root, "ca.crt", &ca.cert_pem);
    let options = listwatch_server::ServeOptions {
        tls: Some(listwatch_auth::tls::tls_config(&cert, &key, None).expect("tls")),
        ..Default::default()
    };
    let front = common::front_serving(kl.addr, options).await;
    let https = common::tls::Https {
        addr: front,
        ca: &ca,
        alpn: &["h2", "http/1.1"],
        cert: None,
    };
    let ready = common::poll_until(
        Duration::from_secs(20),
        || async { https.request("GET", "/readyz", None, None).await.ok() },
        |r| r.as_ref().is_some_and(|r| r.status == 200),
    )
    .await
    .expect("the TLS front answers");
    assert_eq!(ready.version, http::Version::HTTP_2, "ALPN offers h2 here");
    let args = vec![
        "--server".to_string(),
        format!("https://127.0.0.1:{}", front.port()),
        "--certificate-authority".to_string(),
        ca_file.display().to_string(),
        // Over https without credentials kubectl would prompt for a user name; the front
        // has no authenticator and forwards the header, which the test upstream ignores.
        "--token".to_string(),
        "streams-test".to_string(),
    ];
    for bin in every_kubectl() {
        kl.served.lock().clear();
        streams(bin, front, &args, echo, &root, &kl).await;
        assert_all_served(&kl);
    }
}

/// Each subresource reached the test upstream itself (as a WebSocket upgrade, for exec,
/// attach and port-forward): kubectl did not get by some other way.
fn assert_all_served(kl: &kubelet::Kubelet) {
    let served = kl.served.lock().clone();
    for sub in ["log", "exec", "attach", "portforward"] {
        assert!(
            served.iter().any(|s| s == sub),
            "{sub} not upstream: {served:?}"
        );
    }
}
