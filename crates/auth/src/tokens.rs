//! Bearer tokens beyond the static file: JWTs verified here without calling anything — the
//! cluster's service-account tokens (signed with its key, checked against the objects the
//! cache follows) and OIDC ID tokens (keys from a JWKS file) — and, for clusters that use
//! one, a token webhook (`TokenReview`, answers cached). Chained after the static token file
//! by [`crate::authn::Authenticator`].

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use listwatch_core::ApiError;
use listwatch_core::scan;
use listwatch_sources::Registry;
use ring::signature::KeyPair;
use serde::Deserialize;
use serde_json::Value;
use x509_parser::prelude::FromDer as _;

pub use crate::authn::TokenAuthenticator;
use crate::authn::TokenReviewer;
use crate::authorizer::{AuthFuture, User, json_extra, json_strings};
use crate::config::{ConfigError, invalid, read};
use crate::webhook::ReviewSender;

/// Seconds of clock skew tolerated on `exp` / `nbf` / `iat`, as kube-apiserver allows.
const LEEWAY: u64 = 60;

/// The issuer of legacy (Secret-based) service-account tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

/// Why a token was refused (logged, never sent: the client sees a plain 401).
fn refuse(why: impl std::fmt::Display) -> Result<User, ApiError> {
    tracing::info!(reason = %why, "bearer token refused");
    Err(ApiError::Unauthorized)
}

/// The `iss` of a JWT, read without verifying it (to pick the authenticator that will).
fn issuer(token: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64url(payload)?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims["iss"].as_str().map(str::to_string)
}

/// A JWT segment (base64url; trailing padding tolerated).
fn base64url(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).ok()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A public key read from PEM: `PUBLIC KEY` / `RSA PUBLIC KEY`, a certificate's, or the
/// public half of an RSA (`RSA PRIVATE KEY`, `PRIVATE KEY`) or ECDSA P-256 (`PRIVATE KEY`)
/// private key — kube-apiserver's `--service-account-key-file` takes any of these.
fn keys_from_pem(path: &Path) -> Result<Vec<(DecodingKey, Algorithm)>, ConfigError> {
    let text = read(path)?;
    let invalid = |why: String| invalid(path, why);
    let blocks = pem::parse_many(&text).map_err(|e| invalid(e.to_string()))?;
    let mut keys = Vec::new();
    for block in blocks {
        let der = block.contents();
        let key = match block.tag() {
            "PUBLIC KEY" | "RSA PUBLIC KEY" | "CERTIFICATE" => {
                let spki = match block.tag() {
                    "CERTIFICATE" => x509_spki(der).map_err(invalid)?,
                    _ => der.to_vec(),
                };
                public_from_spki(&spki, block.tag() == "RSA PUBLIC KEY").map_err(invalid)?
            }
            "RSA PRIVATE KEY" => {
                let pair = ring::signature::RsaKeyPair::from_der(der)
                    .map_err(|e| invalid(format!("RSA private key: {e}")))?;
                (
                    DecodingKey::from_rsa_der(pair.public_key().as_ref()),
                    Algorithm::RS256,
                )
            }
            "PRIVATE KEY" => {
                if let Ok(pair) = ring::signature::RsaKeyPair::from_pkcs8(der) {
                    (
                        DecodingKey::from_rsa_der(pair.public_key().as_ref()),
                        Algorithm::RS256,
                    )
                } else {
                    let rng = ring::rand::SystemRandom::new();
                    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
                        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                        der,
                        &rng,
                    )
                    .map_err(|e| invalid(format!("private key (RSA or ECDSA P-256): {e}")))?;
                    (
                        DecodingKey::from_ec_der(pair.public_key().as_ref()),
                        Algorithm::ES256,
                    )
                }
            }
            other => return Err(invalid(format!("unsupported PEM block {other:?}"))),
        };
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(invalid("no keys".into()));
    }
    Ok(keys)
}

/// A `SubjectPublicKeyInfo` (or PKCS#1 `RSAPublicKey` when `pkcs1`) as a verification key.
fn public_from_spki(der: &[u8], pkcs1: bool) -> Result<(DecodingKey, Algorithm), String> {
    if pkcs1 {
        return Ok((DecodingKey::from_rsa_der(der), Algorithm::RS256));
    }
    let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(der)
        .map_err(|e| format!("public key: {e}"))?;
    let key = spki.subject_public_key.data.as_ref();
    let alg = &spki.algorithm.algorithm;
    if *alg == x509_parser::oid_registry::OID_PKCS1_RSAENCRYPTION {
        Ok((DecodingKey::from_rsa_der(key), Algorithm::RS256))
    } else if *alg == x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY {
        Ok((DecodingKey::from_ec_der(key), Algorithm::ES256))
    } else {
        Err("public key is neither RSA nor ECDSA".into())
    }
}

/// A certificate's `SubjectPublicKeyInfo`.
fn x509_spki(der: &[u8]) -> Result<Vec<u8>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    Ok(cert.tbs_certificate.subject_pki.raw.to_vec())
}

/// Verifies `token` with the keys of its algorithm (and of its `kid`, when both the token
/// and a key name one); the claims when one verifies it.
fn verify(
    token: &str,
    keys: &[(Option<String>, DecodingKey, Algorithm)],
    validation: &Validation,
) -> Result<Value, String> {
    let header = jsonwebtoken::decode_header(token).map_err(|e| e.to_string())?;
    let mut last = String::from("no key for the token's algorithm");
    for (kid, key, alg) in keys {
        if *alg != header.alg || (kid.is_some() && header.kid.is_some() && *kid != header.kid) {
            continue;
        }
        let mut v = validation.clone();
        v.algorithms = vec![*alg];
        match jsonwebtoken::decode::<Value>(token, key, &v) {
            Ok(data) => return Ok(data.claims),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// What an object the cache holds says of itself: its uid and whether it is being deleted.
struct Held {
    uid: String,
    deleting: bool,
    bytes: bytes::Bytes,
}

/// Service-account tokens, checked against the service accounts, secrets, pods and nodes
/// the cache follows (kube-apiserver's `--service-account-lookup`, always on here).
pub struct ServiceAccountTokens {
    keys: Vec<(Option<String>, DecodingKey, Algorithm)>,
    issuers: Vec<String>,
    audiences: Vec<String>,
    objects: Registry,
}

impl ServiceAccountTokens {
    /// Keys from `key_files` (PEM), bound tokens from `issuers` for `audiences` (empty: the
    /// issuers, as kube-apiserver defaults `--api-audiences`); lookups in `objects`.
    pub fn from_key_files(
        key_files: &[impl AsRef<Path>],
        issuers: Vec<String>,
        audiences: Vec<String>,
        objects: Registry,
    ) -> Result<Self, ConfigError> {
        let mut keys = Vec::new();
        for f in key_files {
            // PEM keys have no id: any of the token's algorithm may have signed it.
            keys.extend(
                keys_from_pem(f.as_ref())?
                    .into_iter()
                    .map(|(k, a)| (None, k, a)),
            );
        }
        let audiences = if audiences.is_empty() {
            issuers.clone()
        } else {
            audiences
        };
        Ok(ServiceAccountTokens {
            keys,
            issuers,
            audiences,
            objects,
        })
    }

    /// The object `resource`/`namespace`/`name` of core v1 if the cache holds it.
    fn held(&self, resource: &str, namespace: &str, name: &str) -> Option<Held> {
        let store = self.objects.get("", "v1", resource)?;
        let key = store.info().key(namespace, name);
        let snap = store.current();
        let r = snap.get(&key)?;
        let b = r.bytes();
        let uid = scan::find_path(b, 0, &["metadata", "uid"])
            .and_then(|v| scan::plain_string(b, v))
            .map(|s| String::from_utf8_lossy(&b[s.0..s.1]).into_owned())
            .unwrap_or_default();
        let deleting = scan::find_path(b, 0, &["metadata", "deletionTimestamp"])
            .is_some_and(|v| b[v.0] == b'"');
        Some(Held {
            uid,
            deleting,
            bytes: b.clone(),
        })
    }

    /// The object must be held, not being deleted, and (when `uid` is given) the same one.
    fn alive(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<Held, String> {
        let held = self
            .held(resource, namespace, name)
            .ok_or_else(|| format!("{resource} {namespace}/{name} not found"))?;
        if held.deleting {
            return Err(format!("{resource} {namespace}/{name} is being deleted"));
        }
        if let Some(uid) = uid
            && held.uid != uid
        {
            return Err(format!(
                "{resource} {namespace}/{name} has uid {}, the token names {uid}",
                held.uid
            ));
        }
        Ok(held)
    }

    fn legacy(&self, token: &str) -> Result<User, String> {
        let mut v = Validation::new(Algorithm::RS256);
        v.set_issuer(&[LEGACY_ISSUER]);
        v.validate_exp = false;
        v.validate_aud = false;
        v.required_spec_claims.clear();
        let claims = verify(token, &self.keys, &v)?;
        let claim = |k: &str| -> Result<&str, String> {
            claims[format!("kubernetes.io/serviceaccount/{k}")]
                .as_str()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("claim {k} missing"))
        };
        let (ns, secret, sa, uid) = (
            claim("namespace")?,
            claim("secret.name")?,
            claim("service-account.name")?,
            claim("service-account.uid")?,
        );
        // Valid only while its Secret exists and still holds this very token.
        let held = self.alive("secrets", ns, secret, None)?;
        let b = &held.bytes[..];
        let stored = scan::find_path(b, 0, &["data", "token"])
            .and_then(|v| scan::plain_string(b, v))
            .and_then(|s| STANDARD.decode(&b[s.0..s.1]).ok())
            .unwrap_or_default();
        if !same_bytes(&stored, token.as_bytes()) {
            return Err(format!("secret {ns}/{secret} does not hold this token"));
        }
        if scan::find_path(
            b,
            0,
            &[
                "metadata",
                "labels",
                "kubernetes.io/legacy-token-invalid-since",
            ],
        )
        .is_some()
        {
            return Err(format!("secret {ns}/{secret}'s token was invalidated"));
        }
        self.alive("serviceaccounts", ns, sa, Some(uid))?;
        Ok(service_account_user(ns, sa))
    }

    fn bound(&self, token: &str) -> Result<User, String> {
        let mut v = Validation::new(Algorithm::RS256);
        v.set_issuer(&self.issuers);
        v.set_audience(&self.audiences);
        v.leeway = LEEWAY;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = verify(token, &self.keys, &v)?;
        #[derive(Deserialize)]
        struct Ref {
            name: String,
            uid: String,
        }
        #[derive(Deserialize)]
        struct Private {
            namespace: String,
            serviceaccount: Ref,
            pod: Option<Ref>,
            secret: Option<Ref>,
            node: Option<Ref>,
        }
        let private: Private = serde_json::from_value(claims["kubernetes.io"].clone())
            .map_err(|e| format!("kubernetes.io claim: {e}"))?;
        if let Some(iat) = claims["iat"].as_u64()
            && iat > now() + LEEWAY
        {
            return Err("issued in the future".into());
        }
        let ns = private.namespace.as_str();
        let sa = &private.serviceaccount;
        self.alive("serviceaccounts", ns, &sa.name, Some(&sa.uid))?;
        // Bound to an object: valid only while that very object exists.
        if let Some(p) = &private.pod {
            self.alive("pods", ns, &p.name, Some(&p.uid))?;
        }
        if let Some(s) = &private.secret {
            self.alive("secrets", ns, &s.name, Some(&s.uid))?;
        }
        if let Some(n) = &private.node {
            self.alive("nodes", "", &n.name, Some(&n.uid))?;
        }
        Ok(service_account_user(ns, &sa.name))
    }
}

/// Equality in time independent of where the bytes differ (tokens are secrets).
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts` and
/// `system:serviceaccounts:<ns>`.
fn service_account_user(ns: &str, name: &str) -> User {
    User {
        name: format!("system:serviceaccount:{ns}:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
        ],
        ..User::default()
    }
}

impl TokenAuthenticator for ServiceAccountTokens {
    fn authenticate_token(&self, token: &str) -> Option<Result<User, ApiError>> {
        let iss = issuer(token)?;
        let result = if iss == LEGACY_ISSUER {
            self.legacy(token)
        } else if self.issuers.contains(&iss) {
            self.bound(token)
        } else {
            return None;
        };
        Some(result.or_else(refuse))
    }
}

/// OIDC ID tokens of one issuer, verified with the keys of a JWKS file (kube-apiserver's
/// `--oidc-*` flags; the keys are read from a file, never fetched).
pub struct OidcTokens {
    issuer: String,
    client_id: String,
    username_claim: String,
    username_prefix: String,
    groups_claim: Option<String>,
    groups_prefix: String,
    keys: Vec<(Option<String>, DecodingKey, Algorithm)>,
}

/// The OIDC authenticator's settings (kube-apiserver's flag names).
pub struct OidcConfig {
    /// `--oidc-issuer-url`.
    pub issuer: String,
    /// `--oidc-client-id`: the audience tokens must carry.
    pub client_id: String,
    /// `--oidc-username-claim` (default `sub`).
    pub username_claim: String,
    /// `--oidc-username-prefix`; `None`: `<issuer>#` unless the claim is `email`; `-`: none.
    pub username_prefix: Option<String>,
    /// `--oidc-groups-claim`.
    pub groups_claim: Option<String>,
    /// `--oidc-groups-prefix`.
    pub groups_prefix: String,
}

impl OidcTokens {
    /// An authenticator for `config` with the keys of the JWKS file `jwks`.
    pub fn new(config: OidcConfig, jwks: &Path) -> Result<Self, ConfigError> {
        let text = read(jwks)?;
        let invalid = |why: String| invalid(jwks, why);
        let set: jsonwebtoken::jwk::JwkSet =
            serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            let key = DecodingKey::from_jwk(jwk).map_err(|e| invalid(e.to_string()))?;
            let alg = match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                _ => Algorithm::RS256,
            };
            keys.push((jwk.common.key_id.clone(), key, alg));
        }
        if keys.is_empty() {
            return Err(invalid("no keys".into()));
        }
        let username_prefix = match config.username_prefix.as_deref() {
            Some("-") => String::new(),
            Some(p) => p.to_string(),
            None if config.username_claim == "email" => String::new(),
            None => format!("{}#", config.issuer),
        };
        Ok(OidcTokens {
            issuer: config.issuer,
            client_id: config.client_id,
            username_claim: config.username_claim,
            username_prefix,
            groups_claim: config.groups_claim,
            groups_prefix: config.groups_prefix,
            keys,
        })
    }

    fn check(&self, token: &str) -> Result<User, String> {
        let mut v = Validation::new(Algorithm::RS256);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.client_id]);
        v.leeway = LEEWAY;
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = verify(token, &self.keys, &v)?;
        let name = claims[self.username_claim.as_str()]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("claim {} missing", self.username_claim))?;
        if self.username_claim == "email" && claims["email_verified"] == Value::Bool(false) {
            return Err("email not verified".into());
        }
        let groups = match self.groups_claim.as_deref().map(|c| &claims[c]) {
            Some(Value::String(g)) => vec![format!("{}{g}", self.groups_prefix)],
            Some(Value::Array(gs)) => gs
                .iter()
                .filter_map(Value::as_str)
                .map(|g| format!("{}{g}", self.groups_prefix))
                .collect(),
            _ => Vec::new(),
        };
        Ok(User {
            name: format!("{}{name}", self.username_prefix),
            groups,
            ..User::default()
        })
    }
}

impl TokenAuthenticator for OidcTokens {
    fn authenticate_token(&self, token: &str) -> Option<Result<User, ApiError>> {
        if issuer(token)? != self.issuer {
            return None;
        }
        Some(self.check(token).or_else(refuse))
    }
}

/// How long a refused token's answer is kept (kube-apiserver's webhook keeps failures
/// briefly too, so a token being fixed is retried soon).
const WEBHOOK_FAILURE_TTL: Duration = Duration::from_secs(10);
/// Answers kept at most (expired ones are dropped first).
const WEBHOOK_CACHE_ENTRIES: usize = 10_000;
/// A webhook that does not answer within this is a 401.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// A token authenticator that asks someone else (kube-apiserver's
/// `--authentication-token-webhook-*`, or in front of a cluster the upstream's own
/// `tokenreviews`, as a delegating apiserver does): tokens no other authenticator claims
/// go as a `TokenReview` through a [`ReviewSender`] (the transport, its TLS and credential
/// are the caller's); answers are cached by the token's SHA-256 for `ttl` (refusals for
/// 10 s), and the user keeps the UID, groups and extras the review named.
pub struct WebhookTokens {
    sender: std::sync::Arc<dyn ReviewSender>,
    audiences: Vec<String>,
    ttl: Duration,
    cache: crate::cache::TtlCache<TokenHash, Option<User>>,
}

/// A token's SHA-256: the cache never holds the tokens themselves.
type TokenHash = [u8; 32];

impl WebhookTokens {
    /// Reviews sent through `sender`, asking for `audiences` (none: the reviewer's own),
    /// answers cached for `ttl`.
    pub fn new(
        sender: std::sync::Arc<dyn ReviewSender>,
        audiences: Vec<String>,
        ttl: Duration,
    ) -> Self {
        WebhookTokens {
            sender,
            audiences,
            ttl,
            cache: crate::cache::TtlCache::new(WEBHOOK_CACHE_ENTRIES),
        }
    }

    /// The user the reviewer says `token` is (cached), or 401.
    pub async fn review(&self, token: &str) -> Result<User, ApiError> {
        let key: TokenHash = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .map_err(|_| ApiError::Unauthorized)?;
        if let Some(answer) = self.cache.get(&key) {
            return answer.ok_or(ApiError::Unauthorized);
        }
        let answer = match tokio::time::timeout(WEBHOOK_TIMEOUT, self.ask(token)).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                // Not cached: the reviewer's trouble is not the token's.
                tracing::warn!(error = %e, "token review failed");
                return Err(ApiError::Unauthorized);
            }
            Err(_) => {
                tracing::warn!("token review timed out");
                return Err(ApiError::Unauthorized);
            }
        };
        let ttl = if answer.is_some() {
            self.ttl
        } else {
            WEBHOOK_FAILURE_TTL
        };
        self.cache.insert(key, answer.clone(), ttl);
        answer.ok_or(ApiError::Unauthorized)
    }

    /// One `TokenReview` round trip: `Some(user)` when authenticated.
    async fn ask(&self, token: &str) -> Result<Option<User>, String> {
        let mut spec = serde_json::json!({"token": token});
        if !self.audiences.is_empty() {
            spec["audiences"] = serde_json::json!(self.audiences);
        }
        let review = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": spec,
        });
        let answer = self
            .sender
            .send(bytes::Bytes::from(review.to_string()))
            .await?;
        let v: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
        let status = &v["status"];
        if status["authenticated"] != Value::Bool(true) {
            return Ok(None);
        }
        let user = &status["user"];
        let name = user["username"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or("authenticated without a username")?;
        Ok(Some(User {
            name: name.to_string(),
            groups: json_strings(&user["groups"]),
            uid: user["uid"].as_str().unwrap_or_default().to_string(),
            extra: json_extra(&user["extra"]),
        }))
    }
}

impl TokenReviewer for WebhookTokens {
    fn review_token<'a>(&'a self, token: &'a str) -> AuthFuture<'a> {
        Box::pin(self.review(token))
    }
}
