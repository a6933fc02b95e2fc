//! listwatch-auth: who a request is and what it may do, as kube-apiserver decides both.
//!
//! - [`authorizer`]: the [`User`], the request's [`Attributes`] (kube-apiserver's
//!   `authorizer.Attributes`), the [`Authorizer`] and [`Authenticate`] traits.
//! - [`rbac`]: the cluster's RBAC authorizer, chained after privileged groups and the
//!   [`node`] authorizer (kube-apiserver 1.36's, for kubelets), evaluated from the objects
//!   listwatch caches; [`review`]: access-review answers; [`abac`]: the ABAC policy file;
//!   [`webhook`]: `SubjectAccessReview`s asked of a webhook or the upstream, cached.
//! - [`authn`]: the standalone authenticator (static token file, client-certificate user,
//!   JWTs and webhook, anonymous).
//! - With the `standalone` feature: [`tls`] (rustls, client certificates; the certificate
//!   files read again as listwatch-kubeclient's `CertFiles`), [`tokens`] (service-account
//!   and OIDC JWTs, the token webhook) and `webhook::ReviewClient`, the webhooks' transport
//!   on listwatch-kubeclient.
//!
//! It depends on listwatch-core, -store and -sources (the caches the authorizers and the
//! service-account lookups read) and, standalone, listwatch-kubeclient; never on the server.

pub mod abac;
pub mod authn;
pub mod authorizer;
pub mod cache;
pub mod config;
pub mod impersonation;
pub mod node;
pub mod rbac;
pub mod review;
mod rule;
#[cfg(feature = "standalone")]
pub mod tls;
#[cfg(feature = "standalone")]
pub mod tokens;
pub mod webhook;

pub use authorizer::{
    AlwaysAllow, AnyOf, Attributes, AuthFuture, Authenticate, Authorizer, Decision, DecisionFuture,
    User,
};
pub use config::ConfigError;
