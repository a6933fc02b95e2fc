//! kubectl's server-side printers for the built-in types kubectl users look at most (the
//! columns kube-apiserver's Table for each type has), read from stored bytes with the byte
//! scanner. Pods, ConfigMaps and Secrets are in `table.rs`; everything else without a
//! printer here gets Name/Age.

use listwatch_core::scan;
use listwatch_core::time::{human_duration, parse_rfc3339};

/// A printer: its columns and how a row's cells are read from an object.
pub struct BuiltinPrinter {
    /// Column definitions as a header line ([`header_columns`]): `Name, Ready, Age`, Name
    /// first; a workload's pod-template columns follow them.
    columns: &'static str,
    /// The cells of one object under `columns` but Name and Age, which every printer
    /// fills alike ([`Self::cells`]) (`now` in Unix seconds, for ages).
    cells: fn(b: &[u8], now: i64) -> Vec<String>,
    /// The Name cell of an object named `name`.
    name: fn(name: &str, b: &[u8]) -> String,
    /// A workload's pod template, whose containers and images (and selector) kubectl
    /// shows with `-o wide` after the other columns.
    workload: Option<Workload>,
}

/// Where a workload keeps its pod template's spec and its selector.
struct Workload {
    template: &'static [&'static str],
    selector: Selector,
}

/// A workload's selector column.
enum Selector {
    /// None (StatefulSets show no selector).
    None,
    /// A label selector at this path (`matchLabels`, `matchExpressions`).
    Labels(&'static [&'static str]),
    /// A plain map at this path (a ReplicationController's).
    Map(&'static [&'static str]),
}

/// A workload's wide columns, in kubectl's order (Selector only with a selector).
const WORKLOAD_COLUMNS: &str = "Containers*, Images*, Selector*";

/// The pod template's spec of Deployments, ReplicaSets, StatefulSets, DaemonSets and Jobs.
const TEMPLATE: &[&str] = &["spec", "template", "spec"];

/// A workload whose pod template is at [`TEMPLATE`] and label selector at `spec.selector`.
const WORKLOAD: Workload = Workload {
    template: TEMPLATE,
    selector: Selector::Labels(&["spec", "selector"]),
};

/// The Name cell of most printers: the object's name.
fn plain_name(name: &str, _: &[u8]) -> String {
    name.into()
}

impl BuiltinPrinter {
    /// The printer of the header line `columns` whose cells but Name and Age `cells`
    /// reads, with no workload columns.
    const fn new(columns: &'static str, cells: fn(b: &[u8], now: i64) -> Vec<String>) -> Self {
        BuiltinPrinter {
            columns,
            cells,
            name: plain_name,
            workload: None,
        }
    }

    /// This printer with `workload`'s pod-template columns after its own.
    const fn with_workload(self, workload: Workload) -> Self {
        BuiltinPrinter {
            workload: Some(workload),
            ..self
        }
    }

    /// This printer with its Name cell made by `name`.
    const fn with_name(self, name: fn(name: &str, b: &[u8]) -> String) -> Self {
        BuiltinPrinter { name, ..self }
    }

    /// The column definitions' JSON (`columnDefinitions`).
    pub fn columns_json(&self) -> String {
        let wide = match &self.workload {
            Some(Workload {
                selector: Selector::None,
                ..
            }) => 2,
            Some(_) => 3,
            None => 0,
        };
        let workload = header_columns(WORKLOAD_COLUMNS).take(wide);
        columns_json(header_columns(self.columns).chain(workload))
    }

    /// The cells of one object (`now` in Unix seconds, for ages).
    pub fn cells(&self, name: &str, b: &[u8], now: i64) -> Vec<String> {
        let mut read = (self.cells)(b, now).into_iter();
        let mut cells: Vec<String> = header_columns(self.columns)
            .map(|(column, ..)| match column {
                "Name" => (self.name)(name, b),
                "Age" => created(b, now),
                _ => read.next().unwrap_or_default(),
            })
            .collect();
        if let Some(w) = &self.workload {
            let (containers, images) = containers_images(b, w.template);
            cells.extend([containers, images]);
            match w.selector {
                Selector::None => {}
                Selector::Labels(path) => cells.push(selector(b, path)),
                Selector::Map(path) => cells.push(map_text(b, path)),
            }
        }
        cells
    }
}

/// The printer for `group`/`resource`, if it has one.
pub fn for_resource(group: &str, resource: &str) -> Option<&'static BuiltinPrinter> {
    Some(match (group, resource) {
        ("", "nodes") => &NODES,
        ("", "namespaces") => &NAMESPACES,
        ("", "services") => &SERVICES,
        ("", "events") => &EVENTS,
        ("events.k8s.io", "events") => &EVENTS_V1,
        ("", "replicationcontrollers") => &REPLICATION_CONTROLLERS,
        ("apps", "deployments") => &DEPLOYMENTS,
        ("apps", "replicasets") => &REPLICA_SETS,
        ("apps", "statefulsets") => &STATEFUL_SETS,
        ("apps", "daemonsets") => &DAEMON_SETS,
        ("batch", "jobs") => &JOBS,
        ("batch", "cronjobs") => &CRON_JOBS,
        ("autoscaling", "horizontalpodautoscalers") => &HPAS,
        ("", "persistentvolumeclaims") => &PVCS,
        ("", "persistentvolumes") => &PVS,
        ("certificates.k8s.io", "certificatesigningrequests") => &CSRS,
        ("discovery.k8s.io", "endpointslices") => &ENDPOINT_SLICES,
        ("networking.k8s.io", "ingresses") => &INGRESSES,
        ("coordination.k8s.io", "leases") => &LEASES,
        ("storage.k8s.io", "storageclasses") => &STORAGE_CLASSES,
        ("rbac.authorization.k8s.io", "clusterroles" | "roles")
        | ("apiextensions.k8s.io", "customresourcedefinitions") => &CREATED_AT,
        ("rbac.authorization.k8s.io", "clusterrolebindings" | "rolebindings") => &BINDINGS,
        _ => return None,
    })
}

/// The JSON of column definitions (`columnDefinitions`): name, type, format, description
/// and priority of each.
pub(crate) fn columns_json<'a>(
    columns: impl Iterator<Item = (&'a str, &'a str, &'a str, &'a str, i32)>,
) -> String {
    let mut v = Vec::new();
    v.push(b'[');
    for (i, (name, ty, format, description, priority)) in columns.enumerate() {
        if i > 0 {
            v.push(b',');
        }
        v.extend_from_slice(b"{\"name\":");
        listwatch_core::json::push_go_string(&mut v, name);
        v.extend_from_slice(b",\"type\":");
        listwatch_core::json::push_go_string(&mut v, ty);
        v.extend_from_slice(b",\"format\":");
        listwatch_core::json::push_go_string(&mut v, format);
        v.extend_from_slice(b",\"description\":");
        listwatch_core::json::push_go_string(&mut v, description);
        v.extend_from_slice(format!(",\"priority\":{priority}}}").as_bytes());
    }
    v.push(b']');
    String::from_utf8(v).unwrap_or_default()
}

/// The columns of a header line: names separated by `, `, each a `string` unless a
/// `:type` follows it (`Desired:integer`), shown with `-o wide` (priority 1) when marked
/// `*`; a column called Name has the `name` format. As (name, type, format, description,
/// priority), for [`columns_json`].
fn header_columns(
    header: &'static str,
) -> impl Iterator<Item = (&'static str, &'static str, &'static str, &'static str, i32)> {
    header.split(", ").map(|column| {
        let (column, priority) = match column.strip_suffix('*') {
            Some(narrow) => (narrow, 1),
            None => (column, 0),
        };
        let (name, ty) = column.split_once(':').unwrap_or((column, "string"));
        let format = if name == "Name" { "name" } else { "" };
        (name, ty, format, "", priority)
    })
}

fn text<'a>(b: &'a [u8], start: usize, path: &[&str]) -> Option<&'a str> {
    scan::find_path(b, start, path)
        .and_then(|v| scan::plain_scalar(b, v))
        .and_then(|s| std::str::from_utf8(&b[s.0..s.1]).ok())
}

fn s(b: &[u8], path: &[&str]) -> String {
    text(b, 0, path).unwrap_or("").to_string()
}

fn int(b: &[u8], path: &[&str]) -> String {
    text(b, 0, path).unwrap_or("0").to_string()
}

fn or_none(v: String) -> String {
    if v.is_empty() { "<none>".into() } else { v }
}

fn age(b: &[u8], path: &[&str], now: i64) -> String {
    text(b, 0, path)
        .and_then(parse_rfc3339)
        .map_or_else(|| "<unknown>".into(), |t| human_duration(now - t))
}

fn created(b: &[u8], now: i64) -> String {
    age(b, &["metadata", "creationTimestamp"], now)
}

fn elements(b: &[u8], path: &[&str]) -> Vec<scan::Span> {
    let mut v = Vec::new();
    if let Some(arr) = scan::find_path(b, 0, path) {
        scan::for_each_element(b, arr.0, |e| v.push(e));
    }
    v
}

/// `k=v,k2=v2` of a string map (label selectors, node selectors), `<none>` when empty.
fn map_text(b: &[u8], path: &[&str]) -> String {
    let mut parts = Vec::new();
    if let Some(obj) = scan::find_path(b, 0, path) {
        scan::for_each_member(b, obj.0, |m| {
            let k = String::from_utf8_lossy(&b[m.key.0..m.key.1]);
            let v = scan::plain_scalar(b, m.value)
                .map(|s| String::from_utf8_lossy(&b[s.0..s.1]).into_owned())
                .unwrap_or_default();
            parts.push(format!("{k}={v}"));
        });
    }
    or_none(parts.join(","))
}

/// A label selector (`matchLabels`, then `matchExpressions`) as kubectl writes it.
fn selector(b: &[u8], path: &[&str]) -> String {
    let mut p: Vec<&str> = path.to_vec();
    p.push("matchLabels");
    let labels = map_text(b, &p);
    let mut parts = Vec::new();
    if labels != "<none>" {
        parts.push(labels);
    }
    p.pop();
    p.push("matchExpressions");
    for e in elements(b, &p) {
        let key = text(b, e.0, &["key"]).unwrap_or("");
        let op = text(b, e.0, &["operator"]).unwrap_or("");
        let mut values = Vec::new();
        if let Some(arr) = scan::find_path(b, e.0, &["values"]) {
            scan::for_each_element(b, arr.0, |v| {
                if let Some(s) = scan::plain_scalar(b, v) {
                    values.push(String::from_utf8_lossy(&b[s.0..s.1]).into_owned());
                }
            });
        }
        parts.push(match op {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => format!("{key} {op}"),
        });
    }
    or_none(parts.join(","))
}

/// CONTAINERS and IMAGES of a pod template at `spec`.
fn containers_images(b: &[u8], spec: &[&str]) -> (String, String) {
    let mut p: Vec<&str> = spec.to_vec();
    p.push("containers");
    let (mut names, mut images) = (Vec::new(), Vec::new());
    for c in elements(b, &p) {
        names.push(text(b, c.0, &["name"]).unwrap_or("").to_string());
        images.push(text(b, c.0, &["image"]).unwrap_or("").to_string());
    }
    (names.join(","), images.join(","))
}

static NODES: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Status, Roles, Age, Version, Internal-IP*, External-IP*, OS-Image*, Kernel-Version*, Container-Runtime*",
    |b, _| {
        let mut status = Vec::new();
        for c in elements(b, &["status", "conditions"]) {
            if text(b, c.0, &["type"]) == Some("Ready") {
                status.push(match text(b, c.0, &["status"]) {
                    Some("True") => "Ready",
                    Some("False") => "NotReady",
                    _ => "Unknown",
                });
            }
        }
        if status.is_empty() {
            status.push("Unknown");
        }
        if text(b, 0, &["spec", "unschedulable"]) == Some("true") {
            status.push("SchedulingDisabled");
        }
        let mut roles = Vec::new();
        if let Some(obj) = scan::find_path(b, 0, &["metadata", "labels"]) {
            scan::for_each_member(b, obj.0, |m| {
                let k = String::from_utf8_lossy(&b[m.key.0..m.key.1]);
                if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                    if !role.is_empty() {
                        roles.push(role.to_string());
                    }
                } else if k == "kubernetes.io/role"
                    && let Some(v) = scan::plain_scalar(b, m.value)
                {
                    roles.push(String::from_utf8_lossy(&b[v.0..v.1]).into_owned());
                }
            });
        }
        roles.sort();
        roles.dedup();
        // The first address of the kind, as kube's getNodeInternalIP/ExternalIP.
        let address = |kind: &str| {
            elements(b, &["status", "addresses"])
                .into_iter()
                .find(|a| text(b, a.0, &["type"]) == Some(kind))
                .map_or_else(
                    || "<none>".to_string(),
                    |a| text(b, a.0, &["address"]).unwrap_or("").to_string(),
                )
        };
        // kube's printNode: "<unknown>" for what the kubelet has not reported, then the
        // architecture after the kernel version.
        let unknown = |v: String| {
            if v.is_empty() {
                "<unknown>".to_string()
            } else {
                v
            }
        };
        let mut kernel = unknown(s(b, &["status", "nodeInfo", "kernelVersion"]));
        let arch = s(b, &["status", "nodeInfo", "architecture"]);
        if !arch.is_empty() {
            kernel = format!("{kernel} ({arch})");
        }
        vec![
            status.join(","),
            or_none(roles.join(",")),
            s(b, &["status", "nodeInfo", "kubeletVersion"]),
            address("InternalIP"),
            address("ExternalIP"),
            unknown(s(b, &["status", "nodeInfo", "osImage"])),
            kernel,
            unknown(s(b, &["status", "nodeInfo", "containerRuntimeVersion"])),
        ]
    },
);

static NAMESPACES: BuiltinPrinter =
    BuiltinPrinter::new("Name, Status, Age", |b, _| vec![s(b, &["status", "phase"])]);

static SERVICES: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Type, Cluster-IP, External-IP, Port(s), Age, Selector*",
    |b, _| {
        let ty = s(b, &["spec", "type"]);
        let mut external = Vec::new();
        match ty.as_str() {
            "ExternalName" => external.push(s(b, &["spec", "externalName"])),
            "LoadBalancer" => {
                for i in elements(b, &["status", "loadBalancer", "ingress"]) {
                    let v = text(b, i.0, &["ip"]).or_else(|| text(b, i.0, &["hostname"]));
                    external.push(v.unwrap_or("").to_string());
                }
                if external.is_empty() {
                    external.push("<pending>".into());
                }
            }
            _ => {}
        }
        if let Some(arr) = scan::find_path(b, 0, &["spec", "externalIPs"]) {
            scan::for_each_element(b, arr.0, |e| {
                if let Some(v) = scan::plain_scalar(b, e) {
                    external.push(String::from_utf8_lossy(&b[v.0..v.1]).into_owned());
                }
            });
        }
        let ports: Vec<String> = elements(b, &["spec", "ports"])
            .into_iter()
            .map(|p| {
                let port = text(b, p.0, &["port"]).unwrap_or("0");
                let proto = text(b, p.0, &["protocol"]).unwrap_or("TCP");
                match text(b, p.0, &["nodePort"]).filter(|n| *n != "0") {
                    Some(np) => format!("{port}:{np}/{proto}"),
                    None => format!("{port}/{proto}"),
                }
            })
            .collect();
        vec![
            ty,
            or_none(s(b, &["spec", "clusterIP"])),
            or_none(external.join(",")),
            or_none(ports.join(",")),
            map_text(b, &["spec", "selector"]),
        ]
    },
);

static EVENTS: BuiltinPrinter = BuiltinPrinter::new(
    "Last Seen, Type, Reason, Object, Subobject*, Source*, Message, First Seen*, Count*, Name*",
    |b, now| event_cells(&CORE_EVENT, b, now),
);

/// Where an Event version keeps what the Event printer shows.
struct EventFields {
    regarding: &'static str,
    source: &'static str,
    reporting: &'static str,
    note: &'static str,
    first: &'static str,
    last: &'static str,
    count: &'static str,
}

const CORE_EVENT: EventFields = EventFields {
    regarding: "involvedObject",
    source: "source",
    reporting: "reportingComponent",
    note: "message",
    first: "firstTimestamp",
    last: "lastTimestamp",
    count: "count",
};

/// events.k8s.io/v1 (a view of the stored core/v1 Event): kube-apiserver prints the
/// stored Event, so its Table has the core columns, read under their events.k8s.io names.
static EVENTS_V1: BuiltinPrinter = BuiltinPrinter::new(EVENTS.columns, |b, now| {
    const FIELDS: EventFields = EventFields {
        regarding: "regarding",
        source: "deprecatedSource",
        reporting: "reportingController",
        note: "note",
        first: "deprecatedFirstTimestamp",
        last: "deprecatedLastTimestamp",
        count: "deprecatedCount",
    };
    event_cells(&FIELDS, b, now)
});

fn event_cells(f: &EventFields, b: &[u8], now: i64) -> Vec<String> {
    let seen = |p: &[&str]| text(b, 0, p).and_then(parse_rfc3339);
    let last = seen(&["series", "lastObservedTime"])
        .or_else(|| seen(&[f.last]))
        .or_else(|| seen(&["eventTime"]));
    let first = seen(&[f.first]).or_else(|| seen(&["eventTime"]));
    let ago = |t: Option<i64>| t.map_or_else(|| "<unknown>".into(), |t| human_duration(now - t));
    let kind = s(b, &[f.regarding, "kind"]).to_ascii_lowercase();
    let mut source = s(b, &[f.source, "component"]);
    if source.is_empty() {
        source = s(b, &[f.reporting]);
    }
    // kube's formatEventSource: the host, else the reporting instance, after a comma.
    let mut host = s(b, &[f.source, "host"]);
    if host.is_empty() {
        host = s(b, &["reportingInstance"]);
    }
    if !host.is_empty() {
        source = format!("{source}, {host}");
    }
    // A series counts its occurrences; a singleton new-style event has no count: 1.
    let count = match scan::find_path(b, 0, &["series", "count"]) {
        Some(_) => int(b, &["series", "count"]),
        None => match int(b, &[f.count]).as_str() {
            "" | "0" => "1".to_string(),
            n => n.to_string(),
        },
    };
    vec![
        ago(last),
        s(b, &["type"]),
        s(b, &["reason"]),
        format!("{kind}/{}", s(b, &[f.regarding, "name"])),
        s(b, &[f.regarding, "fieldPath"]),
        source,
        s(b, &[f.note]).trim().to_string(),
        ago(first),
        count,
    ]
}

fn replica_counts(b: &[u8], _: i64) -> Vec<String> {
    vec![
        int(b, &["spec", "replicas"]),
        int(b, &["status", "replicas"]),
        int(b, &["status", "readyReplicas"]),
    ]
}

const REPLICA_COLUMNS: &str = "Name, Desired:integer, Current:integer, Ready:integer, Age";

static REPLICA_SETS: BuiltinPrinter =
    BuiltinPrinter::new(REPLICA_COLUMNS, replica_counts).with_workload(WORKLOAD);

static REPLICATION_CONTROLLERS: BuiltinPrinter =
    BuiltinPrinter::new(REPLICA_COLUMNS, replica_counts)
        // An RC's selector is a plain map.
        .with_workload(Workload {
            template: TEMPLATE,
            selector: Selector::Map(&["spec", "selector"]),
        });

static DEPLOYMENTS: BuiltinPrinter =
    BuiltinPrinter::new("Name, Ready, Up-to-date, Available, Age", |b, _| {
        vec![
            format!(
                "{}/{}",
                int(b, &["status", "readyReplicas"]),
                int(b, &["spec", "replicas"])
            ),
            int(b, &["status", "updatedReplicas"]),
            int(b, &["status", "availableReplicas"]),
        ]
    })
    .with_workload(WORKLOAD);

static STATEFUL_SETS: BuiltinPrinter = BuiltinPrinter::new("Name, Ready, Age", |b, _| {
    vec![format!(
        "{}/{}",
        int(b, &["status", "readyReplicas"]),
        int(b, &["spec", "replicas"])
    )]
})
.with_workload(Workload {
    template: TEMPLATE,
    selector: Selector::None,
});

static DAEMON_SETS: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Desired:integer, Current:integer, Ready:integer, Up-to-date:integer, Available:integer, Node Selector, Age",
    |b, _| {
        // The status's pod counts, then the pods' node selector.
        let counts = [
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
        ];
        let mut cells: Vec<String> = counts.iter().map(|c| int(b, &["status", c])).collect();
        cells.push(map_text(b, &["spec", "template", "spec", "nodeSelector"]));
        cells
    },
)
.with_workload(WORKLOAD);

static JOBS: BuiltinPrinter =
    BuiltinPrinter::new("Name, Status, Completions, Duration, Age", |b, now| {
        let mut status = "Running";
        for c in elements(b, &["status", "conditions"]) {
            if text(b, c.0, &["status"]) != Some("True") {
                continue;
            }
            match text(b, c.0, &["type"]) {
                Some("Complete") => status = "Complete",
                Some("Failed") => status = "Failed",
                Some("Suspended") => status = "Suspended",
                Some("FailureTarget") if status == "Running" => status = "FailureTarget",
                Some("SuccessCriteriaMet") if status == "Running" => status = "SuccessCriteriaMet",
                _ => {}
            }
        }
        let succeeded = int(b, &["status", "succeeded"]);
        let completions = match text(b, 0, &["spec", "completions"]) {
            Some(c) => format!("{succeeded}/{c}"),
            None => {
                let p = text(b, 0, &["spec", "parallelism"]).unwrap_or("1");
                if p.parse::<i64>().unwrap_or(1) > 1 {
                    format!("{succeeded}/1 of {p}")
                } else {
                    format!("{succeeded}/1")
                }
            }
        };
        let t = |p: &[&str]| text(b, 0, p).and_then(parse_rfc3339);
        let duration = match (
            t(&["status", "startTime"]),
            t(&["status", "completionTime"]),
        ) {
            (Some(s), Some(c)) => human_duration(c - s),
            (Some(s), None) => human_duration(now - s),
            _ => String::new(),
        };
        vec![status.into(), completions, duration]
    })
    .with_workload(WORKLOAD);

static CRON_JOBS: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Schedule, Timezone, Suspend:boolean, Active:integer, Last Schedule, Age",
    |b, now| {
        let last = text(b, 0, &["status", "lastScheduleTime"])
            .and_then(parse_rfc3339)
            .map_or_else(|| "<none>".into(), |t| human_duration(now - t));
        vec![
            s(b, &["spec", "schedule"]),
            or_none(s(b, &["spec", "timeZone"])),
            if text(b, 0, &["spec", "suspend"]) == Some("true") {
                "True".into()
            } else {
                "False".into()
            },
            elements(b, &["status", "active"]).len().to_string(),
            last,
        ]
    },
)
.with_workload(Workload {
    template: &["spec", "jobTemplate", "spec", "template", "spec"],
    selector: Selector::Labels(&["spec", "jobTemplate", "spec", "selector"]),
});

static HPAS: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Reference, Targets, MinPods, MaxPods, Replicas, Age",
    |b, _| {
        // Resource metrics as kubectl shows them: "cpu: <current>/<target>".
        let mut targets = Vec::new();
        if text(b, 0, &["apiVersion"]) == Some("autoscaling/v1") {
            targets = hpa_v1_targets(b);
        }
        for m in elements(b, &["spec", "metrics"]) {
            if text(b, m.0, &["type"]) != Some("Resource") {
                continue;
            }
            let res = text(b, m.0, &["resource", "name"]).unwrap_or("");
            let (target, pct) = match text(b, m.0, &["resource", "target", "averageUtilization"]) {
                Some(u) => (format!("{u}%"), true),
                None => (
                    text(b, m.0, &["resource", "target", "averageValue"])
                        .unwrap_or("<auto>")
                        .to_string(),
                    false,
                ),
            };
            let mut current = "<unknown>".to_string();
            for c in elements(b, &["status", "currentMetrics"]) {
                if text(b, c.0, &["resource", "name"]) == Some(res) {
                    let v = if pct {
                        text(b, c.0, &["resource", "current", "averageUtilization"])
                            .map(|u| format!("{u}%"))
                    } else {
                        text(b, c.0, &["resource", "current", "averageValue"]).map(str::to_string)
                    };
                    if let Some(v) = v {
                        current = v;
                    }
                }
            }
            targets.push(format!("{res}: {current}/{target}"));
        }
        vec![
            format!(
                "{}/{}",
                s(b, &["spec", "scaleTargetRef", "kind"]),
                s(b, &["spec", "scaleTargetRef", "name"])
            ),
            or_none(targets.join(", ")),
            text(b, 0, &["spec", "minReplicas"])
                .unwrap_or("<unset>")
                .to_string(),
            int(b, &["spec", "maxReplicas"]),
            int(b, &["status", "currentReplicas"]),
        ]
    },
);

/// The resource metrics of an autoscaling/v1 HPA (a view of the stored v2 one) as the v2
/// printer shows them (kube-apiserver prints the stored object): v1 keeps the metrics it
/// cannot express in annotations (`autoscaling.alpha.kubernetes.io/metrics`,
/// `.../current-metrics`, in v1's shapes) and the CPU utilization target as
/// `targetCPUUtilizationPercentage`, listed last (v1 does not keep its position).
fn hpa_v1_targets(b: &[u8]) -> Vec<String> {
    use serde_json::Value;
    let Ok(o) = serde_json::from_slice::<Value>(b) else {
        return Vec::new();
    };
    let annotation = |k: &str| -> Vec<Value> {
        o["metadata"]["annotations"][k]
            .as_str()
            .and_then(|t| serde_json::from_str::<Vec<Value>>(t).ok())
            .unwrap_or_default()
    };
    let scalar = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let mut specs: Vec<(String, Option<String>, Option<String>)> =
        annotation("autoscaling.alpha.kubernetes.io/metrics")
            .iter()
            .filter(|m| m["type"] == "Resource")
            .map(|m| {
                let r = &m["resource"];
                (
                    r["name"].as_str().unwrap_or("").to_string(),
                    scalar(&r["targetAverageUtilization"]),
                    scalar(&r["targetAverageValue"]),
                )
            })
            .collect();
    if let Some(p) = scalar(&o["spec"]["targetCPUUtilizationPercentage"]) {
        specs.push(("cpu".into(), Some(p), None));
    }
    let currents = annotation("autoscaling.alpha.kubernetes.io/current-metrics");
    let mut out = Vec::new();
    for (res, pct, value) in specs {
        let (target, is_pct) = match (&pct, value) {
            (Some(p), _) => (format!("{p}%"), true),
            (None, v) => (v.unwrap_or_else(|| "<auto>".into()), false),
        };
        let mut current = "<unknown>".to_string();
        if currents.is_empty()
            && res == "cpu"
            && is_pct
            && let Some(c) = scalar(&o["status"]["currentCPUUtilizationPercentage"])
        {
            current = format!("{c}%");
        }
        for c in currents
            .iter()
            .filter(|c| c["resource"]["name"] == res.as_str())
        {
            let v = if is_pct {
                scalar(&c["resource"]["currentAverageUtilization"]).map(|u| format!("{u}%"))
            } else {
                scalar(&c["resource"]["currentAverageValue"])
            };
            if let Some(v) = v {
                current = v;
            }
        }
        out.push(format!("{res}: {current}/{target}"));
    }
    out
}

/// The strings of a string array at `path`.
fn strings(b: &[u8], start: usize, path: &[&str]) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(arr) = scan::find_path(b, start, path) {
        scan::for_each_element(b, arr.0, |e| {
            if let Some(s) = scan::plain_scalar(b, e) {
                v.push(String::from_utf8_lossy(&b[s.0..s.1]).into_owned());
            }
        });
    }
    v
}

/// kubectl's short access modes (`RWO,ROX,RWX,RWOP`).
fn access_modes(b: &[u8], path: &[&str]) -> String {
    let modes = strings(b, 0, path);
    let mut out = Vec::new();
    for (long, short) in [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ] {
        if modes.iter().any(|m| m == long) {
            out.push(short);
        }
    }
    out.join(",")
}

fn storage_class(b: &[u8]) -> String {
    let c = s(b, &["spec", "storageClassName"]);
    if c.is_empty() {
        s(
            b,
            &[
                "metadata",
                "annotations",
                "volume.beta.kubernetes.io/storage-class",
            ],
        )
    } else {
        c
    }
}

fn unset(v: String) -> String {
    if v.is_empty() { "<unset>".into() } else { v }
}

static PVCS: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Status, Volume, Capacity, Access Modes, StorageClass, VolumeAttributesClass, Age, VolumeMode*",
    |b, _| {
        vec![
            s(b, &["status", "phase"]),
            s(b, &["spec", "volumeName"]),
            s(b, &["status", "capacity", "storage"]),
            access_modes(b, &["status", "accessModes"]),
            storage_class(b),
            unset(s(b, &["spec", "volumeAttributesClassName"])),
            unset(s(b, &["spec", "volumeMode"])),
        ]
    },
);

static PVS: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Capacity, Access Modes, Reclaim Policy, Status, Claim, StorageClass, VolumeAttributesClass, Reason, Age, VolumeMode*",
    |b, _| {
        let claim = match text(b, 0, &["spec", "claimRef", "name"]) {
            Some(n) => format!("{}/{n}", s(b, &["spec", "claimRef", "namespace"])),
            None => String::new(),
        };
        vec![
            s(b, &["spec", "capacity", "storage"]),
            access_modes(b, &["spec", "accessModes"]),
            s(b, &["spec", "persistentVolumeReclaimPolicy"]),
            s(b, &["status", "phase"]),
            claim,
            storage_class(b),
            unset(s(b, &["spec", "volumeAttributesClassName"])),
            s(b, &["status", "reason"]),
            unset(s(b, &["spec", "volumeMode"])),
        ]
    },
);

static CSRS: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Age, SignerName, Requestor, RequestedDuration, Condition",
    |b, _| {
        let mut conds = Vec::new();
        for c in elements(b, &["status", "conditions"]) {
            if let Some(t) = text(b, c.0, &["type"]) {
                conds.push(t.to_string());
            }
        }
        if conds.is_empty() {
            conds.push("Pending".into());
        }
        if text(b, 0, &["status", "certificate"]).is_some_and(|c| !c.is_empty()) {
            conds.push("Issued".into());
        }
        let duration = text(b, 0, &["spec", "expirationSeconds"])
            .and_then(|s| s.parse::<i64>().ok())
            .map_or_else(|| "<none>".into(), human_duration);
        vec![
            s(b, &["spec", "signerName"]),
            s(b, &["spec", "username"]),
            duration,
            conds.join(","),
        ]
    },
);

/// Up to three items, then `+ N more...`, as kubectl's list cells.
fn first_three(items: Vec<String>, empty: &str) -> String {
    match items.len() {
        0 => empty.into(),
        n if n > 3 => format!("{} + {} more...", items[..3].join(","), n - 3),
        _ => items.join(","),
    }
}

static ENDPOINT_SLICES: BuiltinPrinter =
    BuiltinPrinter::new("Name, AddressType, Ports, Endpoints, Age", |b, _| {
        let ports = elements(b, &["ports"])
            .into_iter()
            .map(|p| text(b, p.0, &["port"]).unwrap_or("<unset>").to_string())
            .collect();
        let mut addrs = Vec::new();
        for e in elements(b, &["endpoints"]) {
            addrs.extend(strings(b, e.0, &["addresses"]));
        }
        vec![
            s(b, &["addressType"]),
            first_three(ports, "<unset>"),
            first_three(addrs, "<unset>"),
        ]
    });

static INGRESSES: BuiltinPrinter =
    BuiltinPrinter::new("Name, Class, Hosts, Address, Ports, Age", |b, _| {
        let hosts = elements(b, &["spec", "rules"])
            .into_iter()
            .map(|r| {
                text(b, r.0, &["host"])
                    .filter(|h| !h.is_empty())
                    .unwrap_or("*")
                    .to_string()
            })
            .collect();
        let mut address = Vec::new();
        for i in elements(b, &["status", "loadBalancer", "ingress"]) {
            if let Some(v) = text(b, i.0, &["ip"]).or_else(|| text(b, i.0, &["hostname"])) {
                address.push(v.to_string());
            }
        }
        let ports = if elements(b, &["spec", "tls"]).is_empty() {
            "80"
        } else {
            "80, 443"
        };
        vec![
            or_none(s(b, &["spec", "ingressClassName"])),
            first_three(hosts, "*"),
            address.join(","),
            ports.into(),
        ]
    });

static LEASES: BuiltinPrinter = BuiltinPrinter::new("Name, Holder, Age", |b, _| {
    vec![s(b, &["spec", "holderIdentity"])]
});

static STORAGE_CLASSES: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Provisioner, ReclaimPolicy, VolumeBindingMode, AllowVolumeExpansion, Age",
    |b, _| {
        let or = |v: String, d: &str| if v.is_empty() { d.to_string() } else { v };
        vec![
            s(b, &["provisioner"]),
            or(s(b, &["reclaimPolicy"]), "Delete"),
            or(s(b, &["volumeBindingMode"]), "Immediate"),
            or(s(b, &["allowVolumeExpansion"]), "false"),
        ]
    },
)
.with_name(|name, b| {
    // kubectl marks the default class.
    let default = text(
        b,
        0,
        &[
            "metadata",
            "annotations",
            "storageclass.kubernetes.io/is-default-class",
        ],
    ) == Some("true");
    if default {
        format!("{name} (default)")
    } else {
        name.into()
    }
});

static CREATED_AT: BuiltinPrinter = BuiltinPrinter::new("Name, Created At:date", |b, _| {
    vec![s(b, &["metadata", "creationTimestamp"])]
});

static BINDINGS: BuiltinPrinter = BuiltinPrinter::new(
    "Name, Role, Age, Users*, Groups*, ServiceAccounts*",
    |b, _| {
        let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
        for sub in elements(b, &["subjects"]) {
            let n = text(b, sub.0, &["name"]).unwrap_or("").to_string();
            match text(b, sub.0, &["kind"]) {
                Some("User") => users.push(n),
                Some("Group") => groups.push(n),
                Some("ServiceAccount") => sas.push(format!(
                    "{}/{n}",
                    text(b, sub.0, &["namespace"]).unwrap_or("")
                )),
                _ => {}
            }
        }
        vec![
            format!(
                "{}/{}",
                s(b, &["roleRef", "kind"]),
                s(b, &["roleRef", "name"])
            ),
            users.join(", "),
            groups.join(", "),
            sas.join(", "),
        ]
    },
);
