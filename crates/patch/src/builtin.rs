//! The built-in types as strategicpatch sees them: the shape of every field from the
//! protobuf crate's schema table (message → field by JSON name → message), and each field's
//! `patchStrategy` / `patchMergeKey` from `data/strategies.json`, which `scripts/gopatch.py`
//! reads from the same Go types kube-apiserver reflects on.

use std::collections::HashMap;
use std::sync::OnceLock;

use listwatch_protobuf::{Kind, MessageId, Schema, Special};
use serde::Deserialize;

use crate::strategic::{Lookup, PatchMeta, SmpError};

/// The generated strategies (see the module comment).
const STRATEGIES: &str = include_str!("../data/strategies.json");

#[derive(Deserialize)]
struct RawStrategies {
    types: HashMap<String, HashMap<String, RawField>>,
}

#[derive(Deserialize)]
struct RawField {
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default)]
    key: Option<String>,
}

/// `patchStrategy` / `patchMergeKey` by message and JSON field name.
struct Strategies {
    /// Keyed by message index in the schema, then JSON name.
    by_message: HashMap<MessageId, HashMap<String, PatchMeta>>,
}

fn strategies() -> &'static Strategies {
    static TABLE: OnceLock<Strategies> = OnceLock::new();
    TABLE.get_or_init(|| {
        // Generated and checked in; a parse failure is a build defect every test catches.
        #[allow(clippy::expect_used)]
        let raw: RawStrategies =
            serde_json::from_str(STRATEGIES).expect("data/strategies.json parses");
        let schema = Schema::kubernetes();
        // The Go types are named as k8s-pb names the messages, up to case (`JSON`/`Json`).
        let names: HashMap<String, MessageId> = (0..schema.len() as MessageId)
            .map(|id| (schema.message(id).name.to_ascii_lowercase(), id))
            .collect();
        let mut by_message = HashMap::new();
        for (name, fields) in raw.types {
            let Some(&id) = names.get(&name.to_ascii_lowercase()) else {
                continue;
            };
            let fields = fields
                .into_iter()
                .filter(|(_, f)| f.strategy.is_some() || f.key.is_some())
                .map(|(json, f)| {
                    let meta = PatchMeta {
                        strategy: f.strategy.unwrap_or_default(),
                        merge_key: f.key.unwrap_or_default(),
                    };
                    (json, meta)
                })
                .collect();
            by_message.insert(id, fields);
        }
        Strategies { by_message }
    })
}

/// One Go type reachable from a built-in kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoNode {
    /// A struct: its message in the schema.
    Struct(MessageId),
    /// A pointer to a struct (an optional message field): strategicpatch looks through it,
    /// and takes it for a list of that struct where the patch has a list.
    Pointer(MessageId),
    /// A `map[string]T`.
    Map(Elem),
    /// A slice `[]T`.
    Slice(Elem),
    /// A scalar, by Go kind name.
    Scalar(&'static str),
}

/// The element type of a map or slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// Struct elements.
    Struct(MessageId),
    /// Scalar elements, by Go kind name.
    Scalar(&'static str),
}

impl GoNode {
    /// The type of built-in kind `kind` in `api_version`, if the schema has it.
    pub fn kind(api_version: &str, kind: &str) -> Option<GoNode> {
        Schema::kubernetes()
            .kind_exact(api_version, kind)
            .map(GoNode::Struct)
    }

    fn of_elem(e: Elem) -> GoNode {
        match e {
            Elem::Scalar(s) => GoNode::Scalar(s),
            Elem::Struct(id) => {
                let msg = Schema::kubernetes().message(id);
                if msg.special == Special::List {
                    // A Go named slice (`ExtraValue []string`): a JSON array of its items.
                    match msg.fields.first() {
                        Some(f) => GoNode::Slice(elem_of(f.kind)),
                        None => GoNode::Slice(Elem::Scalar("string")),
                    }
                } else {
                    GoNode::Struct(id)
                }
            }
        }
    }

    fn of_field(f: &listwatch_protobuf::Field) -> GoNode {
        if f.repeated {
            GoNode::Slice(elem_of(f.kind))
        } else if f.map {
            GoNode::Map(elem_of(f.kind))
        } else if f.kind == Kind::Bytes {
            GoNode::Slice(Elem::Scalar("uint8"))
        } else if let (Kind::Message(id), false) = (f.kind, f.plain) {
            match GoNode::of_elem(Elem::Struct(id)) {
                GoNode::Struct(id) => GoNode::Pointer(id),
                other => other,
            }
        } else {
            GoNode::of_elem(elem_of(f.kind))
        }
    }
}

fn elem_of(kind: Kind) -> Elem {
    match kind {
        Kind::Message(id) => Elem::Struct(id),
        Kind::String => Elem::Scalar("string"),
        Kind::Bytes => Elem::Scalar("string"),
        Kind::Bool => Elem::Scalar("bool"),
        Kind::Int32 => Elem::Scalar("int32"),
        Kind::Int64 => Elem::Scalar("int64"),
        Kind::Double => Elem::Scalar("float64"),
    }
}

/// Finds JSON field `key` of message `id` the way encoding/json does: an exact name first
/// (through `json:",inline"` structs), then a case-insensitive one. Returns the field and
/// the message that declares it. Messages with a custom JSON form (`Time`, `Quantity`,
/// `RawExtension`, …) have no JSON fields in Go.
fn find_field(id: MessageId, key: &str) -> Option<(&'static listwatch_protobuf::Field, MessageId)> {
    fn walk(
        id: MessageId,
        found: &mut dyn FnMut(&'static listwatch_protobuf::Field, MessageId) -> bool,
    ) -> bool {
        let msg = Schema::kubernetes().message(id);
        if msg.special != Special::None {
            return false;
        }
        for f in &msg.fields {
            if f.inline {
                if let Kind::Message(inner) = f.kind
                    && walk(inner, found)
                {
                    return true;
                }
            } else if found(f, id) {
                return true;
            }
        }
        false
    }
    let mut exact = None;
    walk(id, &mut |f, owner| {
        if &*f.json == key {
            exact = Some((f, owner));
            true
        } else {
            false
        }
    });
    if exact.is_some() {
        return exact;
    }
    let mut folded = None;
    walk(id, &mut |f, owner| {
        if f.json.eq_ignore_ascii_case(key) {
            folded = Some((f, owner));
            true
        } else {
            false
        }
    });
    folded
}

impl Lookup for GoNode {
    fn for_struct(&self, key: &str) -> Result<(GoNode, PatchMeta), SmpError> {
        let (GoNode::Struct(id) | GoNode::Pointer(id)) = *self else {
            return Err(SmpError::Other(format!(
                "merging an object in json but data type is not struct, instead is: {}",
                self.kind_name()
            )));
        };
        let Some((field, owner)) = find_field(id, key) else {
            let name = Schema::kubernetes()
                .message(id)
                .name
                .rsplit('/')
                .next()
                .unwrap_or("");
            return Err(SmpError::Other(format!(
                "unable to find api field in struct {name} for the json field {}",
                listwatch_core::json::go_string(key)
            )));
        };
        let meta = strategies()
            .by_message
            .get(&owner)
            .and_then(|m| m.get(&*field.json))
            .cloned()
            .unwrap_or_default();
        Ok((GoNode::of_field(field), meta))
    }

    fn for_slice(&self, key: &str) -> Result<(GoNode, PatchMeta), SmpError> {
        let (node, meta) = self.for_struct(key)?;
        match node {
            GoNode::Slice(e) => Ok((GoNode::of_elem(e), meta)),
            GoNode::Pointer(id) => Ok((GoNode::Struct(id), meta)),
            _ => Err(SmpError::Other(format!(
                "expected slice or array type, but got: {}",
                self.kind_name()
            ))),
        }
    }

    fn kind_name(&self) -> &'static str {
        match self {
            GoNode::Struct(_) => "struct",
            GoNode::Pointer(_) => "ptr",
            GoNode::Map(_) => "map",
            GoNode::Slice(_) => "slice",
            GoNode::Scalar(s) => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field `data/strategies.json` names is a field of the schema's message (the two
    /// tables come from the same Go types; a regeneration of one alone shows here).
    #[test]
    fn strategies_name_schema_fields() {
        let raw: RawStrategies = serde_json::from_str(STRATEGIES).expect("parses");
        let schema = Schema::kubernetes();
        let names: HashMap<String, MessageId> = (0..schema.len() as MessageId)
            .map(|id| (schema.message(id).name.to_ascii_lowercase(), id))
            .collect();
        let mut missing = Vec::new();
        let mut matched = 0;
        for (name, fields) in &raw.types {
            let Some(&id) = names.get(&name.to_ascii_lowercase()) else {
                missing.push(name.clone());
                continue;
            };
            for json in fields.keys() {
                match find_field(id, json) {
                    Some((f, _)) if &*f.json == json => matched += 1,
                    _ => missing.push(format!("{name}.{json}")),
                }
            }
        }
        // Go types the schema (k8s-pb 0.9 plus its overlay) has no message for: types new
        // in 1.36 and `Table`, which has no protobuf form. Their kinds are not built in
        // here, so nothing is patched by them; a new name in this list is drift to look at.
        missing.sort();
        assert_eq!(
            missing,
            [
                "api/admissionregistration/v1/MutatingAdmissionPolicySpec",
                "api/resource/v1alpha3/ResourcePoolStatusRequestStatus",
                "api/resource/v1beta2/DeviceTaintRuleStatus",
                "api/scheduling/v1alpha2/PodGroupSchedulingConstraints",
                "api/scheduling/v1alpha2/PodGroupSpec",
                "api/scheduling/v1alpha2/PodGroupStatus",
                "api/scheduling/v1alpha2/PodGroupTemplate",
                "api/scheduling/v1alpha2/WorkloadSpec",
                "apimachinery/pkg/apis/meta/v1/Table",
                "apimachinery/pkg/apis/meta/v1/TableRow",
            ],
            "strategies for types or fields the schema does not have"
        );
        assert!(matched > 500, "{matched} fields matched");
    }

    #[test]
    fn pod_spec_strategies_are_go_tags() {
        let pod = GoNode::kind("v1", "Pod").expect("Pod is built in");
        let (spec, _) = pod.for_struct("spec").expect("spec");
        let (container, meta) = spec.for_slice("containers").expect("containers");
        assert_eq!(
            (meta.strategy.as_str(), meta.merge_key.as_str()),
            ("merge", "name")
        );
        let (_, ports) = container.for_slice("ports").expect("ports");
        assert_eq!(ports.merge_key, "containerPort");
        let (_, volumes) = spec.for_slice("volumes").expect("volumes");
        assert_eq!(volumes.strategy, "merge,retainKeys");
        let (_, tolerations) = spec.for_slice("tolerations").expect("tolerations");
        assert_eq!(tolerations, PatchMeta::default());
        // Through `json:",inline"` (Volume embeds VolumeSource) and case-insensitively.
        let (volume, _) = spec.for_slice("volumes").expect("volumes");
        assert!(volume.for_struct("configMap").is_ok());
        assert!(spec.for_struct("Containers").is_ok());
        let err = spec.for_struct("nope").expect_err("unknown field");
        assert_eq!(
            err.to_string(),
            "unable to find api field in struct PodSpec for the json field \"nope\""
        );
        let (labels, _) = pod
            .for_struct("metadata")
            .and_then(|(m, _)| m.for_struct("labels"))
            .expect("labels");
        assert_eq!(labels.kind_name(), "map");
    }
}
