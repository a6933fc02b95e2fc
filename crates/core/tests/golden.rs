//! Golden tests: every Status the option parser can produce for a request in
//! shared/reference/ must equal kube-apiserver 1.36's body byte for byte.

use listwatch_core::{ApiError, ListOptions, ObjectRef, builtin_resource};

fn info(resource: &str) -> listwatch_core::ResourceInfo {
    builtin_resource(resource).expect("builtin")
}

fn body(e: &ApiError) -> String {
    String::from_utf8(e.to_status().body).expect("utf8")
}

/// (resource, query, status code, exact body) as captured from kube-apiserver.
const CASES: &[(&str, &str, u16, &str)] = &[
    (
        "configmaps",
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        422,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]","reason":"Invalid","details":{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden","message":"Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided","field":"resourceVersionMatch"},{"reason":"FieldValueForbidden","message":"Forbidden: sendInitialEvents is forbidden for list","field":"sendInitialEvents"}]},"code":422}"#,
    ),
    (
        "configmaps",
        "resourceVersionMatch=Exact",
        422,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided","reason":"Invalid","details":{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden","message":"Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided","field":"resourceVersionMatch"}]},"code":422}"#,
    ),
    (
        "configmaps",
        "watch=true&limit=1&resourceVersion=1&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&continue=abc",
        422,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided","reason":"Invalid","details":{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden","message":"Forbidden: resourceVersionMatch is forbidden when continue is provided","field":"resourceVersionMatch"}]},"code":422}"#,
    ),
    (
        "configmaps",
        "limit=1&continue=not-a-valid-token",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"invalid continue token: continue key is not valid: illegal base64 data at input byte 16","reason":"BadRequest","code":400}"#,
    ),
    (
        "configmaps",
        "limit=1&continue=eyJ2IjoieCJ9",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"invalid continue token: continue key is not valid: server does not recognize this encoded version x","reason":"BadRequest","code":400}"#,
    ),
    (
        "configmaps",
        "limit=1&resourceVersion=5&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NzAsInN0YXJ0IjoiL2RlZmF1bHQvYW5jaG9yLWNtXHUwMDAwIn0",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"specifying resource version is not allowed when using continue","reason":"BadRequest","code":400}"#,
    ),
    (
        "configmaps",
        "labelSelector=a%20b%20c",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt","reason":"BadRequest","code":400}"#,
    ),
    (
        "configmaps",
        "labelSelector=app%3D%21%21%21",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"unable to parse requirement: found '!', expected: identifier","reason":"BadRequest","code":400}"#,
    ),
    (
        "configmaps",
        "fieldSelector=data.k%3Dv",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"","reason":"BadRequest","code":400}"#,
    ),
    (
        "pods",
        "fieldSelector=spec.foo%3Dbar",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"field label not supported: spec.foo","reason":"BadRequest","code":400}"#,
    ),
    (
        "configmaps",
        "resourceVersion=abc",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"invalid resource version: resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax","reason":"BadRequest","code":400}"#,
    ),
    (
        "configmaps",
        "timeoutSeconds=abc",
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"strconv.ParseInt: parsing \"abc\": invalid syntax","reason":"BadRequest","code":400}"#,
    ),
];

#[test]
fn option_errors_match_kube_apiserver() {
    for (resource, query, code, want) in CASES {
        let err = ListOptions::parse(query, &info(resource), None).expect_err(query);
        assert_eq!(err.code(), *code, "{query}");
        assert_eq!(body(&err), *want, "{query}");
    }
}

#[test]
fn object_errors_match_kube_apiserver() {
    let cm = info("configmaps");
    let cases = [
        (
            ApiError::NotFound(ObjectRef::new(&cm, "does-not-exist")),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"does-not-exist\" not found","reason":"NotFound","details":{"name":"does-not-exist","kind":"configmaps"},"code":404}"#,
        ),
        (
            ApiError::AlreadyExists(ObjectRef::new(&cm, "anchor-cm")),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"anchor-cm\" already exists","reason":"AlreadyExists","details":{"name":"anchor-cm","kind":"configmaps"},"code":409}"#,
        ),
        (
            ApiError::Conflict(ObjectRef::new(&cm, "anchor-cm")),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on configmaps \"anchor-cm\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"anchor-cm","kind":"configmaps"},"code":409}"#,
        ),
        (
            ApiError::UnknownPath,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#,
        ),
        (
            ApiError::Expired(listwatch_core::status::LIST_TOO_OLD_MESSAGE.into()),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"The resourceVersion for the provided list is too old.","reason":"Expired","code":410}"#,
        ),
        (
            ApiError::Expired("too old resource version: 1 (92)".into()),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (92)","reason":"Expired","code":410}"#,
        ),
        (
            ApiError::ResourceVersionTooLarge {
                requested: 999999999,
                current: 80,
            },
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 999999999, current: 80","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#,
        ),
        (
            ApiError::ContinueExpired {
                inconsistent_token: listwatch_core::ContinueToken::encode_inconsistent(
                    "",
                    "default/anchor-cm\u{0}",
                ),
            },
            r#"{"kind":"Status","apiVersion":"v1","metadata":{"continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZGVmYXVsdC9hbmNob3ItY21cdTAwMDAifQ"},"status":"Failure","message":"The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.","reason":"Expired","code":410}"#,
        ),
    ];
    for (err, want) in cases {
        assert_eq!(body(&err), want);
    }
    let s = ApiError::ResourceVersionTooLarge {
        requested: 5,
        current: 1,
    }
    .to_status();
    assert_eq!((s.code, s.retry_after), (504, Some(1)));
}

/// Every Status body in the reference transcripts that the core can produce appears there
/// verbatim (guards against the constants above drifting from the captured files).
#[test]
fn cases_appear_in_reference_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference");
    // The cross-check is the point of this test: without the captures it fails, naming them.
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the reference captures must sit beside the repository as shared/reference)",
            dir.display()
        )
    });
    let mut all = String::new();
    for e in entries.flatten() {
        all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    for (_, q, _, want) in CASES {
        // The pods field-selector case was captured with a different value; compare the message.
        if q.contains("spec.foo") {
            assert!(all.contains("field label not supported: spec.foo"));
            continue;
        }
        assert!(all.contains(want), "not in reference: {want}");
    }
}
