//! Who asks and what they ask: the authenticated [`User`], a request's [`Attributes`] in
//! kube-apiserver's `authorizer.Attributes` shape, the [`Authorizer`] that decides on them
//! (RBAC, Node, ABAC, an embedding host's own) and the [`Authenticate`] step that finds the
//! user. A cluster-wide LIST by a user allowed only some namespaces is denied, as in
//! Kubernetes RBAC: its attributes carry no namespace.

use listwatch_core::labels::{LabelSelector, Op, Requirement};
use listwatch_core::{FieldSelector, ResourceInfo};

/// An authenticated user, as kube-apiserver's `user.Info` describes one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// User name.
    pub name: String,
    /// Group memberships.
    pub groups: Vec<String>,
    /// The user's UID, when the authenticator knows one (a token file's third column, a
    /// TokenReview's `uid`); empty otherwise.
    pub uid: String,
    /// Extra attributes (a service account token's `authentication.kubernetes.io/*`, an
    /// OIDC claim mapping): carried across the hop and into access reviews, as
    /// kube-apiserver's authorizers see them. Keys are as the authenticator gave them.
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl User {
    /// kube-apiserver's anonymous identity: `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..User::default()
        }
    }

    /// `name` in the groups `groups` lists, separated by `sep` (empty entries skipped): how
    /// embedding hosts and test tables write a user down.
    pub fn in_groups(name: impl Into<String>, groups: &str, sep: char) -> User {
        User {
            name: name.into(),
            groups: groups
                .split(sep)
                .filter(|g| !g.is_empty())
                .map(str::to_string)
                .collect(),
            ..User::default()
        }
    }
}

/// The strings of a JSON array (anything else: none), as `groups` comes in a review.
pub fn json_strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .map(str::to_string)
        .collect()
}

/// A `user.Info`'s `extra` as reviews write it (`{"key": ["v", …]}`); other shapes: none.
pub fn json_extra(v: &serde_json::Value) -> std::collections::BTreeMap<String, Vec<String>> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, vs)| (k.clone(), json_strings(vs)))
        .collect()
}

/// What a request asks, as kube-apiserver's `authorizer.Attributes` describes it: a
/// resource request (verb on group/version/resource[/subresource], namespace, name, and for
/// list, watch and deletecollection the request's field and label selectors) or a
/// non-resource one (verb on a path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// Who asks.
    pub user: User,
    /// `get`, `list`, `watch`, `create`, …; for non-resource requests the lower-case HTTP
    /// method.
    pub verb: String,
    /// A request for a resource (else for [`Self::path`]).
    pub resource_request: bool,
    /// Namespace; empty for cluster-scoped resources and requests across all namespaces.
    pub namespace: String,
    /// API group (`""` for core).
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`log`, `scale`), or empty.
    pub subresource: String,
    /// Object name; empty for collections.
    pub name: String,
    /// Path of a non-resource request (`/healthz`, `/apis`).
    pub path: String,
    /// The field selector's requirements (`GetFieldSelector`); empty when the request has
    /// none or it does not parse (the Node authorizer then reads it as absent, as kube's
    /// does with the parse error).
    pub field_selector: FieldSelector,
    /// The label selector's requirements (`GetLabelSelector`); empty when none or unparsable.
    pub label_selector: LabelSelector,
}

impl Attributes {
    /// A resource request: `verb` on `resource` in `namespace` (None: all namespaces, or a
    /// cluster-scoped resource), of the object `name` (empty for collections).
    pub fn resource(
        user: User,
        verb: &str,
        resource: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Attributes {
        Attributes {
            user,
            verb: verb.into(),
            resource_request: true,
            namespace: namespace.unwrap_or_default().into(),
            api_group: resource.group.clone(),
            api_version: resource.version.clone(),
            resource: resource.resource.clone(),
            subresource: String::new(),
            name: name.into(),
            path: String::new(),
            field_selector: FieldSelector::default(),
            label_selector: LabelSelector::default(),
        }
    }

    /// What kube-apiserver's request-info step adds to a list or watch of a collection
    /// reached without the legacy `/watch/` prefix: the raw `fieldSelector` and
    /// `labelSelector` query values as requirements (also for `deletecollection`), and, when
    /// no name is set, the name a `metadata.name=<name>` field selector pins (a kubelet's
    /// watch of one Secret is authorized as that Secret, by RBAC `resourceNames` too).
    pub fn with_request_selectors(mut self, field_selector: &str, label_selector: &str) -> Self {
        if !matches!(self.verb.as_str(), "list" | "watch" | "deletecollection") {
            return self;
        }
        let fields = FieldSelector::parse(field_selector).unwrap_or_default();
        if self.name.is_empty()
            && self.verb != "deletecollection"
            && let Some(name) = fields.exact("metadata.name")
            && is_path_segment_name(name)
        {
            self.name = name.to_string();
        }
        self.field_selector = fields;
        self.label_selector = LabelSelector::parse(label_selector).unwrap_or_default();
        self
    }

    /// A non-resource request: `verb` (lower-case HTTP method) on `path`.
    pub fn non_resource(user: User, verb: &str, path: &str) -> Attributes {
        Attributes {
            user,
            verb: verb.into(),
            resource_request: false,
            namespace: String::new(),
            api_group: String::new(),
            api_version: String::new(),
            resource: String::new(),
            subresource: String::new(),
            name: String::new(),
            path: path.into(),
            field_selector: FieldSelector::default(),
            label_selector: LabelSelector::default(),
        }
    }

    /// The attributes of a `SubjectAccessReview` spec (`user`, `groups`, and
    /// `resourceAttributes` — with its `fieldSelector` and `labelSelector`, each a
    /// `rawSelector` or `requirements` — or `nonResourceAttributes`); missing fields are
    /// empty.
    pub fn from_review_spec(spec: &serde_json::Value) -> Attributes {
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let user = User {
            name: s(&spec["user"]),
            groups: json_strings(&spec["groups"]),
            uid: s(&spec["uid"]),
            extra: json_extra(&spec["extra"]),
        };
        match spec.get("resourceAttributes").filter(|r| r.is_object()) {
            Some(r) => Attributes {
                user,
                verb: s(&r["verb"]),
                resource_request: true,
                namespace: s(&r["namespace"]),
                api_group: s(&r["group"]),
                api_version: s(&r["version"]),
                resource: s(&r["resource"]),
                subresource: s(&r["subresource"]),
                name: s(&r["name"]),
                path: String::new(),
                field_selector: review_field_selector(&r["fieldSelector"]).unwrap_or_default(),
                label_selector: review_label_selector(&r["labelSelector"]).unwrap_or_default(),
            },
            None => {
                let n = &spec["nonResourceAttributes"];
                Attributes::non_resource(user, &s(&n["verb"]), &s(&n["path"]))
            }
        }
    }

    /// Whether the verb only reads (`get`, `list`, `watch`), as ABAC's `readonly` means.
    pub fn is_read_only(&self) -> bool {
        matches!(self.verb.as_str(), "get" | "list" | "watch")
    }
}

/// `path.IsValidPathSegmentName`: what kube-apiserver accepts as a name taken from a
/// field selector.
fn is_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

/// A review's `fieldSelector`: `rawSelector` parsed, or `requirements` (`In` / `NotIn` with
/// exactly one value, the only forms field selectors have), as kube's
/// `ResourceAttributesFrom` reads them; None when absent or invalid.
fn review_field_selector(v: &serde_json::Value) -> Option<FieldSelector> {
    if let Some(raw) = v["rawSelector"].as_str().filter(|r| !r.is_empty()) {
        return FieldSelector::parse(raw).ok();
    }
    let mut terms = Vec::new();
    for r in v["requirements"].as_array()? {
        let values = strings(&r["values"]);
        let negated = match r["operator"].as_str() {
            Some("In") => false,
            Some("NotIn") => true,
            _ => return None,
        };
        let [value] = values.as_slice() else {
            return None;
        };
        terms.push(listwatch_core::fields::FieldTerm {
            field: r["key"].as_str().unwrap_or_default().to_string(),
            value: value.clone(),
            negated,
        });
    }
    Some(FieldSelector { terms })
}

/// A review's `labelSelector`: `rawSelector` parsed, or `requirements` (`In`, `NotIn`,
/// `Exists`, `DoesNotExist`); None when absent or invalid.
fn review_label_selector(v: &serde_json::Value) -> Option<LabelSelector> {
    if let Some(raw) = v["rawSelector"].as_str().filter(|r| !r.is_empty()) {
        return LabelSelector::parse(raw).ok();
    }
    let mut requirements = Vec::new();
    for r in v["requirements"].as_array()? {
        let mut values = strings(&r["values"]);
        values.sort();
        values.dedup();
        let op = match r["operator"].as_str() {
            Some("In") if !values.is_empty() => Op::In,
            Some("NotIn") if !values.is_empty() => Op::NotIn,
            Some("Exists") if values.is_empty() => Op::Exists,
            Some("DoesNotExist") if values.is_empty() => Op::DoesNotExist,
            _ => return None,
        };
        requirements.push(Requirement {
            key: r["key"].as_str().unwrap_or_default().to_string(),
            op,
            values,
        });
    }
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    Some(LabelSelector { requirements })
}

/// An authorizer's answer with kube-apiserver's reason (the binding that allowed it; why
/// not): allow, deny (a webhook's `denied`: the chain stops there), or no opinion — with
/// the error that kept it from deciding, if one did (kube-apiserver answers 500 then).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allowed.
    pub allowed: bool,
    /// Denied outright: no later authorizer is asked.
    pub denied: bool,
    /// Why, or empty.
    pub reason: String,
    /// What kept the authorizer from deciding (an unreachable webhook), if anything.
    pub error: Option<String>,
}

impl Decision {
    /// Allowed, because of `reason` (may be empty).
    pub fn allow(reason: impl Into<String>) -> Decision {
        Decision {
            allowed: true,
            denied: false,
            reason: reason.into(),
            error: None,
        }
    }

    /// No opinion (not allowed by this authorizer), with `reason` (may be empty).
    pub fn no_opinion(reason: impl Into<String>) -> Decision {
        Decision {
            allowed: false,
            denied: false,
            reason: reason.into(),
            error: None,
        }
    }

    /// Denied, with `reason` (may be empty): the chain asks no one else.
    pub fn deny(reason: impl Into<String>) -> Decision {
        Decision {
            denied: true,
            ..Decision::no_opinion(reason)
        }
    }

    /// No decision because of `error` (kube-apiserver's 500 when nothing else allows).
    pub fn failed(error: impl Into<String>) -> Decision {
        Decision {
            error: Some(error.into()),
            ..Decision::no_opinion("")
        }
    }
}

/// What [`Authorizer::authorize_async`] returns.
pub type DecisionFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Decision> + Send + 'a>>;

/// Decides whether a request may proceed.
pub trait Authorizer: Send + Sync + 'static {
    /// The decision for `attributes`, from what is at hand (an authorizer that must ask
    /// elsewhere answers from its cache or not at all here).
    fn authorize(&self, attributes: &Attributes) -> Decision;

    /// The decision for `attributes`, asking elsewhere if need be (a webhook); what the
    /// server calls. Defaults to [`Self::authorize`].
    fn authorize_async<'a>(&'a self, attributes: &'a Attributes) -> DecisionFuture<'a> {
        Box::pin(std::future::ready(self.authorize(attributes)))
    }
}

/// `--authorization-mode=AlwaysAllow`: everything is allowed (no reason given, as
/// kube-apiserver answers).
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _: &Attributes) -> Decision {
        Decision::allow("")
    }
}

/// Authorizers chained as kube-apiserver chains `--authorization-mode` entries: the first
/// that allows or denies decides; when none does, their reasons are joined by newlines (and
/// their errors, if any had one).
pub struct AnyOf(pub Vec<std::sync::Arc<dyn Authorizer>>);

/// Folds a chain's decisions as kube's union authorizer does.
#[derive(Default)]
struct Union {
    reasons: Vec<String>,
    errors: Vec<String>,
}

impl Union {
    /// The chain's answer if `d` settles it.
    fn settles(&mut self, d: Decision) -> Option<Decision> {
        if d.allowed || d.denied {
            return Some(d);
        }
        if !d.reason.is_empty() {
            self.reasons.push(d.reason);
        }
        self.errors.extend(d.error);
        None
    }

    fn no_opinion(self) -> Decision {
        Decision {
            error: (!self.errors.is_empty()).then(|| self.errors.join("\n")),
            ..Decision::no_opinion(self.reasons.join("\n"))
        }
    }
}

impl Authorizer for AnyOf {
    fn authorize(&self, attributes: &Attributes) -> Decision {
        let mut union = Union::default();
        for a in &self.0 {
            if let Some(d) = union.settles(a.authorize(attributes)) {
                return d;
            }
        }
        union.no_opinion()
    }

    fn authorize_async<'a>(&'a self, attributes: &'a Attributes) -> DecisionFuture<'a> {
        Box::pin(async move {
            let mut union = Union::default();
            for a in &self.0 {
                if let Some(d) = union.settles(a.authorize_async(attributes).await) {
                    return d;
                }
            }
            union.no_opinion()
        })
    }
}

/// What [`Authenticate::authenticate`] returns: the user, once known (a webhook may have to
/// be asked).
pub type AuthFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<User, listwatch_core::ApiError>> + Send + 'a>,
>;

/// Turns a request's credentials into a user (or a 401): bearer tokens, the verified
/// client certificate's user, anonymous. The standalone binary's authenticator is one; an
/// embedding host usually authenticates itself and attaches the [`User`].
pub trait Authenticate: Send + Sync + 'static {
    /// The user making the request with head `request`, over a connection whose verified
    /// client certificate named `cert_user`.
    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
        cert_user: Option<&'a User>,
    ) -> AuthFuture<'a>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Allows one user everything; says so when it does not.
    struct Only(&'static str);

    impl Authorizer for Only {
        fn authorize(&self, a: &Attributes) -> Decision {
            if a.user.name == self.0 {
                Decision::allow(format!("{} may", self.0))
            } else {
                Decision::no_opinion(format!("not {}", self.0))
            }
        }
    }

    fn user(n: &str) -> User {
        User {
            name: n.into(),
            ..User::default()
        }
    }

    #[test]
    fn a_chain_allows_what_any_member_allows() {
        let chain = AnyOf(vec![Arc::new(Only("alice")), Arc::new(Only("bob"))]);
        let info = ResourceInfo::default();
        let list = |u: User| Attributes::resource(u, "list", &info, None, "");
        assert_eq!(
            chain.authorize(&list(user("alice"))),
            Decision::allow("alice may")
        );
        assert_eq!(
            chain.authorize(&Attributes::resource(
                user("bob"),
                "get",
                &info,
                Some("ns"),
                "x"
            )),
            Decision::allow("bob may")
        );
        assert_eq!(
            chain.authorize(&list(user("carol"))),
            Decision::no_opinion("not alice\nnot bob")
        );
        assert!(!chain.authorize(&list(User::anonymous())).allowed);
    }

    #[test]
    fn a_review_spec_becomes_attributes() {
        let spec = serde_json::json!({
            "user": "u", "groups": ["g"],
            "resourceAttributes": {"verb": "get", "group": "apps", "version": "v1",
                "resource": "deployments", "subresource": "scale", "namespace": "ns", "name": "d"}
        });
        let a = Attributes::from_review_spec(&spec);
        assert!(a.resource_request && a.is_read_only());
        assert_eq!(
            (
                a.api_group.as_str(),
                a.api_version.as_str(),
                a.subresource.as_str()
            ),
            ("apps", "v1", "scale")
        );
        let spec = serde_json::json!({"user": "u",
            "nonResourceAttributes": {"verb": "get", "path": "/healthz"}});
        let a = Attributes::from_review_spec(&spec);
        assert!(!a.resource_request);
        assert_eq!(a.path, "/healthz");
    }
}
