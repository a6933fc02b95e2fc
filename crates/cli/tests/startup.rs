//! Start-up errors a person can act on: the real binary, given a bad flag, file or address,
//! exits 1 with one line that names it and says why — never a debug dump or a panic.

use std::process::Command;

/// Runs `listwatch serve ARGS` (which must fail at start) and returns its stderr. Unless
/// the case is about `--listen`, it listens on a free port, so a server on the default
/// 8080 cannot change the outcome.
fn fails(args: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_listwatch"));
    cmd.arg("serve");
    let addressed = ["--listen", "--bind-address", "--secure-port"];
    if !args.iter().any(|a| addressed.contains(a)) {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    let out = cmd.args(args).output().expect("run listwatch");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(
        stderr.starts_with("listwatch: ") && stderr.trim_end().lines().count() == 1,
        "{args:?}: not one line: {stderr}"
    );
    assert!(
        !stderr.contains("Os {") && !stderr.contains("kind:") && !stderr.contains("panicked"),
        "{args:?}: debug dump: {stderr}"
    );
    stderr
}

/// [`fails`], asserting that its line names each of `parts`.
fn fails_naming(args: &[&str], parts: &[&str]) {
    let e = fails(args);
    for p in parts {
        assert!(e.contains(p), "{p:?} not in: {e}");
    }
}

fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("listwatch-startup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write");
    path
}

#[test]
fn a_port_without_a_host_says_what_to_write() {
    let says = ["--listen \"8080\"", "HOST:PORT", "127.0.0.1:8080"];
    fails_naming(&["--listen", "8080"], &says);
}

#[test]
fn an_address_in_use_is_named_with_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let named = format!("--listen {addr}");
    fails_naming(
        &["--listen", &addr],
        &[&named, "in use", "choose another port"],
    );
}

#[test]
fn a_missing_or_malformed_resources_file_is_named() {
    let missing = "/nonexistent/resources.json";
    let named = format!("--resources {missing}");
    fails_naming(&["--resources", missing], &[&named, "No such file"]);
    let bad = temp_file("resources.json", "[{\"group\": 1}]");
    let bad = bad.display().to_string();
    let named = format!("--resources {bad}");
    fails_naming(&["--resources", &bad], &[&named, "line 1 column"]);
}

/// What the binary says when it fails loading `file` (`--load`).
fn fails_loading(file: &std::path::Path) -> String {
    fails(&[
        "--listen",
        "127.0.0.1:0",
        "--load",
        &file.display().to_string(),
    ])
}

#[test]
fn a_bad_ndjson_line_is_named_by_file_and_line() {
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"x"}}"#;
    let nameless = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"x"}}"#;
    let file = temp_file("pods.ndjson", &format!("{pod}\n\n{nameless}\n"));
    let e = fails_loading(&file);
    assert!(e.contains(&format!("--load {}:3:", file.display())), "{e}");
    assert!(e.contains("metadata.name"), "{e}");
    let alien = temp_file(
        "alien.ndjson",
        r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}"#,
    );
    let e = fails_loading(&alien);
    assert!(
        e.contains(":1: no resource serves example.com/v1 Widget") && e.contains("--resources"),
        "{e}"
    );
}

#[test]
fn bad_log_levels_and_credential_files_are_named() {
    let level = ["--log-level", "foo=bar=baz"];
    fails_naming(&level, &["--log-level \"foo=bar=baz\""]);
    let tokens = ["--token-auth-file", "/nonexistent/tokens.csv"];
    fails_naming(&tokens, &[&tokens.join(" "), "No such file"]);
    let mode = ["--authorization-mode", "Bogus"];
    fails_naming(&mode, &["--authorization-mode \"Bogus\""]);
    let webhook = ["--authorization-mode", "RBAC,Webhook"];
    fails_naming(
        &webhook,
        &["--authorization-webhook-config-file", "--upstream"],
    );
    let abac = ["--authorization-mode", "ABAC"];
    fails_naming(&abac, &["--authorization-policy-file"]);
    let front_proxy = [
        "--tls-cert",
        "/nonexistent/tls.crt",
        "--tls-key",
        "/nonexistent/tls.key",
        "--requestheader-client-ca-file",
        "/nonexistent/front-proxy-ca.crt",
    ];
    let named = [
        "--requestheader-client-ca-file",
        "/nonexistent/front-proxy-ca.crt",
    ];
    fails_naming(&front_proxy, &named);
}

#[test]
fn kube_apiserver_s_address_flags_are_checked() {
    fails_naming(
        &["--bind-address", "127.0.0.1"],
        &["--bind-address 127.0.0.1 needs --secure-port"],
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let args = ["--bind-address", "127.0.0.1", "--secure-port", &port];
    fails_naming(
        &args,
        &[
            &format!("127.0.0.1:{port}"),
            "another process listens there",
        ],
    );
}

#[test]
fn in_a_pod_without_its_token_the_mount_is_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_listwatch"))
        .args(["serve", "--listen", "127.0.0.1:0", "--source", "apiserver"])
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", "1")
        .env(
            "LISTWATCH_SERVICE_ACCOUNT_DIR",
            "/nonexistent/serviceaccount",
        )
        .output()
        .expect("run listwatch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for part in [
        "in-cluster configuration",
        "/nonexistent/serviceaccount/ca.crt",
    ] {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
}

#[test]
fn the_version_names_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_listwatch"))
        .arg("--version")
        .output()
        .expect("run listwatch");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with(&format!("listwatch {} (", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    // Built in a git checkout (CI's clone is one), it names a commit of this repository
    // (HEAD's when built last: a commit made since does not rebuild the test's binary).
    if Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let commit = text
            .trim()
            .rsplit_once('(')
            .and_then(|(_, c)| c.strip_suffix(')'))
            .unwrap_or_default();
        assert!(
            commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
            "{text}"
        );
        let known = Command::new("git")
            .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .status()
            .expect("git");
        assert!(known.success(), "{commit} is not a commit here");
    }
}
