//! `Verb`: what a request does, decided once from its method, path and `watch` parameter.

/// A request's verb, as kube-apiserver's request info names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET with `watch` (or under `/watch/`), of a collection or one object.
    Watch,
    /// POST to a collection.
    Create,
    /// PUT of one object.
    Update,
    /// DELETE of one object.
    Delete,
    /// PATCH of one object (JSON, merge or strategic merge patch).
    Patch,
    /// PATCH of one object with `application/apply-patch+yaml` (server-side apply): kube
    /// labels its metrics `APPLY`; authorizers see `patch`.
    Apply,
    /// Discovery, health, metrics, or a method we do not serve.
    Other,
}

impl Verb {
    /// The verb of an HTTP `method` on a resource path: `object` when it names one object,
    /// `watch` when the request watches.
    pub fn of(method: &str, object: bool, watch: bool) -> Verb {
        match method {
            "GET" if watch => Verb::Watch,
            "GET" if object => Verb::Get,
            "GET" => Verb::List,
            "POST" if !object => Verb::Create,
            "PUT" if object => Verb::Update,
            "DELETE" if object => Verb::Delete,
            "PATCH" if object => Verb::Patch,
            _ => Verb::Other,
        }
    }

    /// The label of kube-apiserver's `apiserver_request_total{verb}` metric.
    pub fn metric_label(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::List => "LIST",
            Verb::Watch => "WATCH",
            Verb::Create => "POST",
            Verb::Update => "PUT",
            Verb::Delete => "DELETE",
            Verb::Patch => "PATCH",
            Verb::Apply => "APPLY",
            Verb::Other => "OTHER",
        }
    }

    /// The verb authorizers (RBAC, ABAC) see.
    pub fn authz_name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Delete => "delete",
            Verb::Patch | Verb::Apply => "patch",
            Verb::Other => "other",
        }
    }
}
