//! Authorization hook: the embedding host (or, later, our own authenticator) puts the
//! authenticated [`User`] into the request's extensions; an [`Authorizer`] decides per verb,
//! resource and namespace. A cluster-wide LIST by a user allowed only some namespaces is
//! denied, as in Kubernetes RBAC.

use listwatch_core::ResourceInfo;

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// User name.
    pub name: String,
    /// Group memberships.
    pub groups: Vec<String>,
}

/// Decides whether a user may perform a read.
pub trait Authorizer: Send + Sync + 'static {
    /// Whether `user` (None: anonymous) may `verb` (`list`, `watch`, `get`, `create`,
    /// `update`, `delete`) `resource` in `namespace` (None: all namespaces, or a
    /// cluster-scoped resource).
    fn allowed(
        &self,
        user: Option<&User>,
        verb: &str,
        resource: &ResourceInfo,
        namespace: Option<&str>,
    ) -> bool;

    /// The same for one named object (`name` empty for collections): authorizers that
    /// grant by object name (RBAC `resourceNames`, the Node authorizer) override it.
    fn allowed_object(
        &self,
        user: Option<&User>,
        verb: &str,
        resource: &ResourceInfo,
        namespace: Option<&str>,
        _name: &str,
    ) -> bool {
        self.allowed(user, verb, resource, namespace)
    }
}

/// Authorizers chained as kube-apiserver chains `--authorization-mode` entries: none of
/// ours denies outright (each allows or has no opinion), so a request is allowed when any
/// of them allows it.
pub struct AnyOf(pub Vec<std::sync::Arc<dyn Authorizer>>);

impl Authorizer for AnyOf {
    fn allowed(
        &self,
        user: Option<&User>,
        verb: &str,
        resource: &ResourceInfo,
        namespace: Option<&str>,
    ) -> bool {
        self.0
            .iter()
            .any(|a| a.allowed(user, verb, resource, namespace))
    }

    fn allowed_object(
        &self,
        user: Option<&User>,
        verb: &str,
        resource: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        self.0
            .iter()
            .any(|a| a.allowed_object(user, verb, resource, namespace, name))
    }
}

/// What [`Authenticate::authenticate`] returns: the user, once known (a webhook may have to
/// be asked).
pub type AuthFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<User, listwatch_core::ApiError>> + Send + 'a>,
>;

/// Turns a request's credentials into a user (or a 401): bearer tokens, the verified
/// client certificate's user, anonymous. The standalone binary's authenticator is one; an
/// embedding host usually authenticates itself and attaches the [`User`].
pub trait Authenticate: Send + Sync + 'static {
    /// The user making a request with `headers`, over a connection whose verified client
    /// certificate named `cert_user`.
    fn authenticate<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
        cert_user: Option<&'a User>,
    ) -> AuthFuture<'a>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Allows one user everything.
    struct Only(&'static str);

    impl Authorizer for Only {
        fn allowed(&self, user: Option<&User>, _: &str, _: &ResourceInfo, _: Option<&str>) -> bool {
            user.is_some_and(|u| u.name == self.0)
        }
    }

    #[test]
    fn a_chain_allows_what_any_member_allows() {
        let chain = AnyOf(vec![Arc::new(Only("alice")), Arc::new(Only("bob"))]);
        let info = ResourceInfo::default();
        let user = |n: &str| User {
            name: n.into(),
            groups: vec![],
        };
        assert!(chain.allowed(Some(&user("alice")), "list", &info, None));
        assert!(chain.allowed_object(Some(&user("bob")), "get", &info, Some("ns"), "x"));
        assert!(!chain.allowed(Some(&user("carol")), "list", &info, None));
        assert!(!chain.allowed(None, "list", &info, None));
    }
}
