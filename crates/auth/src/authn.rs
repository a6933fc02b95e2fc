//! The standalone authenticator: bearer tokens (kube-apiserver's CSV token file, then the
//! [`TokenAuthenticator`]s — service-account and OIDC JWTs — then a [`TokenReviewer`], the
//! token webhook), the verified client certificate's user, and anonymous requests (all of
//! them with `--anonymous-auth`, else GETs of the public health and version paths).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use listwatch_core::ApiError;

use crate::authorizer::{AuthFuture, Authenticate, User};
use crate::config::{ConfigError, invalid, read};

/// One authenticator of a kind of bearer token, judged without waiting (JWTs).
pub trait TokenAuthenticator: Send + Sync {
    /// `None` when the token is not this authenticator's to judge (another issuer, not a
    /// JWT); else the user, or why the token is refused.
    fn authenticate_token(&self, token: &str) -> Option<Result<User, ApiError>>;
}

/// Asked last, and may take a while, about a token nothing else claims (the token webhook).
pub trait TokenReviewer: Send + Sync {
    /// The user `token` names, or 401.
    fn review_token<'a>(&'a self, token: &'a str) -> AuthFuture<'a>;
}

/// The paths kube-apiserver's `system:public-info-viewer` ClusterRole lets everyone,
/// `system:unauthenticated` included, GET: what load balancers and kubelet probes read.
pub const PUBLIC_INFO_PATHS: &[&str] = &["/healthz", "/livez", "/readyz", "/version", "/version/"];

/// Whether `request` is a GET of one of the [`PUBLIC_INFO_PATHS`] (exact paths, as the
/// ClusterRole's `nonResourceURLs` match; any query).
pub fn is_public_info(request: &http::request::Parts) -> bool {
    request.method == http::Method::GET && PUBLIC_INFO_PATHS.contains(&request.uri.path())
}

/// The bearer token of an `Authorization` header as kube-apiserver's bearer-token
/// authenticator reads it: the scheme compared case-insensitively, the token up to the
/// next space. `None` (not a bearer credential: other authenticators and anonymous may
/// still apply) for another scheme or an empty token; `Err` for a header that is not text.
fn bearer_token(headers: &http::HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(v) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let auth = v.to_str().map_err(|_| ApiError::Unauthorized)?.trim();
    let mut parts = auth.splitn(3, ' ');
    let scheme = parts.next().unwrap_or_default();
    let token = parts.next().unwrap_or_default();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Ok(None);
    }
    Ok(Some(token))
}

/// Who a connection's client certificate makes the client, decided once per connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The user a certificate signed by the client CA names.
    pub user: Option<User>,
    /// The certificate is a trusted front proxy's: the user is in the request headers.
    pub front_proxy: bool,
}

/// Put into a request's extensions by the server when the connection's client certificate
/// is a trusted front proxy's: the request's headers then name the user.
#[derive(Clone, Copy, Debug)]
pub struct FrontProxied;

/// The headers a trusted front proxy names the user in: kube-apiserver's
/// `--requestheader-username-headers`, `--requestheader-group-headers` and
/// `--requestheader-extra-headers-prefix`.
#[derive(Clone, Debug)]
pub struct RequestHeaderNames {
    /// The first of these with a value is the user's name.
    pub user: Vec<String>,
    /// Every value of each is a group.
    pub group: Vec<String>,
    /// A header starting with one of these (case-insensitive) names an extra: the rest of
    /// its name, percent-decoded and lower-cased, is the key; each value one of its values.
    pub extra_prefixes: Vec<String>,
}

impl Default for RequestHeaderNames {
    fn default() -> Self {
        RequestHeaderNames {
            user: vec!["X-Remote-User".into()],
            group: vec!["X-Remote-Group".into()],
            extra_prefixes: vec!["X-Remote-Extra-".into()],
        }
    }
}

/// A percent-encoded header-name fragment decoded (an extra's key, as kube-apiserver
/// writes keys with `/` or upper case into header names); malformed escapes are kept.
pub fn unescape_header_key(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl RequestHeaderNames {
    /// The user the headers name, if one does.
    fn user_in(&self, headers: &http::HeaderMap) -> Option<User> {
        let name = self
            .user
            .iter()
            .filter_map(|h| headers.get(h.as_str())?.to_str().ok())
            .find(|v| !v.is_empty())?;
        let groups = self
            .group
            .iter()
            .flat_map(|h| headers.get_all(h.as_str()))
            .filter_map(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        let mut extra = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (h, v) in headers {
            let Some(key) = self.extra_prefixes.iter().find_map(|p| {
                let n = h.as_str();
                (n.len() > p.len() && n[..p.len()].eq_ignore_ascii_case(p))
                    .then(|| unescape_header_key(&n[p.len()..]).to_lowercase())
            }) else {
                continue;
            };
            if let Ok(v) = v.to_str() {
                extra.entry(key).or_default().push(v.to_string());
            }
        }
        Some(User {
            name: name.to_string(),
            groups,
            uid: String::new(),
            extra,
        })
    }
}

/// Turns credentials into a user: bearer tokens (the static file's, then JWTs —
/// service-account, OIDC — then the webhook), client certificates, or anonymous.
#[derive(Default)]
pub struct Authenticator {
    tokens: HashMap<String, User>,
    /// Asked in order for a token the static file does not know.
    token_authenticators: Vec<Arc<dyn TokenAuthenticator>>,
    /// Asked last, for a token no other authenticator claims.
    webhook: Option<Arc<dyn TokenReviewer>>,
    /// Requests without credentials become `system:anonymous` instead of 401.
    pub anonymous: bool,
    /// With these, a request over a trusted front proxy's connection ([`FrontProxied`]) is
    /// the user its headers name, before any other credential is looked at.
    pub request_headers: Option<RequestHeaderNames>,
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
    pub fn with_webhook(mut self, w: Arc<dyn TokenReviewer>) -> Self {
        self.webhook = Some(w);
        self
    }

    /// Also accepts the tokens `a` vouches for (asked after the static tokens and the
    /// authenticators added before it).
    pub fn with_token_authenticator(mut self, a: Arc<dyn TokenAuthenticator>) -> Self {
        self.token_authenticators.push(a);
        self
    }

    /// Reads kube-apiserver's static token file: `token,user,uid,"group1,group2"` per line
    /// (groups optional; blank lines and `#` comments skipped).
    pub fn from_token_file(path: &Path, anonymous: bool) -> Result<Self, ConfigError> {
        let data = read(path)?;
        let text = std::str::from_utf8(&data).map_err(|e| invalid(path, e))?;
        let mut tokens = HashMap::new();
        let records = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        for (i, line) in records.enumerate() {
            let rec =
                csv_fields(line).map_err(|e| invalid(path, format!("line {}: {e}", i + 1)))?;
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
                    uid: rec[2].to_string(),
                    ..User::default()
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
    /// The request's user: a trusted front proxy's headers win, then a bearer token (the
    /// static file, then the JWT authenticators whose issuer it names, then the webhook),
    /// then the client certificate; without any, anonymous when enabled, and for GETs of the public
    /// health and version paths in any case. A token that is present but unknown is 401
    /// even with anonymous on, as in kube-apiserver.
    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
        cert_user: Option<&'a User>,
    ) -> AuthFuture<'a> {
        Box::pin(async move {
            // kube-apiserver asks its request-header authenticator first.
            if let Some(names) = &self.request_headers
                && request.extensions.get::<FrontProxied>().is_some()
                && let Some(user) = names.user_in(&request.headers)
            {
                return Ok(with_group(user, "system:authenticated"));
            }
            if let Some(token) = bearer_token(&request.headers)? {
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
                        Some(w) => w.review_token(token).await?,
                        None => return Err(ApiError::Unauthorized),
                    },
                };
                return Ok(with_group(user, "system:authenticated"));
            }
            if let Some(u) = cert_user {
                return Ok(with_group(u.clone(), "system:authenticated"));
            }
            // kube-apiserver with anonymous requests limited to its probes
            // (AuthenticationConfiguration `anonymous.conditions`) plus what
            // system:public-info-viewer grants: a probe needs no credentials.
            if self.anonymous || is_public_info(request) {
                return Ok(User::anonymous());
            }
            Err(ApiError::Unauthorized)
        })
    }
}

/// The fields of one line of a CSV file as kube-apiserver's token file reads it: separated
/// by commas, each trimmed, a field may be quoted (`"a,b"`, a quote in it doubled) to hold
/// commas — the groups field does. A small parser of our own rather than a CSV crate: the
/// embedding facade takes this crate and should not carry one for four fields.
fn csv_fields(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        rest = rest.trim_start();
        let field = if let Some(quoted) = rest.strip_prefix('"') {
            let mut field = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) => {
                        if quoted[i + 1..].starts_with('"') {
                            field.push('"');
                            chars.next();
                        } else {
                            break i + 1;
                        }
                    }
                    Some((_, c)) => field.push(c),
                    None => return Err("a quoted field is not closed"),
                }
            };
            rest = quoted[end..].trim_start();
            if !rest.is_empty() && !rest.starts_with(',') {
                return Err("text after a quoted field");
            }
            field
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            let field = rest[..end].trim().to_string();
            rest = &rest[end..];
            field
        };
        fields.push(field);
        match rest.strip_prefix(',') {
            Some(more) => rest = more,
            None => return Ok(fields),
        }
    }
}

fn with_group(mut u: User, g: &str) -> User {
    if !u.groups.iter().any(|x| x == g) {
        u.groups.push(g.into());
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, path: &str, authorization: Option<&str>) -> http::request::Parts {
        let mut b = http::Request::builder().method(method).uri(path);
        if let Some(a) = authorization {
            b = b.header(http::header::AUTHORIZATION, a);
        }
        b.body(()).expect("request").into_parts().0
    }

    fn alice() -> Authenticator {
        let mut a = Authenticator::default();
        a.tokens.insert(
            "t0k3n".into(),
            User {
                name: "alice".into(),
                ..User::default()
            },
        );
        a
    }

    fn run(a: &Authenticator, h: &http::request::Parts) -> Result<User, ApiError> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match a.authenticate(h, None).as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => panic!("the static token file never waits"),
        }
    }

    #[test]
    fn the_token_file_reads_quoted_groups_comments_and_blank_lines() {
        let dir = std::env::temp_dir().join(format!("lw-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("tokens.csv");
        let file = "# a comment\n\n\
            t1,alice,uid-1,\"system:masters, dev ,\"\n\
            \t t2 , bob , uid-2 \r\n\
            t3,\"carol \"\"c\"\"\",uid-3,ops\n";
        std::fs::write(&path, file).expect("write");
        let a = Authenticator::from_token_file(&path, false).expect("tokens");
        let user = |t: &str| a.tokens.get(t).cloned().expect(t);
        assert_eq!(user("t1").name, "alice");
        assert_eq!(user("t1").uid, "uid-1");
        assert_eq!(user("t1").groups, ["system:masters", "dev"]);
        assert_eq!(
            (user("t2").name, user("t2").uid),
            ("bob".into(), "uid-2".into())
        );
        assert!(user("t2").groups.is_empty());
        assert_eq!(user("t3").name, "carol \"c\"");
        assert_eq!(user("t3").groups, ["ops"]);
        assert_eq!(a.tokens.len(), 3);
        for bad in ["t,u\n", "t,u,\"open\n", "t,u,\"x\"y\n"] {
            std::fs::write(&path, bad).expect("write");
            assert!(
                Authenticator::from_token_file(&path, false).is_err(),
                "{bad:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Who each request is (`None`: refused). The bearer scheme is case-insensitive; an
    /// unknown token is refused, and another scheme or an empty token is no bearer
    /// credential at all (401 here only because anonymous is off); probes need no
    /// credentials, but bad ones are refused.
    #[test]
    fn bearer_tokens_in_any_case_and_probes_without_credentials_are_who_they_say() {
        let a = alice();
        let alice = Some("alice");
        // Anonymous is checked whole: its name and group.
        let anonymous = Some("system:anonymous");
        let cases = [
            ("GET", "/api", Some("Bearer t0k3n"), alice),
            ("GET", "/api", Some("bearer t0k3n"), alice),
            ("GET", "/api", Some("BEARER t0k3n"), alice),
            ("GET", "/api", Some("bEaReR t0k3n extra"), alice),
            ("GET", "/api", Some("bearer nope"), None),
            ("GET", "/api", Some("Basic dTpw"), None),
            ("GET", "/api", Some("Bearer "), None),
            ("GET", "/api", Some("Bearer  t0k3n"), None),
            ("GET", "/api", Some("t0k3n"), None),
            ("GET", "/healthz", None, anonymous),
            ("GET", "/livez", None, anonymous),
            ("GET", "/readyz?verbose", None, anonymous),
            ("GET", "/version", None, anonymous),
            ("GET", "/version/", None, anonymous),
            ("GET", "/readyz/etcd", None, None),
            ("GET", "/api", None, None),
            ("POST", "/healthz", None, None),
            ("GET", "/readyz", Some("Bearer nope"), None),
        ];
        for (method, path, authorization, expected) in cases {
            let got = run(&a, &head(method, path, authorization));
            let case = format!("{method} {path} {authorization:?}");
            match expected {
                Some("system:anonymous") => {
                    assert_eq!(got.expect(&case), User::anonymous(), "{case}");
                }
                Some(name) => assert_eq!(got.expect(&case).name, name, "{case}"),
                None => assert!(matches!(got, Err(ApiError::Unauthorized)), "{case}"),
            }
        }
    }
}
