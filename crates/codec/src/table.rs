//! `meta.k8s.io` Table responses (what kubectl asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): pods get kubectl's pod columns,
//! every other kind a Name/Age table. Rows carry the object's metadata as
//! `PartialObjectMetadata`, spliced from the stored bytes without parsing them.

use listwatch_core::ResourceInfo;
use listwatch_core::json::push_go_string;
use listwatch_core::scan::{self, Span};
use listwatch_core::time::{human_duration, parse_rfc3339};
use listwatch_store::Record;

use crate::ChunkWriter;

const POD_COLUMNS: &str = include_str!("pod_columns.json");
const GENERIC_COLUMNS: &str = include_str!("generic_columns.json");
const CONFIGMAP_COLUMNS: &str = include_str!("configmap_columns.json");
const SECRET_COLUMNS: &str = include_str!("secret_columns.json");

/// Which printer a resource gets.
#[derive(Clone, Copy)]
enum Printer {
    Pods,
    ConfigMaps,
    Secrets,
    NameAge,
    /// The resource's own JSONPath columns (a CRD's `additionalPrinterColumns`).
    Columns,
    /// A built-in type's printer (`printers.rs`).
    Builtin(&'static crate::printers::BuiltinPrinter),
}

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

/// How to render rows for one resource.
#[derive(Clone)]
pub struct TableFormat {
    printer: Printer,
    api_version: &'static str,
    include: IncludeObject,
    /// For [`Printer::Columns`]: each column's type and path, and the definitions' JSON.
    columns: Vec<(String, Vec<String>)>,
    column_json: String,
}

impl std::fmt::Debug for TableFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableFormat")
            .field("api_version", &self.api_version)
            .field("include", &self.include)
            .field("columns", &self.columns)
            .finish()
    }
}

impl TableFormat {
    /// The table for `info`, as `meta.k8s.io/v1` or (`v1beta1`) `meta.k8s.io/v1beta1`.
    pub fn new(info: &ResourceInfo, v1beta1: bool, include: IncludeObject) -> Self {
        let mut column_json = String::new();
        let columns = info
            .columns
            .iter()
            .map(|c| {
                let path = c
                    .json_path
                    .trim_start_matches('.')
                    .split('.')
                    .map(str::to_string)
                    .collect();
                (c.type_.clone(), path)
            })
            .collect();
        if !info.columns.is_empty() {
            column_json = crate::printers::columns_json(info.columns.iter().map(|c| {
                let (name, ty, format) = (&*c.name, &*c.type_, &*c.format);
                (name, ty, format, &*c.description, c.priority)
            }));
        }
        let builtin = crate::printers::for_resource(&info.group, &info.resource);
        if let Some(p) = builtin.filter(|_| info.columns.is_empty()) {
            column_json = p.columns_json();
        }
        TableFormat {
            printer: match (info.group.as_str(), info.resource.as_str()) {
                _ if !info.columns.is_empty() => Printer::Columns,
                _ if let Some(p) = builtin => Printer::Builtin(p),
                ("", "pods") => Printer::Pods,
                ("", "configmaps") => Printer::ConfigMaps,
                ("", "secrets") => Printer::Secrets,
                _ => Printer::NameAge,
            },
            columns,
            column_json,
            api_version: if v1beta1 {
                "meta.k8s.io/v1beta1"
            } else {
                "meta.k8s.io/v1"
            },
            include,
        }
    }

    /// `{"kind":"Table","apiVersion":…,"metadata":{` — the caller writes the metadata fields.
    pub fn open(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"");
        out.extend_from_slice(self.api_version.as_bytes());
        out.extend_from_slice(b"\",\"metadata\":{");
    }

    /// After the metadata: the column definitions and the start of the rows array.
    pub fn columns_and_rows_start(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"},\"columnDefinitions\":");
        out.extend_from_slice(
            match self.printer {
                Printer::Pods => POD_COLUMNS,
                Printer::ConfigMaps => CONFIGMAP_COLUMNS,
                Printer::Secrets => SECRET_COLUMNS,
                Printer::NameAge => GENERIC_COLUMNS,
                Printer::Columns | Printer::Builtin(_) => &self.column_json,
            }
            .as_bytes(),
        );
        out.extend_from_slice(b",\"rows\":[");
    }

    /// Writes one row for `r` (served with `stamp_rv` in place of its RV when given).
    pub fn write_row(&self, out: &mut ChunkWriter, r: &Record, stamp_rv: Option<u64>, now: i64) {
        let b = &r.bytes()[..];
        let mut cells = Vec::with_capacity(160);
        cells.extend_from_slice(b"{\"cells\":[");
        let created =
            scan::find_path(b, 0, &["metadata", "creationTimestamp"]).and_then(|v| text(b, v));
        let age = created
            .and_then(parse_rfc3339)
            .map_or_else(|| "<unknown>".to_string(), |t| human_duration(now - t));
        let data_count = || (members(b, &["data"]) + members(b, &["binaryData"])).to_string();
        let values: Vec<String> = match self.printer {
            Printer::Pods => {
                let mut p = pod_cells(b);
                // kubectl ≥ 1.28: "2 (28s ago)" from the latest restart's finish time.
                if p.restarts != "0"
                    && let Some(t) = p.last_restart
                {
                    p.restarts = format!("{} ({} ago)", p.restarts, human_duration(now - t));
                }
                vec![
                    r.name().into(),
                    p.ready,
                    p.status,
                    p.restarts,
                    age,
                    p.ip,
                    p.node,
                    p.nominated,
                    p.gates,
                ]
            }
            Printer::ConfigMaps => vec![r.name().into(), data_count(), age],
            Printer::Secrets => {
                let ty = path_text(b, 0, &["type"]).unwrap_or("").to_string();
                vec![r.name().into(), ty, members(b, &["data"]).to_string(), age]
            }
            Printer::NameAge => vec![r.name().into(), age],
            Printer::Builtin(p) => p.cells(r.name(), b, now),
            Printer::Columns => {
                // Typed cells: numbers and booleans as JSON, dates as ages, missing as null.
                for (i, (ty, path)) in self.columns.iter().enumerate() {
                    if i > 0 {
                        cells.push(b',');
                    }
                    let path: Vec<&str> = path.iter().map(String::as_str).collect();
                    match scan::find_path(b, 0, &path) {
                        Some(v) if ty == "date" => match text(b, v).and_then(parse_rfc3339) {
                            Some(t) => push_go_string(&mut cells, &human_duration(now - t)),
                            None => cells.extend_from_slice(b"null"),
                        },
                        Some(v) if ty == "string" => match text(b, v) {
                            Some(t) => push_go_string(&mut cells, t),
                            None => cells.extend_from_slice(&b[v.0..v.1]),
                        },
                        Some(v) => cells.extend_from_slice(&b[v.0..v.1]),
                        None => cells.extend_from_slice(b"null"),
                    }
                }
                Vec::new()
            }
        };
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                cells.push(b',');
            }
            push_go_string(&mut cells, v);
        }
        cells.push(b']');
        out.put_slice(&cells);
        match self.include {
            IncludeObject::None => {}
            IncludeObject::Object => {
                out.put_slice(b",\"object\":");
                write_with_rv(out, r, stamp_rv, (0, b.len()));
            }
            IncludeObject::Metadata => {
                if let Some(md) = scan::find_member(b, 0, "metadata") {
                    out.put_slice(b",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":");
                    write_with_rv(out, r, stamp_rv, md);
                    out.put_slice(b"}");
                }
            }
        }
        out.put_slice(b"}");
    }

    /// A watch event whose object is a one-row Table (as kube-apiserver sends for `-w`).
    pub fn write_event(
        &self,
        out: &mut ChunkWriter,
        kind: &str,
        r: &Record,
        stamp_rv: Option<u64>,
        now: i64,
    ) {
        out.put_slice(b"{\"type\":\"");
        out.put_slice(kind.as_bytes());
        out.put_slice(b"\",\"object\":");
        self.write_single(out, r, stamp_rv, now);
        out.put_slice(b"}\n");
    }

    /// A one-row Table for `r` (single-object GET, and each watch event).
    pub fn write_single(&self, out: &mut ChunkWriter, r: &Record, stamp_rv: Option<u64>, now: i64) {
        let mut head = Vec::with_capacity(3300);
        self.open(&mut head);
        head.extend_from_slice(b"\"resourceVersion\":\"");
        let mut buf = itoa::Buffer::new();
        head.extend_from_slice(buf.format(stamp_rv.unwrap_or(r.rv())).as_bytes());
        head.push(b'"');
        self.columns_and_rows_start(&mut head);
        out.put_slice(&head);
        self.write_row(out, r, stamp_rv, now);
        out.put_slice(b"]}");
    }
}

/// Writes `span` of the record's bytes, replacing its RV by `stamp_rv` when given.
fn write_with_rv(out: &mut ChunkWriter, r: &Record, stamp_rv: Option<u64>, span: Span) {
    let (pre, post) = r.split_at_rv();
    let (rv_start, rv_end) = (pre.len(), r.bytes().len() - post.len());
    match stamp_rv {
        Some(rv) if rv != r.rv() && span.0 <= rv_start && rv_end <= span.1 => {
            out.put_bytes(r.bytes().slice(span.0..rv_start));
            let mut buf = itoa::Buffer::new();
            out.put_slice(buf.format(rv).as_bytes());
            out.put_bytes(r.bytes().slice(rv_end..span.1));
        }
        _ => out.put_bytes(r.bytes().slice(span.0..span.1)),
    }
}

fn text(b: &[u8], v: Span) -> Option<&str> {
    scan::plain_scalar(b, v).and_then(|s| std::str::from_utf8(&b[s.0..s.1]).ok())
}

fn path_text<'a>(b: &'a [u8], start: usize, path: &[&str]) -> Option<&'a str> {
    scan::find_path(b, start, path).and_then(|v| text(b, v))
}

struct PodCells {
    ready: String,
    status: String,
    restarts: String,
    /// The latest restart the RESTARTS column counts (its finish time).
    last_restart: Option<i64>,
    ip: String,
    node: String,
    nominated: String,
    gates: String,
}

struct ContainerState<'a> {
    name: &'a str,
    ready: bool,
    started: bool,
    restarts: i64,
    waiting_reason: Option<&'a str>,
    terminated: Option<(Option<&'a str>, i64, i64)>,
    running: bool,
    /// `lastState.terminated.finishedAt` (seconds since the epoch).
    last_finished: Option<i64>,
}

fn container_states<'a>(b: &'a [u8], path: &[&str]) -> Vec<ContainerState<'a>> {
    let mut v = Vec::new();
    if let Some(arr) = scan::find_path(b, 0, path) {
        scan::for_each_element(b, arr.0, |e| {
            let num = |p: &[&str]| {
                path_text(b, e.0, p)
                    .and_then(|s| s.parse::<i64>().ok())
                    .unwrap_or(0)
            };
            let terminated = scan::find_path(b, e.0, &["state", "terminated"]).map(|_| {
                (
                    path_text(b, e.0, &["state", "terminated", "reason"]),
                    num(&["state", "terminated", "exitCode"]),
                    num(&["state", "terminated", "signal"]),
                )
            });
            v.push(ContainerState {
                name: path_text(b, e.0, &["name"]).unwrap_or(""),
                ready: path_text(b, e.0, &["ready"]) == Some("true"),
                started: path_text(b, e.0, &["started"]) == Some("true"),
                restarts: num(&["restartCount"]),
                waiting_reason: path_text(b, e.0, &["state", "waiting", "reason"])
                    .filter(|s| !s.is_empty()),
                terminated,
                running: scan::find_path(b, e.0, &["state", "running"]).is_some(),
                last_finished: path_text(b, e.0, &["lastState", "terminated", "finishedAt"])
                    .and_then(parse_rfc3339),
            });
        });
    }
    v
}

fn members(b: &[u8], path: &[&str]) -> usize {
    let mut n = 0;
    if let Some(obj) = scan::find_path(b, 0, path) {
        scan::for_each_member(b, obj.0, |_| n += 1);
    }
    n
}

fn count(b: &[u8], path: &[&str]) -> usize {
    let mut n = 0;
    if let Some(arr) = scan::find_path(b, 0, path) {
        scan::for_each_element(b, arr.0, |_| n += 1);
    }
    n
}

/// kube-apiserver 1.36's pod printer (`printPod`): READY, STATUS, RESTARTS (with the
/// latest restart's age appended by the caller from `last_restart`), IP, NODE, NOMINATED
/// NODE, READINESS GATES. Restartable init containers (sidecars) count as containers
/// once started.
fn pod_cells(b: &[u8]) -> PodCells {
    let none = || "<none>".to_string();
    let mut total = count(b, &["spec", "containers"]);
    let init_total = count(b, &["spec", "initContainers"]);
    let mut sidecars = Vec::new();
    if let Some(arr) = scan::find_path(b, 0, &["spec", "initContainers"]) {
        scan::for_each_element(b, arr.0, |e| {
            if path_text(b, e.0, &["restartPolicy"]) == Some("Always") {
                sidecars.push(path_text(b, e.0, &["name"]).unwrap_or(""));
            }
        });
    }
    total += sidecars.len();
    let phase = path_text(b, 0, &["status", "phase"]).unwrap_or("");
    let mut reason = phase.to_string();
    if let Some(r) = path_text(b, 0, &["status", "reason"]).filter(|s| !s.is_empty()) {
        reason = r.to_string();
    }
    let condition = |ty: &str| {
        let mut found = None;
        if let Some(arr) = scan::find_path(b, 0, &["status", "conditions"]) {
            scan::for_each_element(b, arr.0, |e| {
                if found.is_none() && path_text(b, e.0, &["type"]) == Some(ty) {
                    found = Some((
                        path_text(b, e.0, &["status"]).unwrap_or(""),
                        path_text(b, e.0, &["reason"]).unwrap_or(""),
                    ));
                }
            });
        }
        found
    };
    if condition("PodScheduled").is_some_and(|(_, r)| r == "SchedulingGated") {
        reason = "SchedulingGated".into();
    }
    let (mut restarts, mut sidecar_restarts, mut ready) = (0, 0, 0);
    let (mut last, mut sidecar_last) = (None, None);
    let mut initializing = false;
    for (i, c) in container_states(b, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        restarts += c.restarts;
        last = last.max(c.last_finished);
        let sidecar = sidecars.contains(&c.name);
        if sidecar {
            sidecar_restarts += c.restarts;
            sidecar_last = sidecar_last.max(c.last_finished);
        }
        match (&c.terminated, c.waiting_reason) {
            (Some((_, 0, _)), _) => continue,
            _ if sidecar && c.started => {
                if c.ready {
                    ready += 1;
                }
                continue;
            }
            (Some((Some(r), _, _)), _) if !r.is_empty() => reason = format!("Init:{r}"),
            (Some((_, _, sig)), _) if *sig != 0 => reason = format!("Init:Signal:{sig}"),
            (Some((_, code, _)), _) => reason = format!("Init:ExitCode:{code}"),
            (None, Some(w)) if w != "PodInitializing" => reason = format!("Init:{w}"),
            _ => reason = format!("Init:{i}/{init_total}"),
        }
        initializing = true;
        break;
    }
    if !initializing || condition("Initialized").is_some_and(|(s, _)| s == "True") {
        restarts = sidecar_restarts;
        last = sidecar_last;
        let mut has_running = false;
        let mut error_reason = String::new();
        for c in container_states(b, &["status", "containerStatuses"])
            .iter()
            .rev()
        {
            restarts += c.restarts;
            last = last.max(c.last_finished);
            if let Some(w) = c.waiting_reason {
                reason = w.to_string();
            } else if let Some((r, code, sig)) = &c.terminated {
                reason = match r {
                    Some(r) if !r.is_empty() => r.to_string(),
                    _ if *sig != 0 => format!("Signal:{sig}"),
                    _ => format!("ExitCode:{code}"),
                };
                if *code != 0 {
                    error_reason = reason.clone();
                }
            } else if c.ready && c.running {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" {
            if has_running && condition("Ready").is_some_and(|(s, _)| s == "True") {
                reason = "Running".into();
            } else if !error_reason.is_empty() {
                reason = error_reason;
            } else if has_running {
                reason = "NotReady".into();
            }
        }
    }
    if scan::find_path(b, 0, &["metadata", "deletionTimestamp"]).is_some_and(|v| b[v.0] != b'n') {
        if path_text(b, 0, &["status", "reason"]) == Some("NodeLost") {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    let gates = count(b, &["spec", "readinessGates"]);
    let or_none = |v: Option<&str>| {
        v.filter(|s| !s.is_empty())
            .map_or_else(none, str::to_string)
    };
    let first_ip = scan::find_path(b, 0, &["status", "podIPs"]).and_then(|arr| {
        let mut ip = None;
        scan::for_each_element(b, arr.0, |e| {
            if ip.is_none() {
                ip = path_text(b, e.0, &["ip"]);
            }
        });
        ip
    });
    PodCells {
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts: restarts.to_string(),
        last_restart: last,
        // kube's v1 → internal conversion fills `podIPs` from `podIP` when it is empty.
        ip: or_none(first_ip.or_else(|| path_text(b, 0, &["status", "podIP"]))),
        node: or_none(path_text(b, 0, &["spec", "nodeName"])),
        nominated: or_none(path_text(b, 0, &["status", "nominatedNodeName"])),
        gates: if gates == 0 {
            none()
        } else {
            format!("{}/{gates}", count_true_gates(b))
        },
    }
}

fn count_true_gates(b: &[u8]) -> usize {
    let mut types = Vec::new();
    if let Some(arr) = scan::find_path(b, 0, &["spec", "readinessGates"]) {
        scan::for_each_element(b, arr.0, |e| {
            if let Some(t) = path_text(b, e.0, &["conditionType"]) {
                types.push(t);
            }
        });
    }
    let mut n = 0;
    if let Some(arr) = scan::find_path(b, 0, &["status", "conditions"]) {
        scan::for_each_element(b, arr.0, |e| {
            let t = path_text(b, e.0, &["type"]);
            if t.is_some_and(|t| types.contains(&t))
                && path_text(b, e.0, &["status"]) == Some("True")
            {
                n += 1;
            }
        });
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_core::builtin_resource;

    fn pods() -> ResourceInfo {
        builtin_resource("pods").expect("pods")
    }

    fn row(json: &str, now: i64) -> String {
        let r = Record::ingest(json.as_bytes(), &pods(), 7).expect("ingest");
        let mut out = ChunkWriter::new(1 << 20);
        TableFormat::new(&pods(), false, IncludeObject::Metadata)
            .write_row(&mut out, &r, None, now);
        out.flush();
        String::from_utf8(out.pop().expect("row").to_vec()).expect("utf8")
    }

    #[test]
    fn pending_pod_row_matches_reference() {
        let t = parse_rfc3339("2026-11-22T02:18:39Z").expect("ts");
        let r = row(
            r#"{"metadata":{"name":"list-pod-0","namespace":"wl-1","creationTimestamp":"2026-11-22T02:18:39Z"},"spec":{"containers":[{"name":"a"},{"name":"b"}]},"status":{"phase":"Pending"}}"#,
            t + 35,
        );
        assert!(r.starts_with(r#"{"cells":["list-pod-0","0/2","Pending","0","35s","\u003cnone\u003e","\u003cnone\u003e","\u003cnone\u003e","\u003cnone\u003e"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"list-pod-0","namespace":"wl-1","resourceVersion":"7","#), "{r}");
    }

    #[test]
    fn running_and_crashing_pods() {
        let r = row(
            r#"{"metadata":{"name":"p","namespace":"n"},"spec":{"nodeName":"n1","containers":[{"name":"a"},{"name":"b"}]},"status":{"phase":"Running","podIP":"10.0.0.1","containerStatuses":[{"name":"a","ready":true,"restartCount":2,"state":{"running":{}}},{"name":"b","ready":false,"restartCount":5,"state":{"waiting":{"reason":"CrashLoopBackOff"}}}]}}"#,
            0,
        );
        assert!(r.contains(r#""p","1/2","CrashLoopBackOff","7","#), "{r}");
        assert!(r.contains(r#""10.0.0.1","n1","#));
        let r = row(
            r#"{"metadata":{"name":"p","namespace":"n","deletionTimestamp":"2026-01-01T00:00:00Z"},"spec":{"containers":[]},"status":{"phase":"Running"}}"#,
            0,
        );
        assert!(r.contains(r#""Terminating""#));
        let r = row(
            r#"{"metadata":{"name":"p","namespace":"n"},"spec":{"initContainers":[{"name":"i"}],"containers":[{"name":"a"}]},"status":{"phase":"Pending","initContainerStatuses":[{"name":"i","restartCount":1,"state":{"waiting":{"reason":"PodInitializing"}}}]}}"#,
            0,
        );
        assert!(r.contains(r#""0/1","Init:0/1","1""#), "{r}");
    }
}
