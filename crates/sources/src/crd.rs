//! What a CustomResourceDefinition serves: one [`ResourceInfo`] per served version, with
//! its scope, names, categories, selectable fields and printer columns, once the CRD is
//! `Established` (kube-apiserver serves nothing before that).

use std::time::Duration;

use listwatch_core::{PrinterColumn, ResourceInfo};
use serde::Deserialize;
use serde_json::{Value, json};

/// How long the watches of a custom resource that is no longer served may drain.
pub const DRAIN: Duration = Duration::from_secs(5);

#[derive(Deserialize)]
struct Crd {
    spec: Spec,
    #[serde(default)]
    status: Status,
}

#[derive(Deserialize)]
struct Spec {
    group: String,
    names: Names,
    scope: String,
    #[serde(default)]
    versions: Vec<Version>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Names {
    plural: String,
    #[serde(default)]
    singular: String,
    kind: String,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Version {
    name: String,
    served: bool,
    #[serde(default)]
    additional_printer_columns: Vec<Column>,
    #[serde(default)]
    selectable_fields: Vec<SelectableField>,
    #[serde(default)]
    subresources: Subresources,
}

#[derive(Deserialize, Default)]
struct Subresources {
    #[serde(default)]
    status: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Column {
    name: String,
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    format: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    priority: i32,
    json_path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SelectableField {
    json_path: String,
}

#[derive(Deserialize, Default)]
struct Status {
    #[serde(default)]
    conditions: Vec<Condition>,
}

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

/// The resources a CRD object (v1 JSON) serves; empty when it is not established or does
/// not parse.
pub fn served_resources(crd_json: &[u8]) -> Vec<ResourceInfo> {
    let Ok(crd) = serde_json::from_slice::<Crd>(crd_json) else {
        return Vec::new();
    };
    let established = crd
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    if !established {
        return Vec::new();
    }
    let s = &crd.spec;
    s.versions
        .iter()
        .filter(|v| v.served)
        .map(|v| {
            // kube-apiserver's CRD tables: Name first, then the version's columns, or Age
            // (a `date` column) for a version without columns of its own; a column without
            // a description is described by its JSONPath.
            let mut columns = vec![PrinterColumn {
                name: "Name".into(),
                type_: "string".into(),
                format: "name".into(),
                description: NAME_DESCRIPTION.into(),
                priority: 0,
                json_path: ".metadata.name".into(),
            }];
            if v.additional_printer_columns.is_empty() {
                columns.push(PrinterColumn {
                    name: "Age".into(),
                    type_: "date".into(),
                    format: String::new(),
                    description: CREATION_TIMESTAMP_DESCRIPTION.into(),
                    priority: 0,
                    json_path: ".metadata.creationTimestamp".into(),
                });
            }
            for c in &v.additional_printer_columns {
                columns.push(PrinterColumn {
                    name: c.name.clone(),
                    type_: c.type_.clone(),
                    format: c.format.clone(),
                    description: if c.description.is_empty() {
                        format!(
                            "Custom resource definition column (in JSONPath format): {}",
                            c.json_path
                        )
                    } else {
                        c.description.clone()
                    },
                    priority: c.priority,
                    json_path: c.json_path.clone(),
                });
            }
            ResourceInfo {
                group: s.group.clone(),
                version: v.name.clone(),
                resource: s.names.plural.clone(),
                singular: s.names.singular.clone(),
                kind: s.names.kind.clone(),
                namespaced: s.scope == "Namespaced",
                field_selectors: v
                    .selectable_fields
                    .iter()
                    .map(|f| f.json_path.trim_start_matches('.').to_string())
                    .collect(),
                short_names: s.names.short_names.clone(),
                categories: s.names.categories.clone(),
                columns,
                empty_object_tail: String::new(),
                etcd_prefix: format!("/registry/{}/{}/", s.group, s.names.plural),
                status_subresource: v.subresources.status.is_some(),
            }
            .normalized()
        })
        .collect()
}

/// A served resource by (group, version, resource).
pub type Key = (String, String, String);

/// Every resource the established CRDs in `crds` serve, by key.
pub fn served_by(
    crds: &listwatch_store::Snapshot,
) -> std::collections::BTreeMap<Key, ResourceInfo> {
    crds.items()
        .values()
        .flat_map(|r| served_resources(r.bytes()))
        .map(|i| ((i.group.clone(), i.version.clone(), i.resource.clone()), i))
        .collect()
}

/// Retires the custom resource `key` in `registry`: 404 from now on, its open watches
/// drained over [`DRAIN`].
pub fn retire(registry: &crate::Registry, key: &Key) {
    if let Some(store) = registry.get(&key.0, &key.1, &key.2) {
        store.retire(DRAIN);
    }
    tracing::info!(group = %key.0, version = %key.1, resource = %key.2, "custom resource no longer served");
}

/// `crd` (v1 JSON) with the status kube-apiserver's CRD controllers give it once its names
/// are accepted and it is established (`NamingConditionController`,
/// `EstablishingController`): `acceptedNames` from `spec.names`, `NamesAccepted` and
/// `Established` true, its storage version in `storedVersions`. For stores that run no
/// controllers (the embedded one); conditions already true keep their transition time.
pub fn established(crd: &[u8], now: &str) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(crd).ok()?;
    let names = v.get("spec")?.get("names")?.clone();
    let kind = names.get("kind")?.as_str()?.to_string();
    let mut accepted = names.as_object()?.clone();
    accepted
        .entry("singular")
        .or_insert_with(|| Value::String(kind.to_lowercase()));
    accepted
        .entry("listKind")
        .or_insert_with(|| Value::String(format!("{kind}List")));
    let storage: Vec<Value> = v["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|x| x["storage"] == json!(true))
                .map(|x| x["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    if !v.get("status").is_some_and(Value::is_object) {
        v["status"] = json!({});
    }
    let status = v["status"].as_object_mut()?;
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (type_, reason, message) in [
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        (
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ] {
        let true_now = conditions
            .iter()
            .any(|c| c["type"] == type_ && c["status"] == "True");
        if !true_now {
            conditions.retain(|c| c["type"] != type_);
            conditions.push(json!({
                "type": type_,
                "status": "True",
                "lastTransitionTime": now,
                "reason": reason,
                "message": message,
            }));
        }
    }
    let mut stored: Vec<Value> = status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for s in storage {
        if !stored.contains(&s) {
            stored.push(s);
        }
    }
    status.insert("acceptedNames".into(), Value::Object(accepted));
    status.insert("conditions".into(), Value::Array(conditions));
    status.insert("storedVersions".into(), Value::Array(stored));
    serde_json::to_vec(&v).ok()
}

/// The schema defaults of one CRD, by version: what kube-apiserver applies to a custom
/// resource when it decodes the stored object (its storage codec's defaulter runs the
/// structural defaulting of the schema of the object's own stored `apiVersion`), so an
/// object stored before a default was added to the schema is served with it. Each
/// version's schema is reduced to the branches that hold a `default`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadDefaults {
    by_version: std::collections::BTreeMap<String, DefaultNode>,
}

/// A schema node on the way to a default: its own `default` (with `nullable`), and the
/// nodes under it that hold one.
#[derive(Clone, Debug, Default, PartialEq)]
struct DefaultNode {
    default: Option<Value>,
    nullable: bool,
    properties: std::collections::BTreeMap<String, DefaultNode>,
    items: Option<Box<DefaultNode>>,
    additional: Option<Box<DefaultNode>>,
}

impl DefaultNode {
    /// The defaults under `schema` (an OpenAPI v3 schema of a structural CRD); `None` when
    /// it holds none.
    fn reduce(schema: &Value) -> Option<DefaultNode> {
        let properties: std::collections::BTreeMap<String, DefaultNode> = schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, s)| Some((k.clone(), DefaultNode::reduce(s)?)))
            .collect();
        let items = schema
            .get("items")
            .filter(|s| s.is_object())
            .and_then(DefaultNode::reduce)
            .map(Box::new);
        let additional = schema
            .get("additionalProperties")
            .filter(|s| s.is_object())
            .and_then(DefaultNode::reduce)
            .map(Box::new);
        // A `default: null` is no default (Go's `Default.Object == nil`).
        let default = schema.get("default").filter(|d| !d.is_null()).cloned();
        if default.is_none() && properties.is_empty() && items.is_none() && additional.is_none() {
            return None;
        }
        Some(DefaultNode {
            default,
            nullable: schema["nullable"] == json!(true),
            properties,
            items,
            additional,
        })
    }

    /// A null where this node does not allow one, replaced by its default.
    fn fill_null(&self, x: &mut Value) -> bool {
        match &self.default {
            Some(d) if x.is_null() && !self.nullable => {
                *x = d.clone();
                true
            }
            _ => false,
        }
    }

    /// Applies the defaults to `x` in place as apiextensions' structural defaulting does:
    /// an absent member (or a null one its schema does not allow) gets its property's
    /// default, then every member, item and additional property is defaulted in turn
    /// (defaults put in included). Whether anything changed.
    fn apply(&self, x: &mut Value) -> bool {
        let mut changed = false;
        match x {
            Value::Object(members) => {
                for (k, p) in &self.properties {
                    let Some(d) = &p.default else { continue };
                    let absent = !members.contains_key(k);
                    let null_not_allowed =
                        members.get(k).is_some_and(Value::is_null) && !p.nullable;
                    if absent || null_not_allowed {
                        members.insert(k.clone(), d.clone());
                        changed = true;
                    }
                }
                for (k, v) in members.iter_mut() {
                    if let Some(p) = self.properties.get(k) {
                        changed |= p.apply(v);
                    } else if let Some(a) = &self.additional {
                        changed |= a.fill_null(v);
                        changed |= a.apply(v);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(i) = &self.items {
                    for v in items {
                        changed |= i.fill_null(v);
                        changed |= i.apply(v);
                    }
                }
            }
            _ => {}
        }
        changed
    }
}

impl ReadDefaults {
    /// The defaults of a CRD object (v1 JSON); `None` when no version's schema has one.
    pub fn of_crd(crd_json: &[u8]) -> Option<ReadDefaults> {
        let crd: Value = serde_json::from_slice(crd_json).ok()?;
        let by_version: std::collections::BTreeMap<String, DefaultNode> = crd["spec"]["versions"]
            .as_array()?
            .iter()
            .filter_map(|v| {
                let node = DefaultNode::reduce(&v["schema"]["openAPIV3Schema"])?;
                Some((v["name"].as_str()?.to_string(), node))
            })
            .collect();
        (!by_version.is_empty()).then_some(ReadDefaults { by_version })
    }

    /// `object` (a stored custom resource's JSON) with the defaults of its own
    /// `apiVersion`'s schema applied; `None` when none applies (the bytes stay as they are).
    /// Written as Go's `encoding/json` writes the unstructured object: members sorted,
    /// strings escaped as Go escapes them.
    pub fn apply(&self, object: &[u8]) -> Option<Vec<u8>> {
        let mut x: Value = serde_json::from_slice(object).ok()?;
        let version = x["apiVersion"].as_str()?.rsplit('/').next()?.to_string();
        let node = self.by_version.get(&version)?;
        if !node.apply(&mut x) {
            return None;
        }
        let mut out = Vec::with_capacity(object.len() + 64);
        // Go's `map[string]interface{}` tree: members sorted.
        listwatch_core::json::push_go_value(
            &mut out,
            &x,
            listwatch_core::json::MemberOrder::Sorted,
        );
        Some(out)
    }
}

/// Every established CRD's [`ReadDefaults`], by (group, plural).
pub fn read_defaults_by(
    crds: &listwatch_store::Snapshot,
) -> std::collections::BTreeMap<(String, String), ReadDefaults> {
    crds.items()
        .values()
        .filter(|r| !served_resources(r.bytes()).is_empty())
        .filter_map(|r| {
            let crd: Value = serde_json::from_slice(r.bytes()).ok()?;
            let group = crd["spec"]["group"].as_str()?.to_string();
            let plural = crd["spec"]["names"]["plural"].as_str()?.to_string();
            Some(((group, plural), ReadDefaults::of_crd(r.bytes())?))
        })
        .collect()
}

/// kube-apiserver's description of a CRD's default Age column (`metadata.creationTimestamp`).
pub const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// kube-apiserver's description of the Name column.
pub const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_crd_serves_each_served_version() {
        let crd = br#"{"spec":{"group":"example.com","names":{"plural":"widgets","singular":"widget","kind":"Widget","shortNames":["wd"],"categories":["all"]},"scope":"Namespaced","versions":[
            {"name":"v1","served":true,"storage":true,"additionalPrinterColumns":[{"name":"Color","type":"string","jsonPath":".spec.color"}],"selectableFields":[{"jsonPath":".spec.color"}]},
            {"name":"v1alpha1","served":false,"storage":false}]},
            "status":{"conditions":[{"type":"Established","status":"True"}]}}"#;
        let r = served_resources(crd);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].etcd_prefix, "/registry/example.com/widgets/");
        assert_eq!(r[0].field_selectors, vec!["spec.color".to_string()]);
        assert_eq!(r[0].columns.len(), 2);
        assert!(r[0].supports_field("spec.color"));
        let not_yet = String::from_utf8_lossy(crd).replace("\"True\"", "\"False\"");
        assert!(served_resources(not_yet.as_bytes()).is_empty());
        assert!(!r[0].status_subresource);
    }

    #[test]
    fn stored_objects_get_the_defaults_of_their_own_version_s_schema() {
        let crd = br#"{"spec":{"versions":[
            {"name":"v1","schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{
                "mode":{"type":"string","default":"standard"},
                "note":{"type":"string","nullable":true,"default":"n"},
                "size":{"type":"integer"},
                "nested":{"type":"object","default":{},"properties":{"depth":{"type":"integer","default":2}}},
                "ports":{"type":"array","items":{"type":"object","properties":{"protocol":{"type":"string","default":"TCP"}}}},
                "limits":{"type":"object","additionalProperties":{"type":"string","default":"1"}}}}}}}},
            {"name":"v2","schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"mode":{"type":"string","default":"v2"}}}}}}},
            {"name":"v3","schema":{"openAPIV3Schema":{"type":"object"}}}]}}"#;
        let d = ReadDefaults::of_crd(crd).expect("defaults");
        let got = d
            .apply(br#"{"apiVersion":"example.com/v1","kind":"W","metadata":{"name":"a"},"spec":{"note":null,"size":3,"ports":[{"port":80},{"protocol":"UDP"}],"limits":{"cpu":null,"mem":"2"},"text":"<&>"}}"#)
            .expect("defaulted");
        let want = r#"{"apiVersion":"example.com/v1","kind":"W","metadata":{"name":"a"},"spec":{"limits":{"cpu":"1","mem":"2"},"mode":"standard","nested":{"depth":2},"note":null,"ports":[{"port":80,"protocol":"TCP"},{"protocol":"UDP"}],"size":3,"text":"\u003c\u0026\u003e"}}"#;
        assert_eq!(String::from_utf8_lossy(&got), want);
        // An object stored in another version gets that version's defaults; nothing to
        // add leaves the bytes alone.
        let v2 = d
            .apply(br#"{"apiVersion":"example.com/v2","metadata":{},"spec":{}}"#)
            .expect("defaulted");
        assert_eq!(
            v2,
            br#"{"apiVersion":"example.com/v2","metadata":{},"spec":{"mode":"v2"}}"#
        );
        assert!(
            d.apply(br#"{"apiVersion":"example.com/v2","spec":{"mode":"x"}}"#)
                .is_none()
        );
        assert!(
            d.apply(br#"{"apiVersion":"example.com/v3","spec":{}}"#)
                .is_none()
        );
        assert!(ReadDefaults::of_crd(br#"{"spec":{"versions":[{"name":"v1","schema":{"openAPIV3Schema":{"type":"object"}}}]}}"#).is_none());
    }

    #[test]
    fn a_written_crd_is_established_as_kube_s_controllers_would() {
        let crd = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},"spec":{"group":"example.com","names":{"plural":"widgets","kind":"Widget"},"scope":"Cluster","versions":[
            {"name":"v1","served":true,"storage":true,"subresources":{"status":{}}}]}}"#;
        assert!(served_resources(crd).is_empty(), "not established yet");
        let done = established(crd, "2026-11-25T00:00:00Z").expect("a CRD");
        let served = served_resources(&done);
        assert_eq!(served.len(), 1);
        assert!(served[0].status_subresource);
        assert!(!served[0].namespaced);
        let v: Value = serde_json::from_slice(&done).unwrap();
        assert_eq!(v["status"]["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(v["status"]["acceptedNames"]["singular"], "widget");
        assert_eq!(v["status"]["storedVersions"], json!(["v1"]));
        // Applied again (an update), the transition times stay.
        let again = established(&done, "2030-01-01T00:00:00Z").unwrap();
        let w: Value = serde_json::from_slice(&again).unwrap();
        assert_eq!(w["status"]["conditions"], v["status"]["conditions"]);
    }
}
