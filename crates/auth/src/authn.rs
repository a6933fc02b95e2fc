//! Who may connect and who they are: TLS (rustls, HTTP/2 by ALPN, optional client
//! certificates), authentication (bearer tokens from kube-apiserver's CSV token file, client
//! certificate CN/O, anonymous only when enabled) and an ABAC policy file authorizer.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use listwatch_core::{ApiError, ResourceInfo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use crate::auth::{Authenticate, Authorizer, User};

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

/// A rustls server config: `cert`/`key` PEM files, ALPN `h2` then `http/1.1`, and, with
/// `client_ca`, client certificates verified against it (optional for the client, so
/// token users can still connect).
pub fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(cert, e))?;
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| invalid(key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(cert, e))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&read(ca)?) {
                roots
                    .add(c.map_err(|e| invalid(ca, e))?)
                    .map_err(|e| invalid(ca, e))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| invalid(ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key_der)
        .map_err(|e| invalid(key, e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The user named by a verified client certificate: CN is the user, each O a group.
pub fn user_from_cert(cert: &CertificateDer<'_>) -> Option<User> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(User { name, groups })
}

/// Turns credentials into a user: bearer tokens (the static file's, then JWTs —
/// service-account, OIDC), client certificates, or anonymous.
#[derive(Default)]
pub struct Authenticator {
    tokens: HashMap<String, User>,
    /// Asked in order for a token the static file does not know.
    token_authenticators: Vec<std::sync::Arc<dyn crate::tokens::TokenAuthenticator>>,
    /// Asked last, for a token no other authenticator claims.
    webhook: Option<std::sync::Arc<crate::tokens::WebhookTokens>>,
    /// Requests without credentials become `system:anonymous` instead of 401.
    pub anonymous: bool,
}

impl Authenticator {
    /// Client certificates only (no tokens).
    pub fn certificates_only(anonymous: bool) -> Self {
        Authenticator {
            anonymous,
            ..Authenticator::default()
        }
    }

    /// Asks `w` about tokens nothing else claims (kube-apiserver's token webhook).
    pub fn with_webhook(mut self, w: std::sync::Arc<crate::tokens::WebhookTokens>) -> Self {
        self.webhook = Some(w);
        self
    }

    /// Also accepts the tokens `a` vouches for (asked after the static tokens and the
    /// authenticators added before it).
    pub fn with_token_authenticator(
        mut self,
        a: std::sync::Arc<dyn crate::tokens::TokenAuthenticator>,
    ) -> Self {
        self.token_authenticators.push(a);
        self
    }

    /// Reads kube-apiserver's static token file: `token,user,uid,"group1,group2"` per line
    /// (groups optional; blank lines and `#` comments skipped).
    pub fn from_token_file(path: &Path, anonymous: bool) -> Result<Self, ConfigError> {
        let data = read(path)?;
        let mut tokens = HashMap::new();
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .comment(Some(b'#'))
            .trim(csv::Trim::All)
            .from_reader(data.as_slice());
        for (i, rec) in rdr.records().enumerate() {
            let rec = rec.map_err(|e| invalid(path, e))?;
            if rec.len() < 3 {
                return Err(invalid(
                    path,
                    format!("line {}: want token,user,uid[,\"groups\"]", i + 1),
                ));
            }
            let groups = rec
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            tokens.insert(
                rec[0].to_string(),
                User {
                    name: rec[1].to_string(),
                    groups,
                },
            );
        }
        Ok(Authenticator {
            tokens,
            anonymous,
            ..Authenticator::default()
        })
    }
}

impl Authenticate for Authenticator {
    /// The request's user: a bearer token wins (the static file, then the JWT
    /// authenticators whose issuer it names, then the webhook), then the client
    /// certificate; without either, anonymous when enabled. A token that is present but
    /// unknown is 401 even with anonymous on, as in kube-apiserver.
    fn authenticate<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
        cert_user: Option<&'a User>,
    ) -> crate::auth::AuthFuture<'a> {
        Box::pin(async move {
            if let Some(v) = headers.get(http::header::AUTHORIZATION) {
                let token = v
                    .to_str()
                    .ok()
                    .and_then(|s| s.strip_prefix("Bearer "))
                    .map(str::trim)
                    .ok_or(ApiError::Unauthorized)?;
                if let Some(user) = self.tokens.get(token) {
                    return Ok(with_group(user.clone(), "system:authenticated"));
                }
                let user = match self
                    .token_authenticators
                    .iter()
                    .find_map(|a| a.authenticate_token(token))
                {
                    Some(judged) => judged?,
                    None => match &self.webhook {
                        Some(w) => w.review(token).await?,
                        None => return Err(ApiError::Unauthorized),
                    },
                };
                return Ok(with_group(user, "system:authenticated"));
            }
            if let Some(u) = cert_user {
                return Ok(with_group(u.clone(), "system:authenticated"));
            }
            if self.anonymous {
                return Ok(User {
                    name: "system:anonymous".into(),
                    groups: vec!["system:unauthenticated".into()],
                });
            }
            Err(ApiError::Unauthorized)
        })
    }
}

fn with_group(mut u: User, g: &str) -> User {
    if !u.groups.iter().any(|x| x == g) {
        u.groups.push(g.into());
    }
    u
}

/// One ABAC rule (kube-apiserver's `--authorization-policy-file` format, one JSON object
/// per line): `{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy",
/// "spec":{"user":"alice","namespace":"team-a","resource":"pods","readonly":true}}`.
#[derive(Debug, serde::Deserialize)]
struct Policy {
    spec: PolicySpec,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicySpec {
    #[serde(default)]
    user: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    readonly: bool,
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    resource: String,
}

/// Authorizes by an ABAC policy file: a request is allowed when one rule matches its user
/// (or one of its groups), resource, API group and namespace, and its verb (`readonly`
/// rules allow get, list and watch only). `*` matches anything. A rule with a namespace
/// never matches a cluster-wide request, so a user allowed some namespaces gets 403 for a
/// LIST across all of them, as with RBAC.
pub struct PolicyAuthorizer {
    rules: Vec<PolicySpec>,
}

impl PolicyAuthorizer {
    /// Reads the policy file (JSON lines; blank lines and `#` comments skipped).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let data = read(path)?;
        let text = String::from_utf8(data).map_err(|e| invalid(path, e))?;
        let mut rules = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let p: Policy = serde_json::from_str(line)
                .map_err(|e| invalid(path, format!("line {}: {e}", i + 1)))?;
            rules.push(p.spec);
        }
        Ok(PolicyAuthorizer { rules })
    }
}

fn matches(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

impl Authorizer for PolicyAuthorizer {
    fn allowed(
        &self,
        user: Option<&User>,
        verb: &str,
        resource: &ResourceInfo,
        namespace: Option<&str>,
    ) -> bool {
        let Some(user) = user else { return false };
        let read = matches!(verb, "get" | "list" | "watch");
        self.rules.iter().any(|r| {
            let who = (!r.user.is_empty() && matches(&r.user, &user.name))
                || (!r.group.is_empty() && user.groups.iter().any(|g| matches(&r.group, g)));
            let ns_ok = match namespace {
                Some(ns) => matches(&r.namespace, ns),
                // Cluster-wide (all namespaces, or a cluster-scoped resource).
                None => r.namespace == "*" || r.namespace.is_empty(),
            };
            who && (read || !r.readonly)
                && matches(&r.resource, &resource.resource)
                && matches(&r.api_group, &resource.group)
                && ns_ok
        })
    }
}
