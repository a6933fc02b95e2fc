//! Certificates renewed in place under a running gateway in front of kube-apiserver 1.36,
//! as cert-manager and kubeadm renew them: the client CA bundle (`--client-ca-file`) is
//! replaced by another CA's, and the front-proxy certificate listwatch presents upstream
//! (`--proxy-client-cert-file`/`--proxy-client-key-file`) by one kube-apiserver accepts.
//! New connections see the new files, with no restart: users of the new CA are known and
//! those of the old one are not, and what passes through reaches kube-apiserver as the
//! user. The first front-proxy certificate has a name kube-apiserver does not allow
//! (`--requestheader-allowed-names`), so a gateway that kept it could pass nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use listwatch_testkit::TempDir;
use listwatch_testkit::kube::{KubeCluster, Listwatch, front_proxy_identity};
use listwatch_testkit::openssl::{self_signed_ca, signed_cert};

/// A client certificate `dir/file.pem` (key `dir/file.key`) for `subject`, signed by `ca`.
fn client_cert(
    dir: &Path,
    file: &str,
    subject: &str,
    ca: &(PathBuf, PathBuf),
) -> (PathBuf, PathBuf) {
    signed_cert(
        dir,
        file,
        subject,
        "extendedKeyUsage=clientAuth\n",
        (&ca.0, &ca.1),
    )
}

/// Copies `from` over `to` at once: a new file renamed over the old one.
fn replace(from: &Path, to: &Path) {
    let tmp = to.with_extension("new");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

/// The HTTP status and body of `curl` through the gateway as the holder of `cert`.
fn as_user(
    gateway: &Listwatch,
    ca: &Path,
    cert: &(PathBuf, PathBuf),
    extra: &[&str],
) -> (String, String) {
    let (c, k) = (
        cert.0.to_str().expect("utf-8"),
        cert.1.to_str().expect("utf-8"),
    );
    let mut args = vec!["--cert", c, "--key", k, "-w", "\n%{http_code}"];
    args.extend_from_slice(extra);
    let out = gateway.curl(ca, &args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.to_string(), body.to_string())
}

#[test]
fn renewed_client_ca_and_front_proxy_certificate_apply_without_a_restart() {
    let Some(cluster) = KubeCluster::start_or_skip(
        "renewed_client_ca_and_front_proxy_certificate_apply_without_a_restart",
    ) else {
        return;
    };
    let dir = TempDir::new("cert-rotation");
    let old_users = self_signed_ca(&dir, "users-old");
    let new_users = self_signed_ca(&dir, "users-new");
    let alice = client_cert(&dir, "alice", "/O=system:masters/CN=alice", &old_users);
    let bob = client_cert(&dir, "bob", "/O=system:masters/CN=bob", &new_users);
    let front_proxy_ca = (
        cluster.file("front-proxy-ca.pem"),
        cluster.file("front-proxy-ca.key"),
    );
    let not_allowed = client_cert(
        &dir,
        "not-allowed",
        "/CN=not-front-proxy-client",
        &front_proxy_ca,
    );

    // The files the gateway is started with, then renewed in place.
    let client_ca = dir.join("client-ca.pem");
    let (proxy_cert, proxy_key) = (dir.join("proxy.pem"), dir.join("proxy.key"));
    replace(&old_users.0, &client_ca);
    replace(&not_allowed.0, &proxy_cert);
    replace(&not_allowed.1, &proxy_key);

    let mut extra = front_proxy_identity(&proxy_cert, &proxy_key);
    extra.extend(["--client-ca-file".as_ref(), client_ca.as_os_str()]);
    let gateway = cluster.gateway(&dir, "gateway", &extra);
    let ca = cluster.file("ca.pem");
    let configmaps = "/api/v1/namespaces/default/configmaps";

    // The old CA's user is known (a read served here), the new CA's is not (refused in the
    // TLS handshake: a certificate presented and not verified ends it, "000" to curl).
    assert_eq!(as_user(&gateway, &ca, &alice, &[configmaps]).0, "200");
    assert_eq!(as_user(&gateway, &ca, &bob, &[configmaps]).0, "000");

    // Renewed: the client CA bundle is the new CA's, the front-proxy certificate one
    // kube-apiserver allows.
    replace(&new_users.0, &client_ca);
    replace(&cluster.file("front-proxy-client.pem"), &proxy_cert);
    replace(&cluster.file("front-proxy-client.key"), &proxy_key);
    std::thread::sleep(Duration::from_millis(1500));

    assert_eq!(as_user(&gateway, &ca, &bob, &[configmaps]).0, "200");
    assert_eq!(as_user(&gateway, &ca, &alice, &[configmaps]).0, "000");
    // Passed through with the renewed front-proxy certificate, kube-apiserver knows bob.
    let (status, body) = as_user(
        &gateway,
        &ca,
        &bob,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        ],
    );
    assert_eq!(status, "201", "{body}\n{}", gateway.log_text());
    let review: serde_json::Value = serde_json::from_str(&body).expect("a review");
    assert_eq!(review["status"]["userInfo"]["username"], "bob", "{body}");
}
