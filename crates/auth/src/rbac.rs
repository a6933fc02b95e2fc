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

use crate::authorizer::{Attributes, Authorizer, Decision};

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
        if a.user.groups.iter().any(|g| g == "system:masters") {
            return Decision::allow("");
        }
        let ix = self.index();
        if let Some(node) = a.user.name.strip_prefix("system:node:")
            && a.user.groups.iter().any(|g| g == "system:nodes")
            && self.node_allows(&ix, node, a)
        {
            return Decision::allow("");
        }
        rbac_decide(&ix, a)
    }

    /// kube-apiserver's Node authorizer, allow/no-opinion only.
    fn node_allows(&self, ix: &Index, node: &str, a: &Attributes) -> bool {
        if !a.resource_request {
            return false;
        }
        let graph_types = [
            ("", "secrets"),
            ("", "configmaps"),
            ("", "persistentvolumeclaims"),
            ("", "persistentvolumes"),
            ("", "serviceaccounts"),
            ("resource.k8s.io", "resourceclaims"),
        ];
        if graph_types.contains(&(a.api_group.as_str(), a.resource.as_str())) {
            // Reads of objects a pod bound to this node uses; nothing else.
            if a.verb != "get"
                || a.name.is_empty()
                || (a.namespace.is_empty() && a.resource != "persistentvolumes")
            {
                return false;
            }
            return self.node_uses(node, a);
        }
        let reads = matches!(a.verb.as_str(), "get" | "list" | "watch");
        if a.api_group.is_empty() && a.resource == "nodes" && a.subresource.is_empty() && reads {
            // Its own Node only; never all nodes.
            return a.name == node;
        }
        if a.api_group.is_empty() && a.resource == "pods" && a.subresource.is_empty() && reads {
            // A pod bound to it; lists and watches need a spec.nodeName field selector,
            // which a review does not carry.
            return a.verb == "get"
                && !a.name.is_empty()
                && self.pod_on_node(&a.namespace, &a.name, node);
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
    fn node_uses(&self, node: &str, r: &Attributes) -> bool {
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
        "User" => s.name == a.user.name,
        "Group" => a.user.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = if s.namespace.is_empty() {
                binding_ns
            } else {
                &s.namespace
            };
            a.user.name == format!("system:serviceaccount:{ns}:{}", s.name)
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
    if !a.resource_request {
        return rule.non_resource_urls.iter().any(|u| {
            u == "*" || *u == a.path || (u.ends_with('*') && a.path.starts_with(&u[..u.len() - 1]))
        });
    }
    if !has(&rule.api_groups, &a.api_group) {
        return false;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource_ok = rule.resources.iter().any(|x| {
        x == "*"
            || *x == combined
            || (!a.subresource.is_empty() && *x == format!("*/{}", a.subresource))
    });
    resource_ok
        && (rule.resource_names.is_empty()
            || (!a.name.is_empty() && rule.resource_names.contains(&a.name)))
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
            return Decision::allow(format!(
                "RBAC: allowed by ClusterRoleBinding \"{name}\" of ClusterRole \"{}\" to {}",
                role_ref.name,
                who(s)
            ));
        }
    }
    let ns = if a.resource_request {
        a.namespace.as_str()
    } else {
        ""
    };
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
                return Decision::allow(format!(
                    "RBAC: allowed by RoleBinding \"{name}/{ns}\" of {} \"{}\" to {}",
                    role_ref.kind,
                    role_ref.name,
                    who(s)
                ));
            }
        }
    }
    Decision::no_opinion("")
}

impl Authorizer for ClusterAuthorizer {
    fn authorize(&self, a: &Attributes) -> Decision {
        self.decide(a)
    }
}
