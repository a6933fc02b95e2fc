//! kube-apiserver 1.36's Node authorizer (`--authorization-mode=Node`): what a kubelet —
//! user `system:node:<name>` in group `system:nodes` — may do.
//!
//! - Secrets, ConfigMaps, PVCs, PVs, ResourceClaims, ServiceAccounts, VolumeAttachments
//!   and ResourceSlices: only objects its graph connects to the node. kube-apiserver keeps
//!   that graph from informers (`node ← pod ← secret | configmap | pvc | serviceaccount |
//!   resourceclaim`, `pvc ← pv ← secret`, `node ← volumeattachment`, `node ←
//!   resourceslice`); here the same edges are read from the caches when asked, so a pod
//!   bound a moment ago counts as soon as the cache has it.
//! - Pods and its own Node: the selector-aware rules (`AuthorizeNodeWithSelectors`, on in 1.36):
//!   pods are listed and watched only with `spec.nodeName=<node>`, Nodes read only by name.
//! - Leases and CSINodes: only its own. Everything else: the static `system:node` rules
//!   ([`node_rules`]), compiled in as kube-apiserver's are (the stored ClusterRole is never
//!   read: editing it changes nothing, as in kube-apiserver).
//!
//! It allows or has no opinion, with kube-apiserver's reasons; RBAC is asked next.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock};

use listwatch_sources::Registry;
use listwatch_store::Store;
use parking_lot::Mutex;
use serde_json::Value;

use crate::authorizer::{Attributes, Decision, User};
use crate::rule::{Rule, rule_allows};

/// The node a user is, as kube's default `NodeIdentifier` reads it: `Some(name)` for
/// `system:node:<name>` in `system:nodes` (`Some("")` when the name is empty: a node the
/// authorizer cannot identify), None for everyone else.
pub fn node_identity(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix("system:node:")?;
    user.groups
        .iter()
        .any(|g| g == "system:nodes")
        .then_some(name)
}

/// One static rule: API groups, resources (`res/sub` for subresources), verbs.
type StaticRule = (
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

/// `bootstrappolicy.NodeRules()` as kube-apiserver 1.36 builds it with its default feature
/// gates (the rules it also writes as the `system:node` ClusterRole), in its order.
const NODE_RULES: &[StaticRule] = &[
    (&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
    (
        &["authorization.k8s.io"],
        &["localsubjectaccessreviews", "subjectaccessreviews"],
        &["create"],
    ),
    (&[""], &["services"], &["get", "list", "watch"]),
    (&[""], &["nodes"], &["create", "get", "list", "watch"]),
    (&[""], &["nodes/status"], &["patch", "update"]),
    (&[""], &["nodes"], &["patch", "update"]),
    (
        &["", "events.k8s.io"],
        &["events"],
        &["create", "patch", "update"],
    ),
    (&[""], &["pods"], &["get", "list", "watch"]),
    (&[""], &["pods"], &["create", "delete"]),
    (&[""], &["pods/status"], &["patch", "update"]),
    (&[""], &["pods/eviction"], &["create"]),
    (&[""], &["configmaps", "secrets"], &["get", "list", "watch"]),
    (
        &[""],
        &["persistentvolumeclaims", "persistentvolumes"],
        &["get"],
    ),
    (&[""], &["endpoints"], &["get"]),
    (
        &["certificates.k8s.io"],
        &["certificatesigningrequests"],
        &["create", "get", "list", "watch"],
    ),
    (
        &["coordination.k8s.io"],
        &["leases"],
        &["create", "delete", "get", "patch", "update"],
    ),
    (&["storage.k8s.io"], &["volumeattachments"], &["get"]),
    (&[""], &["serviceaccounts/token"], &["create"]),
    (
        &[""],
        &["persistentvolumeclaims/status"],
        &["get", "patch", "update"],
    ),
    (
        &["storage.k8s.io"],
        &["csidrivers"],
        &["get", "list", "watch"],
    ),
    (
        &["storage.k8s.io"],
        &["csinodes"],
        &["create", "delete", "get", "patch", "update"],
    ),
    (
        &["node.k8s.io"],
        &["runtimeclasses"],
        &["get", "list", "watch"],
    ),
    // DynamicResourceAllocation (GA).
    (&["resource.k8s.io"], &["resourceclaims"], &["get"]),
    (
        &["resource.k8s.io"],
        &["resourceslices"],
        &["deletecollection"],
    ),
    // KubeletServiceAccountTokenForCredentialProviders (on by default).
    (&[""], &["serviceaccounts"], &["get"]),
];

/// The static node rules, as RBAC policy rules (the `system:node` ClusterRole's `rules`).
pub fn node_rules() -> &'static [Rule] {
    static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        NODE_RULES
            .iter()
            .map(|(groups, resources, verbs)| Rule {
                verbs: owned(verbs),
                api_groups: owned(groups),
                resources: owned(resources),
                ..Rule::default()
            })
            .collect()
    });
    &RULES
}

/// The kinds of vertex the graph links to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Vertex {
    Pod,
    Secret,
    ConfigMap,
    Pvc,
    Pv,
    ServiceAccount,
    ResourceClaim,
    VolumeAttachment,
    ResourceSlice,
}

/// What the pods bound to one node reference, each as (namespace, name).
#[derive(Default)]
struct PodEdges {
    pods: HashSet<(String, String)>,
    secrets: HashSet<(String, String)>,
    configmaps: HashSet<(String, String)>,
    pvcs: HashSet<(String, String)>,
    service_accounts: HashSet<(String, String)>,
    claims: HashSet<(String, String)>,
}

/// Per-node pod edges, valid while the pod store stays at `pods_rv`.
#[derive(Default)]
struct EdgeCache {
    pods_rv: u64,
    by_node: HashMap<String, Arc<PodEdges>>,
}

/// Bounds the cache: node names in reviews are anyone's choice.
const CACHED_NODES: usize = 4096;

/// The Node authorizer over a registry's caches (pods, PVs, VolumeAttachments,
/// ResourceSlices).
pub struct NodeAuthorizer {
    registry: Registry,
    edges: Mutex<EdgeCache>,
}

fn no(reason: impl Into<String>) -> Decision {
    Decision::no_opinion(reason)
}

fn yes() -> Decision {
    Decision::allow("")
}

impl NodeAuthorizer {
    /// An authorizer reading `registry`'s stores.
    pub fn new(registry: &Registry) -> Self {
        NodeAuthorizer {
            registry: registry.clone(),
            edges: Mutex::new(EdgeCache::default()),
        }
    }

    /// kube's `NodeAuthorizer.Authorize`: allow, or no opinion with its reason (empty for
    /// users that are not nodes).
    pub fn decide(&self, a: &Attributes) -> Decision {
        let Some(node) = node_identity(&a.user) else {
            return no("");
        };
        if node.is_empty() {
            return no(format!("unknown node for user {:?}", a.user.name));
        }
        if a.resource_request {
            let gr = (a.api_group.as_str(), a.resource.as_str());
            match gr {
                ("", "secrets") => return self.read_namespaced(node, Vertex::Secret, a),
                ("", "configmaps") => return self.read_namespaced(node, Vertex::ConfigMap, a),
                ("", "persistentvolumeclaims") if a.subresource == "status" => {
                    return self.status_update(node, Vertex::Pvc, a);
                }
                ("", "persistentvolumeclaims") => return self.get(node, Vertex::Pvc, a),
                ("", "persistentvolumes") => return self.get(node, Vertex::Pv, a),
                ("resource.k8s.io", "resourceclaims") => {
                    return self.get(node, Vertex::ResourceClaim, a);
                }
                ("storage.k8s.io", "volumeattachments") => {
                    return self.get(node, Vertex::VolumeAttachment, a);
                }
                ("", "serviceaccounts") => return self.service_account(node, a),
                ("coordination.k8s.io", "leases") => return lease(node, a),
                ("storage.k8s.io", "csinodes") => return csi_node(node, a),
                ("resource.k8s.io", "resourceslices") => return self.resource_slice(node, a),
                ("", "nodes") => return node_object(node, a),
                ("", "pods") => return self.pod(node, a),
                _ => {}
            }
        }
        if node_rules().iter().any(|r| rule_allows(r, a)) {
            yes()
        } else {
            no("")
        }
    }

    /// `authorizeStatusUpdate`: update or patch of a related object's status.
    fn status_update(&self, node: &str, kind: Vertex, a: &Attributes) -> Decision {
        if !matches!(a.verb.as_str(), "update" | "patch") {
            return no("can only get/update/patch this type");
        }
        if a.subresource != "status" {
            return no("can only update status subresource");
        }
        self.path(node, kind, a)
    }

    /// `authorizeGet`: get of a related object.
    fn get(&self, node: &str, kind: Vertex, a: &Attributes) -> Decision {
        if a.verb != "get" {
            return no("can only get individual resources of this type");
        }
        if !a.subresource.is_empty() {
            return no("cannot get subresource");
        }
        self.path(node, kind, a)
    }

    /// `authorizeReadNamespacedObject`: get, list or watch of one related namespaced
    /// object (a list or watch names it with a `metadata.name` field selector).
    fn read_namespaced(&self, node: &str, kind: Vertex, a: &Attributes) -> Decision {
        if !a.is_read_only() {
            return no("can only read resources of this type");
        }
        if !a.subresource.is_empty() {
            return no("cannot read subresource");
        }
        if a.namespace.is_empty() {
            return no("can only read namespaced object of this type");
        }
        self.path(node, kind, a)
    }

    /// `authorize`: a named object with a path to the node in the graph.
    fn path(&self, node: &str, kind: Vertex, a: &Attributes) -> Decision {
        if a.name.is_empty() {
            return no("No Object name found");
        }
        self.related_or_why(node, kind, a)
    }

    fn related_or_why(&self, node: &str, kind: Vertex, a: &Attributes) -> Decision {
        if self.related(node, kind, &a.namespace, &a.name) {
            yes()
        } else {
            no(format!(
                "no relationship found between node '{node}' and this object"
            ))
        }
    }

    /// `authorizeServiceAccount`: a get of a service account a pod on the node runs as
    /// (for the kubelet's credential providers), or the `token` subresource's create.
    fn service_account(&self, node: &str, a: &Attributes) -> Decision {
        if a.verb == "get" && a.subresource.is_empty() {
            return self.read_namespaced(node, Vertex::ServiceAccount, a);
        }
        if a.verb != "create" || a.name.is_empty() {
            return no("can only create tokens for individual service accounts");
        }
        if a.subresource != "token" {
            return no("can only create token subresource of serviceaccount");
        }
        self.related_or_why(node, Vertex::ServiceAccount, a)
    }

    /// `authorizeResourceSlice`: the node's own slices; list, watch and deletecollection
    /// only with a `spec.nodeName=<node>` field selector.
    fn resource_slice(&self, node: &str, a: &Attributes) -> Decision {
        if !a.subresource.is_empty() {
            return no("cannot authorize ResourceSlice subresources");
        }
        match a.verb.as_str() {
            // NodeRestriction admission checks the new slice's node.
            "create" => yes(),
            "get" | "update" | "patch" | "delete" => self.path(node, Vertex::ResourceSlice, a),
            "watch" | "list" | "deletecollection" if selects_node(a, node) => yes(),
            "watch" | "list" | "deletecollection" => no(
                "can only list/watch/deletecollection resourceslices with nodeName field selector",
            ),
            _ => no(
                "only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection",
            ),
        }
    }

    /// `authorizePod`: a get of a pod bound to the node; list and watch with
    /// `spec.nodeName=<node>` (or of one related pod by name); mirror pods' create and
    /// delete, status and eviction (NodeRestriction admission narrows those to the node).
    fn pod(&self, node: &str, a: &Attributes) -> Decision {
        match (a.subresource.as_str(), a.verb.as_str()) {
            ("", "get") => self.get(node, Vertex::Pod, a),
            ("", "list" | "watch") if selects_node(a, node) => yes(),
            ("", "list" | "watch") if !a.name.is_empty() => self.path(node, Vertex::Pod, a),
            ("", "list" | "watch") => {
                no("can only list/watch pods with spec.nodeName field selector")
            }
            ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => {
                yes()
            }
            _ => no(""),
        }
    }

    /// Whether the graph has a path from the object to `node`.
    fn related(&self, node: &str, kind: Vertex, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        match kind {
            Vertex::VolumeAttachment | Vertex::ResourceSlice => {
                let resource = if kind == Vertex::VolumeAttachment {
                    ("storage.k8s.io", "volumeattachments")
                } else {
                    ("resource.k8s.io", "resourceslices")
                };
                // Cluster-scoped: a vertex has no namespace.
                namespace.is_empty()
                    && self
                        .object(resource.0, resource.1, name)
                        .is_some_and(|o| o["spec"]["nodeName"].as_str() == Some(node))
            }
            Vertex::Pv => {
                namespace.is_empty()
                    && self
                        .volumes_of(&self.pod_edges(node))
                        .iter()
                        .any(|(pv, _)| pv == name)
            }
            Vertex::Secret => {
                let edges = self.pod_edges(node);
                edges.secrets.contains(&key)
                    || self
                        .volumes_of(&edges)
                        .iter()
                        .any(|(_, secrets)| secrets.contains(&key))
            }
            _ => {
                let edges = self.pod_edges(node);
                let set = match kind {
                    Vertex::Pod => &edges.pods,
                    Vertex::ConfigMap => &edges.configmaps,
                    Vertex::Pvc => &edges.pvcs,
                    Vertex::ServiceAccount => &edges.service_accounts,
                    _ => &edges.claims,
                };
                set.contains(&key)
            }
        }
    }

    fn store(&self, group: &str, resource: &str) -> Option<Arc<Store>> {
        self.registry.get(group, "v1", resource)
    }

    fn object(&self, group: &str, resource: &str, key: &str) -> Option<Value> {
        let store = self.store(group, resource)?;
        let snap = store.current();
        serde_json::from_slice(snap.get(key)?.bytes()).ok()
    }

    /// The edges of the pods bound to `node`: found by the `spec.nodeName` the pod cache
    /// already indexes for field selectors, so only those pods are parsed; kept until the
    /// pod store moves.
    fn pod_edges(&self, node: &str) -> Arc<PodEdges> {
        let Some(pods) = self.store("", "pods") else {
            return Arc::default();
        };
        let snap = pods.current();
        {
            let mut cache = self.edges.lock();
            if cache.pods_rv != snap.rv() || cache.by_node.len() >= CACHED_NODES {
                *cache = EdgeCache {
                    pods_rv: snap.rv(),
                    by_node: HashMap::new(),
                };
            } else if let Some(e) = cache.by_node.get(node) {
                return e.clone();
            }
        }
        let mut edges = PodEdges::default();
        if let Some(field) = pods
            .info()
            .field_selectors
            .iter()
            .position(|f| f == "spec.nodeName")
        {
            for record in snap
                .items()
                .values()
                .filter(|r| r.field(field) == Some(node))
            {
                if let Ok(pod) = serde_json::from_slice::<Value>(record.bytes()) {
                    add_pod(&mut edges, &pod);
                }
            }
        }
        let edges = Arc::new(edges);
        let mut cache = self.edges.lock();
        if cache.pods_rv == snap.rv() {
            cache.by_node.insert(node.to_string(), edges.clone());
        }
        edges
    }

    /// The PVs bound (by `spec.claimRef`) to a claim the node's pods use, each with the
    /// kubelet-visible secrets it references.
    fn volumes_of(&self, edges: &PodEdges) -> Vec<(String, HashSet<(String, String)>)> {
        let Some(pvs) = self.store("", "persistentvolumes") else {
            return Vec::new();
        };
        if edges.pvcs.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for record in pvs.current().items().values() {
            let Ok(pv) = serde_json::from_slice::<Value>(record.bytes()) else {
                continue;
            };
            let claim = &pv["spec"]["claimRef"];
            let claim = (str_of(&claim["namespace"]), str_of(&claim["name"]));
            if edges.pvcs.contains(&claim) {
                out.push((record.name().to_string(), pv_secrets(&pv)));
            }
        }
        out
    }
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Whether the request's field selector has `spec.nodeName=<node>`.
fn selects_node(a: &Attributes, node: &str) -> bool {
    a.field_selector
        .terms
        .iter()
        .any(|t| !t.negated && t.field == "spec.nodeName" && t.value == node)
}

/// `authorizeLease`: the node's own Lease in `kube-node-lease` (any name on create:
/// NodeRestriction admission checks it).
fn lease(node: &str, a: &Attributes) -> Decision {
    if !matches!(
        a.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no("can only get, create, update, patch, or delete a node lease");
    }
    if a.namespace != "kube-node-lease" {
        return no("can only access leases in the \"kube-node-lease\" system namespace");
    }
    if a.verb != "create" && a.name != node {
        return no("can only access node lease with the same name as the requesting node");
    }
    yes()
}

/// `authorizeCSINode`: the node's own CSINode.
fn csi_node(node: &str, a: &Attributes) -> Decision {
    if !matches!(
        a.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no("can only get, create, update, patch, or delete a CSINode");
    }
    if !a.subresource.is_empty() {
        return no("cannot authorize CSINode subresources");
    }
    if a.verb != "create" && a.name != node {
        return no("can only access CSINode with the same name as the requesting node");
    }
    yes()
}

/// `authorizeNode`: its own Node read by name (so a kubelet may read it before it exists);
/// writes and status writes (NodeRestriction admission narrows them to itself).
fn node_object(node: &str, a: &Attributes) -> Decision {
    match (a.subresource.as_str(), a.verb.as_str()) {
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => yes(),
        ("", "get" | "list" | "watch") if a.name == node => yes(),
        ("", "get" | "list" | "watch") if a.name.is_empty() => no(format!(
            "node '{node}' cannot read all nodes, only its own Node object"
        )),
        ("", "get" | "list" | "watch") => no(format!(
            "node '{node}' cannot read '{}', only its own Node object",
            a.name
        )),
        _ => no(""),
    }
}

/// The graph's edges for one pod bound to the node (kube's `Graph.AddPod`): the pod
/// itself; unless it is a mirror pod (which a node creates itself and so must not gain
/// access through), its service account, the secrets and config maps its spec names
/// (`VisitPodSecretNames`, `VisitPodConfigmapNames`), its claims (ephemeral ones named
/// `<pod>-<volume>`) and its resource claims.
fn add_pod(edges: &mut PodEdges, pod: &Value) {
    let meta = &pod["metadata"];
    let ns = str_of(&meta["namespace"]);
    let pod_name = str_of(&meta["name"]);
    let add = |set: &mut HashSet<(String, String)>, name: &Value| {
        if let Some(name) = name.as_str().filter(|n| !n.is_empty()) {
            set.insert((ns.clone(), name.to_string()));
        }
    };
    add(&mut edges.pods, &meta["name"]);
    if meta["annotations"]
        .get("kubernetes.io/config.mirror")
        .is_some()
    {
        return;
    }
    let spec = &pod["spec"];
    add(&mut edges.service_accounts, &spec["serviceAccountName"]);
    let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
    for p in items(&spec["imagePullSecrets"]) {
        add(&mut edges.secrets, &p["name"]);
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in items(&spec[list]) {
            for e in items(&c["envFrom"]) {
                add(&mut edges.secrets, &e["secretRef"]["name"]);
                add(&mut edges.configmaps, &e["configMapRef"]["name"]);
            }
            for e in items(&c["env"]) {
                add(&mut edges.secrets, &e["valueFrom"]["secretKeyRef"]["name"]);
                add(
                    &mut edges.configmaps,
                    &e["valueFrom"]["configMapKeyRef"]["name"],
                );
            }
        }
    }
    for v in items(&spec["volumes"]) {
        add_volume_secret(&mut |name| add(&mut edges.secrets, name), &v);
        if let Some(projected) = v.get("projected") {
            for s in items(&projected["sources"]) {
                add(&mut edges.configmaps, &s["configMap"]["name"]);
            }
        } else {
            add(&mut edges.configmaps, &v["configMap"]["name"]);
        }
        if let Some(claim) = v.get("persistentVolumeClaim") {
            add(&mut edges.pvcs, &claim["claimName"]);
        } else if v.get("ephemeral").is_some() {
            let volume = str_of(&v["name"]);
            add(
                &mut edges.pvcs,
                &Value::String(format!("{pod_name}-{volume}")),
            );
        }
    }
    // `resourceclaim.Name`: a claim named in the spec, or the one generated from a
    // template as the pod's status records it (none yet: no edge).
    let statuses = items(&pod["status"]["resourceClaimStatuses"]);
    for c in items(&spec["resourceClaims"]) {
        if c.get("resourceClaimName").is_some() {
            add(&mut edges.claims, &c["resourceClaimName"]);
        } else if c.get("resourceClaimTemplateName").is_some()
            && let Some(s) = statuses.iter().find(|s| s["name"] == c["name"])
        {
            add(&mut edges.claims, &s["resourceClaimName"]);
        }
    }
    add(
        &mut edges.claims,
        &pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"],
    );
}

/// The secret one pod volume names: kube visits the first source a volume has, in this
/// order (a valid volume has exactly one).
fn add_volume_secret(add: &mut dyn FnMut(&Value), v: &Value) {
    const SOURCES: [(&str, &str); 11] = [
        ("azureFile", "secretName"),
        ("cephfs", "secretRef"),
        ("cinder", "secretRef"),
        ("flexVolume", "secretRef"),
        ("projected", ""),
        ("rbd", "secretRef"),
        ("secret", "secretName"),
        ("scaleIO", "secretRef"),
        ("iscsi", "secretRef"),
        ("storageos", "secretRef"),
        ("csi", "nodePublishSecretRef"),
    ];
    let Some((source, field)) = SOURCES.iter().find(|(s, _)| v.get(*s).is_some()) else {
        return;
    };
    let src = &v[*source];
    match *field {
        "" => {
            for s in src["sources"].as_array().into_iter().flatten() {
                add(&s["secret"]["name"]);
            }
        }
        "secretName" => add(&src["secretName"]),
        f => add(&src[f]["name"]),
    }
}

/// The kubelet-visible secrets a PV references (`VisitPVSecretNames`: the first source the
/// PV has, in kube's order), as (namespace, name).
fn pv_secrets(pv: &Value) -> HashSet<(String, String)> {
    /// Where a source's secret namespace comes from.
    enum Ns {
        /// `secretNamespace`, else the claim's namespace (azureFile).
        AzureFile,
        /// `secretRef.namespace`, else the claim's (secrets persisted before it existed).
        OrClaim,
        /// `secretRef.namespace` as written.
        Own,
        /// The CSI node-side refs, each with its own namespace (the controller's secrets
        /// are not the kubelet's).
        Csi,
    }
    const SOURCES: [(&str, Ns); 9] = [
        ("azureFile", Ns::AzureFile),
        ("cephfs", Ns::OrClaim),
        ("cinder", Ns::Own),
        ("flexVolume", Ns::OrClaim),
        ("rbd", Ns::OrClaim),
        ("scaleIO", Ns::OrClaim),
        ("iscsi", Ns::OrClaim),
        ("storageos", Ns::Own),
        ("csi", Ns::Csi),
    ];
    let spec = &pv["spec"];
    let claim_ns = str_of(&spec["claimRef"]["namespace"]);
    let or_claim = |ns: &Value| {
        Some(str_of(ns))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| claim_ns.clone())
    };
    let mut out = HashSet::new();
    let mut add = |ns: String, name: &Value| {
        if let Some(name) = name.as_str().filter(|n| !n.is_empty()) {
            out.insert((ns, name.to_string()));
        }
    };
    let Some((source, how)) = SOURCES.iter().find(|(k, _)| spec.get(*k).is_some()) else {
        return out;
    };
    let src = &spec[*source];
    let r = &src["secretRef"];
    match how {
        Ns::AzureFile => add(or_claim(&src["secretNamespace"]), &src["secretName"]),
        Ns::OrClaim => add(or_claim(&r["namespace"]), &r["name"]),
        Ns::Own => add(str_of(&r["namespace"]), &r["name"]),
        Ns::Csi => {
            for k in [
                "nodePublishSecretRef",
                "nodeStageSecretRef",
                "nodeExpandSecretRef",
            ] {
                add(str_of(&src[k]["namespace"]), &src[k]["name"]);
            }
        }
    }
    out
}
