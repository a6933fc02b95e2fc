use listwatch_core::builtin_resources;
use listwatch_protobuf::wire::{FieldReader, Value as Wire};
use serde_json::{Value, json};

use super::*;

fn served(verbs: &[&str]) -> Vec<Served> {
    builtin_resources()
        .into_iter()
        .map(|info| Served {
            info,
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            crd_schema: None,
        })
        .collect()
}

fn v3(docs: &OpenApiDocs, path: &str) -> Value {
    serde_json::from_slice(&docs.v3[path].bytes).expect("v3 JSON")
}

#[test]
fn index_names_each_group_version_by_its_hash() {
    let docs = OpenApiDocs::build(&served(&["get", "list", "watch"]));
    let index: Value = serde_json::from_slice(&docs.v3_index.bytes).expect("JSON");
    let core = &index["paths"]["api/v1"]["serverRelativeURL"];
    assert_eq!(
        core.as_str(),
        Some(format!("/openapi/v3/api/v1?hash={}", docs.v3["api/v1"].hash).as_str())
    );
    assert!(index["paths"]["apis/apps/v1"].is_object());
    assert_eq!(docs.v3["api/v1"].hash.len(), 128);
    // Same input, same bytes and hashes (clients cache by hash).
    let again = OpenApiDocs::build(&served(&["get", "list", "watch"]));
    assert_eq!(again.v3_index.bytes, docs.v3_index.bytes);
    assert_eq!(again.v2_proto.bytes, docs.v2_proto.bytes);
}

#[test]
fn pod_schema_has_kube_types_descriptions_and_markers() {
    let docs = OpenApiDocs::build(&served(&["get", "list", "watch"]));
    let d = v3(&docs, "api/v1");
    let schemas = &d["components"]["schemas"];
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert_eq!(pod["properties"]["kind"]["type"], "string");
    assert_eq!(
        pod["properties"]["spec"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodSpec"
    );
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["type"], "array");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert!(
        containers["description"]
            .as_str()
            .is_some_and(|s| s.contains("containers"))
    );
    let container = &schemas["io.k8s.api.core.v1.Container"];
    assert_eq!(container["required"], json!(["name"]));
    let port = &schemas["io.k8s.api.core.v1.ContainerPort"]["properties"]["containerPort"];
    assert_eq!(port["format"], "int32");
    let ios = &schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
    assert_eq!(ios["format"], "int-or-string");
    assert_eq!(
        schemas["io.k8s.apimachinery.pkg.apis.meta.v1.Time"]["format"],
        "date-time"
    );
    // Read-only verbs: GET paths only, with the list parameters kube lists.
    let list = &d["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"];
    assert_eq!(list["x-kubernetes-action"], "list");
    let names = listwatch_testkit::member_strings(&list["parameters"], "name");
    assert!(names.contains(&"labelSelector") && names.contains(&"sendInitialEvents"));
    assert!(d["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"].is_null());
    assert!(d["paths"]["/api/v1/pods"]["get"].is_object());
}

#[test]
fn writable_operations_never_claim_field_validation() {
    let docs = OpenApiDocs::build(&served(&[
        "create", "delete", "get", "list", "patch", "update", "watch",
    ]));
    let d = v3(&docs, "api/v1");
    let obj = &d["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"];
    for m in ["get", "put", "patch", "delete"] {
        assert_eq!(
            obj[m]["x-kubernetes-group-version-kind"]["kind"], "ConfigMap",
            "{m}"
        );
    }
    assert!(!String::from_utf8_lossy(&docs.v3["api/v1"].bytes).contains("fieldValidation"));
    assert!(!String::from_utf8_lossy(&docs.v2_json.bytes).contains("fieldValidation"));
    let nodes = &d["paths"]["/api/v1/nodes/{name}"]["parameters"];
    assert_eq!(nodes[0]["name"], "name");
}

#[test]
fn every_served_builtin_kind_has_a_described_definition() {
    let docs = OpenApiDocs::build(&served(&["get", "list", "watch"]));
    let v2: Value = serde_json::from_slice(&docs.v2_json.bytes).expect("v2 JSON");
    for r in builtin_resources() {
        let want = json!({"group": r.group, "kind": r.kind, "version": r.version});
        let found = v2["definitions"]
            .as_object()
            .expect("defs")
            .values()
            .find(|d| {
                d["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|a| a.contains(&want))
            });
        let def = found.unwrap_or_else(|| panic!("no definition for {want}"));
        assert!(def["description"].is_string(), "{want}: no description");
    }
}

#[test]
fn custom_resources_take_their_crd_schema() {
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "color": {"type": "string", "description": "The widget's color."},
            "size": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"phase": {"type": "string"}}}}});
    let info = ResourceInfo {
        group: "example.com".into(),
        version: "v1".into(),
        resource: "widgets".into(),
        kind: "Widget".into(),
        namespaced: true,
        ..Default::default()
    }
    .normalized();
    let docs = OpenApiDocs::build(&[Served {
        info,
        verbs: vec!["get".into(), "list".into()],
        crd_schema: Some(schema),
    }]);
    let d = v3(&docs, "apis/example.com/v1");
    let w = &d["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(
        w["properties"]["spec"]["properties"]["color"]["type"],
        "string"
    );
    assert_eq!(
        w["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(
        d["components"]["schemas"]["com.example.v1.WidgetList"]["properties"]["items"].is_object()
    );
    let v2: Value = serde_json::from_slice(&docs.v2_json.bytes).expect("v2 JSON");
    let w2 = &v2["definitions"]["com.example.v1.Widget"];
    // Swagger 2.0 has no anyOf; a preserved object lists no properties there.
    assert!(w2["properties"]["spec"]["properties"]["size"]["anyOf"].is_null());
    assert!(w2["properties"]["status"]["properties"].is_null());
    assert_eq!(
        w2["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
}

/// Reads the protobuf back with the protobuf crate's own wire reader: the document's
/// `swagger` (1) and one `definitions` entry (9) per JSON definition.
#[test]
fn v2_protobuf_carries_the_json_document() {
    let docs = OpenApiDocs::build(&served(&["get", "list", "watch"]));
    let v2: Value = serde_json::from_slice(&docs.v2_json.bytes).expect("v2 JSON");
    let b = &docs.v2_proto.bytes;
    let mut r = FieldReader::new(b, 0, b.len());
    let (mut swagger, mut defs, mut paths) = (String::new(), 0, 0);
    while let Some((tag, v)) = r.next_field().expect("well-formed") {
        match (tag, v) {
            (1, Wire::Len(s, e)) => {
                swagger = String::from_utf8_lossy(&b[s as usize..e as usize]).into()
            }
            (8, Wire::Len(s, e)) => {
                let mut p = FieldReader::new(b, s as usize, e as usize);
                while let Some((t, _)) = p.next_field().expect("paths") {
                    paths += usize::from(t == 2);
                }
            }
            (9, Wire::Len(s, e)) => {
                let mut d = FieldReader::new(b, s as usize, e as usize);
                while let Some((t, _)) = d.next_field().expect("definitions") {
                    defs += usize::from(t == 1);
                }
            }
            _ => {}
        }
    }
    assert_eq!(swagger, "2.0");
    assert_eq!(defs, v2["definitions"].as_object().expect("defs").len());
    assert_eq!(paths, v2["paths"].as_object().expect("paths").len());
    assert_eq!(docs.v2_proto.hash, docs.v2_json.hash);
}
