//! What the server knows about one resource type: names, scope, selectable fields and the
//! shape of its empty object (used for BOOKMARK events).

use serde::Deserialize;

/// Where kube-apiserver keeps objects in etcd unless `--etcd-prefix` says otherwise.
pub const DEFAULT_ETCD_ROOT: &str = "/registry";

/// One served resource type (a GroupVersionResource plus what serving it needs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
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
    /// Discovery categories (e.g. `all`, for `kubectl get all`).
    #[serde(default)]
    pub categories: Vec<String>,
    /// Table columns read from the object by JSONPath (a CRD's `additionalPrinterColumns`);
    /// empty for the built-in printers.
    #[serde(default)]
    pub columns: Vec<PrinterColumn>,
    /// JSON members that follow `metadata` in the kind's empty object as Go serializes it
    /// (for Pods: `"spec":{"containers":null},"status":{}`), without a leading comma.
    #[serde(default)]
    pub empty_object_tail: String,
    /// etcd key prefix under which kube-apiserver stores this resource, e.g.
    /// `/registry/pods/`.
    #[serde(default)]
    pub etcd_prefix: String,
    /// Whether a custom resource's CRD version declares `subresources.status`; built-ins
    /// are known by [`BUILTIN_STATUS`].
    #[serde(default)]
    pub status_subresource: bool,
}

/// The built-in resources kube-apiserver 1.36 serves a `status` subresource for
/// (`…/status` in its discovery), by (group, resource).
pub const BUILTIN_STATUS: &[(&str, &str)] = &[
    ("", "namespaces"),
    ("", "nodes"),
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
    ("", "pods"),
    ("", "replicationcontrollers"),
    ("", "resourcequotas"),
    ("", "services"),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("apiregistration.k8s.io", "apiservices"),
    ("apps", "daemonsets"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("autoscaling", "horizontalpodautoscalers"),
    ("batch", "cronjobs"),
    ("batch", "jobs"),
    ("certificates.k8s.io", "certificatesigningrequests"),
    ("flowcontrol.apiserver.k8s.io", "flowschemas"),
    (
        "flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations",
    ),
    ("networking.k8s.io", "ingresses"),
    ("networking.k8s.io", "servicecidrs"),
    ("policy", "poddisruptionbudgets"),
    ("resource.k8s.io", "resourceclaims"),
    ("storage.k8s.io", "volumeattachments"),
];

/// One Table column computed from a simple JSONPath into the object.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: `string`, `integer`, `number`, `boolean` or `date`.
    #[serde(rename = "type")]
    pub type_: String,
    /// OpenAPI format (`name` for the name column).
    #[serde(default)]
    pub format: String,
    /// Column description.
    #[serde(default)]
    pub description: String,
    /// 0 for the default view, higher for `-o wide`.
    #[serde(default)]
    pub priority: i32,
    /// Dotted path into the object, e.g. `.spec.color`.
    pub json_path: String,
}

fn yes() -> bool {
    true
}

impl ResourceInfo {
    /// `configmaps` or `deployments.apps`, as kube-apiserver prints a GroupResource.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

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

    /// Whether objects of this resource have a `status` subresource (`…/status`).
    pub fn has_status_subresource(&self) -> bool {
        self.status_subresource
            || BUILTIN_STATUS.contains(&(self.group.as_str(), self.resource.as_str()))
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

    /// Fills defaults derived from other fields (singular name, etcd prefix under
    /// [`DEFAULT_ETCD_ROOT`]).
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

    /// This resource under another etcd root than kube-apiserver's default `/registry`
    /// (its `--etcd-prefix`): `/registry/pods/` becomes `<root>/pods/`.
    pub fn under_etcd_root(mut self, root: &str) -> Self {
        let root = root.trim_end_matches('/');
        if root != DEFAULT_ETCD_ROOT
            && let Some(rest) = self.etcd_prefix.strip_prefix(DEFAULT_ETCD_ROOT)
        {
            self.etcd_prefix = format!("{root}{rest}");
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

/// The built-in resource with plural name `resource` (the first such, core group before
/// named groups as [`builtin_resources`] lists them), if there is one.
pub fn builtin_resource(resource: &str) -> Option<ResourceInfo> {
    builtin_resources()
        .into_iter()
        .find(|r| r.resource == resource)
}

/// Every resource kube-apiserver 1.36 stores in etcd, in the version it serves by default
/// (`events.k8s.io/v1` events and `autoscaling/v1` HPAs are views of two of them:
/// `listwatch_sources::views`; docs/resources.md).
pub fn builtin_resources() -> Vec<ResourceInfo> {
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
    const EVENT_FIELDS: &[&str] = &[
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
    ];
    #[allow(clippy::too_many_arguments)]
    fn b(
        group: &str,
        version: &str,
        resource: &str,
        kind: &str,
        namespaced: bool,
        fields: &[&str],
        short: &[&str],
        categories: &[&str],
        tail: &str,
        etcd: &str,
    ) -> ResourceInfo {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        ResourceInfo {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            singular: String::new(),
            kind: kind.into(),
            namespaced,
            field_selectors: strings(fields),
            short_names: strings(short),
            categories: strings(categories),
            columns: Vec::new(),
            empty_object_tail: tail.into(),
            etcd_prefix: etcd.into(),
            status_subresource: false,
        }
        .normalized()
    }
    vec![
        b(
            "",
            "v1",
            "configmaps",
            "ConfigMap",
            true,
            &[],
            &["cm"],
            &[],
            r#""#,
            "",
        ),
        b(
            "",
            "v1",
            "endpoints",
            "Endpoints",
            true,
            &[],
            &["ep"],
            &[],
            r#""#,
            "/registry/services/endpoints/",
        ),
        b(
            "",
            "v1",
            "events",
            "Event",
            true,
            EVENT_FIELDS,
            &["ev"],
            &[],
            r#""involvedObject":{},"reason":"","message":"","source":{},"firstTimestamp":null,"lastTimestamp":null,"count":0,"type":"","eventTime":null,"reportingComponent":"","reportingInstance":"""#,
            "",
        ),
        b(
            "",
            "v1",
            "limitranges",
            "LimitRange",
            true,
            &[],
            &["limits"],
            &[],
            r#""#,
            "",
        ),
        b(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            &["status.phase"],
            &["ns"],
            &[],
            r#""spec":{},"status":{}"#,
            "",
        ),
        b(
            "",
            "v1",
            "nodes",
            "Node",
            false,
            &["spec.unschedulable"],
            &["no"],
            &[],
            r#""spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}"#,
            "/registry/minions/",
        ),
        b(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &[],
            &["pvc"],
            &[],
            r#""#,
            "",
        ),
        b(
            "",
            "v1",
            "persistentvolumes",
            "PersistentVolume",
            false,
            &[],
            &["pv"],
            &[],
            r#""#,
            "",
        ),
        b(
            "",
            "v1",
            "pods",
            "Pod",
            true,
            POD_FIELDS,
            &["po"],
            &["all"],
            r#""spec":{"containers":null},"status":{}"#,
            "",
        ),
        b(
            "",
            "v1",
            "podtemplates",
            "PodTemplate",
            true,
            &[],
            &[],
            &[],
            r#""#,
            "",
        ),
        b(
            "",
            "v1",
            "replicationcontrollers",
            "ReplicationController",
            true,
            &["status.replicas"],
            &["rc"],
            &["all"],
            r#""#,
            "/registry/controllers/",
        ),
        b(
            "",
            "v1",
            "resourcequotas",
            "ResourceQuota",
            true,
            &[],
            &["quota"],
            &[],
            r#""#,
            "",
        ),
        b(
            "",
            "v1",
            "secrets",
            "Secret",
            true,
            &["type"],
            &[],
            &[],
            r#""#,
            "",
        ),
        b(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &[],
            &["sa"],
            &[],
            r#""#,
            "",
        ),
        b(
            "",
            "v1",
            "services",
            "Service",
            true,
            &[],
            &["svc"],
            &["all"],
            r#""spec":{},"status":{"loadBalancer":{}}"#,
            "/registry/services/specs/",
        ),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingadmissionpolicies",
            "MutatingAdmissionPolicy",
            false,
            &[],
            &[],
            &["api-extensions"],
            "",
            "/registry/mutatingadmissionpolicies/",
        ),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingadmissionpolicybindings",
            "MutatingAdmissionPolicyBinding",
            false,
            &[],
            &[],
            &["api-extensions"],
            "",
            "/registry/mutatingadmissionpolicybindings/",
        ),
        b(
            "resource.k8s.io",
            "v1",
            "resourceclaimtemplates",
            "ResourceClaimTemplate",
            true,
            &[],
            &[],
            &[],
            "",
            "/registry/resourceclaimtemplates/",
        ),
        b(
            "resource.k8s.io",
            "v1",
            "resourceslices",
            "ResourceSlice",
            false,
            &[],
            &[],
            &[],
            "",
            "/registry/resourceslices/",
        ),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            &[],
            &[],
            &["api-extensions"],
            r#""#,
            "/registry/mutatingwebhookconfigurations/",
        ),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            false,
            &[],
            &[],
            &["api-extensions"],
            r#""#,
            "/registry/validatingadmissionpolicies/",
        ),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            false,
            &[],
            &[],
            &["api-extensions"],
            r#""#,
            "/registry/validatingadmissionpolicybindings/",
        ),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            &[],
            &[],
            &["api-extensions"],
            r#""#,
            "/registry/validatingwebhookconfigurations/",
        ),
        b(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &[],
            &["crd", "crds"],
            &["api-extensions"],
            r#""#,
            "",
        ),
        b(
            "apiregistration.k8s.io",
            "v1",
            "apiservices",
            "APIService",
            false,
            &[],
            &[],
            &["api-extensions"],
            r#""#,
            "",
        ),
        b(
            "apps",
            "v1",
            "controllerrevisions",
            "ControllerRevision",
            true,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/controllerrevisions/",
        ),
        b(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            true,
            &[],
            &["ds"],
            &["all"],
            r#""spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"updateStrategy":{}},"status":{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}"#,
            "/registry/daemonsets/",
        ),
        b(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            &[],
            &["deploy"],
            &["all"],
            r#""spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"strategy":{}},"status":{}"#,
            "/registry/deployments/",
        ),
        b(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            true,
            &["status.replicas"],
            &["rs"],
            &["all"],
            r#""spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}}},"status":{"replicas":0}"#,
            "/registry/replicasets/",
        ),
        b(
            "apps",
            "v1",
            "statefulsets",
            "StatefulSet",
            true,
            &[],
            &["sts"],
            &["all"],
            r#""spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"serviceName":"","updateStrategy":{}},"status":{"replicas":0,"availableReplicas":0}"#,
            "/registry/statefulsets/",
        ),
        b(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            true,
            &[],
            &["hpa"],
            &["all"],
            r#""#,
            "/registry/horizontalpodautoscalers/",
        ),
        b(
            "batch",
            "v1",
            "cronjobs",
            "CronJob",
            true,
            &[],
            &["cj"],
            &["all"],
            r#""#,
            "/registry/cronjobs/",
        ),
        b(
            "batch",
            "v1",
            "jobs",
            "Job",
            true,
            &["status.successful"],
            &[],
            &["all"],
            r#""#,
            "/registry/jobs/",
        ),
        b(
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
            "CertificateSigningRequest",
            false,
            &["spec.signerName"],
            &["csr"],
            &[],
            r#""#,
            "/registry/certificatesigningrequests/",
        ),
        b(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/leases/",
        ),
        b(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/endpointslices/",
        ),
        b(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "flowschemas",
            "FlowSchema",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/flowschemas/",
        ),
        b(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "prioritylevelconfigurations",
            "PriorityLevelConfiguration",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/prioritylevelconfigurations/",
        ),
        b(
            "networking.k8s.io",
            "v1",
            "ingressclasses",
            "IngressClass",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/ingressclasses/",
        ),
        b(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "Ingress",
            true,
            &[],
            &["ing"],
            &[],
            r#""#,
            "/registry/ingress/",
        ),
        b(
            "networking.k8s.io",
            "v1",
            "ipaddresses",
            "IPAddress",
            false,
            &[],
            &["ip"],
            &[],
            r#""#,
            "/registry/ipaddresses/",
        ),
        b(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
            &[],
            &["netpol"],
            &[],
            r#""#,
            "/registry/networkpolicies/",
        ),
        b(
            "networking.k8s.io",
            "v1",
            "servicecidrs",
            "ServiceCIDR",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/servicecidrs/",
        ),
        b(
            "node.k8s.io",
            "v1",
            "runtimeclasses",
            "RuntimeClass",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/runtimeclasses/",
        ),
        b(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &[],
            &["pdb"],
            &[],
            r#""#,
            "/registry/poddisruptionbudgets/",
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/clusterrolebindings/",
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/clusterroles/",
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/rolebindings/",
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            "Role",
            true,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/roles/",
        ),
        b(
            "resource.k8s.io",
            "v1",
            "deviceclasses",
            "DeviceClass",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/deviceclasses/",
        ),
        b(
            "resource.k8s.io",
            "v1",
            "resourceclaims",
            "ResourceClaim",
            true,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/resourceclaims/",
        ),
        b(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            false,
            &[],
            &["pc"],
            &[],
            r#""#,
            "/registry/priorityclasses/",
        ),
        b(
            "storage.k8s.io",
            "v1",
            "csidrivers",
            "CSIDriver",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/csidrivers/",
        ),
        b(
            "storage.k8s.io",
            "v1",
            "csinodes",
            "CSINode",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/csinodes/",
        ),
        b(
            "storage.k8s.io",
            "v1",
            "csistoragecapacities",
            "CSIStorageCapacity",
            true,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/csistoragecapacities/",
        ),
        b(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "StorageClass",
            false,
            &[],
            &["sc"],
            &[],
            r#""#,
            "/registry/storageclasses/",
        ),
        b(
            "storage.k8s.io",
            "v1",
            "volumeattachments",
            "VolumeAttachment",
            false,
            &[],
            &[],
            &[],
            r#""#,
            "/registry/volumeattachments/",
        ),
        b(
            "storage.k8s.io",
            "v1",
            "volumeattributesclasses",
            "VolumeAttributesClass",
            false,
            &[],
            &["vac"],
            &[],
            r#""#,
            "/registry/volumeattributesclasses/",
        ),
    ]
}
