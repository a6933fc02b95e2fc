//! The API's description of itself: the discovery documents ([`discovery`]) and the
//! OpenAPI documents of what listwatch serves, as kube-apiserver publishes them:
//! `/openapi/v2` (JSON, and gnostic's protobuf, which kubectl's client-side validation
//! reads) and `/openapi/v3` (an index, then one document per group-version, which `kubectl
//! explain` and kubectl's field-validation check read).
//!
//! Built-in kinds come from the protobuf schema table (the same generated table the server
//! serves protobuf with) plus generated annotations; custom resources from their CRD's
//! `openAPIV3Schema`. [`OpenApiDocs::build`] makes every document once, with its SHA-512
//! hash (kube-apiserver's ETag), as shared [`Bytes`].

use std::collections::BTreeMap;

use bytes::Bytes;
use listwatch_core::ResourceInfo;
use listwatch_protobuf::Schema;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

mod crd;
pub mod discovery;
mod paths;
pub mod proto;
pub mod schema;
pub mod serve;

pub use schema::Flavor;
pub use serve::{OpenApiCache, respond};

/// One served resource, what the server does with it, and its custom schema if any.
#[derive(Clone, Debug)]
pub struct Served {
    /// The resource.
    pub info: ResourceInfo,
    /// The verbs discovery lists for it (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`): each becomes an operation.
    pub verbs: Vec<String>,
    /// For a custom resource, its CRD version's `schema.openAPIV3Schema`, if it has one.
    pub crd_schema: Option<Value>,
}

/// One document, encoded, with its hash.
#[derive(Clone, Debug)]
pub struct Doc {
    /// The encoded document.
    pub bytes: Bytes,
    /// Upper-case hex SHA-512 of the JSON form (kube-apiserver's ETag, unquoted, and the
    /// v3 index's `hash` parameter).
    pub hash: String,
}

impl Doc {
    fn new(bytes: Vec<u8>, hash: String) -> Doc {
        Doc {
            bytes: bytes.into(),
            hash,
        }
    }

    fn json(v: &Value) -> Doc {
        let bytes = serde_json::to_vec(v).unwrap_or_default();
        let hash = hex_sha512(&bytes);
        Doc::new(bytes, hash)
    }
}

fn hex_sha512(data: &[u8]) -> String {
    use std::fmt::Write;
    Sha512::digest(data)
        .iter()
        .fold(String::with_capacity(128), |mut s, b| {
            let _ = write!(s, "{b:02X}");
            s
        })
}

/// Every OpenAPI document for one set of served resources.
#[derive(Clone, Debug)]
pub struct OpenApiDocs {
    /// `/openapi/v2` as JSON.
    pub v2_json: Doc,
    /// `/openapi/v2` as gnostic's `openapi.v2.Document` protobuf (same hash as the JSON,
    /// as kube-apiserver tags both).
    pub v2_proto: Doc,
    /// `/openapi/v3`: `{"paths": {"api/v1": {"serverRelativeURL": …?hash=…}, …}}`.
    pub v3_index: Doc,
    /// `/openapi/v3/<path>` by path (`api/v1`, `apis/apps/v1`).
    pub v3: BTreeMap<String, Doc>,
}

/// The `info` block of every document.
fn info() -> Value {
    json!({"title": "Kubernetes", "version": "v1.36.0"})
}

/// `api/v1` or `apis/<group>/<version>`.
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

impl OpenApiDocs {
    /// Builds every document for `served`.
    pub fn build(served: &[Served]) -> OpenApiDocs {
        let table = Schema::kubernetes();
        let mut v2_paths = Map::new();
        let mut v2_defs = schema::Definitions::new();
        let mut by_gv: BTreeMap<String, (Map<String, Value>, schema::Definitions)> =
            BTreeMap::new();
        for s in served {
            for flavor in [Flavor::V2, Flavor::V3] {
                let kind = crd::kind_schemas(table, s, flavor);
                let (paths, defs) = match flavor {
                    Flavor::V2 => (&mut v2_paths, &mut v2_defs),
                    Flavor::V3 => {
                        let e = by_gv
                            .entry(gv_path(&s.info.group, &s.info.version))
                            .or_default();
                        (&mut e.0, &mut e.1)
                    }
                };
                kind.add_to(table, flavor, defs);
                paths::add(&s.info, &s.verbs, &kind, flavor, table, paths, defs);
            }
        }
        let v2 = json!({
            "swagger": "2.0",
            "info": info(),
            "paths": v2_paths,
            "definitions": v2_defs,
        });
        let v2_json = Doc::json(&v2);
        let v2_proto = Doc::new(proto::document(&v2), v2_json.hash.clone());
        let mut v3 = BTreeMap::new();
        let mut index = Map::new();
        for (path, (paths, defs)) in by_gv {
            let doc = Doc::json(&json!({
                "openapi": "3.0.0",
                "info": info(),
                "paths": paths,
                "components": {"schemas": defs},
            }));
            index.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
            );
            v3.insert(path, doc);
        }
        OpenApiDocs {
            v2_json,
            v2_proto,
            v3_index: Doc::json(&json!({ "paths": index })),
            v3,
        }
    }
}

#[cfg(test)]
mod tests;
