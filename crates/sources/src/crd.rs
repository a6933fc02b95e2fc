//! What a CustomResourceDefinition serves: one [`ResourceInfo`] per served version, with
//! its scope, names, categories, selectable fields and printer columns, once the CRD is
//! `Established` (kube-apiserver serves nothing before that).

use listwatch_core::{PrinterColumn, ResourceInfo};
use serde::Deserialize;

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
            let mut columns = Vec::new();
            if !v.additional_printer_columns.is_empty() {
                // kube-apiserver's CRD tables: Name first, the CRD's columns, and Age
                // unless the CRD has a creationTimestamp column of its own.
                columns.push(PrinterColumn {
                    name: "Name".into(),
                    type_: "string".into(),
                    format: "name".into(),
                    description: NAME_DESCRIPTION.into(),
                    priority: 0,
                    json_path: ".metadata.name".into(),
                });
                for c in &v.additional_printer_columns {
                    columns.push(PrinterColumn {
                        name: c.name.clone(),
                        type_: c.type_.clone(),
                        format: c.format.clone(),
                        description: c.description.clone(),
                        priority: c.priority,
                        json_path: c.json_path.clone(),
                    });
                }
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
            }
            .normalized()
        })
        .collect()
}

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
    }
}
