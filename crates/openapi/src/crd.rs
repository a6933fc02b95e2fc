//! The definitions of one served kind and its list: a built-in's from the schema table, a
//! custom resource's from its CRD schema (written for v2 as kube-apiserver does: without
//! what Swagger 2.0 cannot say).

use listwatch_protobuf::{MessageId, Schema};
use serde_json::{Map, Value, json};

use crate::Served;
use crate::schema::{self, Definitions, Flavor};

/// The two definitions a resource's operations name.
pub struct KindSchemas {
    /// Definition name of the kind (`io.k8s.api.core.v1.Pod`, `com.example.v1.Widget`).
    pub kind: String,
    /// Definition name of its list.
    pub list: String,
    group: String,
    version: String,
    kind_name: String,
    body: Body,
}

enum Body {
    Builtin(MessageId, Option<MessageId>),
    Custom(Value),
}

/// A meta.k8s.io/v1 message by name (`ObjectMeta`, `Status`, …).
pub fn meta(table: &Schema, name: &str) -> Option<MessageId> {
    let full = format!("apimachinery/pkg/apis/meta/v1/{name}");
    (0..table.len() as MessageId).find(|&id| *table.message(id).name == *full)
}

/// The definitions for `s` in `flavor` (a kind the table lacks is described as a custom
/// kind: any object, or its CRD schema).
pub fn kind_schemas(table: &Schema, s: &Served, flavor: Flavor) -> KindSchemas {
    let i = &s.info;
    let av = i.api_version();
    let builtin = table
        .kind_exact(&av, &i.kind)
        .filter(|_| s.crd_schema.is_none());
    let (kind, list, body) = match builtin {
        Some(id) => {
            let list = table.kind_exact(&av, &i.list_kind());
            let list_name = match list {
                Some(l) => schema::definition_name(table, l),
                None => format!("{}List", schema::definition_name(table, id)),
            };
            (
                schema::definition_name(table, id),
                list_name,
                Body::Builtin(id, list),
            )
        }
        None => {
            // kube-apiserver names a custom kind by its group reversed: example.com → com.example.
            let mut group: Vec<&str> = i.group.split('.').collect();
            group.reverse();
            let base = format!("{}.{}.{}", group.join("."), i.version, i.kind);
            let custom = custom_kind(s.crd_schema.as_ref(), flavor);
            (base.clone(), format!("{base}List"), Body::Custom(custom))
        }
    };
    KindSchemas {
        kind,
        list,
        group: i.group.clone(),
        version: i.version.clone(),
        kind_name: i.kind.clone(),
        body,
    }
}

impl KindSchemas {
    /// The `x-kubernetes-group-version-kind` value naming `kind` in this group-version.
    pub fn gvk(&self, kind: &str) -> Value {
        json!({"group": self.group, "kind": kind, "version": self.version})
    }

    /// The kind's own name (`Pod`).
    pub fn kind_name(&self) -> &str {
        &self.kind_name
    }

    /// Adds the kind's and its list's definitions (and all they reach) to `defs`.
    pub fn add_to(&self, table: &Schema, flavor: Flavor, defs: &mut Definitions) {
        match &self.body {
            Body::Builtin(id, list) => {
                schema::add_closure(table, *id, flavor, defs);
                if let Some(l) = list {
                    schema::add_closure(table, *l, flavor, defs);
                }
            }
            Body::Custom(kind) => {
                let mut kind = kind.clone();
                let listed = kind.get("properties").is_some_and(Value::is_object);
                if let (true, Some(om)) = (listed, meta(table, "ObjectMeta")) {
                    let name = schema::definition_name(table, om);
                    kind["properties"]["metadata"] =
                        flavor.described_ref(&name, Some(METADATA_DESCRIPTION));
                    schema::add_closure(table, om, flavor, defs);
                }
                defs.insert(self.kind.clone(), kind);
            }
        }
        let list_kind = format!("{}List", self.kind_name);
        self.list_definition(table, flavor, defs);
        for (def, kind) in [(&self.kind, &self.kind_name), (&self.list, &list_kind)] {
            if let Some(Value::Object(d)) = defs.get_mut(def) {
                let gvk = self.gvk(kind);
                let e = d
                    .entry("x-kubernetes-group-version-kind")
                    .or_insert_with(|| json!([]));
                if let Some(a) = e.as_array_mut().filter(|a| !a.contains(&gvk)) {
                    a.push(gvk);
                }
            }
        }
    }

    /// The list definition: the table's (whose Go `TypeMeta` has no protobuf field) or, for
    /// custom resources, made here.
    fn list_definition(&self, table: &Schema, flavor: Flavor, defs: &mut Definitions) {
        let list_meta = meta(table, "ListMeta").map(|l| schema::definition_name(table, l));
        if let Some(l) = meta(table, "ListMeta") {
            schema::add_closure(table, l, flavor, defs);
        }
        let def = defs.entry(self.list.clone()).or_insert_with(|| json!({}));
        let Some(d) = def.as_object_mut() else {
            return;
        };
        d.insert("type".into(), json!("object"));
        d.entry("description").or_insert_with(|| {
            json!(format!(
                "{}List is a list of {} objects.",
                self.kind_name, self.kind_name
            ))
        });
        let props = d.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            type_meta(p);
            if !p.contains_key("items") {
                p.insert(
                    "items".into(),
                    json!({"type": "array", "items": flavor.described_ref(&self.kind, None),
                        "description": format!("The {} objects.", self.kind_name)}),
                );
            }
            if let (false, Some(lm)) = (p.contains_key("metadata"), list_meta) {
                p.insert(
                    "metadata".into(),
                    flavor.described_ref(&lm, Some("Standard list metadata.")),
                );
            }
        }
        d.entry("required").or_insert_with(|| json!(["items"]));
    }
}

const METADATA_DESCRIPTION: &str = "Standard object's metadata.";

/// Adds `apiVersion` and `kind` (Go's inline `TypeMeta`) when missing.
fn type_meta(props: &mut Map<String, Value>) {
    for (name, d) in schema::type_meta_descriptions() {
        props
            .entry(name)
            .or_insert_with(|| json!({"type": "string", "description": d}));
    }
}

/// A custom kind's definition from its CRD schema (or, without one, any object).
fn custom_kind(crd: Option<&Value>, flavor: Flavor) -> Value {
    let mut v = match crd {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    if flavor == Flavor::V2 {
        to_v2(&mut v);
    }
    if let Some(o) = v.as_object_mut() {
        o.insert("type".into(), json!("object"));
        // Swagger 2.0 readers take listed properties as all there are.
        if flavor == Flavor::V2
            && o.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
        {
            return v;
        }
        let props = o.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            type_meta(p);
        }
    }
    v
}

/// What kube-apiserver's CRD → Swagger 2.0 conversion leaves out: the keywords 2.0 lacks
/// (`nullable`, `oneOf`, `anyOf`, `not`), the type of a value that may be an int or a string
/// or null, and the properties of objects that keep unknown fields (kubectl's validation
/// would otherwise refuse the fields the schema does not list).
fn to_v2(v: &mut Value) {
    let Some(o) = v.as_object_mut() else {
        return;
    };
    for k in ["nullable", "oneOf", "anyOf", "allOf", "not"] {
        if o.remove(k).is_some() && k == "nullable" {
            o.remove("type");
        }
    }
    if o.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        o.remove("type");
        o.remove("format");
    }
    if o.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
        o.remove("properties");
        o.remove("additionalProperties");
        o.remove("required");
    }
    if let Some(Value::Object(p)) = o.get_mut("properties") {
        p.values_mut().for_each(to_v2);
    }
    for k in ["items", "additionalProperties"] {
        if let Some(x) = o.get_mut(k) {
            to_v2(x);
        }
    }
}
