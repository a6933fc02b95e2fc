//! What the server knows about one resource type: names, scope, selectable fields and the
//! shape of its empty object (used for BOOKMARK events).

use serde::Deserialize;

/// One served resource type (a GroupVersionResource plus what serving it needs).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural lower-case resource name, e.g. `pods`.
    pub resource: String,
    /// Singular lower-case name, e.g. `pod` (discovery).
    #[serde(default)]
    pub singular: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Whether objects live in namespaces.
    #[serde(default = "yes")]
    pub namespaced: bool,
    /// Selectable fields beyond `metadata.name` and `metadata.namespace`, as dotted paths
    /// into the object (e.g. `spec.nodeName`).
    #[serde(default)]
    pub field_selectors: Vec<String>,
    /// Short names for discovery (e.g. `po`).
    #[serde(default)]
    pub short_names: Vec<String>,
    /// JSON members that follow `metadata` in the kind's empty object as Go serializes it
    /// (for Pods: `"spec":{"containers":null},"status":{}`), without a leading comma.
    #[serde(default)]
    pub empty_object_tail: String,
    /// etcd key prefix under which kube-apiserver stores this resource, e.g.
    /// `/registry/pods/`.
    #[serde(default)]
    pub etcd_prefix: String,
}

fn yes() -> bool {
    true
}

impl ResourceInfo {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether `name` is a field selector label this resource supports.
    pub fn supports_field(&self, name: &str) -> bool {
        name == "metadata.name"
            || name == "metadata.namespace"
            || self.field_selectors.iter().any(|f| f == name)
    }

    /// The error kube-apiserver gives for an unsupported field label. Types with a custom
    /// field-label conversion (those with extra selectable fields) say "field label not
    /// supported"; the default conversion lists what is allowed.
    pub fn unsupported_field_message(&self, name: &str) -> String {
        if self.field_selectors.is_empty() {
            format!(
                "{name:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )
        } else {
            format!("field label not supported: {name}")
        }
    }

    /// Fills defaults derived from other fields (singular name, etcd prefix).
    pub fn normalized(mut self) -> Self {
        if self.singular.is_empty() {
            self.singular = self.kind.to_ascii_lowercase();
        }
        if self.etcd_prefix.is_empty() {
            self.etcd_prefix = if self.group.is_empty() {
                format!("/registry/{}/", self.resource)
            } else {
                format!("/registry/{}/{}/", self.group, self.resource)
            };
        }
        self
    }

    /// The store key of an object: `namespace/name`, or `name` for cluster-scoped types.
    pub fn key(&self, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("{namespace}/{name}")
        } else {
            name.to_string()
        }
    }
}

/// Built-in resource definitions for common Kubernetes types.
pub fn builtin_resources() -> Vec<ResourceInfo> {
    struct B {
        group: &'static str,
        resource: &'static str,
        kind: &'static str,
        namespaced: bool,
        fields: &'static [&'static str],
        short: &'static [&'static str],
        tail: &'static str,
        etcd: &'static str,
    }
    const POD_FIELDS: &[&str] = &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    ];
    let table = [
        B {
            group: "",
            resource: "pods",
            kind: "Pod",
            namespaced: true,
            fields: POD_FIELDS,
            short: &["po"],
            tail: r#""spec":{"containers":null},"status":{}"#,
            etcd: "",
        },
        B {
            group: "",
            resource: "configmaps",
            kind: "ConfigMap",
            namespaced: true,
            fields: &[],
            short: &["cm"],
            tail: "",
            etcd: "",
        },
        B {
            group: "",
            resource: "secrets",
            kind: "Secret",
            namespaced: true,
            fields: &["type"],
            short: &[],
            tail: "",
            etcd: "",
        },
        B {
            group: "",
            resource: "services",
            kind: "Service",
            namespaced: true,
            fields: &[],
            short: &["svc"],
            tail: r#""spec":{},"status":{"loadBalancer":{}}"#,
            etcd: "/registry/services/specs/",
        },
        B {
            group: "",
            resource: "endpoints",
            kind: "Endpoints",
            namespaced: true,
            fields: &[],
            short: &["ep"],
            tail: "",
            etcd: "/registry/services/endpoints/",
        },
        B {
            group: "",
            resource: "nodes",
            kind: "Node",
            namespaced: false,
            fields: &["spec.unschedulable"],
            short: &["no"],
            tail: r#""spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}"#,
            etcd: "/registry/minions/",
        },
        B {
            group: "",
            resource: "namespaces",
            kind: "Namespace",
            namespaced: false,
            fields: &["status.phase"],
            short: &["ns"],
            tail: r#""spec":{},"status":{}"#,
            etcd: "",
        },
        B {
            group: "",
            resource: "events",
            kind: "Event",
            namespaced: true,
            fields: &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            short: &["ev"],
            tail: r#""involvedObject":{},"reason":"","message":"","source":{},"firstTimestamp":null,"lastTimestamp":null,"count":0,"type":"","eventTime":null,"reportingComponent":"","reportingInstance":"""#,
            etcd: "",
        },
        B {
            group: "",
            resource: "serviceaccounts",
            kind: "ServiceAccount",
            namespaced: true,
            fields: &[],
            short: &["sa"],
            tail: "",
            etcd: "",
        },
        B {
            group: "apps",
            resource: "deployments",
            kind: "Deployment",
            namespaced: true,
            fields: &[],
            short: &["deploy"],
            tail: r#""spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"strategy":{}},"status":{}"#,
            etcd: "/registry/deployments/",
        },
        B {
            group: "apps",
            resource: "replicasets",
            kind: "ReplicaSet",
            namespaced: true,
            fields: &["status.replicas"],
            short: &["rs"],
            tail: r#""spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}}},"status":{"replicas":0}"#,
            etcd: "/registry/replicasets/",
        },
        B {
            group: "apps",
            resource: "statefulsets",
            kind: "StatefulSet",
            namespaced: true,
            fields: &[],
            short: &["sts"],
            tail: r#""spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"serviceName":"","updateStrategy":{}},"status":{"replicas":0,"availableReplicas":0}"#,
            etcd: "/registry/statefulsets/",
        },
        B {
            group: "apps",
            resource: "daemonsets",
            kind: "DaemonSet",
            namespaced: true,
            fields: &[],
            short: &["ds"],
            tail: r#""spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"updateStrategy":{}},"status":{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}"#,
            etcd: "/registry/daemonsets/",
        },
    ];
    table
        .into_iter()
        .map(|b| {
            ResourceInfo {
                group: b.group.into(),
                version: "v1".into(),
                resource: b.resource.into(),
                singular: String::new(),
                kind: b.kind.into(),
                namespaced: b.namespaced,
                field_selectors: b.fields.iter().map(|s| s.to_string()).collect(),
                short_names: b.short.iter().map(|s| s.to_string()).collect(),
                empty_object_tail: b.tail.into(),
                etcd_prefix: b.etcd.into(),
            }
            .normalized()
        })
        .collect()
}
