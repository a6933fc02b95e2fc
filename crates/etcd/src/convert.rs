//! What kube-apiserver does to a stored object on read beyond relabelling: one conversion —
//! CustomResourceDefinitions, which kube-apiserver 1.36 still stores as
//! `apiextensions.k8s.io/v1beta1` JSON and serves as v1 (per-version schema, subresources,
//! printer columns and selectable fields; `JSONPath` → `jsonPath`; webhook conversion
//! settings nested under `webhook`) — and the built-in defaulters whose result differs
//! from what was stored ([`builtin_defaults_on_read`]).

use listwatch_core::scan;
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

/// kube-apiserver's defaulters that give a stored built-in object something it did not
/// have when it was written, since kube-apiserver runs them again whenever it decodes what
/// etcd holds. The one that matters for objects kube-apiserver 1.36 itself wrote: a Job's
/// `metadata.labels` default to its pod template's labels (`SetDefaults_Job`), and a Job
/// created without labels gets its template's labels only after the request's defaulting
/// ran (the Job strategy adds `controller-uid` and `job-name` to the template on create),
/// so it is stored without labels and served with them. `None`: nothing to change.
pub fn builtin_defaults_on_read(group: &str, resource: &str, json: &[u8]) -> Option<Vec<u8>> {
    if group != "batch" || resource != "jobs" {
        return None;
    }
    let start = scan::skip_ws(json, 0);
    let template = scan::find_path(json, start, &["spec", "template", "metadata", "labels"])?;
    let mut template_has_labels = false;
    scan::for_each_member(json, template.0, |_| template_has_labels = true)?;
    if !template_has_labels {
        return None;
    }
    let metadata = scan::find_member(json, start, "metadata")?;
    let (at, replace_to) = match scan::find_member(json, metadata.0, "labels") {
        Some(labels) => {
            let mut has = false;
            scan::for_each_member(json, labels.0, |_| has = true)?;
            if has {
                return None;
            }
            (labels.0, Some(labels.1))
        }
        None => (metadata.0 + 1, None),
    };
    let mut out = Vec::with_capacity(json.len() + template.1 - template.0 + 12);
    out.extend_from_slice(&json[..at]);
    match replace_to {
        Some(end) => {
            out.extend_from_slice(&json[template.0..template.1]);
            out.extend_from_slice(&json[end..]);
        }
        None => {
            out.extend_from_slice(b"\"labels\":");
            out.extend_from_slice(&json[template.0..template.1]);
            let rest = scan::skip_ws(json, at);
            if json.get(rest) != Some(&b'}') {
                out.push(b',');
            }
            out.extend_from_slice(&json[at..]);
        }
    }
    Some(out)
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
    fn a_job_stored_without_labels_gets_its_template_s() {
        let job = br#"{"kind":"Job","metadata":{"name":"j","namespace":"n"},"spec":{"template":{"metadata":{"labels":{"job-name":"j"}}}}}"#;
        let got = builtin_defaults_on_read("batch", "jobs", job).expect("defaulted");
        assert_eq!(
            String::from_utf8_lossy(&got),
            r#"{"kind":"Job","metadata":{"labels":{"job-name":"j"},"name":"j","namespace":"n"},"spec":{"template":{"metadata":{"labels":{"job-name":"j"}}}}}"#
        );
        let empty_labels =
            br#"{"metadata":{"labels":{}},"spec":{"template":{"metadata":{"labels":{"a":"b"}}}}}"#;
        let got = builtin_defaults_on_read("batch", "jobs", empty_labels).expect("defaulted");
        assert_eq!(
            String::from_utf8_lossy(&got),
            r#"{"metadata":{"labels":{"a":"b"}},"spec":{"template":{"metadata":{"labels":{"a":"b"}}}}}"#
        );
        let empty_metadata =
            br#"{"metadata":{},"spec":{"template":{"metadata":{"labels":{"a":"b"}}}}}"#;
        let got = builtin_defaults_on_read("batch", "jobs", empty_metadata).expect("defaulted");
        assert!(got.starts_with(br#"{"metadata":{"labels":{"a":"b"}},"#));
        // Labels of its own, a template without labels, another kind: as stored.
        let own = br#"{"metadata":{"labels":{"x":"y"}},"spec":{"template":{"metadata":{"labels":{"a":"b"}}}}}"#;
        assert!(builtin_defaults_on_read("batch", "jobs", own).is_none());
        let bare = br#"{"metadata":{},"spec":{"template":{"metadata":{"labels":{}}}}}"#;
        assert!(builtin_defaults_on_read("batch", "jobs", bare).is_none());
        assert!(builtin_defaults_on_read("batch", "cronjobs", job).is_none());
    }

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
