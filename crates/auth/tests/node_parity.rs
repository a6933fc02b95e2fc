//! The Node authorizer against decisions derived from kube-apiserver 1.36's rules for node
//! identities (`plugin/pkg/auth/authorizer/node`, `bootstrappolicy.NodeRules`), over a
//! fixture cluster of our own: pods bound to `node-a` and `node-b` referencing every kind
//! of object the graph links, a mirror pod, an unscheduled pod, PVs bound by `claimRef`,
//! VolumeAttachments and ResourceSlices. Each case names the expected answer: `allow`, or
//! the reason kube-apiserver gives when it has no opinion (no RBAC objects exist here, so
//! the Node authorizer alone decides).

use std::sync::Arc;

use listwatch_auth::authorizer::{Attributes, User};
use listwatch_auth::rbac::ClusterAuthorizer;
use listwatch_core::{FieldSelector, ResourceInfo, builtin_resource, builtin_resources};
use listwatch_sources::{EmbeddedSource, Registry};
use listwatch_store::StoreConfig;
use serde_json::{Value, json};

/// The fixture's objects, by (group, resource).
fn objects() -> Vec<(&'static str, &'static str, Value)> {
    let web = json!({
        "metadata": {"name": "web", "namespace": "ns1"},
        "spec": {
            "nodeName": "node-a",
            "serviceAccountName": "web-sa",
            "imagePullSecrets": [{"name": "pull"}],
            "initContainers": [{"name": "init", "image": "i",
                "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "init-secret", "key": "k"}}}]}],
            "containers": [{"name": "app", "image": "i",
                "env": [
                    {"name": "S", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                    {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                    {"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                ],
                "envFrom": [{"secretRef": {"name": "from-secret"}}, {"configMapRef": {"name": "from-cm"}}]}],
            "ephemeralContainers": [{"name": "debug", "image": "i",
                "envFrom": [{"configMapRef": {"name": "debug-cm"}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "vol-secret"}},
                {"name": "c", "configMap": {"name": "vol-cm"}},
                {"name": "p", "projected": {"sources": [
                    {"secret": {"name": "proj-secret"}},
                    {"configMap": {"name": "proj-cm"}},
                    {"serviceAccountToken": {"path": "token"}}]}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}},
                {"name": "az", "azureFile": {"secretName": "az-secret", "shareName": "s"}}
            ],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimName": "gpu-claim"},
                {"name": "tpl", "resourceClaimTemplateName": "tpl"},
                {"name": "later", "resourceClaimTemplateName": "tpl"}
            ]
        },
        "status": {
            "resourceClaimStatuses": [
                {"name": "tpl", "resourceClaimName": "web-tpl-x1"},
                {"name": "stray", "resourceClaimName": "stray-claim"}
            ],
            "extendedResourceClaimStatus": {"resourceClaimName": "web-extended", "requestMappings": []}
        }
    });
    let mirror = json!({
        "metadata": {"name": "mirror", "namespace": "ns1",
            "annotations": {"kubernetes.io/config.mirror": "abc"}},
        "spec": {"nodeName": "node-a", "serviceAccountName": "mirror-sa",
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "s", "secret": {"secretName": "mirror-secret"}}]}
    });
    let other = json!({
        "metadata": {"name": "other", "namespace": "ns2"},
        "spec": {"nodeName": "node-b", "serviceAccountName": "default",
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "b-secret"}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "b-data"}}
            ]}
    });
    let pending = json!({
        "metadata": {"name": "pending", "namespace": "ns1"},
        "spec": {"serviceAccountName": "pending-sa", "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "s", "secret": {"secretName": "pending-secret"}}]}
    });
    let pv = |name: &str, claim: Option<(&str, &str)>, source: Value| {
        let mut spec = json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]});
        if let Some((ns, n)) = claim {
            spec["claimRef"] = json!({"namespace": ns, "name": n});
        }
        if let (Some(spec), Some(source)) = (spec.as_object_mut(), source.as_object()) {
            spec.extend(source.clone());
        }
        json!({"metadata": {"name": name}, "spec": spec})
    };
    vec![
        ("", "pods", web),
        ("", "pods", mirror),
        ("", "pods", other),
        ("", "pods", pending),
        (
            "",
            "persistentvolumes",
            pv(
                "pv-data",
                Some(("ns1", "data")),
                json!({"csi": {"driver": "d", "volumeHandle": "h",
                    "nodePublishSecretRef": {"name": "pv-node-secret", "namespace": "ns1"},
                    "nodeStageSecretRef": {"name": "stage", "namespace": "kube-system"},
                    "controllerPublishSecretRef": {"name": "pv-ctrl-secret", "namespace": "ns1"}}}),
            ),
        ),
        (
            "",
            "persistentvolumes",
            pv(
                "pv-b",
                Some(("ns2", "b-data")),
                json!({"rbd": {"monitors": ["m"], "image": "i", "secretRef": {"name": "rbd-secret"}}}),
            ),
        ),
        (
            "",
            "persistentvolumes",
            pv("pv-free", None, json!({"hostPath": {"path": "/x"}})),
        ),
        (
            "",
            "persistentvolumes",
            pv(
                "pv-wrong-ns",
                Some(("ns2", "data")),
                json!({"hostPath": {"path": "/y"}}),
            ),
        ),
        // The claim names pv-free as its volume: the graph follows the PV's claimRef, not this.
        (
            "",
            "persistentvolumeclaims",
            json!({"metadata": {"name": "data", "namespace": "ns1"}, "spec": {"volumeName": "pv-free"}}),
        ),
        (
            "storage.k8s.io",
            "volumeattachments",
            json!({"metadata": {"name": "va-a"}, "spec": {"attacher": "d", "nodeName": "node-a",
                "source": {"persistentVolumeName": "pv-data"}}}),
        ),
        (
            "storage.k8s.io",
            "volumeattachments",
            json!({"metadata": {"name": "va-b"}, "spec": {"attacher": "d", "nodeName": "node-b",
                "source": {"persistentVolumeName": "pv-b"}}}),
        ),
        (
            "resource.k8s.io",
            "resourceslices",
            json!({"metadata": {"name": "slice-a"}, "spec": {"driver": "d", "nodeName": "node-a",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}}}),
        ),
        (
            "resource.k8s.io",
            "resourceslices",
            json!({"metadata": {"name": "slice-all"}, "spec": {"driver": "d", "allNodes": true,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}}}),
        ),
    ]
}

fn cluster() -> ClusterAuthorizer {
    let registry = Registry::new(builtin_resources(), 1, &StoreConfig::default());
    let source = EmbeddedSource::new(registry.clone());
    for (group, resource, object) in objects() {
        let store = registry
            .get(group, "v1", resource)
            .expect("served resource");
        source
            .seed(&store, [object.to_string().into_bytes()])
            .expect("seed");
    }
    ClusterAuthorizer::new(&registry)
}

/// The user a case's first column names: `<node>` is `system:node:<node>` in `system:nodes`;
/// `<name>@<group>+<group>` is spelled out.
fn user(spec: &str) -> User {
    match spec.split_once('@') {
        Some((name, groups)) => User::in_groups(name, groups, '+'),
        None => User {
            name: format!("system:node:{spec}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..User::default()
        },
    }
}

/// Cases: user | verb | [group:]resource[/subresource] | namespace | name | field selector
/// | `allow`, or the reason of a refusal (`-` for an empty column or reason).
const CASES: &str = r#"
# Pods: a get of a pod bound to the node; list and watch with spec.nodeName=<node>.
node-a | get | pods | ns1 | web | - | allow
node-a | get | pods | ns1 | mirror | - | allow
node-a | get | pods | ns2 | other | - | no relationship found between node 'node-a' and this object
node-a | get | pods | ns1 | pending | - | no relationship found between node 'node-a' and this object
node-a | get | pods | ns1 | - | - | No Object name found
node-a | list | pods | - | - | spec.nodeName=node-a | allow
node-a | watch | pods | - | - | spec.nodeName==node-a | allow
node-a | watch | pods | ns1 | - | spec.nodeName=node-a,status.phase=Running | allow
node-a | list | pods | - | - | spec.nodeName=node-b | can only list/watch pods with spec.nodeName field selector
node-a | list | pods | - | - | - | can only list/watch pods with spec.nodeName field selector
node-a | watch | pods | ns1 | - | spec.nodeName!=node-a | can only list/watch pods with spec.nodeName field selector
node-a | list | pods | ns1 | - | status.phase=Running | can only list/watch pods with spec.nodeName field selector
node-a | watch | pods | ns1 | web | - | allow
node-a | list | pods | ns2 | other | - | no relationship found between node 'node-a' and this object
node-a | create | pods | ns1 | - | - | allow
node-a | delete | pods | ns1 | web | - | allow
node-a | update | pods | ns1 | web | - | -
node-a | patch | pods/status | ns1 | web | - | allow
node-a | update | pods/status | ns2 | other | - | allow
node-a | get | pods/status | ns1 | web | - | -
node-a | create | pods/eviction | ns1 | web | - | allow
node-a | get | pods/log | ns1 | web | - | -
node-b | list | pods | - | - | spec.nodeName=node-b | allow
# Nodes: its own by name; writes (NodeRestriction admission narrows them).
node-a | get | nodes | - | node-a | - | allow
node-a | watch | nodes | - | node-a | - | allow
node-a | get | nodes | - | node-b | - | node 'node-a' cannot read 'node-b', only its own Node object
node-a | list | nodes | - | - | - | node 'node-a' cannot read all nodes, only its own Node object
node-a | create | nodes | - | - | - | allow
node-a | patch | nodes | - | node-b | - | allow
node-a | update | nodes/status | - | node-a | - | allow
node-a | get | nodes/status | - | node-a | - | -
node-a | delete | nodes | - | node-a | - | -
# Secrets: every way a pod's spec names one, and through its PV.
node-a | get | secrets | ns1 | pull | - | allow
node-a | get | secrets | ns1 | env-secret | - | allow
node-a | get | secrets | ns1 | from-secret | - | allow
node-a | get | secrets | ns1 | init-secret | - | allow
node-a | get | secrets | ns1 | vol-secret | - | allow
node-a | get | secrets | ns1 | proj-secret | - | allow
node-a | get | secrets | ns1 | csi-secret | - | allow
node-a | get | secrets | ns1 | az-secret | - | allow
node-a | get | secrets | ns1 | pv-node-secret | - | allow
node-a | get | secrets | kube-system | stage | - | allow
node-a | watch | secrets | ns1 | vol-secret | - | allow
node-a | list | secrets | ns1 | env-secret | - | allow
node-a | get | secrets | ns1 | pv-ctrl-secret | - | no relationship found between node 'node-a' and this object
node-a | get | secrets | ns1 | mirror-secret | - | no relationship found between node 'node-a' and this object
node-a | get | secrets | ns1 | pending-secret | - | no relationship found between node 'node-a' and this object
node-a | get | secrets | ns2 | b-secret | - | no relationship found between node 'node-a' and this object
node-a | get | secrets | ns2 | rbd-secret | - | no relationship found between node 'node-a' and this object
node-a | get | secrets | ns2 | vol-secret | - | no relationship found between node 'node-a' and this object
node-b | get | secrets | ns2 | b-secret | - | allow
node-b | get | secrets | ns2 | rbd-secret | - | allow
node-b | get | secrets | ns1 | vol-secret | - | no relationship found between node 'node-b' and this object
node-c | get | secrets | ns1 | vol-secret | - | no relationship found between node 'node-c' and this object
node-a | list | secrets | ns1 | - | - | No Object name found
node-a | get | secrets | - | vol-secret | - | can only read namespaced object of this type
node-a | create | secrets | ns1 | - | - | can only read resources of this type
node-a | delete | secrets | ns1 | vol-secret | - | can only read resources of this type
node-a | get | secrets/x | ns1 | vol-secret | - | cannot read subresource
# Config maps.
node-a | get | configmaps | ns1 | env-cm | - | allow
node-a | get | configmaps | ns1 | from-cm | - | allow
node-a | get | configmaps | ns1 | debug-cm | - | allow
node-a | get | configmaps | ns1 | vol-cm | - | allow
node-a | watch | configmaps | ns1 | proj-cm | - | allow
node-a | get | configmaps | ns1 | kube-root-ca.crt | - | no relationship found between node 'node-a' and this object
node-a | get | configmaps | ns2 | env-cm | - | no relationship found between node 'node-a' and this object
node-a | watch | configmaps | - | - | - | can only read namespaced object of this type
# Service accounts: a get of a pod's, and its token.
node-a | get | serviceaccounts | ns1 | web-sa | - | allow
node-a | create | serviceaccounts/token | ns1 | web-sa | - | allow
node-a | get | serviceaccounts | ns1 | mirror-sa | - | no relationship found between node 'node-a' and this object
node-a | create | serviceaccounts/token | ns1 | mirror-sa | - | no relationship found between node 'node-a' and this object
node-a | create | serviceaccounts/token | ns1 | pending-sa | - | no relationship found between node 'node-a' and this object
node-a | create | serviceaccounts/token | ns2 | default | - | no relationship found between node 'node-a' and this object
node-b | create | serviceaccounts/token | ns2 | default | - | allow
node-a | get | serviceaccounts | - | web-sa | - | can only read namespaced object of this type
node-a | list | serviceaccounts | ns1 | - | - | can only create tokens for individual service accounts
node-a | create | serviceaccounts/token | ns1 | - | - | can only create tokens for individual service accounts
node-a | get | serviceaccounts/token | ns1 | web-sa | - | can only create tokens for individual service accounts
node-a | create | serviceaccounts | ns1 | web-sa | - | can only create token subresource of serviceaccount
# Claims: by name and ephemeral (<pod>-<volume>); status writes.
node-a | get | persistentvolumeclaims | ns1 | data | - | allow
node-a | get | persistentvolumeclaims | ns1 | web-scratch | - | allow
node-a | get | persistentvolumeclaims | ns2 | b-data | - | no relationship found between node 'node-a' and this object
node-a | list | persistentvolumeclaims | ns1 | - | - | can only get individual resources of this type
node-a | patch | persistentvolumeclaims/status | ns1 | data | - | allow
node-a | update | persistentvolumeclaims/status | ns2 | b-data | - | no relationship found between node 'node-a' and this object
node-a | get | persistentvolumeclaims/status | ns1 | data | - | can only get/update/patch this type
# Volumes: bound by claimRef to a claim a pod on the node uses.
node-a | get | persistentvolumes | - | pv-data | - | allow
node-a | get | persistentvolumes | - | pv-free | - | no relationship found between node 'node-a' and this object
node-a | get | persistentvolumes | - | pv-wrong-ns | - | no relationship found between node 'node-a' and this object
node-a | get | persistentvolumes | - | pv-b | - | no relationship found between node 'node-a' and this object
node-a | get | persistentvolumes | ns1 | pv-data | - | no relationship found between node 'node-a' and this object
node-b | get | persistentvolumes | - | pv-b | - | allow
node-a | list | persistentvolumes | - | - | - | can only get individual resources of this type
# Resource claims: named, generated from a template (as the status records), extended.
node-a | get | resource.k8s.io:resourceclaims | ns1 | gpu-claim | - | allow
node-a | get | resource.k8s.io:resourceclaims | ns1 | web-tpl-x1 | - | allow
node-a | get | resource.k8s.io:resourceclaims | ns1 | web-extended | - | allow
node-a | get | resource.k8s.io:resourceclaims | ns1 | stray-claim | - | no relationship found between node 'node-a' and this object
node-a | watch | resource.k8s.io:resourceclaims | ns1 | gpu-claim | - | can only get individual resources of this type
# Volume attachments: the node's own.
node-a | get | storage.k8s.io:volumeattachments | - | va-a | - | allow
node-a | get | storage.k8s.io:volumeattachments | - | va-b | - | no relationship found between node 'node-a' and this object
node-b | get | storage.k8s.io:volumeattachments | - | va-b | - | allow
node-c | get | storage.k8s.io:volumeattachments | - | va-a | - | no relationship found between node 'node-c' and this object
node-a | list | storage.k8s.io:volumeattachments | - | - | - | can only get individual resources of this type
# Resource slices.
node-a | get | resource.k8s.io:resourceslices | - | slice-a | - | allow
node-a | delete | resource.k8s.io:resourceslices | - | slice-a | - | allow
node-a | get | resource.k8s.io:resourceslices | - | slice-all | - | no relationship found between node 'node-a' and this object
node-a | create | resource.k8s.io:resourceslices | - | - | - | allow
node-a | list | resource.k8s.io:resourceslices | - | - | spec.nodeName=node-a | allow
node-a | deletecollection | resource.k8s.io:resourceslices | - | - | spec.nodeName=node-a | allow
node-a | watch | resource.k8s.io:resourceslices | - | - | - | can only list/watch/deletecollection resourceslices with nodeName field selector
node-a | get | resource.k8s.io:resourceslices/status | - | slice-a | - | cannot authorize ResourceSlice subresources
node-a | escalate | resource.k8s.io:resourceslices | - | slice-a | - | only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection
# Leases and CSINodes: its own.
node-a | get | coordination.k8s.io:leases | kube-node-lease | node-a | - | allow
node-a | update | coordination.k8s.io:leases | kube-node-lease | node-a | - | allow
node-a | create | coordination.k8s.io:leases | kube-node-lease | - | - | allow
node-a | get | coordination.k8s.io:leases | kube-node-lease | node-b | - | can only access node lease with the same name as the requesting node
node-a | get | coordination.k8s.io:leases | default | node-a | - | can only access leases in the "kube-node-lease" system namespace
node-a | list | coordination.k8s.io:leases | kube-node-lease | - | - | can only get, create, update, patch, or delete a node lease
node-a | get | storage.k8s.io:csinodes | - | node-a | - | allow
node-a | create | storage.k8s.io:csinodes | - | - | - | allow
node-a | patch | storage.k8s.io:csinodes | - | node-b | - | can only access CSINode with the same name as the requesting node
node-a | list | storage.k8s.io:csinodes | - | - | - | can only get, create, update, patch, or delete a CSINode
node-a | get | storage.k8s.io:csinodes/status | - | node-a | - | cannot authorize CSINode subresources
# The static node rules.
node-a | get | services | ns1 | web | - | allow
node-a | list | services | - | - | - | allow
node-a | get | endpoints | ns1 | web | - | allow
node-a | list | endpoints | ns1 | - | - | -
node-a | create | events | ns1 | - | - | allow
node-a | patch | events.k8s.io:events | ns1 | e | - | allow
node-a | get | events | ns1 | e | - | -
node-a | list | storage.k8s.io:csidrivers | - | - | - | allow
node-a | get | node.k8s.io:runtimeclasses | - | runc | - | allow
node-a | create | certificates.k8s.io:certificatesigningrequests | - | - | - | allow
node-a | create | authentication.k8s.io:tokenreviews | - | - | - | allow
node-a | create | authorization.k8s.io:subjectaccessreviews | - | - | - | allow
node-a | get | apps:deployments | ns1 | d | - | -
node-a | get | namespaces | - | ns1 | - | -
# Who is a node: the name and the group.
system:node:node-a@system:authenticated | get | pods | ns1 | web | - | -
system:node:@system:nodes | get | services | ns1 | web | - | unknown node for user "system:node:"
alice@system:authenticated | get | secrets | ns1 | vol-secret | - | -
"#;

fn attributes(cols: &[&str]) -> Attributes {
    let dash = |s: &str| {
        if s == "-" {
            String::new()
        } else {
            s.to_string()
        }
    };
    let (group, resource) = cols[2].split_once(':').unwrap_or(("", cols[2]));
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let info = ResourceInfo {
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        ..ResourceInfo::default()
    };
    let namespace = dash(cols[3]);
    let mut a = Attributes::resource(
        user(cols[0]),
        cols[1],
        &info,
        Some(namespace.as_str()).filter(|n| !n.is_empty()),
        &dash(cols[4]),
    );
    a.subresource = subresource.into();
    a.field_selector = FieldSelector::parse(&dash(cols[5])).expect("field selector");
    a
}

#[test]
fn node_identities_are_decided_as_kube_apiserver_decides() {
    let authz = cluster();
    let mut failures = Vec::new();
    let mut cases = 0;
    for line in CASES.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split(" | ").map(str::trim).collect();
        assert_eq!(cols.len(), 7, "malformed case: {line}");
        cases += 1;
        let got = authz.decide(&attributes(&cols));
        let want_allowed = cols[6] == "allow";
        let want_reason = if want_allowed || cols[6] == "-" {
            ""
        } else {
            cols[6]
        };
        if got.allowed != want_allowed || got.reason != want_reason {
            failures.push(format!(
                "{line}\n    got {} {:?}",
                if got.allowed { "allow" } else { "no" },
                got.reason
            ));
        }
    }
    listwatch_testkit::assert_no_differences(&failures, cases, 140);
}

/// What reaches the authorizer from a request's query: kube-apiserver's request-info step.
#[test]
fn a_requests_selectors_and_pinned_name_reach_the_node_authorizer() {
    let authz = cluster();
    let pods = builtin_resource("pods").expect("pods");
    let secrets = builtin_resource("secrets").expect("secrets");
    let node = || user("node-a");
    let read = |verb: &str, info, ns: Option<&str>, fs: &str| {
        authz
            .decide(
                &Attributes::resource(node(), verb, info, ns, "").with_request_selectors(fs, ""),
            )
            .allowed
    };
    assert!(read("list", &pods, None, "spec.nodeName=node-a"));
    assert!(read("watch", &pods, Some("ns1"), "spec.nodeName=node-a"));
    assert!(!read("list", &pods, None, "spec.nodeName=node-b"));
    assert!(!read("list", &pods, None, ""));
    // A get carries no selectors: kube-apiserver reads them for list, watch and
    // deletecollection only.
    let get = Attributes::resource(node(), "get", &pods, Some("ns1"), "")
        .with_request_selectors("spec.nodeName=node-a", "");
    assert!(get.field_selector.is_empty());
    // A kubelet's watch of one secret: the name the field selector pins is the object's.
    let one = Attributes::resource(node(), "watch", &secrets, Some("ns1"), "")
        .with_request_selectors("metadata.name=vol-secret", "app=x");
    assert_eq!(one.name, "vol-secret");
    assert_eq!(one.label_selector.requirements.len(), 1);
    assert!(authz.decide(&one).allowed);
    assert!(read(
        "watch",
        &secrets,
        Some("ns1"),
        "metadata.name=env-secret"
    ));
    assert!(!read(
        "watch",
        &secrets,
        Some("ns1"),
        "metadata.name=b-secret"
    ));
    assert!(!read(
        "watch",
        &secrets,
        Some("ns1"),
        "metadata.name!=b-secret"
    ));
    // Not a path segment: no name.
    let odd = Attributes::resource(node(), "list", &secrets, Some("ns1"), "")
        .with_request_selectors("metadata.name=a/b", "");
    assert_eq!(odd.name, "");
    // An unparsable selector is absent.
    let bad = Attributes::resource(node(), "list", &pods, None, "")
        .with_request_selectors("spec.nodeName", "");
    assert!(bad.field_selector.is_empty());
    assert!(!authz.decide(&bad).allowed);
}

/// A `SubjectAccessReview`'s `fieldSelector`, raw or as requirements.
#[test]
fn a_reviews_field_selector_reaches_the_node_authorizer() {
    let authz = cluster();
    let review = |field_selector: Value| {
        let spec = json!({
            "user": "system:node:node-a",
            "groups": ["system:nodes", "system:authenticated"],
            "resourceAttributes": {"verb": "list", "resource": "pods", "version": "v1",
                "fieldSelector": field_selector}
        });
        authz.decide(&Attributes::from_review_spec(&spec))
    };
    assert!(review(json!({"rawSelector": "spec.nodeName=node-a"})).allowed);
    assert!(
        review(json!({"requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["node-a"]}]}))
            .allowed
    );
    let refused = "can only list/watch pods with spec.nodeName field selector";
    for invalid in [
        json!({"requirements": [{"key": "spec.nodeName", "operator": "NotIn", "values": ["node-a"]}]}),
        json!({"requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["node-a", "node-b"]}]}),
        json!({"requirements": [{"key": "spec.nodeName", "operator": "Exists"}]}),
        json!({"rawSelector": "spec.nodeName=node-b"}),
        json!(null),
    ] {
        let d = review(invalid.clone());
        assert_eq!(
            (d.allowed, d.reason.as_str()),
            (false, refused),
            "{invalid}"
        );
    }
}

/// The static rules compiled in are the `system:node` ClusterRole kube-apiserver 1.36
/// wrote (`shared/reference/authz/rbac-objects.json.gz`), rule for rule.
#[test]
fn the_node_rules_are_the_system_node_cluster_role_of_kube_apiserver() {
    let file = listwatch_testkit::reference("authz/rbac-objects.json.gz");
    let objects: Value = serde_json::from_reader(flate2::read::GzDecoder::new(
        std::fs::File::open(file).expect("rbac objects"),
    ))
    .expect("json");
    let role = objects["clusterroles"]["items"]
        .as_array()
        .or(objects["clusterroles"].as_array())
        .into_iter()
        .flatten()
        .find(|r| r["metadata"]["name"] == "system:node")
        .expect("system:node ClusterRole");
    let captured: Vec<listwatch_auth::rbac::Rule> =
        serde_json::from_value(role["rules"].clone()).expect("rules");
    let sorted = |rules: &[listwatch_auth::rbac::Rule]| {
        let mut rules: Vec<_> = rules
            .iter()
            .cloned()
            .map(|mut r| {
                for v in [&mut r.verbs, &mut r.api_groups, &mut r.resources] {
                    v.sort();
                }
                r
            })
            .collect();
        rules.sort_by_key(|r| format!("{r:?}"));
        rules
    };
    assert_eq!(
        sorted(listwatch_auth::node::node_rules()),
        sorted(&captured)
    );
    assert_eq!(captured.len(), 25);
}

/// The cache of pod edges follows the pods: a pod bound later counts at once.
#[test]
fn a_pod_bound_later_counts_at_once() {
    let registry = Registry::new(builtin_resources(), 1, &StoreConfig::default());
    let source: Arc<EmbeddedSource> = EmbeddedSource::new(registry.clone());
    let authz = ClusterAuthorizer::new(&registry);
    let pods = registry.get("", "v1", "pods").expect("pods");
    let get_secret = Attributes::resource(
        user("node-a"),
        "get",
        registry.get("", "v1", "secrets").expect("secrets").info(),
        Some("ns1"),
        "late",
    );
    assert!(!authz.decide(&get_secret).allowed);
    let pod = json!({"metadata": {"name": "late", "namespace": "ns1"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "s", "secret": {"secretName": "late"}}]}});
    source
        .create(&pods, Some("ns1"), pod.to_string().as_bytes())
        .expect("create");
    assert!(authz.decide(&get_secret).allowed);
}
