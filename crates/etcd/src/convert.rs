//! Storage-version conversions kube-apiserver applies on read that are not relabelling.
//! Today one: CustomResourceDefinitions, which kube-apiserver 1.36 still stores as
//! `apiextensions.k8s.io/v1beta1` JSON and serves as v1 (per-version schema, subresources,
//! printer columns and selectable fields; `JSONPath` → `jsonPath`; webhook conversion
//! settings nested under `webhook`).

use serde_json::{Map, Value};

/// The served JSON for `json` stored under `resource` in `group`, or `None` when it needs
/// no conversion (the common case: no parse, no copy).
pub fn on_read(group: &str, resource: &str, json: &[u8]) -> Option<Vec<u8>> {
    if group != "apiextensions.k8s.io" || resource != "customresourcedefinitions" {
        return None;
    }
    // Cheap check before parsing: v1 values pass through untouched.
    let head = &json[..json.len().min(200)];
    if !head
        .windows(b"apiextensions.k8s.io/v1beta1".len())
        .any(|w| w == b"apiextensions.k8s.io/v1beta1")
    {
        return None;
    }
    let mut crd: Value = serde_json::from_slice(json).ok()?;
    crd_v1beta1_to_v1(&mut crd);
    serde_json::to_vec(&crd).ok()
}

fn rename_jsonpath(columns: &mut Value) {
    for c in columns.as_array_mut().into_iter().flatten() {
        if let Some(obj) = c.as_object_mut()
            && let Some(p) = obj.remove("JSONPath")
        {
            obj.insert("jsonPath".into(), p);
        }
    }
}

/// Converts a v1beta1 CRD object to v1 in place.
pub fn crd_v1beta1_to_v1(crd: &mut Value) {
    if let Some(o) = crd.as_object_mut() {
        o.insert("apiVersion".into(), "apiextensions.k8s.io/v1".into());
    }
    let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let version = spec.remove("version");
    let shared: Vec<(&str, Option<Value>)> = [
        ("schema", spec.remove("validation")),
        ("subresources", spec.remove("subresources")),
        (
            "additionalPrinterColumns",
            spec.remove("additionalPrinterColumns"),
        ),
        ("selectableFields", spec.remove("selectableFields")),
    ]
    .into_iter()
    .collect();
    let versions = spec
        .entry("versions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if versions.as_array().is_some_and(Vec::is_empty)
        && let Some(Value::String(name)) = &version
    {
        *versions = serde_json::json!([{"name": name, "served": true, "storage": true}]);
    }
    for v in versions.as_array_mut().into_iter().flatten() {
        let Some(v) = v.as_object_mut() else { continue };
        for (key, value) in &shared {
            if let Some(value) = value
                && !v.contains_key(*key)
            {
                v.insert((*key).to_string(), value.clone());
            }
        }
        if let Some(cols) = v.get_mut("additionalPrinterColumns") {
            rename_jsonpath(cols);
        }
    }
    // v1's preserveUnknownFields is omitempty: false disappears.
    if spec.get("preserveUnknownFields") == Some(&Value::Bool(false)) {
        spec.remove("preserveUnknownFields");
    }
    if let Some(conv) = spec.get_mut("conversion").and_then(Value::as_object_mut) {
        let client = conv.remove("webhookClientConfig");
        let review = conv.remove("conversionReviewVersions");
        if client.is_some() || review.is_some() {
            let mut webhook = Map::new();
            if let Some(c) = client {
                webhook.insert("clientConfig".into(), c);
            }
            if let Some(r) = review {
                webhook.insert("conversionReviewVersions".into(), r);
            }
            conv.insert("webhook".into(), Value::Object(webhook));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1beta1_crd_reads_as_v1() {
        let stored = br#"{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1","metadata":{"name":"ws.example.com"},"spec":{"group":"example.com","version":"v1","validation":{"openAPIV3Schema":{"type":"object"}},"additionalPrinterColumns":[{"name":"C","type":"string","JSONPath":".spec.c"}],"preserveUnknownFields":false,"conversion":{"strategy":"Webhook","webhookClientConfig":{"url":"https://x"},"conversionReviewVersions":["v1"]}}}"#;
        let out = on_read("apiextensions.k8s.io", "customresourcedefinitions", stored)
            .expect("converted");
        let v: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1");
        let ver = &v["spec"]["versions"][0];
        assert_eq!(ver["name"], "v1");
        assert_eq!(ver["schema"]["openAPIV3Schema"]["type"], "object");
        assert_eq!(ver["additionalPrinterColumns"][0]["jsonPath"], ".spec.c");
        assert!(v["spec"].get("version").is_none());
        assert!(v["spec"].get("preserveUnknownFields").is_none());
        assert_eq!(
            v["spec"]["conversion"]["webhook"]["clientConfig"]["url"],
            "https://x"
        );
        assert!(on_read("", "pods", stored).is_none());
    }
}
