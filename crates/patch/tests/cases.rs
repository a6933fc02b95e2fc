//! `apply` end to end on data: the RFC 6902 / RFC 7386 examples (tests/data/rfc.yaml) and
//! what kubectl sends to built-in types (tests/data/kubectl.yaml), down to the status
//! kube-apiserver answers when a patch does not apply.

use listwatch_core::ApiError;
use listwatch_patch::{PatchType, apply};
use serde_json::Value;

fn run(file: &str) -> usize {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("case file is readable");
    let cases: Vec<Value> = serde_yaml::from_str(&text).expect("case file parses");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let kind = match case["type"].as_str().expect("type") {
            "json" => PatchType::Json,
            "merge" => PatchType::Merge,
            "strategic" => PatchType::Strategic,
            other => panic!("{name}: unknown type {other}"),
        };
        let type_of = case["apiVersion"]
            .as_str()
            .map(|av| (av, case["kind"].as_str().expect("kind")));
        let original = serde_json::to_vec(&case["original"]).expect("json");
        let patch = serde_json::to_vec(&case["patch"]).expect("json");
        match (apply(kind, type_of, &original, &patch), case.get("status")) {
            (Ok(got), None) => {
                let got: Value = serde_json::from_slice(&got).expect("result is JSON");
                if got != case["result"] {
                    failures.push(format!("{name}:\n  want {}\n  got  {got}", case["result"]));
                }
            }
            (Err(e), Some(status)) => {
                let api = ApiError::from(e);
                let body = String::from_utf8(api.to_status().body).expect("utf-8");
                if Some(u64::from(api.code())) != status.as_u64() {
                    failures.push(format!("{name}: want {status}, got {body}"));
                }
                if let Some(message) = case.get("message").and_then(Value::as_str) {
                    let got: Value = serde_json::from_str(&body).expect("Status is JSON");
                    if got["message"] != message {
                        failures.push(format!("{name}: want message {message:?}, got {body}"));
                    }
                }
            }
            (Ok(got), Some(status)) => failures.push(format!(
                "{name}: want {status}, got {}",
                String::from_utf8_lossy(&got)
            )),
            (Err(e), None) => failures.push(format!("{name}: unexpected error {e:?}")),
        }
    }
    assert!(failures.is_empty(), "{file}:\n{}", failures.join("\n"));
    cases.len()
}

#[test]
fn rfc_examples() {
    assert!(run("rfc.yaml") >= 40);
}

#[test]
fn what_kubectl_sends() {
    assert!(run("kubectl.yaml") >= 8);
}

fn status(e: listwatch_patch::PatchError) -> String {
    String::from_utf8(ApiError::from(e).to_status().body).expect("utf-8")
}

/// The Status bodies kube-apiserver writes for the answers a patch gets that no other
/// request does.
#[test]
fn statuses_are_kube_apiservers() {
    let cm = Some(("v1", "ConfigMap"));
    let doc = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#;
    // A JSON patch that does not apply: NewGenericServerResponse(422), its text hidden.
    let e = apply(
        PatchType::Json,
        cm,
        doc,
        br#"[{"op":"test","path":"/x","value":1}]"#,
    )
    .expect_err("test fails");
    assert_eq!(e.to_string(), "testing value /x failed: test failed");
    assert_eq!(
        status(e),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server rejected our request due to an error in our request","reason":"Invalid","details":{},"code":422}"#
    );
    // An unknown Content-Type: go-restful's 415 for built-in types, the handler's for CRs.
    let e = PatchType::from_content_type("application/json", true).expect_err("not a patch");
    assert_eq!(
        status(e),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"415: Unsupported Media Type","reason":"UnsupportedMediaType","details":{},"code":415}"#
    );
    let e = apply(PatchType::Strategic, None, doc, b"{}").expect_err("no SMP for CRs");
    assert_eq!(
        status(e),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml","reason":"UnsupportedMediaType","code":415}"#
    );
    // Too many operations: 413.
    let many = format!(
        "[{}]",
        vec![r#"{"op":"test","path":"/kind","value":"ConfigMap"}"#; 10_001].join(",")
    );
    let e = apply(PatchType::Json, cm, doc, many.as_bytes()).expect_err("too many");
    assert_eq!(
        status(e),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001","reason":"RequestEntityTooLarge","code":413}"#
    );
    // Not JSON: 400 with encoding/json's message (and its escaping of `<`).
    let e = apply(PatchType::Strategic, cm, doc, b"<nope>").expect_err("not JSON");
    assert_eq!(
        status(e),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"invalid character '\u003c' looking for beginning of value","reason":"BadRequest","code":400}"#
    );
    // An unclassified strategicpatch error: 500 with no reason.
    let e = apply(PatchType::Strategic, cm, doc, br#"{"$patch":"merge"}"#).expect_err("bad $patch");
    assert_eq!(
        status(e),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"unknown patch type: merge in map: map[$patch:merge]","code":500}"#
    );
    // Content-Type parameters are ignored; apply-patch is recognised and refused with 415.
    assert_eq!(
        PatchType::from_content_type("application/merge-patch+json; charset=utf-8", true).ok(),
        Some(PatchType::Merge)
    );
    let e = apply(PatchType::Apply, cm, doc, b"{}").expect_err("no SSA");
    assert_eq!(ApiError::from(e).code(), 415);
}
