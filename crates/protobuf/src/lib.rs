//! Kubernetes protobuf for listwatch: the [`Schema`] of every built-in type (generated from
//! published crates, see docs/protobuf.md) and a transcoder from the protobuf kube-apiserver
//! stores in etcd to the JSON it serves for the same object.

pub mod encode;
pub mod schema;
mod table;
pub mod to_json;
pub mod wire;

pub use encode::ProtoEncoder;
pub use schema::{Field, Kind, Message, MessageId, Schema, Special};
pub use to_json::JsonWriter;

use wire::{FieldReader, Value, slice};

/// The four bytes kube-apiserver puts before a protobuf-encoded object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Why a value could not be transcoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    /// The value does not start with `k8s\0`.
    #[error("not a Kubernetes protobuf value (no k8s\\0 prefix)")]
    NotProtobuf,
    /// The bytes are not well-formed for the schema.
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
    /// The envelope names a kind the schema does not have.
    #[error("no built-in protobuf type {api_version}, Kind={kind}")]
    UnknownKind {
        /// `apiVersion` from the envelope.
        api_version: String,
        /// `kind` from the envelope.
        kind: String,
    },
}

/// `None` as [`ProtoError::Malformed`]: the error is built only when there is one
/// (`ok_or` built and dropped one per scanned value, ~1 % of a transcode).
pub(crate) trait OrMalformed<T> {
    fn or_malformed(self, what: &'static str) -> Result<T, ProtoError>;
}

impl<T> OrMalformed<T> for Option<T> {
    #[inline(always)]
    fn or_malformed(self, what: &'static str) -> Result<T, ProtoError> {
        match self {
            Some(v) => Ok(v),
            None => Err(ProtoError::Malformed(what)),
        }
    }
}

/// The parts of kube-apiserver's `runtime.Unknown` envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// `typeMeta.apiVersion`.
    pub api_version: &'a str,
    /// `typeMeta.kind`.
    pub kind: &'a str,
    /// The object's own message bytes.
    pub raw: &'a [u8],
}

/// Splits a stored value (`k8s\0` + `runtime.Unknown`) into type and message bytes.
pub fn envelope(value: &[u8]) -> Result<Envelope<'_>, ProtoError> {
    let body = value.strip_prefix(MAGIC).ok_or(ProtoError::NotProtobuf)?;
    let mut env = Envelope {
        api_version: "",
        kind: "",
        raw: &[],
    };
    let mut r = FieldReader::new(body, 0, body.len());
    while let Some((tag, v)) = r.next_field()? {
        match (tag, v) {
            (1, Value::Len(s, e)) => {
                let mut tm = FieldReader::new(body, s as usize, e as usize);
                while let Some((t, v)) = tm.next_field()? {
                    if let Value::Len(s, e) = v {
                        let text = std::str::from_utf8(slice(body, s, e))
                            .map_err(|_| ProtoError::Malformed("type meta is not UTF-8"))?;
                        match t {
                            1 => env.api_version = text,
                            2 => env.kind = text,
                            _ => {}
                        }
                    }
                }
            }
            (2, Value::Len(s, e)) => env.raw = slice(body, s, e),
            _ => {}
        }
    }
    Ok(env)
}

/// Appends the JSON kube-apiserver serves for stored protobuf `value` (with `kind` and
/// `apiVersion`), and returns the envelope's type.
pub fn storage_to_json<'v>(
    writer: &mut JsonWriter<'_>,
    schema: &Schema,
    value: &'v [u8],
    out: &mut Vec<u8>,
) -> Result<Envelope<'v>, ProtoError> {
    let env = envelope(value)?;
    let id = schema
        .kind(env.api_version, env.kind)
        .ok_or_else(|| ProtoError::UnknownKind {
            api_version: env.api_version.to_string(),
            kind: env.kind.to_string(),
        })?;
    writer.write_message(id, env.raw, Some((env.api_version, env.kind)), out)?;
    Ok(env)
}
