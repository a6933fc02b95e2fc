//! listwatch as a pod would run it in front of a real kube-apiserver 1.36: started with only
//! what a pod is given — `KUBERNETES_SERVICE_HOST`/`_PORT`, its service account's token and
//! the cluster CA in a directory (the kubelet's mount) — and `--source apiserver`, no
//! `--upstream`. Mid-run the token file is replaced by a new token and the old one
//! invalidated (as the kubelet rotates a projected token), and the serving certificate's
//! files are replaced (as cert-manager renews them): following, pass-through writes and an
//! open watch go on, and new connections get the new certificate.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use listwatch_testkit::kube::{KubeRun, Listwatch};
use listwatch_testkit::workload::{Subject, Workload};
use listwatch_testkit::{PipeLines, TempDir};

listwatch_testkit::kube_tests!(
    in_a_pod_it_follows_the_cluster_through_token_and_certificate_rotation
);

/// listwatch's own service account (cluster-admin here; deploy/ has the least-privilege
/// role) and the two Secrets its two tokens are bound to.
fn setup() -> Workload {
    Workload::new()
        .service_accounts("kube-system", &["listwatch"])
        .secret("kube-system", "token-one", &[])
        .secret("kube-system", "token-two", &[])
        .cluster_grant(
            "listwatch",
            "cluster-admin",
            Subject::service_account("kube-system", "listwatch"),
        )
        .service_accounts("default", &["default"])
}

/// Writes `text` to `path` as the kubelet does: a new file renamed over the old one.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// The serial number of the certificate a new TLS connection to `port` is given.
fn served_serial(port: u16) -> String {
    let mut s_client = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_client");
    let x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(s_client.stdout.take().expect("pipe"))
        .output()
        .expect("openssl x509");
    let _ = s_client.wait();
    String::from_utf8_lossy(&x509.stdout).trim().to_string()
}

fn file_serial(cert: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(cert)
        .output()
        .expect("openssl x509");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn in_a_pod_it_follows_the_cluster_through_token_and_certificate_rotation(
    KubeRun(_, _, cluster): KubeRun,
) {
    cluster.apply(&setup());
    let token = |secret: &str| {
        cluster
            .kubectl_ok(&[
                "create",
                "token",
                "listwatch",
                "-n",
                "kube-system",
                "--bound-object-kind",
                "Secret",
                "--bound-object-name",
                secret,
            ])
            .trim()
            .to_string()
    };
    let (first, second) = (token("token-one"), token("token-two"));

    let dir = TempDir::new("in-cluster");
    let mount = dir.join("serviceaccount");
    std::fs::create_dir_all(&mount).expect("dir");
    std::fs::copy(cluster.file("ca.pem"), mount.join("ca.crt")).expect("ca");
    replace(&mount.join("token"), &first);
    std::fs::write(mount.join("namespace"), "kube-system").expect("namespace");
    let (cert, key) = cluster.serving_cert(&dir, "serving");
    let port = cluster.port.to_string();
    let lw = Listwatch::start(
        &[
            "--source".as_ref(),
            "apiserver".as_ref(),
            "--tls-cert-file".as_ref(),
            cert.as_os_str(),
            "--tls-private-key-file".as_ref(),
            key.as_os_str(),
        ],
        &[
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1".as_ref()),
            ("KUBERNETES_SERVICE_PORT", port.as_ref()),
            ("LISTWATCH_SERVICE_ACCOUNT_DIR", mount.as_os_str()),
        ],
        &cluster.file("ca.pem"),
        Duration::from_secs(60),
    );
    assert!(
        lw.log_text().contains(&format!(
            "following the upstream apiserver upstream=https://127.0.0.1:{port}"
        )),
        "{}",
        lw.log_text()
    );
    let ca = cluster.file("ca.pem");
    let admin = format!("Authorization: Bearer {}", cluster.admin_token);
    let me = cluster.kubeconfig_for(
        &dir.join("admin.kubeconfig"),
        &lw.url(),
        &cluster.admin_token,
    );

    // An open watch, served here, read line by line on a thread.
    let mut watch = Command::new("curl")
        .args(["-sN", "--cacert"])
        .arg(&ca)
        .args(["-H", &admin])
        .arg(format!(
            "{}/api/v1/namespaces/default/configmaps?watch=1",
            lw.url()
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("curl watch");
    let events = PipeLines::read(watch.stdout.take().expect("pipe"));
    let saw = |name: &str| {
        let quoted = format!("\"{name}\"");
        events
            .find(Duration::from_secs(20), |line| {
                line.contains("\"ADDED\"") && line.contains(&quoted)
            })
            .is_some()
    };
    let create = |name: &str| {
        let out = cluster.kubectl_with(&me, &["create", "configmap", name, "-n", "default"], None);
        assert!(
            out.status.success(),
            "create {name} through listwatch: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            lw.log_text()
        );
    };
    create("before");
    assert!(saw("before"), "the watch saw the first write");

    // Rotation: a new token in the file, the old one invalidated; a new certificate.
    replace(&mount.join("token"), &second);
    cluster.kubectl_ok(&["delete", "secret", "token-one", "-n", "kube-system"]);
    // kube-apiserver caches token answers for seconds: wait for the refusal.
    let first_refused = || {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(&ca)
            .args(["-H", &format!("Authorization: Bearer {first}")])
            .arg(format!(
                "{}/api/v1/namespaces/default/configmaps",
                cluster.url()
            ))
            .output()
            .expect("curl");
        out.stdout == b"401"
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !first_refused() {
        assert!(
            Instant::now() < deadline,
            "the first token still works after 30 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let old_serial = file_serial(&cert);
    let renewed = dir.join("renewed");
    std::fs::create_dir_all(&renewed).expect("dir");
    let (new_cert, new_key) = cluster.serving_cert(&renewed, "serving");
    std::fs::copy(&new_key, &key).expect("key");
    std::fs::copy(&new_cert, &cert).expect("cert");
    let new_serial = file_serial(&cert);
    assert_ne!(old_serial, new_serial);
    std::thread::sleep(Duration::from_millis(1500));

    // Pass-through (with the new token), following and the open watch go on.
    create("after");
    assert!(
        saw("after"),
        "the open watch saw the write after the rotation"
    );
    let out = cluster.kubectl_with(
        &me,
        &["get", "configmaps", "-n", "default", "-o", "name"],
        None,
    );
    let names = String::from_utf8_lossy(&out.stdout);
    assert!(
        names.contains("configmap/before") && names.contains("configmap/after"),
        "a consistent LIST through listwatch: {names}"
    );
    assert_eq!(
        served_serial(lw.port),
        new_serial,
        "new connections get the new certificate"
    );
    assert!(
        watch.try_wait().expect("watch").is_none(),
        "the watch opened before the rotation is still open"
    );
    let _ = watch.kill();
    let _ = watch.wait();
}
