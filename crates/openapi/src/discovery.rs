//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`, `/version`, and the
//! aggregated form kubectl asks for) of what a registry serves, so kubectl and client
//! libraries find it: with the OpenAPI documents, the API's description of itself.

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
            let r = json!({
                "name": i.resource,
                "singularName": i.singular,
                "namespaced": i.namespaced,
                "kind": i.kind,
                "verbs": verbs(writable),
            });
            with_names(r, i)
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
                let r = json!({
                    "resource": i.resource,
                    "responseKind": {"group": "", "version": "", "kind": i.kind},
                    "scope": if i.namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": i.singular,
                    "verbs": verbs(writable),
                });
                with_names(r, i)
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

/// A discovery resource entry with its short names and categories, when it has any.
fn with_names(mut r: Value, i: &listwatch_core::ResourceInfo) -> Value {
    if !i.short_names.is_empty() {
        r["shortNames"] = json!(i.short_names);
    }
    if !i.categories.is_empty() {
        r["categories"] = json!(i.categories);
    }
    r
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
