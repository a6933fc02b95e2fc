//! The etcd source over a real cluster's etcd, side by side with the kube-apiserver 1.36
//! that wrote it (etcd over mutual TLS, as kubeadm runs it).
//!
//! A workload goes in through kube-apiserver with kubectl: namespaces, one or more objects
//! of every built-in kind that can be created without controllers or kubelets (status
//! written through `status` subresources where a controller would), a CSR approved, two
//! CRDs (one with two served versions) and their objects, and then — with listwatch
//! already following etcd — defaults added to a CRD's schema, which kube-apiserver applies
//! when it decodes objects stored before them.
//!
//! Then, for every collection both servers list (their discovery, intersected):
//! - LIST as JSON: equal to kube-apiserver's whole, list metadata included (listwatch is
//!   asked at kube's list RV with `resourceVersionMatch=Exact`, so both describe the same
//!   revision);
//! - LIST as protobuf and as `PartialObjectMetadataList` (JSON and protobuf): byte for
//!   byte (or the same refusal, for custom resources, which kube serves as JSON only);
//! - LIST `as=Table`: equal, except cells of the columns kube renders relative to the
//!   serving clock (`Age`, `Last Seen`, …), which may differ by the seconds between the two
//!   requests (at most [`CLOCK_SLACK`]);
//! - every listed object's GET, JSON and protobuf: equal (an object rewritten between the
//!   two reads — kube-apiserver renews its own leases — is read again);
//! - WATCH from the same RV (JSON and protobuf): the same events for writes made after.
//!
//! Views that differ are collected and the test fails listing them. docs/etcd.md
//! ("Side by side with kube-apiserver") lists what this found and its named exceptions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use listwatch_testkit::kube::{KubeCluster, KubeRun, listwatch_binary};
use serde_json::Value;

listwatch_testkit::kube_tests!(etcd_source_serves_what_kube_apiserver_serves_from_the_same_etcd);

const WORKLOAD: &str = include_str!("data/kube-etcd-parity-workload.yaml");
const CRDS: &str = include_str!("data/kube-etcd-parity-crd.yaml");
const CRS: &str = include_str!("data/kube-etcd-parity-crs.yaml");

/// How far apart two renderings of a clock-relative Table cell may be: the requests to the
/// two servers are made one after the other, seconds apart at most.
const CLOCK_SLACK: u64 = 5;

/// How long the watches stay open after the last write.
const DELIVERY: Duration = Duration::from_secs(3);

/// Table columns kube-apiserver renders relative to the time of the request.
const CLOCK_COLUMNS: &[&str] = &[
    "Age",
    "Last Seen",
    "First Seen",
    "Duration",
    "Last Schedule",
];

const JSON: &str = "application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const POM_JSON: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";
const POM_PROTOBUF: &str =
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";
const POM_ONE_JSON: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One of the two servers compared: its base URL and how curl reaches it.
struct Server {
    name: &'static str,
    base: String,
    /// curl options: kube-apiserver's CA and the admin token; none for listwatch (http).
    auth: Vec<String>,
}

/// An HTTP answer: status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

impl Server {
    fn curl(&self) -> Command {
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "--http1.1"]).args(&self.auth);
        cmd
    }

    /// `GET path` with `Accept: accept`.
    fn get(&self, path: &str, accept: &str) -> Answer {
        let out = self
            .curl()
            .args(["--max-time", "30", "-H"])
            .arg(format!("Accept: {accept}"))
            .args(["-o", "-", "-w", "%{stderr}%{http_code}"])
            .arg(format!("{}{path}", self.base))
            .output()
            .expect("curl runs");
        let status = String::from_utf8_lossy(&out.stderr)
            .trim()
            .parse()
            .unwrap_or(0);
        Answer {
            status,
            body: out.stdout,
        }
    }

    /// A watch of `path` (query included) with `Accept: accept`, ended after `secs`.
    fn watch(&self, path: &str, accept: &str, secs: u64) -> Child {
        self.curl()
            .args(["-N", "--max-time", &secs.to_string(), "-H"])
            .arg(format!("Accept: {accept}"))
            .arg(format!("{}{path}", self.base))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("curl runs")
    }
}

/// A collection: group, version, resource, namespaced.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Collection {
    group: String,
    version: String,
    resource: String,
    namespaced: bool,
}

impl Collection {
    fn prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    fn list_path(&self) -> String {
        format!("{}/{}", self.prefix(), self.resource)
    }

    fn object_path(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) => format!("{}/namespaces/{ns}/{}/{name}", self.prefix(), self.resource),
            None => format!("{}/{}/{name}", self.prefix(), self.resource),
        }
    }

    fn label(&self) -> String {
        format!("{}/{}/{}", self.group, self.version, self.resource)
    }
}

/// Every collection `server` lists, by its discovery (`/api/v1`, `/apis` and each group
/// version).
fn collections(server: &Server) -> BTreeSet<Collection> {
    let mut versions = vec![("".to_string(), "v1".to_string(), "/api/v1".to_string())];
    let groups = server.get("/apis", JSON).json();
    for g in groups["groups"].as_array().into_iter().flatten() {
        for v in g["versions"].as_array().into_iter().flatten() {
            let gv = v["groupVersion"].as_str().unwrap_or_default();
            let (group, version) = gv.split_once('/').unwrap_or(("", gv));
            versions.push((group.into(), version.into(), format!("/apis/{gv}")));
        }
    }
    let mut out = BTreeSet::new();
    for (group, version, path) in versions {
        let list = server.get(&path, JSON).json();
        for r in list["resources"].as_array().into_iter().flatten() {
            let name = r["name"].as_str().unwrap_or_default();
            let lists = r["verbs"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v == "list"));
            if name.contains('/') || !lists {
                continue;
            }
            out.insert(Collection {
                group: group.clone(),
                version: version.clone(),
                resource: name.to_string(),
                namespaced: r["namespaced"].as_bool().unwrap_or(false),
            });
        }
    }
    out
}

/// Seconds in one of Go's `duration.HumanDuration` renderings (`42s`, `3m5s`, `2d4h`).
fn human_seconds(s: &str) -> Option<u64> {
    let (mut total, mut n, mut digits) = (0u64, 0u64, false);
    for c in s.chars() {
        if let Some(d) = c.to_digit(10) {
            n = n * 10 + u64::from(d);
            digits = true;
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'y' => 365 * 86_400,
            _ => return None,
        };
        if !digits {
            return None;
        }
        total += n * unit;
        (n, digits) = (0, false);
    }
    (!digits).then_some(total)
}

/// `got` (listwatch's Table) with the clock-relative cells of `want` (kube-apiserver's)
/// put in where the two renderings are at most [`CLOCK_SLACK`] apart.
fn align_clock_cells(got: &mut Value, want: &Value) {
    let clock: Vec<usize> = want["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| {
            CLOCK_COLUMNS.contains(&c["name"].as_str().unwrap_or_default()) || c["type"] == "date"
        })
        .map(|(i, _)| i)
        .collect();
    let want_rows = want["rows"].as_array().cloned().unwrap_or_default();
    let Some(rows) = got["rows"].as_array_mut() else {
        return;
    };
    for (row, want_row) in rows.iter_mut().zip(&want_rows) {
        for &i in &clock {
            let (Some(g), Some(w)) = (row["cells"][i].as_str(), want_row["cells"][i].as_str())
            else {
                continue;
            };
            if let (Some(a), Some(b)) = (human_seconds(g), human_seconds(w))
                && a.abs_diff(b) <= CLOCK_SLACK
            {
                row["cells"][i] = Value::String(w.to_string());
            }
        }
    }
}

/// Annotations kube-apiserver's conversion to a kind's internal type removes, so its
/// PartialObjectMetadata (made from the internal object) lacks them while the object itself
/// carries them; listwatch serves the stored object's metadata (docs/etcd.md, exception
/// "PartialObjectMetadata of converted kinds").
fn internal_only_annotations(label: &str) -> &'static [&'static str] {
    match label {
        "apps/v1/daemonsets" => &["deprecated.daemonset.template.generation"],
        "autoscaling/v1/horizontalpodautoscalers" => &[
            "autoscaling.alpha.kubernetes.io/metrics",
            "autoscaling.alpha.kubernetes.io/current-metrics",
            "autoscaling.alpha.kubernetes.io/conditions",
            "autoscaling.alpha.kubernetes.io/behavior",
        ],
        _ => &[],
    }
}

/// Removes `keys` from `metadata.annotations` (and the member once empty).
fn drop_annotations(metadata: &mut Value, keys: &[&str]) {
    if keys.is_empty() {
        return;
    }
    let Some(m) = metadata.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(a)) = m.get_mut("annotations") {
        for k in keys {
            a.remove(*k);
        }
        if a.is_empty() {
            m.remove("annotations");
        }
    }
}

/// A PartialObjectMetadata(List) answer of listwatch with [`internal_only_annotations`]
/// removed.
fn as_internal_metadata(label: &str, a: &Answer) -> Answer {
    let keys = internal_only_annotations(label);
    let mut v = a.json();
    if keys.is_empty() || a.status != 200 {
        return Answer {
            status: a.status,
            body: a.body.clone(),
        };
    }
    match v.get_mut("items").and_then(Value::as_array_mut) {
        Some(items) => items
            .iter_mut()
            .for_each(|i| drop_annotations(&mut i["metadata"], keys)),
        None => drop_annotations(&mut v["metadata"], keys),
    }
    Answer {
        status: a.status,
        body: serde_json::to_vec(&v).expect("json"),
    }
}

/// A Table as compared: column descriptions left out and cells as text (listwatch's
/// printers write neither: docs/etcd.md, exception "Tables"), clock cells aligned, rows'
/// objects as kube's internal metadata, and for `autoscaling/v1` HPAs the Targets cell's
/// metrics as a set (the v1 view cannot keep a CPU target's position among them).
fn table_as_compared(label: &str, t: &mut Value) {
    for c in t["columnDefinitions"].as_array_mut().into_iter().flatten() {
        if let Some(c) = c.as_object_mut() {
            c.remove("description");
        }
    }
    let targets = t["columnDefinitions"]
        .as_array()
        .and_then(|cs| cs.iter().position(|c| c["name"] == "Targets"));
    for row in t["rows"].as_array_mut().into_iter().flatten() {
        for cell in row["cells"].as_array_mut().into_iter().flatten() {
            if !cell.is_string() {
                *cell = Value::String(cell.to_string());
            }
        }
        if let Some(i) = targets.filter(|_| label == "autoscaling/v1/horizontalpodautoscalers")
            && let Some(text) = row["cells"][i].as_str()
        {
            let mut parts: Vec<&str> = text.split(", ").collect();
            parts.sort_unstable();
            row["cells"][i] = Value::String(parts.join(", "));
        }
        drop_annotations(
            &mut row["object"]["metadata"],
            internal_only_annotations(label),
        );
    }
}

/// The column names of a Table.
fn column_names(t: &Value) -> Vec<String> {
    t["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Compares the Tables of collection `label`.
fn compare_tables(label: &str, got: &Answer, want: &Answer, findings: &mut Findings) {
    let view = format!("LIST {label} Table");
    if got.status != 200 || want.status != 200 {
        findings.json(view, got, want);
        return;
    }
    let (mut g, mut w) = (got.json(), want.json());
    align_clock_cells(&mut g, &w);
    table_as_compared(label, &mut g);
    table_as_compared(label, &mut w);
    if column_names(&g) == ["Name", "Age"] && column_names(&w) != ["Name", "Age"] {
        // No printer here: the Name column, and every row's name and object (kube orders
        // some Tables its own way, FlowSchemas by precedence), are still kube's.
        findings.no_printer.insert(label.to_string());
        let rows = |t: &Value| -> BTreeMap<String, (Value, Value)> {
            t["rows"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    let name = r["object"]["metadata"]["name"].as_str().unwrap_or_default();
                    (
                        name.to_string(),
                        (r["cells"][0].clone(), r["object"].clone()),
                    )
                })
                .collect()
        };
        let same = rows(&g) == rows(&w)
            && g["columnDefinitions"][0] == w["columnDefinitions"][0]
            && g["metadata"] == w["metadata"];
        findings.views += 1;
        if !same {
            findings.differences.push(format!(
                "{view} (no printer): names, objects or metadata differ: {}",
                listwatch_testkit::json_diff(&g, &w, 6).join("; ")
            ));
        }
        return;
    }
    let as_answer = |v: &Value| Answer {
        status: 200,
        body: serde_json::to_vec(v).expect("json"),
    };
    findings.json(view, &as_answer(&g), &as_answer(&w));
}

/// What differed, by view.
#[derive(Default)]
struct Findings {
    differences: Vec<String>,
    views: usize,
    /// Collections whose Table listwatch prints with Name and Age only (no printer).
    no_printer: BTreeSet<String>,
    /// Watch events compared (JSON) and watch bytes compared (protobuf).
    watch_events: usize,
    watch_bytes: usize,
    /// Views not compared byte for byte, by the named exception that excludes them.
    excepted: BTreeMap<&'static str, usize>,
}

impl Findings {
    /// Counts the view and compares its statuses: whether both are 200, so the bodies are
    /// compared. Equal error statuses pass: their messages name what each server serves
    /// (kube-apiserver's 406 lists YAML, which listwatch does not serve); differing ones are
    /// a difference.
    fn statuses_agree(&mut self, view: &str, got: &Answer, want: &Answer) -> bool {
        self.views += 1;
        if got.status == want.status {
            return want.status == 200;
        }
        self.differences.push(format!(
            "{view}: status {} (listwatch), {} (kube-apiserver): {}",
            got.status,
            want.status,
            String::from_utf8_lossy(&got.body[..got.body.len().min(300)])
        ));
        false
    }

    fn json(&mut self, view: String, got: &Answer, want: &Answer) {
        if !self.statuses_agree(&view, got, want) {
            return;
        }
        let (g, w) = (got.json(), want.json());
        if g != w {
            let lines = listwatch_testkit::json_diff(&g, &w, 8);
            self.differences.push(format!(
                "{view}: JSON differs:\n    {}",
                lines.join("\n    ")
            ));
        }
    }

    fn bytes(&mut self, view: String, got: &Answer, want: &Answer) {
        if !self.statuses_agree(&view, got, want) {
            return;
        }
        if got.body != want.body {
            let at = got
                .body
                .iter()
                .zip(&want.body)
                .position(|(a, b)| a != b)
                .unwrap_or(got.body.len().min(want.body.len()));
            let around = |b: &[u8]| {
                String::from_utf8_lossy(&b[at.saturating_sub(40)..(at + 40).min(b.len())])
                    .into_owned()
            };
            self.differences.push(format!(
                "{view}: bytes differ at {at} of {} / {}: listwatch {:?}, kube-apiserver {:?}",
                got.body.len(),
                want.body.len(),
                around(&got.body),
                around(&want.body)
            ));
        }
    }
}

/// Starts `listwatch serve --source etcd` over the cluster's etcd (mutual TLS) on plain
/// HTTP and waits for `/readyz`.
fn start_listwatch(cluster: &KubeCluster, port: u16) -> Killed {
    let log = std::env::temp_dir().join(format!("listwatch-kube-etcd-{port}.log"));
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new(listwatch_binary())
        .arg("serve")
        .args(["--source", "etcd", "--etcd-endpoints", &cluster.etcd_url])
        .arg("--etcd-cafile")
        .arg(cluster.file("etcd-ca.pem"))
        .arg("--etcd-certfile")
        .arg(cluster.file("apiserver-etcd-client.pem"))
        .arg("--etcd-keyfile")
        .arg(cluster.file("apiserver-etcd-client.key"))
        .args(["--listen", &listen, "--authorization-mode", "AlwaysAllow"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("listwatch starts");
    let server = Killed(child);
    let ready = listwatch_testkit::curl_until(
        &format!("http://{listen}/readyz"),
        Duration::from_secs(60),
        |body| body == b"ok",
    );
    assert!(
        ready == b"ok",
        "listwatch not ready: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    server
}

/// Polls `probe` until it holds, for at most `within`.
fn wait_until(what: &str, within: Duration, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !probe() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A certificate signing request (PEM) for a client certificate, made with openssl.
fn csr_pem(dir: &Path) -> String {
    let out = Command::new("openssl")
        .args(["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout"])
        .arg(dir.join("csr.key"))
        .args(["-subj", "/CN=parity/O=parity-group"])
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl req failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The workload: everything through kube-apiserver, statuses through their subresources.
fn write_workload(cluster: &KubeCluster, dir: &Path) {
    cluster.kubectl_ok_with(&["apply", "-f", "-"], Some(WORKLOAD));
    cluster.kubectl_ok_with(&["apply", "-f", "-"], Some(CRDS));
    cluster.kubectl_ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.parity.example.com",
        "crd/gadgets.parity.example.com",
    ]);
    cluster.kubectl_ok_with(&["apply", "-f", "-"], Some(CRS));
    // What controllers and kubelets would write: statuses (times to the second and micro).
    let status = |kind: &str, name: &str, ns: Option<&str>, patch: &str| {
        let mut args = vec!["patch", kind, name, "--subresource=status", "--type=merge"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        args.extend(["-p", patch]);
        cluster.kubectl_ok(&args);
    };
    status(
        "pod",
        "parity",
        Some("par-a"),
        r#"{"status":{"phase":"Running","podIP":"10.244.1.5","podIPs":[{"ip":"10.244.1.5"}],"hostIP":"10.0.0.5","startTime":"2026-01-02T03:04:05Z","qosClass":"Burstable","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-01-02T03:04:07Z"}],"containerStatuses":[{"name":"main","ready":true,"restartCount":1,"image":"nginx:1.27","imageID":"docker.io/library/nginx@sha256:00","containerID":"containerd://abc","started":true,"state":{"running":{"startedAt":"2026-01-02T03:04:06Z"}},"lastState":{"terminated":{"exitCode":137,"reason":"OOMKilled","startedAt":"2026-01-02T03:04:00Z","finishedAt":"2026-01-02T03:04:05Z"}}}]}}"#,
    );
    status(
        "node",
        "node-1",
        None,
        r#"{"status":{"capacity":{"cpu":"4","memory":"8Gi","pods":"110"},"allocatable":{"cpu":"3800m","memory":"7Gi","pods":"110"},"addresses":[{"type":"InternalIP","address":"10.0.0.5"},{"type":"Hostname","address":"node-1"}],"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:00:00Z","reason":"KubeletReady","message":"kubelet is posting ready status"}],"nodeInfo":{"machineID":"m","systemUUID":"s","bootID":"b","kernelVersion":"6.1","osImage":"Debian","containerRuntimeVersion":"containerd://1.7","kubeletVersion":"v1.36.2","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}}}"#,
    );
    status(
        "deployment",
        "parity",
        Some("par-a"),
        r#"{"status":{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"readyReplicas":1,"availableReplicas":1,"unavailableReplicas":1,"conditions":[{"type":"Available","status":"False","lastUpdateTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"MinimumReplicasUnavailable","message":"Deployment does not have minimum availability."}]}}"#,
    );
    status(
        "hpa",
        "parity",
        Some("par-a"),
        r#"{"status":{"currentReplicas":2,"desiredReplicas":2,"lastScaleTime":"2026-01-02T03:04:05Z","currentMetrics":[{"type":"Resource","resource":{"name":"cpu","current":{"averageUtilization":42,"averageValue":"42m"}}}],"conditions":[{"type":"AbleToScale","status":"True","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"ReadyForNewScale"}]}}"#,
    );
    status(
        "widget.v1.parity.example.com",
        "full",
        Some("par-a"),
        r#"{"status":{"ready":true}}"#,
    );
    let csr = csr_pem(dir);
    let request = base64(csr.as_bytes());
    let csr_object = format!(
        "{{\"apiVersion\":\"certificates.k8s.io/v1\",\"kind\":\"CertificateSigningRequest\",\
         \"metadata\":{{\"name\":\"parity\"}},\"spec\":{{\"request\":\"{request}\",\
         \"signerName\":\"example.com/parity\",\"expirationSeconds\":3600,\
         \"usages\":[\"digital signature\",\"key encipherment\",\"client auth\"]}}}}"
    );
    cluster.kubectl_ok_with(&["create", "-f", "-"], Some(&csr_object));
    cluster.kubectl_ok(&["certificate", "approve", "parity"]);
}

/// Standard base64 (the CSR's `spec.request`).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Adds schema defaults to `widgets` (both versions) once its objects are stored without
/// those fields, and waits until kube-apiserver serves them: it applies the defaults of
/// the stored object's version when it decodes what etcd holds.
fn add_crd_defaults_later(cluster: &KubeCluster, kube: &Server) {
    let path = |v: usize, field: &str| {
        format!(
            "/spec/versions/{v}/schema/openAPIV3Schema/properties/spec/properties/{field}/default"
        )
    };
    let patch = serde_json::json!([
        {"op": "add", "path": path(0, "mode"), "value": "standard"},
        {"op": "add", "path": path(0, "size"), "value": 1},
        {"op": "add", "path": path(0, "tags"), "value": ["defaulted"]},
        {"op": "add", "path": path(1, "mode"), "value": "v2-mode"},
    ]);
    cluster.kubectl_ok(&[
        "patch",
        "crd",
        "widgets.parity.example.com",
        "--type=json",
        "-p",
        &patch.to_string(),
    ]);
    wait_until(
        "kube-apiserver serves the new CRD default",
        Duration::from_secs(30),
        || {
            let w = kube
                .get(
                    "/apis/parity.example.com/v2/namespaces/par-b/widgets/bare",
                    JSON,
                )
                .json();
            w["spec"]["mode"] == "standard"
        },
    );
}

/// Compares every view of collection `c`.
fn compare_collection(c: &Collection, kube: &Server, lw: &Server, findings: &mut Findings) {
    let label = c.label();
    let want = kube.get(&c.list_path(), JSON);
    assert_eq!(
        want.status,
        200,
        "kube-apiserver LIST {label}: {}",
        String::from_utf8_lossy(&want.body)
    );
    let list = want.json();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let at = format!("?resourceVersion={rv}&resourceVersionMatch=Exact");
    let path = format!("{}{at}", c.list_path());
    findings.json(format!("LIST {label}"), &lw.get(&path, JSON), &want);
    findings.bytes(
        format!("LIST {label} protobuf"),
        &lw.get(&path, PROTOBUF),
        &kube.get(&path, PROTOBUF),
    );
    if internal_only_annotations(&label).is_empty() {
        findings.bytes(
            format!("LIST {label} protobuf POM"),
            &lw.get(&path, POM_PROTOBUF),
            &kube.get(&path, POM_PROTOBUF),
        );
    } else {
        *findings
            .excepted
            .entry("PartialObjectMetadata of converted kinds (protobuf)")
            .or_default() += 1;
    }
    findings.json(
        format!("LIST {label} POM"),
        &as_internal_metadata(&label, &lw.get(&path, POM_JSON)),
        &kube.get(&path, POM_JSON),
    );
    compare_tables(
        &label,
        &lw.get(&path, TABLE),
        &kube.get(&path, TABLE),
        findings,
    );

    for item in list["items"].as_array().into_iter().flatten() {
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let ns = item["metadata"]["namespace"].as_str();
        let path = c.object_path(ns, name);
        let view = format!(
            "GET {label} {}{name}",
            ns.map(|n| format!("{n}/")).unwrap_or_default()
        );
        // An object rewritten between the two reads (kube-apiserver renews its own leases)
        // is read again; a real difference stays.
        for accept in [JSON, PROTOBUF, POM_ONE_JSON] {
            let mut tries = 0;
            loop {
                let (want, mut got) = (kube.get(&path, accept), lw.get(&path, accept));
                if accept == POM_ONE_JSON {
                    got = as_internal_metadata(&label, &got);
                }
                let equal = got.status == want.status
                    && (got.body == want.body || accept != PROTOBUF && got.json() == want.json());
                tries += 1;
                if !equal && tries < 5 {
                    std::thread::sleep(Duration::from_millis(300));
                    continue;
                }
                if accept == PROTOBUF {
                    findings.bytes(format!("{view} protobuf"), &got, &want);
                } else {
                    findings.json(format!("{view} {accept}"), &got, &want);
                }
                break;
            }
        }
    }
}

/// Watches from one RV on both servers while writes go through kube-apiserver: the same
/// events, JSON value for value and protobuf byte for byte.
fn compare_watches(cluster: &KubeCluster, kube: &Server, lw: &Server, findings: &mut Findings) {
    let rv = kube.get("/api/v1/configmaps", JSON).json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let q = format!("?watch=1&resourceVersion={rv}");
    let watches: Vec<(String, &str)> = vec![
        (format!("/api/v1/configmaps{q}"), JSON),
        (format!("/api/v1/namespaces/par-a/configmaps{q}"), PROTOBUF),
        (
            format!("/api/v1/namespaces/par-a/pods{q}&labelSelector=app%3Dparity"),
            JSON,
        ),
        (format!("/api/v1/namespaces/par-a/pods{q}"), PROTOBUF),
        (format!("/apis/parity.example.com/v1/widgets{q}"), JSON),
        (
            format!("/apis/parity.example.com/v2/namespaces/par-a/widgets{q}"),
            JSON,
        ),
        (format!("/apis/apps/v1/deployments{q}"), PROTOBUF),
    ];
    // Ended by the test once the writes are done (the bound only guards a hung run).
    let secs = 120;
    let started: Vec<_> = watches
        .iter()
        .map(|(path, accept)| (kube.watch(path, accept, secs), lw.watch(path, accept, secs)))
        .collect();
    let k = |args: &[&str]| {
        cluster.kubectl_ok(args);
    };
    k(&[
        "create",
        "configmap",
        "watched",
        "-n",
        "par-a",
        "--from-literal=a=1",
    ]);
    k(&["label", "configmap", "watched", "-n", "par-a", "step=two"]);
    k(&["delete", "configmap", "watched", "-n", "par-a"]);
    k(&["label", "pod", "parity", "-n", "par-a", "watched=yes"]);
    k(&["annotate", "pod", "parity", "-n", "par-a", "note=watched"]);
    k(&[
        "scale",
        "deployment",
        "parity",
        "-n",
        "par-a",
        "--replicas=3",
    ]);
    cluster.kubectl_ok_with(
        &["apply", "-f", "-"],
        Some(
            "{\"apiVersion\":\"parity.example.com/v2\",\"kind\":\"Widget\",\"metadata\":\
             {\"name\":\"watched\",\"namespace\":\"par-a\"},\"spec\":{\"color\":\"white\"}}",
        ),
    );
    k(&[
        "patch",
        "widgets.v1.parity.example.com",
        "watched",
        "-n",
        "par-a",
        "--type=merge",
        "-p",
        "{\"spec\":{\"size\":9}}",
    ]);
    k(&[
        "delete",
        "widgets.v1.parity.example.com",
        "watched",
        "-n",
        "par-a",
    ]);
    // Every event is on both streams well within this after the last write (both servers
    // deliver in milliseconds here); then both watches are ended at the same point.
    std::thread::sleep(DELIVERY);
    let ended = |mut c: Child| {
        let _ = c.kill();
        c.wait_with_output().expect("curl").stdout
    };
    for ((path, accept), (want, got)) in watches.iter().zip(started) {
        let (want, got) = (ended(want), ended(got));
        let view = format!("WATCH {path} {accept}");
        if accept == &JSON {
            let events = |b: &[u8]| -> Vec<Value> {
                String::from_utf8_lossy(b)
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
                    .collect()
            };
            let (g, w) = (events(&got), events(&want));
            findings.watch_events += w.len();
            assert!(!w.is_empty(), "{view}: kube-apiserver sent no events");
            findings.views += 1;
            if g != w {
                let kinds = |e: &[Value]| -> Vec<String> {
                    e.iter()
                        .map(|e| format!("{} {}", e["type"], e["object"]["metadata"]["name"]))
                        .collect()
                };
                let first = g.iter().zip(&w).position(|(a, b)| a != b);
                let detail = first
                    .map(|i| listwatch_testkit::json_diff(&g[i], &w[i], 6).join("; "))
                    .unwrap_or_default();
                findings.differences.push(format!(
                    "{view}: events differ: listwatch {:?}, kube-apiserver {:?}; {detail}",
                    kinds(&g),
                    kinds(&w)
                ));
            }
        } else {
            assert!(!want.is_empty(), "{view}: kube-apiserver sent no events");
            findings.watch_bytes += want.len();
            findings.bytes(
                view,
                &Answer {
                    status: 200,
                    body: got,
                },
                &Answer {
                    status: 200,
                    body: want,
                },
            );
        }
    }
}

/// Collections kube-apiserver lists that listwatch does not serve, and why: not stored
/// in etcd (computed for each request).
const KUBE_ONLY: &[&str] = &["/v1/componentstatuses"];

/// Collections whose Table listwatch prints with Name and Age only, where kube-apiserver
/// has a printer (docs/etcd.md, exception "Tables").
const NO_PRINTER: &[&str] = &[
    "/v1/endpoints",
    "/v1/limitranges",
    "/v1/podtemplates",
    "/v1/resourcequotas",
    "admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
    "admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
    "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    "admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "apiregistration.k8s.io/v1/apiservices",
    "apps/v1/controllerrevisions",
    "flowcontrol.apiserver.k8s.io/v1/flowschemas",
    "flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
    "networking.k8s.io/v1/ingressclasses",
    "networking.k8s.io/v1/ipaddresses",
    "networking.k8s.io/v1/networkpolicies",
    "networking.k8s.io/v1/servicecidrs",
    "node.k8s.io/v1/runtimeclasses",
    "policy/v1/poddisruptionbudgets",
    "resource.k8s.io/v1/resourceclaims",
    "resource.k8s.io/v1/resourceslices",
    "scheduling.k8s.io/v1/priorityclasses",
    "storage.k8s.io/v1/csidrivers",
    "storage.k8s.io/v1/csinodes",
    "storage.k8s.io/v1/csistoragecapacities",
    "storage.k8s.io/v1/volumeattachments",
    "storage.k8s.io/v1/volumeattributesclasses",
];

fn etcd_source_serves_what_kube_apiserver_serves_from_the_same_etcd(
    KubeRun(test, _, cluster): KubeRun,
) {
    let began = Instant::now();
    let dir = std::env::temp_dir().join(format!("lw-kube-etcd-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_workload(&cluster, &dir);

    let port = listwatch_testkit::unlisted_port();
    let _lw = start_listwatch(&cluster, port);
    let kube = Server {
        name: "kube-apiserver",
        base: cluster.url(),
        auth: vec![
            "--cacert".into(),
            cluster.file("ca.pem").display().to_string(),
            "-H".into(),
            format!("Authorization: Bearer {}", cluster.admin_token),
        ],
    };
    let lw = Server {
        name: "listwatch",
        base: format!("http://127.0.0.1:{port}"),
        auth: Vec::new(),
    };
    // Defaults added to the CRD while listwatch follows etcd.
    add_crd_defaults_later(&cluster, &kube);

    let want = collections(&kube);
    let custom =
        |s: &BTreeSet<Collection>| s.iter().filter(|c| c.group == "parity.example.com").count();
    wait_until(
        "listwatch serves the custom resources",
        Duration::from_secs(30),
        || custom(&collections(&lw)) == custom(&want),
    );
    let got = collections(&lw);
    let kube_only: Vec<String> = want.difference(&got).map(Collection::label).collect();
    let lw_only: Vec<String> = got.difference(&want).map(Collection::label).collect();
    assert_eq!(
        kube_only, KUBE_ONLY,
        "collections kube-apiserver lists and listwatch does not ({} vs {})",
        kube.name, lw.name
    );
    assert!(
        lw_only.is_empty(),
        "collections only listwatch lists: {lw_only:?}"
    );

    let mut findings = Findings::default();
    let mut objects = BTreeMap::new();
    for c in want.intersection(&got) {
        compare_collection(c, &kube, &lw, &mut findings);
        let n = kube.get(&c.list_path(), JSON).json()["items"]
            .as_array()
            .map_or(0, Vec::len);
        objects.insert(c.label(), n);
    }
    let empty: Vec<&String> = objects
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(c, _)| c)
        .collect();
    let no_printer: Vec<&str> = findings.no_printer.iter().map(String::as_str).collect();
    if no_printer != NO_PRINTER {
        findings.differences.push(format!(
            "collections whose Table listwatch prints as Name and Age (docs/etcd.md, \"Tables\"): \
             {no_printer:?}, where NO_PRINTER names {NO_PRINTER:?}"
        ));
    }
    compare_watches(&cluster, &kube, &lw, &mut findings);
    eprintln!(
        "{test}: {} collections ({} objects; empty: {empty:?}), {} views compared \
         ({} JSON watch events, {} protobuf watch bytes), {} differ, excepted: {:?}, {:.1} s",
        objects.len(),
        objects.values().sum::<usize>(),
        findings.views,
        findings.watch_events,
        findings.watch_bytes,
        findings.differences.len(),
        findings.excepted,
        began.elapsed().as_secs_f64()
    );
    assert!(
        findings.differences.is_empty(),
        "{} views differ from kube-apiserver's:\n{}",
        findings.differences.len(),
        findings.differences.join("\n")
    );
}
