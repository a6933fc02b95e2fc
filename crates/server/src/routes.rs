//! Where a request path is decoded into what it addresses.

use std::sync::Arc;

use listwatch_openapi::discovery::Document;
use listwatch_sources::Registry;
use listwatch_store::Store;

/// What a request path addresses.
pub enum Route {
    /// A discovery or health endpoint.
    Discovery(DiscoveryPath),
    /// A served resource's collection or one of its objects.
    Resource(Target),
    /// A namespace or name that cannot name anything (a 400 with this message).
    Invalid(String),
    /// Nothing we serve.
    NotFound,
}

/// The object or collection a resource path addresses.
pub struct Target {
    /// The resource's store.
    pub store: Arc<Store>,
    /// Namespace, for namespaced requests.
    pub namespace: Option<String>,
    /// Object name (`None`: the collection).
    pub name: Option<String>,
    /// Reached through the legacy `/watch/` prefix (authorized without its selectors).
    pub legacy_watch: bool,
    /// The subresource named after the object (`scale`, `status`), if any.
    pub subresource: Option<String>,
}

/// Discovery and operational endpoints.
pub enum DiscoveryPath {
    /// A discovery document (`/api`, `/apis`, their group-versions, `/version`).
    Document(Document),
    /// `/healthz`, `/livez`.
    Health,
    /// `/readyz`: every resource's cache is trusted by its source.
    Ready,
    /// `/metrics`.
    Metrics,
    /// `/openapi/v2`, `/openapi/v3` and `/openapi/v3/<group-version>` (`openapi.rs`).
    OpenApi,
}

impl DiscoveryPath {
    /// Probes and metrics: this process's own, never passed on to an upstream.
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Health | Self::Ready | Self::Metrics)
    }
}

/// Why a path segment (namespace or name) cannot name anything, as kube-apiserver's
/// `ValidatePathSegmentName` words it — checked after percent-decoding, as Go's server
/// decodes paths (`%2e%2e` is `..`).
fn invalid_segment(s: &str) -> Option<&'static str> {
    match s {
        "." => Some("may not be '.'"),
        ".." => Some("may not be '..'"),
        _ if s.contains('/') => Some("may not contain '/'"),
        _ if s.contains('%') => Some("may not contain '%'"),
        _ if s.chars().any(char::is_control) => Some("may not contain control characters"),
        _ => None,
    }
}

/// Decodes `path` against the registry.
pub fn route(registry: &Registry, path: &str) -> Route {
    // Segments are percent-decoded one by one (an encoded '/' stays inside its segment);
    // one that is not UTF-8 once decoded cannot name anything.
    let mut decoded = Vec::new();
    for raw in path.trim_end_matches('/').split('/').skip(1) {
        match percent_encoding::percent_decode_str(raw).decode_utf8() {
            Ok(s) => decoded.push(s.into_owned()),
            Err(_) => {
                return Route::Invalid(format!(
                    "path segment {raw:?} is not valid UTF-8 once decoded"
                ));
            }
        }
    }
    let segs: Vec<&str> = decoded.iter().map(String::as_str).collect();
    if let Some(doc) = Document::of(&segs) {
        return Route::Discovery(DiscoveryPath::Document(doc));
    }
    match segs.as_slice() {
        ["healthz" | "livez", ..] => return Route::Discovery(DiscoveryPath::Health),
        ["readyz", ..] => return Route::Discovery(DiscoveryPath::Ready),
        ["metrics"] => return Route::Discovery(DiscoveryPath::Metrics),
        ["openapi", ..] => return Route::Discovery(DiscoveryPath::OpenApi),
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    let (legacy_watch, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    // A resource retired at runtime is unknown from then on.
    let lookup = |r: &str| registry.get(group, version, r).filter(|s| !s.is_retired());
    for (what, s) in match rest {
        ["namespaces", ns, _] => vec![("namespace", *ns)],
        ["namespaces", ns, _, name] | ["namespaces", ns, _, name, _] => {
            vec![("namespace", *ns), ("name", *name)]
        }
        [_, name] => vec![("name", *name)],
        _ => vec![],
    } {
        if let Some(why) = invalid_segment(s) {
            return Route::Invalid(format!("invalid {what} {s:?}: {why}"));
        }
    }
    let valid = |s: &str| !s.is_empty();
    match rest {
        ["namespaces", ns, r] if valid(ns) => match lookup(r).filter(|s| s.info().namespaced) {
            Some(store) => resource(store, Some(ns.to_string()), None, legacy_watch, None),
            None => Route::NotFound,
        },
        ["namespaces", ns, r, name, sub @ ..] if valid(ns) && valid(name) && sub.len() < 2 => {
            match lookup(r).filter(|s| s.info().namespaced) {
                Some(store) if subresource_served(&store, sub) => resource(
                    store,
                    Some(ns.to_string()),
                    Some(name.to_string()),
                    legacy_watch,
                    sub.first().map(|s| s.to_string()),
                ),
                _ => Route::NotFound,
            }
        }
        [r] => match lookup(r) {
            Some(store) => resource(store, None, None, legacy_watch, None),
            None => Route::NotFound,
        },
        [r, name, sub @ ..] if valid(name) && sub.len() < 2 => {
            match lookup(r).filter(|s| !s.info().namespaced) {
                Some(store) if subresource_served(&store, sub) => resource(
                    store,
                    None,
                    Some(name.to_string()),
                    legacy_watch,
                    sub.first().map(|s| s.to_string()),
                ),
                _ => Route::NotFound,
            }
        }
        _ => Route::NotFound,
    }
}

fn resource(
    store: Arc<Store>,
    namespace: Option<String>,
    name: Option<String>,
    legacy_watch: bool,
    subresource: Option<String>,
) -> Route {
    Route::Resource(Target {
        store,
        namespace,
        name,
        legacy_watch,
        subresource,
    })
}

/// The kinds with a `scale` subresource (autoscaling/v1 `Scale`), as kube-apiserver serves
/// it: their `spec.replicas` is what it scales.
pub const SCALABLE: &[(&str, &str)] = &[
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("", "replicationcontrollers"),
];

/// Whether `sub` (empty: the object itself) is served for `store`'s resource.
fn subresource_served(store: &Store, sub: &[&str]) -> bool {
    let info = store.info();
    match sub {
        [] => true,
        ["scale"] => SCALABLE.contains(&(info.group.as_str(), info.resource.as_str())),
        ["status"] => info.has_status_subresource(),
        _ => false,
    }
}
