//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`, `/version`) so
//! kubectl and client libraries find what we serve, and the operational endpoints
//! (`/healthz`, `/livez`, `/readyz`, `/metrics`): [`Discovery::respond`].

use http::{HeaderValue, StatusCode, header};
use listwatch_sources::{Registry, Source};
use serde_json::{Value, json};

use crate::metrics::Metrics;
use crate::response::{self, Answer};
use crate::routes::DiscoveryPath;
use listwatch_core::ApiError;

/// What discovery and the operational endpoints are answered from.
pub struct Discovery<'a> {
    /// The served resources.
    pub registry: &'a Registry,
    /// The source (writable or not, healthy or not).
    pub source: &'a dyn Source,
    /// Address advertised in `/api`.
    pub advertise: &'a str,
    /// The metrics `/metrics` renders.
    pub metrics: &'a Metrics,
}

impl Discovery<'_> {
    /// The response to a GET of `path`; `accept` picks aggregated discovery, `verbose`
    /// lists every readiness check.
    pub fn respond(&self, path: DiscoveryPath, accept: Option<&str>, verbose: bool) -> Answer {
        let ok = |v: Value| Ok(response::json_value(StatusCode::OK, &v));
        let writable = self.source.writer().is_some();
        match path {
            DiscoveryPath::Api | DiscoveryPath::Apis => {
                let core = matches!(path, DiscoveryPath::Api);
                match (wants_aggregated(accept), core) {
                    (Some(v), _) => Ok(self.aggregated(core, writable, v)),
                    (None, true) => ok(api(self.advertise)),
                    (None, false) => ok(apis(self.registry)),
                }
            }
            DiscoveryPath::Group(g) => {
                group(self.registry, &g).map_or(Err(ApiError::UnknownPath), ok)
            }
            DiscoveryPath::GroupVersion(g, v) => resource_list(self.registry, &g, &v, writable)
                .map_or(Err(ApiError::UnknownPath), ok),
            DiscoveryPath::Version => ok(version()),
            // Parsed as its own request kind (it negotiates by headers).
            DiscoveryPath::OpenApi => Err(ApiError::UnknownPath),
            DiscoveryPath::Health => Ok(response::text(StatusCode::OK, TEXT, "ok")),
            DiscoveryPath::Ready => Ok(self.readyz(verbose)),
            DiscoveryPath::Metrics => {
                let text = self
                    .metrics
                    .render(self.registry.stores().iter(), self.source.skipped_values());
                Ok(response::text(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                ))
            }
        }
    }

    fn aggregated(
        &self,
        core: bool,
        writable: bool,
        api_version: &str,
    ) -> http::Response<crate::body::ResponseBody> {
        let mut r = response::json_value(
            StatusCode::OK,
            &aggregated(self.registry, core, writable, api_version),
        );
        let ct = format!(
            "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
            api_version.rsplit('/').next().unwrap_or("v2")
        );
        if let Ok(v) = HeaderValue::from_str(&ct) {
            r.headers_mut().insert(header::CONTENT_TYPE, v);
        }
        r.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("Accept"));
        r
    }

    /// kube-apiserver's `/readyz`: one `[+]`/`[-]` line per check when failing or asked
    /// (`?verbose`), a bare "ok" otherwise; a failed check's reason is withheld (the probe
    /// needs no credentials; the log has the cause).
    fn readyz(&self, verbose: bool) -> http::Response<crate::body::ResponseBody> {
        let source_ok = self.source.health().is_ok();
        let check = self.source.health_check_name();
        let mut text = if source_ok {
            format!("[+]{check} ok\n")
        } else {
            format!("[-]{check} failed: reason withheld\n")
        };
        let mut ok = source_ok;
        for s in self.registry.stores() {
            let ready = s.is_ready();
            ok &= ready;
            let i = s.info();
            text.push_str(&format!(
                "[{}]cache {}{}{} {}\n",
                if ready { '+' } else { '-' },
                i.resource,
                if i.group.is_empty() { "" } else { "." },
                i.group,
                if ready { "ok" } else { "not ready" }
            ));
        }
        if ok && !verbose {
            text = "ok".into();
        } else if ok {
            text.push_str("readyz check passed\n");
        } else {
            text.push_str("readyz check failed\n");
        }
        let code = if ok {
            StatusCode::OK
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        response::text(code, TEXT, text)
    }
}

/// Probes' `Content-Type`.
const TEXT: &str = "text/plain; charset=utf-8";

/// Verbs advertised for every resource (the embedded source accepts writes).
pub fn verbs(writable: bool) -> Vec<&'static str> {
    if writable {
        vec![
            "create", "delete", "get", "list", "patch", "update", "watch",
        ]
    } else {
        vec!["get", "list", "watch"]
    }
}

/// `/api`: the core group's versions.
pub fn api(addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}],
    })
}

/// `/apis`: the named groups.
pub fn apis(registry: &Registry) -> Value {
    let mut grouped: Vec<(String, Vec<Value>)> = Vec::new();
    for (g, v) in registry.group_versions() {
        if g.is_empty() {
            continue;
        }
        let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
        match grouped.last_mut() {
            Some((name, versions)) if *name == g => versions.push(gv),
            _ => grouped.push((g, vec![gv])),
        }
    }
    // The first version is the preferred one (group_versions orders them as kube does).
    let groups: Vec<Value> = grouped
        .into_iter()
        .map(|(g, versions)| {
            let preferred = versions[0].clone();
            json!({"name": g, "versions": versions, "preferredVersion": preferred})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`.
pub fn group(registry: &Registry, group: &str) -> Option<Value> {
    let versions: Vec<Value> = registry
        .group_versions()
        .into_iter()
        .filter(|(g, _)| g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first()?.clone();
    Some(
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions, "preferredVersion": preferred}),
    )
}

/// `/api/v1` or `/apis/<g>/<v>`: the resources of one group version.
pub fn resource_list(
    registry: &Registry,
    group: &str,
    version: &str,
    writable: bool,
) -> Option<Value> {
    let resources: Vec<Value> = registry
        .stores()
        .iter()
        .filter(|s| !s.is_retired())
        .map(|s| s.info())
        .filter(|i| i.group == group && i.version == version)
        .map(|i| {
            let mut r = json!({
                "name": i.resource,
                "singularName": i.singular,
                "namespaced": i.namespaced,
                "kind": i.kind,
                "verbs": verbs(writable),
            });
            if !i.short_names.is_empty() {
                r["shortNames"] = json!(i.short_names);
            }
            if !i.categories.is_empty() {
                r["categories"] = json!(i.categories);
            }
            r
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut doc = json!({"kind": "APIResourceList", "groupVersion": gv, "resources": resources});
    if !group.is_empty() {
        doc["apiVersion"] = json!("v1");
    }
    Some(doc)
}

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "gitVersion": format!("v1.36.0-listwatch.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// The aggregated discovery document (`apidiscovery.k8s.io`, `APIGroupDiscoveryList`) for
/// `/api` (`core`) or `/apis`, so clients skip the per-group-version fan-out.
pub fn aggregated(registry: &Registry, core: bool, writable: bool, api_version: &str) -> Value {
    let mut items: Vec<(String, Vec<Value>)> = Vec::new();
    for (g, v) in registry.group_versions() {
        if g.is_empty() != core {
            continue;
        }
        let resources: Vec<Value> = registry
            .stores()
            .iter()
            .filter(|s| !s.is_retired())
            .map(|s| s.info())
            .filter(|i| i.group == g && i.version == v)
            .map(|i| {
                let mut r = json!({
                    "resource": i.resource,
                    "responseKind": {"group": "", "version": "", "kind": i.kind},
                    "scope": if i.namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": i.singular,
                    "verbs": verbs(writable),
                });
                if !i.short_names.is_empty() {
                    r["shortNames"] = json!(i.short_names);
                }
                if !i.categories.is_empty() {
                    r["categories"] = json!(i.categories);
                }
                r
            })
            .collect();
        let version = json!({"version": v, "resources": resources, "freshness": "Current"});
        // One item per group, its versions in preference order (group_versions' order).
        match items.last_mut() {
            Some((name, versions)) if *name == g => versions.push(version),
            _ => items.push((g, vec![version])),
        }
    }
    let items: Vec<Value> = items
        .into_iter()
        .map(|(g, versions)| {
            let metadata = if core { json!({}) } else { json!({"name": g}) };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items})
}

/// Whether `Accept` asks for aggregated discovery; returns the `apiVersion` to answer with.
pub fn wants_aggregated(accept: Option<&str>) -> Option<&'static str> {
    for range in accept?.split(',') {
        let params: Vec<&str> = range.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if has("as=APIGroupDiscoveryList") && has("g=apidiscovery.k8s.io") {
            if has("v=v2") {
                return Some("apidiscovery.k8s.io/v2");
            }
            if has("v=v2beta1") {
                return Some("apidiscovery.k8s.io/v2beta1");
            }
        }
        if params
            .first()
            .is_some_and(|m| *m == "application/json" || *m == "*/*")
            && params.len() == 1
        {
            return None;
        }
    }
    None
}
