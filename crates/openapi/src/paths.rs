//! The operations of one served resource, for the verbs it serves, with the query
//! parameters kube-apiserver lists for each (those listwatch honours).
//!
//! `fieldValidation` is left out on purpose: kubectl reads its presence on a PATCH
//! operation as the server rejecting unknown fields itself, and then skips its own
//! validation; listwatch's writes do not decode strictly, so kubectl validates client-side
//! against these documents instead.

use listwatch_core::ResourceInfo;
use listwatch_protobuf::Schema;
use serde_json::{Map, Value, json};

use crate::crd::{KindSchemas, meta};
use crate::schema::{self, Definitions, Flavor};

/// A query or path parameter: (name, location, type, description).
type Param = (&'static str, &'static str, &'static str, &'static str);

const NAME: Param = ("name", "path", "string", "The object's name.");
const NAMESPACE: Param = (
    "namespace",
    "path",
    "string",
    "The namespace the objects are in.",
);
const PRETTY: Param = (
    "pretty",
    "query",
    "string",
    "Indents the JSON output when 'true'.",
);
const DRY_RUN: Param = (
    "dryRun",
    "query",
    "string",
    "'All' checks the request without persisting it.",
);
const FIELD_MANAGER: Param = (
    "fieldManager",
    "query",
    "string",
    "The name of the actor making the change.",
);
const LIST: &[Param] = &[
    (
        "allowWatchBookmarks",
        "query",
        "boolean",
        "Asks a watch for BOOKMARK events.",
    ),
    (
        "continue",
        "query",
        "string",
        "The continue token of the previous page.",
    ),
    (
        "fieldSelector",
        "query",
        "string",
        "Selects objects by fields.",
    ),
    (
        "labelSelector",
        "query",
        "string",
        "Selects objects by labels.",
    ),
    (
        "limit",
        "query",
        "integer",
        "The largest number of objects a page holds.",
    ),
    (
        "resourceVersion",
        "query",
        "string",
        "Which resource version the read is served at (with resourceVersionMatch).",
    ),
    (
        "resourceVersionMatch",
        "query",
        "string",
        "How resourceVersion applies: Exact or NotOlderThan.",
    ),
    (
        "sendInitialEvents",
        "query",
        "boolean",
        "Starts a watch with the current objects as ADDED events, then a BOOKMARK.",
    ),
    (
        "timeoutSeconds",
        "query",
        "integer",
        "How long a list or watch may last.",
    ),
    (
        "watch",
        "query",
        "boolean",
        "Watches for changes instead of listing.",
    ),
];
const DELETE: &[Param] = &[
    DRY_RUN,
    (
        "gracePeriodSeconds",
        "query",
        "integer",
        "Seconds before the object is deleted.",
    ),
    (
        "propagationPolicy",
        "query",
        "string",
        "Whether and how dependents are collected.",
    ),
];

fn param(flavor: Flavor, (name, place, ty, description): Param) -> Value {
    let mut p = json!({"name": name, "in": place, "description": description});
    let required = place == "path";
    match flavor {
        Flavor::V2 => {
            p["type"] = json!(ty);
            p["uniqueItems"] = json!(true);
        }
        Flavor::V3 => p["schema"] = json!({"type": ty, "uniqueItems": true}),
    }
    if required {
        p["required"] = json!(true);
    }
    p
}

/// The content types a response of `info` is served in.
fn produces(builtin: bool, watch: bool) -> Vec<&'static str> {
    let mut v = vec!["application/json"];
    if builtin {
        v.push("application/vnd.kubernetes.protobuf");
    }
    if watch {
        v.push("application/json;stream=watch");
        if builtin {
            v.push("application/vnd.kubernetes.protobuf;stream=watch");
        }
    }
    v
}

/// The content types a request body of `op` is read in: a PATCH's patch types (strategic
/// merge for built-ins only), anything for the rest.
fn consumes(op: &Op, builtin: bool) -> Vec<&'static str> {
    if op.action != "patch" {
        return vec!["*/*"];
    }
    let mut v = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if builtin {
        v.push("application/strategic-merge-patch+json");
    }
    v
}

/// One operation of a path: its `x-kubernetes-action` (`list` alone also watches), the
/// verb its operationId starts with, its query parameters, its body's definition (and
/// whether the body is required) and its responses' codes and definitions.
struct Op<'a> {
    action: &'static str,
    id_verb: &'static str,
    params: Vec<Param>,
    body: Option<(&'a str, bool)>,
    responses: Vec<(&'static str, &'a str)>,
}

/// Adds `info`'s paths for `verbs` to `paths`, and the definitions they name to `defs`.
pub fn add(
    info: &ResourceInfo,
    verbs: &[String],
    kind: &KindSchemas,
    flavor: Flavor,
    table: &Schema,
    paths: &mut Map<String, Value>,
    defs: &mut Definitions,
) {
    let has = |v: &str| verbs.iter().any(|x| x == v);
    let builtin = table.kind_exact(&info.api_version(), &info.kind).is_some();
    let mut named = |n: &str| {
        meta(table, n).map(|id| {
            schema::add_closure(table, id, flavor, defs);
            schema::definition_name(table, id)
        })
    };
    let status = named("Status").unwrap_or_default();
    let delete_options = named("DeleteOptions").unwrap_or_default();
    let patch = named("Patch").unwrap_or_default();
    let prefix = format!("/{}", crate::gv_path(&info.group, &info.version));
    let scoped = if info.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", info.resource)
    } else {
        format!("{prefix}/{}", info.resource)
    };
    let ns = if info.namespaced { "Namespaced" } else { "" };
    let id = |verb: &str, suffix: &str| {
        format!(
            "{verb}{}{}{ns}{}{suffix}",
            group_camel(&info.group),
            upper_first(&info.version),
            kind.kind_name()
        )
    };
    let scope: Vec<Param> = if info.namespaced {
        vec![NAMESPACE]
    } else {
        vec![]
    };
    // A create, replace or patch: dry-run and field-manager parameters, a required body,
    // the object back under each of `codes`.
    let write = |action, id_verb, body, codes: &[&'static str]| Op {
        action,
        id_verb,
        params: vec![DRY_RUN, FIELD_MANAGER],
        body: Some((body, true)),
        responses: codes.iter().map(|&c| (c, kind.kind.as_str())).collect(),
    };
    let mut collection = Vec::new();
    if has("list") {
        collection.push(list_op(kind));
    }
    if has("create") {
        collection.push(write("post", "create", &kind.kind, &["200", "201", "202"]));
    }
    if has("deletecollection") {
        let mut params = LIST.to_vec();
        params.extend_from_slice(DELETE);
        collection.push(Op {
            action: "deletecollection",
            id_verb: "deletecollection",
            params,
            body: Some((&delete_options, false)),
            responses: vec![("200", &status)],
        });
    }
    let mut object = Vec::new();
    if has("get") {
        object.push(Op {
            action: "get",
            id_verb: "read",
            params: vec![],
            body: None,
            responses: vec![("200", &kind.kind)],
        });
    }
    if has("update") {
        object.push(write("put", "replace", &kind.kind, &["200", "201"]));
    }
    if has("patch") {
        object.push(write("patch", "patch", &patch, &["200", "201"]));
    }
    if has("delete") {
        object.push(Op {
            action: "delete",
            id_verb: "delete",
            params: DELETE.to_vec(),
            body: Some((&delete_options, false)),
            responses: vec![("200", &kind.kind), ("202", &kind.kind)],
        });
    }
    let gvk = kind.gvk(kind.kind_name());
    let item = |ops: &[Op], path_params: &[Param], suffix: &str| {
        let mut item = Map::new();
        for op in ops {
            let method = match op.action {
                "list" | "get" => "get",
                "post" => "post",
                "put" => "put",
                "patch" => "patch",
                _ => "delete",
            };
            item.insert(
                method.into(),
                operation(flavor, op, &id(op.id_verb, suffix), &gvk, builtin),
            );
        }
        let mut ps: Vec<Value> = path_params.iter().map(|p| param(flavor, *p)).collect();
        ps.push(param(flavor, PRETTY));
        item.insert("parameters".into(), Value::Array(ps));
        Value::Object(item)
    };
    if !collection.is_empty() {
        paths.insert(scoped.clone(), item(&collection, &scope, ""));
    }
    if !object.is_empty() {
        let mut p = scope.clone();
        p.insert(0, NAME);
        paths.insert(format!("{scoped}/{{name}}"), item(&object, &p, ""));
    }
    if info.namespaced && has("list") {
        let all = [list_op(kind)];
        paths.insert(
            format!("{prefix}/{}", info.resource),
            item(&all, &[], "ForAllNamespaces"),
        );
    }
}

/// LIST (and WATCH, by `watch=true`) of a collection.
fn list_op(kind: &KindSchemas) -> Op<'_> {
    Op {
        action: "list",
        id_verb: "list",
        params: LIST.to_vec(),
        body: None,
        responses: vec![("200", &kind.list)],
    }
}

fn operation(flavor: Flavor, op: &Op, id: &str, gvk: &Value, builtin: bool) -> Value {
    let mut o = json!({
        "operationId": id,
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": gvk,
    });
    let mut params: Vec<Value> = op.params.iter().map(|p| param(flavor, *p)).collect();
    let types = produces(builtin, op.action == "list");
    let consumes = consumes(op, builtin);
    let mut responses = Map::new();
    for (code, def) in &op.responses {
        let r = flavor.described_ref(def, None);
        let text = match *code {
            "201" => "Created",
            "202" => "Accepted",
            _ => "OK",
        };
        let resp = match flavor {
            Flavor::V2 => json!({"description": text, "schema": r}),
            Flavor::V3 => {
                let content: Map<String, Value> = types
                    .iter()
                    .map(|t| (t.to_string(), json!({"schema": r.clone()})))
                    .collect();
                json!({"description": text, "content": content})
            }
        };
        responses.insert(code.to_string(), resp);
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    o["responses"] = Value::Object(responses);
    if let Some((def, required)) = op.body {
        let r = flavor.described_ref(def, None);
        match flavor {
            Flavor::V2 => {
                let mut b = json!({"name": "body", "in": "body", "schema": r});
                if required {
                    b["required"] = json!(true);
                }
                params.insert(0, b);
            }
            Flavor::V3 => {
                let content: Map<String, Value> = consumes
                    .iter()
                    .map(|t| (t.to_string(), json!({"schema": r.clone()})))
                    .collect();
                o["requestBody"] = json!({"content": content, "required": required});
            }
        }
    }
    if flavor == Flavor::V2 {
        o["produces"] = json!(types);
        o["consumes"] = json!(consumes);
        o["schemes"] = json!(["https"]);
    }
    if !params.is_empty() {
        o["parameters"] = Value::Array(params);
    }
    o
}

/// `apps` → `Apps`, `rbac.authorization.k8s.io` → `RbacAuthorization`, `` → `Core`.
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group
        .trim_end_matches(".k8s.io")
        .split(['.', '-'])
        .map(upper_first)
        .collect()
}

fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}
