//! Impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`,
//! `Impersonate-Extra-<key>`), as kube-apiserver's impersonation filter applies it after
//! authentication: each header is an `impersonate` request the authenticated user must be
//! allowed (`users`, `serviceaccounts` in the account's namespace, `groups`, and
//! `uids`/`userextras/<key>` in `authentication.k8s.io`), and the request then runs as the
//! impersonated user. Without this, a read served here would be authorized and answered as
//! the requester itself, and `kubectl --as` would show what the requester (not the named user)
//! may see.

use http::HeaderMap;
use listwatch_core::status::Denied;
use listwatch_core::{ApiError, ObjectRef, ResourceInfo};

use crate::authn::unescape_header_key;
use crate::authorizer::{Attributes, Authorizer, User};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

/// Put in a request's extensions once its `Impersonate-*` headers were authorized and its
/// [`User`] replaced by the impersonated one: a gateway may then drop the headers and carry
/// the new user across the hop (rather than refuse them).
#[derive(Clone, Copy, Debug)]
pub struct Impersonated;

/// Whether `headers` ask for impersonation at all.
pub fn requested(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
}

/// One thing to be allowed to impersonate: the attributes kube-apiserver authorizes.
struct Wanted {
    group: &'static str,
    resource: &'static str,
    subresource: String,
    namespace: String,
    name: String,
}

/// The user `requester` acts as, given the `Impersonate-*` headers: `Ok(None)` without any,
/// 400 for groups, extras or a UID without a user, 403 (naming the first thing refused) when
/// `authorizer` does not allow `requester` to impersonate each of them.
pub async fn impersonate(
    authorizer: &dyn Authorizer,
    requester: &User,
    headers: &HeaderMap,
) -> Result<Option<User>, ApiError> {
    if !requested(headers) {
        return Ok(None);
    }
    let text = |v: &http::HeaderValue| {
        v.to_str()
            .map(str::to_string)
            .map_err(|_| ApiError::BadRequest("impersonation headers must be ASCII".into()))
    };
    let one = |name: &str| -> Result<String, ApiError> {
        headers
            .get(name)
            .map(text)
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let (name, uid) = (one(USER)?, one(UID)?);
    let groups = headers
        .get_all(GROUP)
        .iter()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    let mut extra = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (k, v) in headers {
        if let Some(key) = k.as_str().strip_prefix(EXTRA) {
            extra
                .entry(unescape_header_key(key))
                .or_default()
                .push(text(v)?);
        }
    }
    if name.is_empty() {
        return Err(ApiError::BadRequest(
            "impersonating groups, a UID or extras requires impersonating a user \
             (Impersonate-User)"
                .into(),
        ));
    }

    let mut wanted = Vec::new();
    let service_account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, sa)| !ns.is_empty() && !sa.is_empty() && !sa.contains(':'));
    let mut acting_groups = Vec::new();
    match service_account {
        Some((ns, sa)) => {
            wanted.push(Wanted {
                group: "",
                resource: "serviceaccounts",
                subresource: String::new(),
                namespace: ns.into(),
                name: sa.into(),
            });
            // A service account's own groups, unless groups are named.
            if groups.is_empty() {
                acting_groups = vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        None => wanted.push(Wanted {
            group: "",
            resource: "users",
            subresource: String::new(),
            namespace: String::new(),
            name: name.clone(),
        }),
    }
    for g in &groups {
        wanted.push(Wanted {
            group: "",
            resource: "groups",
            subresource: String::new(),
            namespace: String::new(),
            name: g.clone(),
        });
        acting_groups.push(g.clone());
    }
    for (key, values) in &extra {
        for v in values {
            wanted.push(Wanted {
                group: "authentication.k8s.io",
                resource: "userextras",
                subresource: key.clone(),
                namespace: String::new(),
                name: v.clone(),
            });
        }
    }
    if !uid.is_empty() {
        wanted.push(Wanted {
            group: "authentication.k8s.io",
            resource: "uids",
            subresource: String::new(),
            namespace: String::new(),
            name: uid.clone(),
        });
    }

    for w in wanted {
        let info = ResourceInfo {
            group: w.group.into(),
            version: "v1".into(),
            resource: w.resource.into(),
            namespaced: !w.namespace.is_empty(),
            ..ResourceInfo::default()
        };
        let ns = (!w.namespace.is_empty()).then_some(w.namespace.as_str());
        let mut attrs = Attributes::resource(requester.clone(), "impersonate", &info, ns, &w.name);
        attrs.subresource = w.subresource;
        let d = authorizer.authorize_async(&attrs).await;
        if let Some(e) = d.error {
            return Err(ApiError::Internal(format!("Internal error occurred: {e}")));
        }
        if !d.allowed {
            return Err(ApiError::Forbidden(Box::new(Denied {
                user: requester.name.clone(),
                verb: "impersonate".into(),
                object: ObjectRef::new(&info, &w.name),
                namespace: ns.map(str::to_string),
            })));
        }
    }

    // kube-apiserver adds the authenticated (or, for the anonymous user, the
    // unauthenticated) group unless one of them is named.
    let anonymous = name == "system:anonymous";
    let implied = if anonymous {
        "system:unauthenticated"
    } else {
        "system:authenticated"
    };
    let named = |g: &str| acting_groups.iter().any(|x| x == g);
    let has_implied = if anonymous {
        named("system:unauthenticated")
    } else {
        named("system:authenticated") || named("system:unauthenticated")
    };
    if !has_implied {
        acting_groups.push(implied.into());
    }
    Ok(Some(User {
        name,
        groups: acting_groups,
        uid,
        extra,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Decision;

    /// Allows `admin` to impersonate anything and nobody else anything; records what it
    /// was asked.
    #[derive(Default)]
    struct AdminMay(std::sync::Mutex<Vec<String>>);

    impl Authorizer for AdminMay {
        fn authorize(&self, a: &Attributes) -> Decision {
            self.0.lock().expect("lock").push(format!(
                "{} {} {}/{}/{} {}",
                a.user.name, a.verb, a.api_group, a.resource, a.subresource, a.name
            ));
            if a.user.name == "admin" {
                Decision::allow("")
            } else {
                Decision::no_opinion("")
            }
        }
    }

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        h
    }

    fn run(a: &AdminMay, who: &str, h: &[(&str, &str)]) -> Result<Option<User>, ApiError> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let hs = headers(h);
        let requester = user(who);
        let mut f = std::pin::pin!(impersonate(a, &requester, &hs));
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => panic!("a synchronous authorizer never waits"),
        }
    }

    /// Whom `admin` impersonates with the headers `h` (allowed), and what the authorizer
    /// was asked on the way.
    fn admin_impersonating(h: &[(&str, &str)]) -> (User, Vec<String>) {
        let a = AdminMay::default();
        let u = run(&a, "admin", h)
            .expect("allowed")
            .expect("impersonating");
        (u, a.0.into_inner().expect("lock"))
    }

    #[test]
    fn a_service_account_is_impersonated_with_its_groups_once_allowed() {
        let (u, asked) =
            admin_impersonating(&[("Impersonate-User", "system:serviceaccount:ns1:e2e")]);
        assert_eq!(u.name, "system:serviceaccount:ns1:e2e");
        assert_eq!(
            u.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ns1",
                "system:authenticated"
            ]
        );
        assert_eq!(asked, ["admin impersonate /serviceaccounts/ e2e"]);
    }

    #[test]
    fn named_groups_uid_and_extras_are_each_authorized_and_replace_the_account_s() {
        let (u, asked) = admin_impersonating(&[
            ("Impersonate-User", "system:serviceaccount:ns1:e2e"),
            ("Impersonate-Group", "system:authenticated"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Extra-Scopes%2Fx", "read"),
        ]);
        assert_eq!(u.groups, ["system:authenticated", "devs"]);
        assert_eq!(u.uid, "u-1");
        assert_eq!(u.extra.get("scopes/x"), Some(&vec!["read".to_string()]));
        assert_eq!(asked.len(), 5);
    }

    #[test]
    fn a_user_not_allowed_to_impersonate_is_forbidden_and_groups_alone_are_a_bad_request() {
        let a = AdminMay::default();
        match run(&a, "alice", &[("Impersonate-User", "bob")]) {
            Err(ApiError::Forbidden(d)) => {
                assert_eq!((d.user.as_str(), d.verb.as_str()), ("alice", "impersonate"));
                assert_eq!(
                    (d.object.resource.as_str(), d.object.name.as_str()),
                    ("users", "bob")
                );
            }
            other => panic!("want 403, got {other:?}"),
        }
        assert!(matches!(
            run(&a, "admin", &[("Impersonate-Group", "devs")]),
            Err(ApiError::BadRequest(_))
        ));
        assert!(matches!(run(&a, "alice", &[]), Ok(None)));
    }
}
