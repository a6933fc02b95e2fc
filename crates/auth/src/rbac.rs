//! Kubernetes authorization evaluated from what listwatch follows: the RBAC authorizer
//! (Roles, ClusterRoles, RoleBindings, ClusterRoleBindings from the registry's stores),
//! chained as kube-apiserver chains `--authorization-mode=Node,RBAC`: `system:masters` is
//! allowed everything first (kube-apiserver's privileged-group authorizer), then the Node
//! authorizer ([`crate::node`]) decides for kubelets, then RBAC. Changes to RBAC objects
//! take effect as soon as the cache has them: the rule index is rebuilt when any of the four
//! RBAC stores moves.

use std::collections::HashMap;
use std::sync::Arc;

use listwatch_sources::Registry;
use listwatch_store::Store;
use parking_lot::Mutex;
use serde::Deserialize;

use crate::authorizer::{Attributes, Authorizer, Decision};
use crate::node::NodeAuthorizer;
pub use crate::rule::Rule;
use crate::rule::rule_allows;

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
    node: NodeAuthorizer,
    index: Mutex<Arc<Index>>,
}

const RBAC: &str = "rbac.authorization.k8s.io";

impl ClusterAuthorizer {
    /// An authorizer reading `registry`'s RBAC stores (and pods, PVs, VolumeAttachments and
    /// ResourceSlices for the Node authorizer).
    pub fn new(registry: &Registry) -> Self {
        let get = |r: &str| registry.get(RBAC, "v1", r);
        ClusterAuthorizer {
            stores: [
                get("clusterroles"),
                get("roles"),
                get("clusterrolebindings"),
                get("rolebindings"),
            ],
            node: NodeAuthorizer::new(registry),
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

    /// The decision for `a`: privileged groups, then the Node authorizer, then RBAC; when
    /// none allows, their reasons joined by newlines (kube-apiserver's union authorizer).
    pub fn decide(&self, a: &Attributes) -> Decision {
        if a.user.groups.iter().any(|g| g == "system:masters") {
            return Decision::allow("");
        }
        let node = self.node.decide(a);
        if node.allowed {
            return node;
        }
        let rbac = rbac_decide(&self.index(), a);
        if rbac.allowed || node.reason.is_empty() {
            return rbac;
        }
        let reasons: Vec<&str> = [node.reason.as_str(), rbac.reason.as_str()]
            .into_iter()
            .filter(|r| !r.is_empty())
            .collect();
        Decision::no_opinion(reasons.join("\n"))
    }
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
