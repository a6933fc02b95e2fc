//! A stored value → the JSON the store ingests: decrypts `k8s:enc:` values, transcodes
//! kube-apiserver's protobuf (`k8s\0`) with the schema, and passes JSON through, so clusters
//! with any storage media type (and etcds written under both) read the same.

use std::borrow::Cow;
use std::cell::RefCell;

use listwatch_protobuf::{JsonWriter, ProtoError, Schema};

use crate::encryption::{self, DecryptError, Decryptor};

/// Why a stored value was not ingested.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Encrypted and not openable here (KMS, unknown key, wrong key).
    #[error(transparent)]
    Encrypted(#[from] DecryptError),
    /// Protobuf the schema cannot read.
    #[error(transparent)]
    Protobuf(#[from] ProtoError),
}

impl DecodeError {
    /// A short label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::Encrypted(DecryptError::Kms(_)) => "kms",
            DecodeError::Encrypted(_) => "encrypted",
            DecodeError::Protobuf(_) => "protobuf",
        }
    }
}

/// Turns stored values into JSON, and counts what it could not read.
#[derive(Clone, Debug, Default)]
pub struct ValueDecoder {
    decryptor: Option<Decryptor>,
    skipped:
        std::sync::Arc<parking_lot::Mutex<std::collections::BTreeMap<(String, &'static str), u64>>>,
    /// The schema defaults of each established CRD, by (group, plural), applied to its
    /// objects as they are read (kube-apiserver defaults custom resources on decode).
    crd_defaults: std::sync::Arc<parking_lot::RwLock<CrdDefaults>>,
}

/// Schema defaults by CRD group, then plural (looked up by `&str` on every ingest).
type CrdDefaults = std::collections::HashMap<
    String,
    std::collections::HashMap<String, std::sync::Arc<listwatch_sources::crd::ReadDefaults>>,
>;

thread_local! {
    // One writer per thread: its scratch list grows to the deepest object once.
    static WRITER: RefCell<JsonWriter<'static>> = RefCell::new(JsonWriter::for_storage(Schema::kubernetes()));
}

impl ValueDecoder {
    /// A decoder that opens values with `decryptor`'s keys.
    pub fn new(decryptor: Option<Decryptor>) -> Self {
        ValueDecoder {
            decryptor,
            skipped: Default::default(),
            crd_defaults: Default::default(),
        }
    }

    /// Replaces the CRDs' schema defaults; returns the (group, plural) of every CRD whose
    /// defaults changed (their objects must be read again to be served as kube serves them).
    pub fn set_crd_defaults(
        &self,
        defaults: std::collections::BTreeMap<
            (String, String),
            listwatch_sources::crd::ReadDefaults,
        >,
    ) -> Vec<(String, String)> {
        let mut current = self.crd_defaults.write();
        let held = |g: &str, r: &str| current.get(g).and_then(|m| m.get(r));
        let mut changed: Vec<(String, String)> = current
            .iter()
            .flat_map(|(g, m)| m.iter().map(move |(r, v)| (g, r, v)))
            .filter(|(g, r, v)| defaults.get(&((*g).clone(), (*r).clone())) != Some(v.as_ref()))
            .map(|(g, r, _)| (g.clone(), r.clone()))
            .collect();
        changed.extend(
            defaults
                .keys()
                .filter(|(g, r)| held(g, r).is_none())
                .cloned(),
        );
        let mut next = CrdDefaults::new();
        for ((g, r), v) in defaults {
            next.entry(g).or_default().insert(r, std::sync::Arc::new(v));
        }
        *current = next;
        changed
    }

    /// `json` (an object of `group`/`resource`) with its CRD's schema defaults applied, when
    /// it is a custom resource whose schema has any that apply; `None` otherwise.
    pub fn crd_defaulted(&self, group: &str, resource: &str, json: &[u8]) -> Option<Vec<u8>> {
        let defaults = self.crd_defaults.read().get(group)?.get(resource)?.clone();
        defaults.apply(json)
    }

    /// Counts one value of `resource` skipped for `reason` (`kms`, `encrypted`,
    /// `protobuf`, `invalid`, `layout`).
    pub fn count_skip(&self, resource: &str, reason: &'static str) {
        *self
            .skipped
            .lock()
            .entry((resource.to_string(), reason))
            .or_insert(0) += 1;
    }

    /// Values skipped so far, by resource and reason.
    pub fn skipped(&self) -> Vec<(String, &'static str, u64)> {
        self.skipped
            .lock()
            .iter()
            .map(|((r, why), n)| (r.clone(), *why, *n))
            .collect()
    }

    /// The JSON of the value stored at etcd key `key`.
    pub fn decode<'v>(&self, key: &[u8], value: &'v [u8]) -> Result<Cow<'v, [u8]>, DecodeError> {
        if value.starts_with(encryption::PREFIX) {
            let plain = match &self.decryptor {
                Some(d) => d.decrypt(key, value)?,
                None => {
                    return Err(DecryptError::NoKey {
                        provider: provider(value),
                        key: "(no --encryption-config given)".into(),
                    }
                    .into());
                }
            };
            // Decrypted protobuf becomes new JSON; decrypted JSON is used as it is.
            let transcoded = match self.decode(key, &plain)? {
                Cow::Owned(json) => Some(json),
                Cow::Borrowed(_) => None,
            };
            return Ok(Cow::Owned(transcoded.unwrap_or(plain)));
        }
        if value.starts_with(listwatch_protobuf::MAGIC) {
            let mut out = Vec::with_capacity(value.len() * 2);
            WRITER.with(|w| {
                let mut w = w.borrow_mut();
                listwatch_protobuf::storage_to_json(&mut w, Schema::kubernetes(), value, &mut out)
            })?;
            return Ok(Cow::Owned(out));
        }
        Ok(Cow::Borrowed(value))
    }
}

fn provider(value: &[u8]) -> String {
    let rest = &value[encryption::PREFIX.len().min(value.len())..];
    let end = rest.iter().position(|b| *b == b':').unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_values_say_why() {
        let config = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aescbc:\n          keys:\n            - name: key1\n              secret: Y29ycHVzLWtleS1vbmUtYWVzY2JjLTMyLWJ5dGVzISE=\n      - identity: {}\n";
        let d = ValueDecoder::new(Some(Decryptor::parse(config).expect("config")));
        let key = b"/registry/secrets/default/s";
        let kms = d
            .decode(key, b"k8s:enc:kms:v2:vault:\x00\x01")
            .expect_err("kms");
        assert_eq!(kms.reason(), "kms");
        let other_key = d.decode(
            key,
            b"k8s:enc:aescbc:v1:key9:0123456789abcdef0123456789abcdef",
        );
        assert!(matches!(
            other_key,
            Err(DecodeError::Encrypted(DecryptError::NoKey { .. }))
        ));
        let garbage = d.decode(key, b"k8s:enc:aescbc:v1:key1:short");
        assert!(matches!(
            garbage,
            Err(DecodeError::Encrypted(DecryptError::Failed("aescbc")))
        ));
        let no_config = ValueDecoder::default().decode(key, b"k8s:enc:secretbox:v1:key3:xx");
        assert_eq!(no_config.expect_err("no keys").reason(), "encrypted");
        // JSON passes through untouched.
        assert!(matches!(d.decode(key, b"{}"), Ok(Cow::Borrowed(_))));
        d.count_skip("secrets", "kms");
        d.count_skip("secrets", "kms");
        assert_eq!(d.skipped(), vec![("secrets".to_string(), "kms", 2)]);
    }
}
