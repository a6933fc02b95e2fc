//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`, `/version`, and the
//! aggregated form kubectl asks for) of what a registry serves, so kubectl and client
//! libraries find it: with the OpenAPI documents, the API's description of itself.
//! [`Document::of`] names the document a path asks for and [`respond`] answers a GET of it.

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use listwatch_core::{ApiError, ResourceInfo};
use listwatch_sources::Registry;
use serde_json::{Value, json};

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
    let versions = registry
        .group_versions()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, v)| {
            let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
            (g, gv)
        });
    // The first version is the preferred one (group_versions orders them as kube does).
    let groups: Vec<Value> = by_group(versions)
        .into_iter()
        .map(|(g, versions)| {
            let preferred = versions[0].clone();
            json!({"name": g, "versions": versions, "preferredVersion": preferred})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `items` (group, value) gathered into one entry per group, in their order:
/// `Registry::group_versions` lists a group's versions together, in preference order.
fn by_group(items: impl IntoIterator<Item = (String, Value)>) -> Vec<(String, Vec<Value>)> {
    let mut grouped: Vec<(String, Vec<Value>)> = Vec::new();
    for (g, value) in items {
        match grouped.last_mut() {
            Some((name, values)) if *name == g => values.push(value),
            _ => grouped.push((g, vec![value])),
        }
    }
    grouped
}

/// One discovery entry per live resource of `group`/`version`: `entry`'s, with the
/// resource's short names and categories when it has any.
fn entries(
    registry: &Registry,
    group: &str,
    version: &str,
    entry: impl Fn(&ResourceInfo) -> Value,
) -> Vec<Value> {
    registry
        .stores()
        .iter()
        .filter(|s| !s.is_retired())
        .map(|s| s.info())
        .filter(|i| i.group == group && i.version == version)
        .map(|i| {
            let mut r = entry(i);
            if !i.short_names.is_empty() {
                r["shortNames"] = json!(i.short_names);
            }
            if !i.categories.is_empty() {
                r["categories"] = json!(i.categories);
            }
            r
        })
        .collect()
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
    let resources = entries(registry, group, version, |i| {
        json!({
            "name": i.resource,
            "singularName": i.singular,
            "namespaced": i.namespaced,
            "kind": i.kind,
            "verbs": verbs(writable),
        })
    });
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
pub fn version(git_commit: &str) -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "gitVersion": format!("v1.36.0-listwatch.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": git_commit,
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
    let versions = registry
        .group_versions()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, v)| {
            let resources = entries(registry, &g, &v, |i| {
                json!({
                    "resource": i.resource,
                    "responseKind": {"group": "", "version": "", "kind": i.kind},
                    "scope": if i.namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": i.singular,
                    "verbs": verbs(writable),
                })
            });
            (
                g,
                json!({"version": v, "resources": resources, "freshness": "Current"}),
            )
        });
    // One item per group, its versions in preference order (group_versions' order).
    let items: Vec<Value> = by_group(versions)
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

/// A discovery document a path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Document {
    /// `/api`.
    Api,
    /// `/apis`.
    Apis,
    /// `/apis/<group>`.
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`.
    GroupVersion(String, String),
    /// `/version`.
    Version,
}

impl Document {
    /// The document a path's (percent-decoded) `segments` name, if any.
    pub fn of(segments: &[&str]) -> Option<Document> {
        Some(match segments {
            ["api"] => Document::Api,
            ["apis"] => Document::Apis,
            ["api", "v1"] => Document::GroupVersion(String::new(), "v1".into()),
            ["apis", g] => Document::Group(g.to_string()),
            ["apis", g, v] => Document::GroupVersion(g.to_string(), v.to_string()),
            ["version"] => Document::Version,
            _ => return None,
        })
    }
}

/// What the documents say of the server beside its registry's resources.
pub struct ServerInfo<'a> {
    /// The resources take writes (the verbs listed for them).
    pub writable: bool,
    /// Address advertised in `/api`.
    pub advertise: &'a str,
    /// `/version`'s `gitCommit`.
    pub git_commit: &'a str,
}

/// The response to a GET of `doc` for what `registry` serves; `accept` picks the
/// aggregated form of `/api` and `/apis` (with its own `Content-Type` and `Vary: Accept`).
/// A group or group-version nothing is served in is `UnknownPath` (404).
pub fn respond(
    registry: &Registry,
    server: &ServerInfo<'_>,
    doc: &Document,
    accept: Option<&str>,
) -> Result<Response<Bytes>, ApiError> {
    let writable = server.writable;
    let value = match doc {
        Document::Api | Document::Apis => {
            let core = *doc == Document::Api;
            match wants_aggregated(accept) {
                Some(v) => {
                    let mut r = json_response(&aggregated(registry, core, writable, v));
                    let ct = format!(
                        "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
                        v.rsplit('/').next().unwrap_or("v2")
                    );
                    if let Ok(v) = HeaderValue::from_str(&ct) {
                        r.headers_mut().insert(header::CONTENT_TYPE, v);
                    }
                    r.headers_mut()
                        .insert(header::VARY, HeaderValue::from_static("Accept"));
                    return Ok(r);
                }
                None if core => api(server.advertise),
                None => apis(registry),
            }
        }
        Document::Group(g) => group(registry, g).ok_or(ApiError::UnknownPath)?,
        Document::GroupVersion(g, v) => {
            resource_list(registry, g, v, writable).ok_or(ApiError::UnknownPath)?
        }
        Document::Version => version(server.git_commit),
    };
    Ok(json_response(&value))
}

/// A 200 with `v` as JSON, newline-terminated as Go's encoder writes it.
fn json_response(v: &Value) -> Response<Bytes> {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    let mut r = Response::new(Bytes::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
