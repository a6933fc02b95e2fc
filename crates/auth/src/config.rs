//! Errors reading security configuration files (token, key, policy and CA files), shared by
//! every module that reads one; it imports nothing of this crate.

use std::path::Path;

/// Errors reading security configuration files (startup only).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file's contents are wrong.
    #[error("{path}: {why}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
}

/// A [`ConfigError::Invalid`] for `path`.
pub(crate) fn invalid(path: &Path, why: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// Reads a configuration file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// A TLS file listwatch-kubeclient read (the serving certificate) as a [`ConfigError`].
#[cfg(feature = "standalone")]
impl From<listwatch_kubeclient::Error> for ConfigError {
    fn from(e: listwatch_kubeclient::Error) -> Self {
        match e {
            listwatch_kubeclient::Error::File { path, why } => ConfigError::Invalid { path, why },
            other => ConfigError::Invalid {
                path: String::new(),
                why: other.to_string(),
            },
        }
    }
}
