//! The embedded store as kube-apiserver's CRD handling (issue 29 item 4) and `status`
//! subresources (item 6): a CRD written here is established and its kind served in every
//! served version (discovery, printer columns, selectable fields, `status`); deleting the
//! CRD retires the kind, its watches end and its objects go; a `…/status` write changes
//! `.status` only.

use listwatch_testkit::server as common;

use common::{
    answered, ends_within, get_expecting, json, next_line, request_typed, start, stream_lines,
};
use listwatch_server::ServerConfig;

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/w/widgets";

const CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.example.com"},
 "spec":{"group":"example.com","scope":"Namespaced",
  "names":{"plural":"widgets","singular":"widget","kind":"Widget","shortNames":["wd"]},
  "versions":[
   {"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
    "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}},
    "additionalPrinterColumns":[{"name":"Color","type":"string","jsonPath":".spec.color"}],
    "selectableFields":[{"jsonPath":".spec.color"}]},
   {"name":"v1beta1","served":true,"storage":false,
    "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#;

fn widget(name: &str, color: &str) -> String {
    format!(
        r#"{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"{name}"}},"spec":{{"color":"{color}"}}}}"#
    )
}

/// PATCHes `object`'s `status` subresource (asserting 200) and reads the object back.
async fn patch_status(
    addr: std::net::SocketAddr,
    object: &str,
    content_type: &str,
    patch: &str,
) -> serde_json::Value {
    let path = format!("{object}/status");
    let r = request_typed(addr, "PATCH", &path, content_type, patch).await;
    assert_eq!(r.status, 200, "{}", r.body);
    json(&get_expecting(addr, object, 200).await.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_written_here_is_served_until_it_is_deleted() {
    let s = start(0, ServerConfig::default()).await;
    // Before the CRD: not served.
    get_expecting(s.addr, WIDGETS, 404).await;

    let made = json(&answered(s.addr, "POST", CRDS, Some(CRD), 201).await.body);
    // Established as kube-apiserver's CRD controllers would make it.
    let conditions = made["status"]["conditions"].as_array().expect("conditions");
    for t in ["NamesAccepted", "Established"] {
        assert!(
            conditions
                .iter()
                .any(|c| c["type"] == t && c["status"] == "True"),
            "{t}: {conditions:?}"
        );
    }
    assert_eq!(made["status"]["acceptedNames"]["listKind"], "WidgetList");
    assert_eq!(made["status"]["storedVersions"], serde_json::json!(["v1"]));

    // Discovery lists the kind in both served versions.
    for v in ["v1", "v1beta1"] {
        let d = json(
            &get_expecting(s.addr, &format!("/apis/example.com/{v}"), 200)
                .await
                .body,
        );
        let names = listwatch_testkit::member_strings(&d["resources"], "name");
        assert!(names.contains(&"widgets"), "{v}: {names:?}");
    }

    let mut watch = stream_lines(s.addr, &format!("{WIDGETS}?watch=1")).await;
    answered(s.addr, "POST", WIDGETS, Some(&widget("a", "blue")), 201).await;
    answered(s.addr, "POST", WIDGETS, Some(&widget("b", "red")), 201).await;
    let event = json(&next_line(&mut watch, 10).await.expect("an ADDED event"));
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "a");

    // One object, read in every served version (the CRD's `None` conversion).
    let beta = json(
        &get_expecting(
            s.addr,
            "/apis/example.com/v1beta1/namespaces/w/widgets/a",
            200,
        )
        .await
        .body,
    );
    assert_eq!(beta["apiVersion"], "example.com/v1beta1");
    assert_eq!(beta["spec"]["color"], "blue");

    // Selectable field and printer column.
    let blue = json(
        &get_expecting(
            s.addr,
            &format!("{WIDGETS}?fieldSelector=spec.color%3Dblue"),
            200,
        )
        .await
        .body,
    );
    let items = blue["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{blue}");
    assert_eq!(items[0]["metadata"]["name"], "a");
    let table = listwatch_testkit::get_with(
        s.addr,
        WIDGETS,
        &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
    )
    .await;
    let table: serde_json::Value = serde_json::from_slice(&table.body).expect("a Table");
    let columns = listwatch_testkit::member_strings(&table["columnDefinitions"], "name");
    assert_eq!(columns, ["Name", "Color"]);

    // The status subresource the CRD declares: status changes, spec does not.
    let a = patch_status(
        s.addr,
        &format!("{WIDGETS}/a"),
        "application/merge-patch+json",
        r#"{"spec":{"color":"green"},"status":{"ready":true}}"#,
    )
    .await;
    assert_eq!(a["status"]["ready"], true);
    assert_eq!(a["spec"]["color"], "blue");
    // v1beta1 declares none.
    get_expecting(
        s.addr,
        "/apis/example.com/v1beta1/namespaces/w/widgets/a/status",
        404,
    )
    .await;

    // Deleting the CRD retires the kind: 404, gone from discovery, watches end.
    answered(
        s.addr,
        "DELETE",
        &format!("{CRDS}/widgets.example.com"),
        None,
        200,
    )
    .await;
    get_expecting(s.addr, WIDGETS, 404).await;
    get_expecting(s.addr, "/apis/example.com/v1", 404).await;
    assert!(
        ends_within(&mut watch, 15).await,
        "a watch of a deleted CRD's kind stays open"
    );

    // Created again, the kind starts empty (kube deletes a deleted CRD's objects).
    answered(s.addr, "POST", CRDS, Some(CRD), 201).await;
    let list = json(&get_expecting(s.addr, WIDGETS, 200).await.body);
    assert_eq!(list["items"], serde_json::json!([]), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_changes_status_only() {
    let s = start(0, ServerConfig::default()).await;
    let deploys = "/apis/apps/v1/namespaces/s/deployments";
    let made = json(
        &answered(
            s.addr,
            "POST",
            deploys,
            Some(r#"{"metadata":{"name":"d","labels":{"app":"d"}},"spec":{"replicas":1,"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"labels":{"app":"d"}}}}}"#),
            201,
        )
        .await
        .body,
    );
    let rv = made["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();

    // PUT: spec and labels in the body are ignored, status taken.
    let put = format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"d","resourceVersion":"{rv}","labels":{{"app":"other"}}}},"spec":{{"replicas":7}},"status":{{"replicas":1,"readyReplicas":1}}}}"#
    );
    let r = answered(
        s.addr,
        "PUT",
        &format!("{deploys}/d/status"),
        Some(&put),
        200,
    )
    .await;
    let d = json(&r.body);
    assert_eq!(d["status"]["readyReplicas"], 1);
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["metadata"]["labels"]["app"], "d");
    // The same RV again is stale now: 409.
    answered(
        s.addr,
        "PUT",
        &format!("{deploys}/d/status"),
        Some(&put),
        409,
    )
    .await;

    // Strategic merge patch of the status of a built-in type.
    let d = patch_status(
        s.addr,
        &format!("{deploys}/d"),
        "application/strategic-merge-patch+json",
        r#"{"status":{"conditions":[{"type":"Available","status":"True"}]}}"#,
    )
    .await;
    assert_eq!(d["status"]["conditions"][0]["type"], "Available");
    // A GET of the subresource answers the object.
    let via_status = get_expecting(s.addr, &format!("{deploys}/d/status"), 200).await;
    assert_eq!(json(&via_status.body), d);
    assert_eq!(d["status"]["readyReplicas"], 1);
    assert_eq!(d["spec"]["replicas"], 1);

    // ConfigMaps have no status subresource.
    answered(
        s.addr,
        "POST",
        "/api/v1/namespaces/s/configmaps",
        Some(r#"{"metadata":{"name":"c"}}"#),
        201,
    )
    .await;
    get_expecting(s.addr, "/api/v1/namespaces/s/configmaps/c/status", 404).await;
}
