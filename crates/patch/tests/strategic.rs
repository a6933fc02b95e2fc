//! Strategic merge patch against the cases of apimachinery's strategicpatch tests
//! (tests/data/strategic.yaml, apply direction), on the Go test types they use.

use std::collections::HashMap;
use std::rc::Rc;

use listwatch_patch::{Lookup, PatchMeta, SmpError, strategic_patch};
use serde_json::{Map, Value};

/// The test types of the data file: name → JSON field → (type expression, tags).
type Types = HashMap<String, HashMap<String, (String, PatchMeta)>>;

/// A type expression (`[]T`, `map[string]T`, a named struct, a scalar) in the test table.
#[derive(Clone)]
struct TestType {
    types: Rc<Types>,
    expr: String,
}

impl TestType {
    fn at(&self, expr: &str) -> TestType {
        TestType {
            types: self.types.clone(),
            expr: expr.to_string(),
        }
    }
}

impl Lookup for TestType {
    fn for_struct(&self, key: &str) -> Result<(Self, PatchMeta), SmpError> {
        let Some(fields) = self.types.get(self.expr.trim_start_matches('*')) else {
            return Err(SmpError::Other(format!(
                "merging an object in json but data type is not struct, instead is: {}",
                self.kind_name()
            )));
        };
        let found = fields
            .get(key)
            .or_else(|| {
                fields
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(key))
                    .map(|(_, v)| v)
            })
            .ok_or_else(|| {
                SmpError::Other(format!(
                    "unable to find api field in struct {} for the json field {key:?}",
                    self.expr
                ))
            })?;
        Ok((self.at(&found.0), found.1.clone()))
    }

    fn for_slice(&self, key: &str) -> Result<(Self, PatchMeta), SmpError> {
        let (t, meta) = self.for_struct(key)?;
        // Through a pointer strategicpatch takes the pointee for the element type.
        let expr = t.expr.strip_prefix('*').map_or(t.expr.as_str(), |inner| {
            if inner.starts_with("[]") {
                inner
            } else {
                t.expr.as_str()
            }
        });
        match expr.strip_prefix("[]") {
            Some(elem) => Ok((self.at(elem), meta)),
            None if expr.starts_with('*') => Ok((self.at(&expr[1..]), meta)),
            None => Err(SmpError::Other(format!(
                "expected slice or array type, but got: {}",
                self.kind_name()
            ))),
        }
    }

    fn kind_name(&self) -> &'static str {
        if self.expr.starts_with('*') {
            "ptr"
        } else if self.expr.starts_with("[]") {
            "slice"
        } else if self.expr.starts_with("map[") {
            "map"
        } else if self.types.contains_key(&self.expr) {
            "struct"
        } else {
            "string"
        }
    }
}

fn load() -> (Rc<Types>, Vec<Value>) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/strategic.yaml"
    ))
    .expect("tests/data/strategic.yaml is readable");
    let doc: Value = serde_yaml::from_str(&text).expect("strategic.yaml parses");
    let mut types = Types::new();
    for (name, fields) in doc["types"].as_object().expect("types") {
        let mut table = HashMap::new();
        for (field, spec) in fields.as_object().expect("fields") {
            let entry = match spec {
                Value::String(t) => (t.clone(), PatchMeta::default()),
                Value::Object(m) => (
                    m["type"].as_str().expect("type").to_string(),
                    PatchMeta {
                        strategy: m
                            .get("strategy")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                        merge_key: m.get("key").and_then(Value::as_str).unwrap_or("").into(),
                    },
                ),
                other => panic!("bad field spec {other}"),
            };
            table.insert(field.clone(), entry);
        }
        types.insert(name.clone(), table);
    }
    let cases = doc["cases"].as_array().expect("cases").clone();
    (Rc::new(types), cases)
}

/// Go's `%v` of a scalar, which the Go tests sort merge lists by.
fn sort_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// apimachinery's `sortMergeListsByNameMap`: merge lists sorted by merge key (scalars
/// deduplicated and sorted), recursively; `$retainKeys` / `$deleteFromPrimitiveList` sorted.
fn sort_map(m: &Map<String, Value>, t: &TestType) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in m {
        let v = if k == "$retainKeys" || k.starts_with("$deleteFromPrimitiveList") {
            let mut items = v.as_array().expect("a list").clone();
            items.sort_by_key(sort_key);
            Value::Array(items)
        } else if k.starts_with("$setElementOrder") || k == "$patch" {
            v.clone()
        } else {
            match v {
                Value::Object(inner) => {
                    let (sub, _) = t.for_struct(k).expect("sortable map");
                    Value::Object(sort_map(inner, &sub))
                }
                Value::Array(items) => {
                    let (sub, meta) = t.for_slice(k).expect("sortable list");
                    let merge = meta.strategy.split(',').any(|s| s == "merge");
                    if merge && !items.is_empty() {
                        Value::Array(sort_list(items, &sub, &meta.merge_key))
                    } else {
                        v.clone()
                    }
                }
                other => other.clone(),
            }
        };
        out.insert(k.clone(), v);
    }
    out
}

fn sort_list(items: &[Value], t: &TestType, key: &str) -> Vec<Value> {
    if !items[0].is_object() {
        let mut out: Vec<Value> = Vec::new();
        for v in items {
            if !out.contains(v) {
                out.push(v.clone());
            }
        }
        out.sort_by_key(sort_key);
        return out;
    }
    let mut out: Vec<Value> = items
        .iter()
        .map(|v| Value::Object(sort_map(v.as_object().expect("map item"), t)))
        .collect();
    out.sort_by_key(|v| sort_key(v.get(key).unwrap_or(&Value::Null)));
    out
}

#[test]
fn kubernetes_strategic_merge_patch_cases() {
    let (types, cases) = load();
    assert!(cases.len() > 250, "the case list is whole");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let root = TestType {
            types: types.clone(),
            expr: case
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("mergeItem")
                .to_string(),
        };
        let sorted = case.get("sorted").and_then(Value::as_bool).unwrap_or(false);
        let prepare = |v: &Value| {
            let m = v.as_object().cloned().unwrap_or_default();
            if sorted { sort_map(&m, &root) } else { m }
        };
        let original = prepare(&case["original"]);
        let patch = serde_json::to_vec(&Value::Object(prepare(&case["patch"]))).expect("json");
        let got = strategic_patch(original, &patch, &root);
        match (case.get("error").and_then(Value::as_str), got) {
            (Some(want), Err(e)) if e.to_string().contains(want) => {}
            (Some(want), other) => {
                failures.push(format!("{name}: want error {want:?}, got {other:?}"))
            }
            (None, Ok(result)) => {
                let want = prepare(&case["result"]);
                // Member order is not compared (Go's maps have none); list order is.
                if result != want {
                    failures.push(format!(
                        "{name}:\n  want {}\n  got  {}",
                        Value::Object(want),
                        Value::Object(result)
                    ));
                }
            }
            (None, Err(e)) => failures.push(format!("{name}: unexpected error {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
