//! Encryption at rest, read side: kube-apiserver's `EncryptionConfiguration`
//! (`--encryption-provider-config`) and the `identity`, `aescbc`, `aesgcm` and `secretbox`
//! transformers it writes values with (`k8s:enc:<provider>:v1:<key name>:<payload>`).
//! KMS values cannot be opened without the plugin: they are refused with a typed error that
//! the follower counts and logs, never served stale.

use std::path::Path;

use aes::cipher::{BlockDecryptMut, KeyIvInit, block_padding::Pkcs7};
use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit};
use base64::Engine;
use serde::Deserialize;

/// Prefix of every encrypted value.
pub const PREFIX: &[u8] = b"k8s:enc:";

/// Why an encrypted value could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecryptError {
    /// No `--encryption-config` was given, or it has no key of that name.
    #[error("no {provider} key named {key:?} in the encryption configuration")]
    NoKey {
        /// Provider named by the value.
        provider: String,
        /// Key name from the value.
        key: String,
    },
    /// A KMS-encrypted value (needs the KMS plugin, which listwatch does not call).
    #[error("encrypted with KMS provider {0:?}; listwatch does not call KMS plugins")]
    Kms(String),
    /// The value does not open with the named key (corrupt or a different key).
    #[error("{0} value does not decrypt with its key")]
    Failed(&'static str),
    /// A prefix listwatch does not know.
    #[error("unknown encryption prefix {0:?}")]
    Unknown(String),
}

/// Why an encryption configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Reading the file failed.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not an `EncryptionConfiguration`.
    #[error("encryption configuration: {0}")]
    Invalid(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cipher {
    AesCbc,
    AesGcm,
    Secretbox,
}

impl Cipher {
    fn name(self) -> &'static str {
        match self {
            Cipher::AesCbc => "aescbc",
            Cipher::AesGcm => "aesgcm",
            Cipher::Secretbox => "secretbox",
        }
    }
}

#[derive(Clone)]
struct Key {
    cipher: Cipher,
    name: String,
    secret: Vec<u8>,
}

/// The keys of an `EncryptionConfiguration`, by provider and name.
#[derive(Clone, Default)]
pub struct Decryptor {
    keys: Vec<Key>,
}

impl std::fmt::Debug for Decryptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        let names: Vec<String> = self
            .keys
            .iter()
            .map(|k| format!("{}:{}", k.cipher.name(), k.name))
            .collect();
        f.debug_struct("Decryptor").field("keys", &names).finish()
    }
}

#[derive(Deserialize)]
struct FileConfig {
    kind: String,
    #[serde(default)]
    resources: Vec<FileResources>,
}

#[derive(Deserialize)]
struct FileResources {
    #[serde(default)]
    providers: Vec<FileProvider>,
}

#[derive(Deserialize)]
struct FileProvider {
    aescbc: Option<FileKeys>,
    aesgcm: Option<FileKeys>,
    secretbox: Option<FileKeys>,
}

#[derive(Deserialize)]
struct FileKeys {
    #[serde(default)]
    keys: Vec<FileKey>,
}

#[derive(Deserialize)]
struct FileKey {
    name: String,
    secret: String,
}

impl Decryptor {
    /// Reads an `EncryptionConfiguration` file (YAML or JSON).
    pub fn from_file(path: &Path) -> Result<Decryptor, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Decryptor::parse(&text)
    }

    /// Parses an `EncryptionConfiguration` document.
    pub fn parse(text: &str) -> Result<Decryptor, ConfigError> {
        let file: FileConfig =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if file.kind != "EncryptionConfiguration" {
            return Err(ConfigError::Invalid(format!(
                "kind is {:?}, want EncryptionConfiguration",
                file.kind
            )));
        }
        let mut keys = Vec::new();
        for r in file.resources {
            for p in r.providers {
                for (cipher, set) in [
                    (Cipher::AesCbc, p.aescbc),
                    (Cipher::AesGcm, p.aesgcm),
                    (Cipher::Secretbox, p.secretbox),
                ] {
                    for k in set.map(|s| s.keys).unwrap_or_default() {
                        let secret = base64::engine::general_purpose::STANDARD
                            .decode(k.secret.trim())
                            .map_err(|e| {
                                ConfigError::Invalid(format!("key {}: secret: {e}", k.name))
                            })?;
                        let ok = match cipher {
                            Cipher::Secretbox => secret.len() == 32,
                            _ => matches!(secret.len(), 16 | 24 | 32),
                        };
                        if !ok {
                            return Err(ConfigError::Invalid(format!(
                                "key {}: {} bytes is not a {} key length",
                                k.name,
                                secret.len(),
                                cipher.name()
                            )));
                        }
                        keys.push(Key {
                            cipher,
                            name: k.name,
                            secret,
                        });
                    }
                }
            }
        }
        Ok(Decryptor { keys })
    }

    /// Opens an encrypted value stored at etcd key `key` (aesgcm authenticates the key).
    pub fn decrypt(&self, key: &[u8], value: &[u8]) -> Result<Vec<u8>, DecryptError> {
        let rest = value
            .strip_prefix(PREFIX)
            .ok_or_else(|| DecryptError::Unknown(String::new()))?;
        let mut parts = rest.splitn(4, |b| *b == b':');
        let provider = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        let _version = parts.next();
        let name = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        let payload = parts.next().unwrap_or_default();
        let cipher = match provider.as_str() {
            "aescbc" => Cipher::AesCbc,
            "aesgcm" => Cipher::AesGcm,
            "secretbox" => Cipher::Secretbox,
            "kms" => return Err(DecryptError::Kms(name)),
            _ => return Err(DecryptError::Unknown(provider)),
        };
        let k = self
            .keys
            .iter()
            .find(|k| k.cipher == cipher && k.name == name)
            .ok_or(DecryptError::NoKey {
                provider,
                key: name,
            })?;
        open(cipher, &k.secret, key, payload).ok_or(DecryptError::Failed(cipher.name()))
    }
}

fn open(cipher: Cipher, secret: &[u8], key: &[u8], payload: &[u8]) -> Option<Vec<u8>> {
    match cipher {
        Cipher::AesCbc => {
            let (iv, body) = payload.split_at_checked(16)?;
            let mut buf = body.to_vec();
            let n = match secret.len() {
                16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(secret, iv)
                    .ok()?
                    .decrypt_padded_mut::<Pkcs7>(&mut buf)
                    .ok()?
                    .len(),
                24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(secret, iv)
                    .ok()?
                    .decrypt_padded_mut::<Pkcs7>(&mut buf)
                    .ok()?
                    .len(),
                _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(secret, iv)
                    .ok()?
                    .decrypt_padded_mut::<Pkcs7>(&mut buf)
                    .ok()?
                    .len(),
            };
            buf.truncate(n);
            Some(buf)
        }
        Cipher::AesGcm => {
            let (nonce, body) = payload.split_at_checked(12)?;
            let nonce = aes_gcm::Nonce::from_slice(nonce);
            let with_aad = Payload {
                msg: body,
                aad: key,
            };
            match secret.len() {
                16 => {
                    let c = aes_gcm::Aes128Gcm::new_from_slice(secret).ok()?;
                    c.decrypt(nonce, with_aad).ok()
                }
                32 => {
                    let c = Aes256Gcm::new_from_slice(secret).ok()?;
                    c.decrypt(nonce, with_aad).ok()
                }
                _ => None,
            }
        }
        Cipher::Secretbox => {
            use crypto_secretbox::{KeyInit as _, XSalsa20Poly1305, aead::Aead as _};
            let (nonce, body) = payload.split_at_checked(24)?;
            let c = XSalsa20Poly1305::new_from_slice(secret).ok()?;
            c.decrypt(crypto_secretbox::Nonce::from_slice(nonce), body)
                .ok()
        }
    }
}
