//! The objects a system test applies to a cluster before it reads (`kubectl apply -f -`):
//! namespaces with the `default` service account no controller makes in the test clusters,
//! pods, config maps, secrets, service accounts and the RBAC that grants them reads, built
//! as one `kind: List` so each test names only what is its own.

use serde_json::{Map, Value, json};

/// Who a binding grants to.
#[derive(Clone, Copy, Debug)]
pub enum Subject<'a> {
    /// The service account `name` in `namespace`.
    ServiceAccount {
        /// Its namespace.
        namespace: &'a str,
        /// Its name.
        name: &'a str,
    },
    /// The user `name` (a token-file user, a certificate's common name).
    User(&'a str),
}

impl<'a> Subject<'a> {
    /// The service account `name` in `namespace`.
    pub fn service_account(namespace: &'a str, name: &'a str) -> Subject<'a> {
        Subject::ServiceAccount { namespace, name }
    }

    fn to_json(self) -> Value {
        match self {
            Subject::ServiceAccount { namespace, name } => {
                json!({"kind": "ServiceAccount", "name": name, "namespace": namespace})
            }
            Subject::User(name) => {
                json!({"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"})
            }
        }
    }
}

/// A `kind: List` of objects in the order they are added (a namespace before what is in it).
#[derive(Clone, Debug, Default)]
pub struct Workload {
    items: Vec<Value>,
}

/// `{k: v, …}` of `pairs`.
fn string_map(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), Value::from(*v)))
            .collect::<Map<_, _>>(),
    )
}

/// `metadata` of `name` in `namespace` with `labels` (none: no `labels` member).
fn metadata(namespace: &str, name: &str, labels: &[(&str, &str)]) -> Value {
    let mut m = json!({"name": name, "namespace": namespace});
    if !labels.is_empty() {
        m["labels"] = string_map(labels);
    }
    m
}

impl Workload {
    /// No objects yet.
    pub fn new() -> Workload {
        Workload::default()
    }

    /// Any object, as given.
    pub fn object(mut self, object: Value) -> Workload {
        self.items.push(object);
        self
    }

    /// Namespaces `names`, each with its `default` service account (which admission looks
    /// up for pods, and which no controller makes here).
    pub fn namespaces(mut self, names: &[&str]) -> Workload {
        for name in names {
            self.items
                .push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}));
        }
        for name in names {
            self = self.service_accounts(name, &["default"]);
        }
        self
    }

    /// Service accounts `names` in `namespace`.
    pub fn service_accounts(mut self, namespace: &str, names: &[&str]) -> Workload {
        for name in names {
            self.items
                .push(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": metadata(namespace, name, &[])}));
        }
        self
    }

    /// Pod `name` in `namespace` with `labels`, one container `c` of `image`.
    pub fn pod(
        mut self,
        namespace: &str,
        name: &str,
        labels: &[(&str, &str)],
        image: &str,
    ) -> Workload {
        self.items.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": metadata(namespace, name, labels),
            "spec": {"containers": [{"name": "c", "image": image}]}}));
        self
    }

    /// Pods `names` in `namespace`, unlabelled, each one container `c` of busybox.
    pub fn pods(self, namespace: &str, names: &[&str]) -> Workload {
        names
            .iter()
            .fold(self, |w, name| w.pod(namespace, name, &[], "busybox"))
    }

    /// Config map `name` in `namespace` with `labels` and `data`.
    pub fn config_map(
        mut self,
        namespace: &str,
        name: &str,
        labels: &[(&str, &str)],
        data: &[(&str, &str)],
    ) -> Workload {
        self.items
            .push(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(namespace, name, labels), "data": string_map(data)}));
        self
    }

    /// Secret `name` in `namespace` with `string_data` (none: an empty secret).
    pub fn secret(mut self, namespace: &str, name: &str, string_data: &[(&str, &str)]) -> Workload {
        let mut secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": metadata(namespace, name, &[])});
        if !string_data.is_empty() {
            secret["stringData"] = string_map(string_data);
        }
        self.items.push(secret);
        self
    }

    /// Role `role` in `namespace` allowing `verbs` on the core group's `resources`, and
    /// the RoleBinding `binding` granting it to `subject`.
    pub fn grant(
        mut self,
        namespace: &str,
        (role, binding): (&str, &str),
        resources: &[&str],
        verbs: &[&str],
        subject: Subject<'_>,
    ) -> Workload {
        self.items.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": metadata(namespace, role, &[]),
            "rules": [{"apiGroups": [""], "resources": resources, "verbs": verbs}]}),
        );
        self.items.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": metadata(namespace, binding, &[]),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [subject.to_json()]}),
        );
        self
    }

    /// Role `read` in `namespace` allowing reads (get, list, watch) of the core group's
    /// `resources`, and the RoleBinding `read` granting it to `subject`.
    pub fn grant_reads(
        self,
        namespace: &str,
        resources: &[&str],
        subject: Subject<'_>,
    ) -> Workload {
        let reads = ["get", "list", "watch"];
        self.grant(namespace, ("read", "read"), resources, &reads, subject)
    }

    /// ClusterRoleBinding `name` granting the ClusterRole `cluster_role` to `subject`.
    pub fn cluster_grant(
        mut self,
        name: &str,
        cluster_role: &str,
        subject: Subject<'_>,
    ) -> Workload {
        self.items
            .push(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": cluster_role},
            "subjects": [subject.to_json()]}));
        self
    }

    /// The `kind: List` (JSON, which `kubectl apply -f -` reads as it reads YAML).
    pub fn manifest(&self) -> String {
        json!({"apiVersion": "v1", "kind": "List", "items": self.items}).to_string()
    }
}

/// A CustomResourceDefinition of `kind` (plural `plural`, singular `kind` in lower case,
/// list kind `<kind>List`) in `group`, `scope` `Namespaced` or `Cluster`, with one version
/// `v1`, served and stored, whose objects' `spec` has the OpenAPI schema `spec`.
pub fn custom_resource_definition(
    group: &str,
    scope: &str,
    (kind, plural): (&str, &str),
    spec: Value,
) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": scope,
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}]}})
}

/// The containers of `workload`'s pod template (a Deployment's, a DaemonSet's), as read
/// back from a server (the test fails when it has none).
pub fn template_containers(workload: &Value) -> &[Value] {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap_or_else(|| panic!("no pod template containers in {workload}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_comes_before_its_default_service_account_and_a_grant_is_role_then_binding() {
        let w = Workload::new()
            .namespaces(&["a"])
            .pod("a", "p", &[("app", "web")], "nginx")
            .grant_reads("a", &["pods"], Subject::User("bob"));
        let list: Value = serde_json::from_str(&w.manifest()).expect("JSON");
        assert_eq!(
            crate::member_strings(&list["items"], "kind"),
            ["Namespace", "ServiceAccount", "Pod", "Role", "RoleBinding"]
        );
        assert_eq!(list["items"][2]["metadata"]["labels"]["app"], "web");
        assert_eq!(list["items"][3]["rules"][0]["verbs"][2], "watch");
        assert_eq!(list["items"][4]["subjects"][0]["kind"], "User");
    }
}
