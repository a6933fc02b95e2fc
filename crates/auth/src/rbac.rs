//! Kubernetes authorization evaluated from what listwatch follows: the RBAC authorizer
//! (Roles, ClusterRoles, RoleBindings, ClusterRoleBindings from the registry's stores) and
//! the Node authorizer kube-apiserver chains before it (a kubelet reads its own Node, the
//! pods bound to it and the secrets, configmaps, PVCs, PVs and service accounts those pods
//! use; its static rules are the `system:node` ClusterRole's). `system:masters` is allowed
//! everything first, as kube-apiserver's privileged-group authorizer does. Changes to RBAC
//! objects and pods take effect as soon as the cache has them: the rule index is rebuilt
//! when any of the four RBAC stores moves.

use std::collections::HashMap;
use std::sync::Arc;

use listwatch_sources::Registry;
use listwatch_store::Store;
use parking_lot::Mutex;
use serde::Deserialize;

/// What a request asks (a `SubjectAccessReview`'s attributes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// User name.
    pub user: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Verb (`get`, `list`, …; for non-resource requests the lower-case HTTP verb).
    pub verb: String,
    /// `Some` for resource requests.
    pub resource: Option<ResourceAttributes>,
    /// Path of a non-resource request (`/healthz`, `/apis`).
    pub path: String,
}

impl Attributes {
    /// The attributes of a `SubjectAccessReview` spec (`user`, `groups`, and
    /// `resourceAttributes` or `nonResourceAttributes`).
    pub fn from_review_spec(spec: &serde_json::Value) -> Attributes {
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let groups = spec["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect();
        match spec.get("resourceAttributes") {
            Some(r) => Attributes {
                user: s(&spec["user"]),
                groups,
                verb: s(&r["verb"]),
                resource: Some(ResourceAttributes {
                    group: s(&r["group"]),
                    resource: s(&r["resource"]),
                    subresource: s(&r["subresource"]),
                    namespace: s(&r["namespace"]),
                    name: s(&r["name"]),
                }),
                path: String::new(),
            },
            None => Attributes {
                user: s(&spec["user"]),
                groups,
                verb: s(&spec["nonResourceAttributes"]["verb"]),
                resource: None,
                path: s(&spec["nonResourceAttributes"]["path"]),
            },
        }
    }
}

/// The resource part of [`Attributes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    /// API group (`""` for core).
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`log`, `scale`), or empty.
    pub subresource: String,
    /// Namespace, empty for cluster-wide.
    pub namespace: String,
    /// Object name, empty for collections.
    pub name: String,
}

/// An authorization decision with kube-apiserver's reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allowed.
    pub allowed: bool,
    /// Why (the binding that allowed it), or empty.
    pub reason: String,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
struct Rule {
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    api_groups: Vec<String>,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
}

#[derive(Deserialize)]
struct Meta {
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Deserialize)]
struct RoleObj {
    metadata: Meta,
    #[serde(default)]
    rules: Option<Vec<Rule>>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
struct Subject {
    kind: String,
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Deserialize, Clone, Debug)]
struct RoleRef {
    kind: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BindingObj {
    metadata: Meta,
    #[serde(default)]
    subjects: Option<Vec<Subject>>,
    role_ref: RoleRef,
}

#[derive(Default)]
struct Index {
    /// (rv of each RBAC store) the index was built at.
    built_at: Vec<u64>,
    cluster_roles: HashMap<String, Vec<Rule>>,
    roles: HashMap<(String, String), Vec<Rule>>,
    cluster_bindings: Vec<(String, Vec<Subject>, RoleRef)>,
    bindings: HashMap<String, Vec<(String, Vec<Subject>, RoleRef)>>,
}

/// The chained authorizer (privileged groups → Node → RBAC) over a registry's caches.
pub struct ClusterAuthorizer {
    stores: [Option<Arc<Store>>; 4],
    registry: Registry,
    index: Mutex<Arc<Index>>,
}

const RBAC: &str = "rbac.authorization.k8s.io";

impl ClusterAuthorizer {
    /// An authorizer reading `registry`'s RBAC stores (and pods, nodes, PVCs for the Node
    /// authorizer).
    pub fn new(registry: &Registry) -> Self {
        let get = |r: &str| registry.get(RBAC, "v1", r);
        ClusterAuthorizer {
            stores: [
                get("clusterroles"),
                get("roles"),
                get("clusterrolebindings"),
                get("rolebindings"),
            ],
            registry: registry.clone(),
            index: Mutex::new(Arc::new(Index::default())),
        }
    }

    fn index(&self) -> Arc<Index> {
        let rvs: Vec<u64> = self
            .stores
            .iter()
            .map(|s| s.as_ref().map_or(0, |s| s.rv()))
            .collect();
        let mut guard = self.index.lock();
        if guard.built_at != rvs || guard.built_at.is_empty() {
            *guard = Arc::new(self.build(rvs));
        }
        guard.clone()
    }

    fn build(&self, rvs: Vec<u64>) -> Index {
        let mut ix = Index {
            built_at: rvs,
            ..Index::default()
        };
        let objects = |i: usize| -> Vec<bytes::Bytes> {
            self.stores[i]
                .as_ref()
                .map(|s| {
                    s.current()
                        .items()
                        .values()
                        .map(|r| r.bytes().clone())
                        .collect()
                })
                .unwrap_or_default()
        };
        for b in objects(0) {
            if let Ok(r) = serde_json::from_slice::<RoleObj>(&b) {
                ix.cluster_roles
                    .insert(r.metadata.name, r.rules.unwrap_or_default());
            }
        }
        for b in objects(1) {
            if let Ok(r) = serde_json::from_slice::<RoleObj>(&b) {
                ix.roles.insert(
                    (r.metadata.namespace, r.metadata.name),
                    r.rules.unwrap_or_default(),
                );
            }
        }
        for b in objects(2) {
            if let Ok(r) = serde_json::from_slice::<BindingObj>(&b) {
                ix.cluster_bindings.push((
                    r.metadata.name,
                    r.subjects.unwrap_or_default(),
                    r.role_ref,
                ));
            }
        }
        for b in objects(3) {
            if let Ok(r) = serde_json::from_slice::<BindingObj>(&b) {
                ix.bindings
                    .entry(r.metadata.namespace.clone())
                    .or_default()
                    .push((r.metadata.name, r.subjects.unwrap_or_default(), r.role_ref));
            }
        }
        ix
    }

    /// The decision for `a`: privileged groups, then the Node authorizer, then RBAC.
    pub fn decide(&self, a: &Attributes) -> Decision {
        if a.groups.iter().any(|g| g == "system:masters") {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let ix = self.index();
        if let Some(node) = a.user.strip_prefix("system:node:")
            && a.groups.iter().any(|g| g == "system:nodes")
            && self.node_allows(&ix, node, a)
        {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        rbac_decide(&ix, a)
    }

    /// kube-apiserver's Node authorizer, allow/no-opinion only.
    fn node_allows(&self, ix: &Index, node: &str, a: &Attributes) -> bool {
        let Some(r) = &a.resource else {
            return false;
        };
        let graph_types = [
            ("", "secrets"),
            ("", "configmaps"),
            ("", "persistentvolumeclaims"),
            ("", "persistentvolumes"),
            ("", "serviceaccounts"),
            ("resource.k8s.io", "resourceclaims"),
        ];
        if graph_types.contains(&(r.group.as_str(), r.resource.as_str())) {
            // Reads of objects a pod bound to this node uses; nothing else.
            if a.verb != "get"
                || r.name.is_empty()
                || (r.namespace.is_empty() && r.resource != "persistentvolumes")
            {
                return false;
            }
            return self.node_uses(node, r);
        }
        let reads = matches!(a.verb.as_str(), "get" | "list" | "watch");
        if r.group.is_empty() && r.resource == "nodes" && r.subresource.is_empty() && reads {
            // Its own Node only; never all nodes.
            return r.name == node;
        }
        if r.group.is_empty() && r.resource == "pods" && r.subresource.is_empty() && reads {
            // A pod bound to it; lists and watches need a spec.nodeName field selector,
            // which a review does not carry.
            return a.verb == "get"
                && !r.name.is_empty()
                && self.pod_on_node(&r.namespace, &r.name, node);
        }
        // Everything else: the node rules (the system:node ClusterRole's).
        ix.cluster_roles
            .get("system:node")
            .is_some_and(|rules| rules.iter().any(|rule| rule_allows(rule, a)))
    }

    /// The pods bound to `node`, read from the `spec.nodeName` the pod cache already
    /// indexes for field selectors: only those pods are parsed.
    fn pods_on_node(&self, node: &str) -> Vec<Arc<listwatch_store::Record>> {
        let Some(pods) = self.registry.get("", "v1", "pods") else {
            return Vec::new();
        };
        let Some(field) = pods
            .info()
            .field_selectors
            .iter()
            .position(|f| f == "spec.nodeName")
        else {
            return Vec::new();
        };
        pods.current()
            .items()
            .values()
            .filter(|r| r.field(field) == Some(node))
            .cloned()
            .collect()
    }

    fn pod_on_node(&self, namespace: &str, name: &str, node: &str) -> bool {
        self.pods_on_node(node)
            .iter()
            .any(|r| r.namespace() == namespace && r.name() == name)
    }

    /// Whether a pod bound to `node` references the object `r`.
    fn node_uses(&self, node: &str, r: &ResourceAttributes) -> bool {
        for record in self.pods_on_node(node) {
            let ns = record.namespace();
            if r.resource != "persistentvolumes" && ns != r.namespace {
                continue;
            }
            let pod: serde_json::Value = serde_json::from_slice(record.bytes()).unwrap_or_default();
            let refs = pod_references(&pod);
            let hit = match r.resource.as_str() {
                "secrets" => refs.secrets.contains(&r.name),
                "configmaps" => refs.configmaps.contains(&r.name),
                "persistentvolumeclaims" => refs.pvcs.contains(&r.name),
                "serviceaccounts" => refs.service_account == r.name,
                "resourceclaims" => refs.claims.contains(&r.name),
                "persistentvolumes" => refs.pvcs.iter().any(|c| self.pvc_volume(ns, c) == r.name),
                _ => false,
            };
            if hit {
                return true;
            }
        }
        false
    }

    fn pvc_volume(&self, namespace: &str, claim: &str) -> String {
        self.registry
            .get("", "v1", "persistentvolumeclaims")
            .and_then(|s| {
                let snap = s.current();
                let r = snap.get(&format!("{namespace}/{claim}"))?;
                let v: serde_json::Value = serde_json::from_slice(r.bytes()).ok()?;
                v["spec"]["volumeName"].as_str().map(str::to_string)
            })
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct PodRefs {
    secrets: Vec<String>,
    configmaps: Vec<String>,
    pvcs: Vec<String>,
    claims: Vec<String>,
    service_account: String,
}

fn pod_references(pod: &serde_json::Value) -> PodRefs {
    let mut refs = PodRefs::default();
    let spec = &pod["spec"];
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    refs.service_account = s(&spec["serviceAccountName"]);
    for p in spec["imagePullSecrets"].as_array().into_iter().flatten() {
        refs.secrets.push(s(&p["name"]));
    }
    for v in spec["volumes"].as_array().into_iter().flatten() {
        refs.secrets.push(s(&v["secret"]["secretName"]));
        refs.configmaps.push(s(&v["configMap"]["name"]));
        refs.pvcs.push(s(&v["persistentVolumeClaim"]["claimName"]));
        for src in v["projected"]["sources"].as_array().into_iter().flatten() {
            refs.secrets.push(s(&src["secret"]["name"]));
            refs.configmaps.push(s(&src["configMap"]["name"]));
        }
        for key in [
            "azureFile",
            "cephfs",
            "cinder",
            "flexVolume",
            "iscsi",
            "rbd",
            "scaleIO",
            "storageos",
            "csi",
        ] {
            let sr = &v[key]["secretRef"];
            refs.secrets.push(s(&sr["name"]));
            refs.secrets
                .push(s(&v[key]["nodePublishSecretRef"]["name"]));
            refs.secrets.push(s(&v[key]["secretName"]));
        }
        // An ephemeral volume's claim is named after the pod and the volume.
        if v.get("ephemeral").is_some() {
            refs.pvcs
                .push(format!("{}-{}", s(&pod["metadata"]["name"]), s(&v["name"])));
        }
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in spec[list].as_array().into_iter().flatten() {
            for e in c["envFrom"].as_array().into_iter().flatten() {
                refs.secrets.push(s(&e["secretRef"]["name"]));
                refs.configmaps.push(s(&e["configMapRef"]["name"]));
            }
            for e in c["env"].as_array().into_iter().flatten() {
                refs.secrets
                    .push(s(&e["valueFrom"]["secretKeyRef"]["name"]));
                refs.configmaps
                    .push(s(&e["valueFrom"]["configMapKeyRef"]["name"]));
            }
        }
    }
    for c in pod["status"]["resourceClaimStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        refs.claims.push(s(&c["resourceClaimName"]));
    }
    refs.secrets.retain(|x| !x.is_empty());
    refs.configmaps.retain(|x| !x.is_empty());
    refs.pvcs.retain(|x| !x.is_empty());
    refs.claims.retain(|x| !x.is_empty());
    refs
}

fn subject_matches(s: &Subject, a: &Attributes, binding_ns: &str) -> bool {
    match s.kind.as_str() {
        "User" => s.name == a.user,
        "Group" => a.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = if s.namespace.is_empty() {
                binding_ns
            } else {
                &s.namespace
            };
            a.user == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        _ => false,
    }
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

/// Whether one policy rule allows `a` (kube's `RuleAllows`).
fn rule_allows(rule: &Rule, a: &Attributes) -> bool {
    if !has(&rule.verbs, &a.verb) {
        return false;
    }
    match &a.resource {
        None => rule.non_resource_urls.iter().any(|u| {
            u == "*" || *u == a.path || (u.ends_with('*') && a.path.starts_with(&u[..u.len() - 1]))
        }),
        Some(r) => {
            if !has(&rule.api_groups, &r.group) {
                return false;
            }
            let combined = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let resource_ok = rule.resources.iter().any(|x| {
                x == "*"
                    || *x == combined
                    || (!r.subresource.is_empty() && *x == format!("*/{}", r.subresource))
            });
            resource_ok
                && (rule.resource_names.is_empty()
                    || (!r.name.is_empty() && rule.resource_names.contains(&r.name)))
        }
    }
}

fn rbac_decide(ix: &Index, a: &Attributes) -> Decision {
    let who = |s: &Subject| -> String {
        match s.kind.as_str() {
            "ServiceAccount" => format!("ServiceAccount \"{}/{}\"", s.namespace, s.name),
            k => format!("{k} \"{}\"", s.name),
        }
    };
    for (name, subjects, role_ref) in &ix.cluster_bindings {
        let Some(s) = subjects.iter().find(|s| subject_matches(s, a, "")) else {
            continue;
        };
        if role_ref.kind != "ClusterRole" {
            continue;
        }
        if let Some(rules) = ix.cluster_roles.get(&role_ref.name)
            && rules.iter().any(|r| rule_allows(r, a))
        {
            return Decision {
                allowed: true,
                reason: format!(
                    "RBAC: allowed by ClusterRoleBinding \"{name}\" of ClusterRole \"{}\" to {}",
                    role_ref.name,
                    who(s)
                ),
            };
        }
    }
    let ns = a.resource.as_ref().map_or("", |r| r.namespace.as_str());
    if !ns.is_empty() {
        for (name, subjects, role_ref) in ix.bindings.get(ns).into_iter().flatten() {
            let Some(s) = subjects.iter().find(|s| subject_matches(s, a, ns)) else {
                continue;
            };
            let rules = match role_ref.kind.as_str() {
                "ClusterRole" => ix.cluster_roles.get(&role_ref.name),
                "Role" => ix.roles.get(&(ns.to_string(), role_ref.name.clone())),
                _ => None,
            };
            if rules.is_some_and(|rules| rules.iter().any(|r| rule_allows(r, a))) {
                return Decision {
                    allowed: true,
                    reason: format!(
                        "RBAC: allowed by RoleBinding \"{name}/{ns}\" of {} \"{}\" to {}",
                        role_ref.kind,
                        role_ref.name,
                        who(s)
                    ),
                };
            }
        }
    }
    Decision {
        allowed: false,
        reason: String::new(),
    }
}

impl crate::auth::Authorizer for ClusterAuthorizer {
    fn allowed(
        &self,
        user: Option<&crate::auth::User>,
        verb: &str,
        resource: &listwatch_core::ResourceInfo,
        namespace: Option<&str>,
    ) -> bool {
        self.allowed_object(user, verb, resource, namespace, "")
    }

    fn allowed_object(
        &self,
        user: Option<&crate::auth::User>,
        verb: &str,
        resource: &listwatch_core::ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        // No user: kube-apiserver's anonymous identity.
        let (user, groups) = match user {
            Some(u) => (u.name.clone(), u.groups.clone()),
            None => (
                "system:anonymous".to_string(),
                vec!["system:unauthenticated".to_string()],
            ),
        };
        self.decide(&Attributes {
            user,
            groups,
            verb: verb.to_string(),
            resource: Some(ResourceAttributes {
                group: resource.group.clone(),
                resource: resource.resource.clone(),
                subresource: String::new(),
                namespace: namespace.unwrap_or_default().to_string(),
                name: name.to_string(),
            }),
            path: String::new(),
        })
        .allowed
    }
}
