//! `SubjectAccessReview` and `SelfSubjectAccessReview` answered with whatever authorizer
//! is configured (`kubectl auth can-i`): kube-apiserver answers them under every
//! authorization mode, `AlwaysAllow` included.

use listwatch_core::ResourceInfo;

use crate::authorizer::{Attributes, Authorizer, User};

/// Which review a request posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewKind {
    /// `SubjectAccessReview`: about the user the spec names.
    Subject,
    /// `SelfSubjectAccessReview`: about the requester, whatever the spec says.
    SelfSubject,
}

impl ReviewKind {
    /// The review posted to `path`, if it is a review path.
    pub fn from_path(path: &str) -> Option<ReviewKind> {
        match path.trim_end_matches('/') {
            "/apis/authorization.k8s.io/v1/subjectaccessreviews" => Some(ReviewKind::Subject),
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" => {
                Some(ReviewKind::SelfSubject)
            }
            _ => None,
        }
    }

    /// The kind's name (`SubjectAccessReview`).
    pub fn kind(self) -> &'static str {
        match self {
            ReviewKind::Subject => "SubjectAccessReview",
            ReviewKind::SelfSubject => "SelfSubjectAccessReview",
        }
    }

    /// The review resource itself, whose `create` the requester must be allowed.
    pub fn resource_info(self) -> ResourceInfo {
        let kind = self.kind();
        ResourceInfo {
            group: "authorization.k8s.io".into(),
            version: "v1".into(),
            resource: format!("{}s", kind.to_ascii_lowercase()),
            kind: kind.into(),
            namespaced: false,
            ..ResourceInfo::default()
        }
    }
}

/// The answered review: `review` with kube-apiserver's `status` (`allowed`, and `reason`
/// when the authorizer gave one) for `requester` (self reviews) or the spec's user.
pub async fn answer(
    authorizer: &dyn Authorizer,
    kind: ReviewKind,
    requester: &User,
    mut review: serde_json::Value,
) -> serde_json::Value {
    let mut attrs = Attributes::from_review_spec(&review["spec"]);
    if kind == ReviewKind::SelfSubject {
        attrs.user = requester.clone();
    }
    let d = authorizer.authorize_async(&attrs).await;
    let mut status = serde_json::json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        status["reason"] = d.reason.into();
    }
    if !review.is_object() {
        review = serde_json::json!({});
    }
    review["kind"] = kind.kind().into();
    review["apiVersion"] = "authorization.k8s.io/v1".into();
    review["metadata"] = serde_json::json!({"creationTimestamp": null});
    review["status"] = status;
    review
}
