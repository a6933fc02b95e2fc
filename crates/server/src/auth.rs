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

/// Turns a request's credentials into a user (or a 401): bearer tokens, the verified
/// client certificate's user, anonymous. The standalone binary's token-file authenticator
/// is one; an embedding host usually authenticates itself and attaches the [`User`].
pub trait Authenticate: Send + Sync + 'static {
    /// The user making a request with `headers`, over a connection whose verified client
    /// certificate named `cert_user`.
    fn authenticate(
        &self,
        headers: &http::HeaderMap,
        cert_user: Option<&User>,
    ) -> Result<User, listwatch_core::ApiError>;
}
