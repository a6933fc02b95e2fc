//! The real parts listwatch stands beside: an unmodified kube-apiserver 1.36 with its etcd
//! (over mutual TLS, as kubeadm runs it), built and started by `../shared/k8s/` (its README),
//! and the `listwatch` binary itself, built once per test process with every feature.
//!
//! Tests of the real-apiserver tier start with [`KubeCluster::start_or_skip`]: where no
//! kube-apiserver can be built (no mirror of its source on this machine) they skip with
//! that one reason; with `LISTWATCH_REQUIRE_KUBE=1` (what `scripts/test` sets when the mirror
//! is there) the same reason fails the test instead, so a machine that can run the tier
//! never skips it quietly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// `../shared/k8s/` beside the repository.
pub fn k8s_scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/k8s")
}

/// Where `build.sh` puts its binaries.
const K8S_BIN: &str = "/tmp/k8s-bin";

/// Builds kube-apiserver and etcd through `build.sh` when they are not there yet (once per
/// process, serialized across processes by a lock file); why not, when they cannot be.
fn ensure_built() -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = k8s_scripts().join("build.sh");
            if !script.exists() {
                return Err(format!("{} is missing", script.display()));
            }
            // build.sh exits at once when its binaries are current; flock keeps two test
            // binaries from building into the same tree at once.
            let out = Command::new("flock")
                .arg("/tmp/k8s-build.lock")
                .arg("bash")
                .arg(&script)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("running {}: {e}", script.display()))?;
            if out.status.success() && Path::new(K8S_BIN).join("kube-apiserver").exists() {
                return Ok(());
            }
            let err = String::from_utf8_lossy(&out.stderr);
            let why = err
                .lines()
                .rev()
                .find(|l| l.starts_with("build.sh:"))
                .unwrap_or_else(|| err.lines().last().unwrap_or("no output"));
            Err(format!("no kube-apiserver could be built: {why}"))
        })
        .clone()
}

/// What the real-apiserver tier does when a part it needs cannot be had here (`why`):
/// print it and skip (`None`: the caller returns), or, under `LISTWATCH_REQUIRE_KUBE=1`
/// (a machine that can run the tier), fail the test with it.
pub fn or_skip<T>(test: &str, part: Result<T, String>) -> Option<T> {
    match part {
        Ok(t) => Some(t),
        Err(why) if std::env::var("LISTWATCH_REQUIRE_KUBE").as_deref() == Ok("1") => {
            panic!("{test}: {why} (LISTWATCH_REQUIRE_KUBE=1)")
        }
        Err(why) => {
            eprintln!("{test}: skipped: {why}");
            None
        }
    }
}

/// One run of a real-apiserver test ([`kube_tests!`](crate::kube_tests)): the test's name
/// (what its skip and timing lines start with), when it began (before its cluster started)
/// and its cluster; a test takes it apart as `KubeRun(test, started, cluster)`.
pub struct KubeRun(
    /// The test's name.
    pub &'static str,
    /// When the test began, before its cluster started.
    pub std::time::Instant,
    /// The cluster started for it.
    pub KubeCluster,
);

impl KubeRun {
    /// Starts a cluster for `test`; `None` when it is skipped, as
    /// [`KubeCluster::start_or_skip`].
    pub fn start_or_skip(test: &'static str) -> Option<KubeRun> {
        let started = std::time::Instant::now();
        KubeCluster::start_or_skip(test).map(|cluster| KubeRun(test, started, cluster))
    }
}

/// The `#[test]`s of a file of the real-apiserver tier: for each function named (in this
/// module, taking a [`KubeRun`]), a test of the same name (in a module `kube_tests`) that
/// starts a cluster and runs the function on it, or is skipped with the one reason it
/// cannot run here ([`KubeCluster::start_or_skip`]). The name is written once, where the
/// test's own body can be formatted as any function.
#[macro_export]
macro_rules! kube_tests {
    ($($name:ident),+ $(,)?) => {
        mod kube_tests {
            $(
                #[test]
                fn $name() {
                    if let Some(run) = $crate::kube::KubeRun::start_or_skip(stringify!($name)) {
                        super::$name(run);
                    }
                }
            )+
        }
    };
}

/// A running etcd (mutual TLS) and kube-apiserver 1.36, stopped when dropped.
pub struct KubeCluster {
    /// kube-apiserver's secure port on 127.0.0.1.
    pub port: u16,
    /// `/tmp/k8s-run-PORT`: certificates, keys, logs.
    pub dir: PathBuf,
    /// The admin kubeconfig (a token in `system:masters`, the cluster CA).
    pub kubeconfig: PathBuf,
    /// The admin's bearer token.
    pub admin_token: String,
    /// etcd's client URL (`https://127.0.0.1:EPORT`).
    pub etcd_url: String,
}

/// The environment of a child cargo: without what cargo set for this test process (its
/// package's CARGO_* and OUT_DIR), since build scripts that watch such variables would
/// otherwise see a change and rebuild the whole tree at every run.
fn without_cargo_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let ours = k.starts_with("CARGO_")
            && !matches!(&*k, "CARGO_HOME" | "CARGO_TARGET_DIR" | "CARGO_BUILD_JOBS");
        if ours || k == "OUT_DIR" {
            cmd.env_remove(&*k);
        }
    }
    cmd
}

/// This test process's cargo profile directory (`target/<profile>`).
fn profile_dir() -> PathBuf {
    // target/<profile>/deps/<test> → target/<profile>
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// The listwatch fork of kube-apiserver (`go/kube-apiserver-listwatch/build.sh`: the
/// unmodified tree of `build.sh`, patched, with `liblistwatch_ffi` linked in), built once
/// per test process (serialized across processes by a lock file), sharing this process's
/// target directory for the library; why not, when it cannot be built here.
pub fn fork_binary() -> Result<PathBuf, String> {
    static FORK: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FORK.get_or_init(|| {
        ensure_built()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../go/kube-apiserver-listwatch/build.sh");
        let target = profile_dir().parent().expect("target dir").to_path_buf();
        let mut cmd = Command::new("flock");
        without_cargo_env(&mut cmd)
            .arg("/tmp/k8s-fork.lock")
            .arg("bash")
            .arg(&script)
            .env("CARGO_TARGET_DIR", &target)
            .env("K8S_SCRIPTS", k8s_scripts())
            .stdin(Stdio::null());
        let out = cmd
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        if out.status.success() && path.is_file() {
            return Ok(path);
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        Err(format!(
            "the listwatch fork could not be built: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ))
    })
    .clone()
}

/// A kube-apiserver started by hand beside a cluster's own (on its etcd), stopped (SIGTERM,
/// then SIGKILL) when dropped.
pub struct SecondApiServer {
    child: std::process::Child,
    /// Its secure port on 127.0.0.1.
    pub port: u16,
    /// Its log.
    pub log: PathBuf,
}

impl SecondApiServer {
    /// Its URL.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for SecondApiServer {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").arg(&pid).status();
        for _ in 0..40 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl KubeCluster {
    /// Starts a cluster, or says why none can run here.
    pub fn start() -> Result<KubeCluster, String> {
        Self::start_with(None)
    }

    /// Starts a cluster whose kube-apiserver is `kube_apiserver` (a fork, given run.sh's
    /// flags through `KUBE_APISERVER`), or the unmodified one for `None`.
    pub fn start_with(kube_apiserver: Option<&Path>) -> Result<KubeCluster, String> {
        ensure_built()?;
        let port = crate::unlisted_port();
        // etcd takes EPORT and EPORT+1 (peer): two adjacent ports, both taken from the
        // counter, so no later call in this process hands out the peer port (two clusters
        // started at once collided on it).
        let etcd_port = loop {
            let p = crate::unlisted_port();
            if crate::unlisted_port() == p + 1 {
                break p;
            }
        };
        let mut run = Command::new("bash");
        run.arg(k8s_scripts().join("run.sh"))
            .arg(port.to_string())
            .arg(etcd_port.to_string())
            .env("ETCD_TLS", "1")
            .stdin(Stdio::null());
        if let Some(binary) = kube_apiserver {
            run.env("KUBE_APISERVER", binary);
        }
        let out = run.output().map_err(|e| format!("run.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "run.sh {port} {etcd_port} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let kubeconfig = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let dir = kubeconfig
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let tokens = std::fs::read_to_string(dir.join("tokens.csv"))
            .map_err(|e| format!("{}: {e}", dir.join("tokens.csv").display()))?;
        let admin_token = tokens.split(',').next().unwrap_or_default().to_string();
        Ok(KubeCluster {
            port,
            dir,
            kubeconfig,
            admin_token,
            etcd_url: format!("https://127.0.0.1:{etcd_port}"),
        })
    }

    /// Starts a cluster; `None` after printing the one reason it cannot run here (the
    /// caller returns: the test is skipped), unless `LISTWATCH_REQUIRE_KUBE=1`, where that
    /// reason fails the test.
    pub fn start_or_skip(test: &str) -> Option<KubeCluster> {
        or_skip(test, KubeCluster::start())
    }

    /// Starts a cluster whose kube-apiserver is the listwatch fork ([`fork_binary`]);
    /// `None` after printing why it cannot run here, as [`KubeCluster::start_or_skip`].
    pub fn start_fork_or_skip(test: &str) -> Option<KubeCluster> {
        or_skip(
            test,
            fork_binary().and_then(|fork| KubeCluster::start_with(Some(&fork))),
        )
    }

    /// Starts `binary` (a kube-apiserver) on this cluster's etcd with exactly the flags
    /// run.sh gave the cluster's own (read from /proc), but on another port, and waits for
    /// its `/readyz`: two apiservers on one etcd, as in a highly available control plane.
    pub fn second_apiserver(&self, binary: &Path) -> Result<SecondApiServer, String> {
        self.second_apiserver_with(binary, &[])
    }

    /// [`KubeCluster::second_apiserver`] with `extra` flags after run.sh's (run.sh itself
    /// passes none: an audit policy and log, say, for one started by hand).
    pub fn second_apiserver_with(
        &self,
        binary: &Path,
        extra: &[String],
    ) -> Result<SecondApiServer, String> {
        let pid = std::fs::read_to_string(self.dir.join("apiserver.pid"))
            .map_err(|e| format!("apiserver.pid: {e}"))?;
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim()))
            .map_err(|e| format!("cmdline of {}: {e}", pid.trim()))?;
        let port = crate::unlisted_port();
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .skip(1)
            .filter(|a| !a.is_empty())
            .map(|a| {
                let a = String::from_utf8_lossy(a).into_owned();
                if a.starts_with("--secure-port=") {
                    format!("--secure-port={port}")
                } else {
                    a
                }
            })
            .chain(extra.iter().cloned())
            .collect();
        let log = self.dir.join(format!("apiserver-{port}.log"));
        let child = Command::new(binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?)
            .stderr(
                std::fs::File::options()
                    .append(true)
                    .open(&log)
                    .map_err(|e| e.to_string())?,
            )
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let mut second = SecondApiServer { child, port, log };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let out = Command::new("curl")
                .args(["-s", "--max-time", "5", "--cacert"])
                .arg(self.file("ca.pem"))
                .args(["-H", &format!("Authorization: Bearer {}", self.admin_token)])
                .arg(format!("{}/readyz", second.url()))
                .output()
                .map_err(|e| format!("curl: {e}"))?;
            if out.stdout == b"ok" {
                return Ok(second);
            }
            if let Ok(Some(status)) = second.child.try_wait() {
                return Err(format!(
                    "{} exited ({status}): see {}",
                    binary.display(),
                    second.log.display()
                ));
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "{} not ready in 120 s: see {}",
                    binary.display(),
                    second.log.display()
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }

    /// kube-apiserver's URL.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// A file of the run's PKI (`ca.pem`, `front-proxy-client.pem`, `etcd-ca.pem`, …).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `kubectl --kubeconfig <admin> ARGS`: its output, whatever its exit status.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(&self.kubeconfig, args, None)
    }

    /// `kubectl --kubeconfig KC ARGS`, `stdin` fed to it when given.
    pub fn kubectl_with(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write as _;
        // A discovery cache of this process's own: kubectl's default is per host and port,
        // and a cluster started on the same port by an earlier run left resources there
        // (a CRD since gone) that kubectl then takes as served, POSTs, and gets 404.
        let cache = self
            .dir
            .join(format!("kubectl-cache-{}", std::process::id()));
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(cache)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs (scripts/test installs it)");
        if let Some(mut pipe) = child.stdin.take() {
            let _ = pipe.write_all(stdin.unwrap_or_default().as_bytes());
        }
        child.wait_with_output().expect("kubectl")
    }

    /// `kubectl --kubeconfig KC ARGS`: whether it succeeded, and its stdout (or, when it
    /// failed, its stderr: where kubectl says `Forbidden`).
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
        crate::process::outcome(self.kubectl_with(kubeconfig, args, None))
    }

    /// `kubectl` as the admin, which must succeed: its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        self.kubectl_ok_with(args, None)
    }

    /// `kubectl -f -` style: `stdin` fed to an admin kubectl that must succeed.
    pub fn kubectl_ok_with(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_with(&self.kubeconfig, args, stdin);
        crate::process::stdout_of_success(&format!("kubectl {}", args.join(" ")), &out)
    }

    /// `kubectl apply` of `workload` as the admin, which must succeed.
    pub fn apply(&self, workload: &crate::workload::Workload) {
        self.kubectl_ok_with(&["apply", "-f", "-"], Some(&workload.manifest()));
    }

    /// A token of the service account `name` in `namespace`, valid for an hour
    /// (`kubectl create token`).
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        self.kubectl_ok(&["create", "token", name, "-n", namespace, "--duration", "1h"])
            .trim()
            .to_string()
    }

    /// A serving certificate for 127.0.0.1 and localhost signed by the cluster CA (the CA
    /// kubectl and client-go already trust): `(cert, key)` paths under `dir`.
    pub fn serving_cert(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        self.signed_cert(
            dir,
            name,
            &format!("/CN={name}"),
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
    }

    /// A certificate `dir/file.pem` (key `dir/file.key`) for `subject` with the X.509 v3
    /// `extensions`, signed by the cluster CA ([`crate::openssl::signed_cert`]).
    pub fn signed_cert(
        &self,
        dir: &Path,
        file: &str,
        subject: &str,
        extensions: &str,
    ) -> (PathBuf, PathBuf) {
        let (ca_cert, ca_key) = (self.file("ca.pem"), self.file("ca.key"));
        crate::openssl::signed_cert(dir, file, subject, extensions, (&ca_cert, &ca_key))
    }

    /// The gateway in front of this cluster as docs/gateway.md starts it: `listwatch serve
    /// --source apiserver --upstream <kube-apiserver> --upstream-kubeconfig <admin>`, serving
    /// TLS with a certificate of the cluster CA (made under `dir` as `name`), with `extra`
    /// flags after those; ready within 90 s.
    pub fn gateway(&self, dir: &Path, name: &str, extra: &[&std::ffi::OsStr]) -> Listwatch {
        self.gateway_as(dir, name, &self.kubeconfig, extra)
    }

    /// [`KubeCluster::gateway`] with `upstream_kubeconfig` (listwatch's own credential
    /// upstream) instead of the admin's.
    pub fn gateway_as(
        &self,
        dir: &Path,
        name: &str,
        upstream_kubeconfig: &Path,
        extra: &[&std::ffi::OsStr],
    ) -> Listwatch {
        let (cert, key) = self.serving_cert(dir, name);
        let upstream = self.url();
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "--source".as_ref(),
            "apiserver".as_ref(),
            "--upstream".as_ref(),
            upstream.as_ref(),
            "--upstream-kubeconfig".as_ref(),
            upstream_kubeconfig.as_os_str(),
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ];
        args.extend_from_slice(extra);
        Listwatch::start(
            &args,
            &[],
            &self.file("ca.pem"),
            std::time::Duration::from_secs(90),
        )
    }

    /// A kubeconfig at `path` naming `server` (trusting the cluster CA) with `token`.
    pub fn kubeconfig_for(&self, path: &Path, server: &str, token: &str) -> PathBuf {
        self.kubeconfig_with(path, server, &[("token", token)])
    }

    /// A kubeconfig at `path` naming `server` (trusting the cluster CA) whose user has the
    /// credential members `user` (`token`, or `client-certificate` and `client-key`).
    pub fn kubeconfig_with(&self, path: &Path, server: &str, user: &[(&str, &str)]) -> PathBuf {
        let user: String = user
            .iter()
            .map(|(k, v)| format!("    {k}: {v}\n"))
            .collect();
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters:\n- name: k\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
             users:\n- name: u\n  user:\n{user}\
             contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n",
            self.file("ca.pem").display()
        );
        std::fs::write(path, text).expect("kubeconfig");
        path.to_path_buf()
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(k8s_scripts().join("run.sh"))
            .arg("stop")
            .arg(self.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `listwatch serve`'s flags to pass requests upstream as a front proxy
/// (`--upstream-identity front-proxy`) presenting the client certificate `cert` (key `key`).
pub fn front_proxy_identity<'a>(cert: &'a Path, key: &'a Path) -> Vec<&'a std::ffi::OsStr> {
    vec![
        "--upstream-identity".as_ref(),
        "front-proxy".as_ref(),
        "--proxy-client-cert-file".as_ref(),
        cert.as_os_str(),
        "--proxy-client-key-file".as_ref(),
        key.as_os_str(),
    ]
}

/// The `listwatch` binary with every feature (`--source etcd` included), built by cargo
/// once per test process into this workspace's target directory (seconds when current).
pub fn listwatch_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let profile_dir = profile_dir();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let target = profile_dir.parent().expect("target dir");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        without_cargo_env(&mut cmd);
        cmd.args([
            "build",
            "--quiet",
            "-p",
            "listwatch-cli",
            "--features",
            "etcd",
        ])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo build runs");
        assert!(status.success(), "cargo build -p listwatch-cli failed");
        profile_dir.join("listwatch")
    })
    .clone()
}

/// A `listwatch serve` process serving TLS on 127.0.0.1, killed when dropped; its log is
/// kept in a file named in failures.
pub struct Listwatch {
    child: std::process::Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its log (stdout).
    pub log: PathBuf,
}

impl Listwatch {
    /// Starts `listwatch serve --listen 127.0.0.1:<free port> ARGS` with `env` added to
    /// its environment, and waits until `/readyz` answers `ok` over TLS (trusting `ca`),
    /// panicking with its log after `within`.
    pub fn start(
        args: &[&std::ffi::OsStr],
        env: &[(&str, &std::ffi::OsStr)],
        ca: &Path,
        within: std::time::Duration,
    ) -> Listwatch {
        let port = crate::unlisted_port();
        let log = std::env::temp_dir().join(format!("listwatch-{}-{port}.log", std::process::id()));
        let mut cmd = Command::new(listwatch_binary());
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("log file"))
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let lw = Listwatch {
            child: cmd.spawn().expect("listwatch starts"),
            port,
            log,
        };
        let deadline = std::time::Instant::now() + within;
        while lw.curl(ca, &["/readyz"]).stdout != b"ok" {
            assert!(
                std::time::Instant::now() < deadline,
                "listwatch not ready in {within:?}: {}",
                lw.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        lw
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// `curl -s --cacert CA` of `args` (the last one a path on this server, or options
    /// before it), within 10 s.
    pub fn curl(&self, ca: &Path, args: &[&str]) -> Output {
        let (path, options) = args.split_last().expect("a path");
        Command::new("curl")
            .args(["-s", "--max-time", "10", "--cacert"])
            .arg(ca)
            .args(options)
            .arg(format!("{}{path}", self.url()))
            .output()
            .expect("curl runs")
    }

    /// Its `/metrics` text, read with the bearer `token`.
    pub fn metrics(&self, ca: &Path, token: &str) -> String {
        let auth = format!("Authorization: Bearer {token}");
        String::from_utf8_lossy(&self.curl(ca, &["-H", &auth, "/metrics"]).stdout).into_owned()
    }

    /// What it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Listwatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
