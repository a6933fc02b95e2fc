//! kube-apiserver's webhook authorizer (`--authorization-mode=Webhook`): a request's
//! attributes go as a `SubjectAccessReview` to a webhook — or to the upstream apiserver's
//! own `subjectaccessreviews`, as kube-rbac-proxy asks — and its answers are cached, allowed
//! ones for longer than the rest.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::authorizer::{Attributes, Authorizer, Decision, DecisionFuture};
use crate::cache::TtlCache;

/// What [`ReviewSender::send`] returns: the 2xx answer's body, or why there is none.
pub type SendFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Bytes, String>> + Send + 'a>>;

/// Carries a `SubjectAccessReview` or `TokenReview` (JSON) to whoever answers it: over
/// HTTPS, `ReviewClient` (the `standalone` feature); in tests, a table.
pub trait ReviewSender: Send + Sync + 'static {
    /// POSTs `review` and returns the answer's body when the status is 2xx; gives up (an
    /// error) when no answer comes in bounded time.
    fn send(&self, review: Bytes) -> SendFuture<'_>;
}

/// `SubjectAccessReview`s or `TokenReview`s POSTed to one URL — a webhook's, or the
/// upstream's `/apis/authorization.k8s.io/v1/subjectaccessreviews` (`tokenreviews`) — with
/// listwatch's own credential, over listwatch-kubeclient: the webhooks' transport.
#[cfg(feature = "standalone")]
pub struct ReviewClient {
    client: listwatch_kubeclient::Client,
}

/// The largest answer read from a review.
#[cfg(feature = "standalone")]
const REVIEW_MAX_BODY: usize = 1 << 20;

#[cfg(feature = "standalone")]
impl ReviewClient {
    /// A client POSTing to `config.server` itself (path included), with its CA, client
    /// certificate or token; an answer must come within `config.response_timeout`.
    pub fn new(
        config: &listwatch_kubeclient::ClientConfig,
    ) -> Result<ReviewClient, listwatch_kubeclient::Error> {
        Ok(ReviewClient {
            client: listwatch_kubeclient::Client::new(config)?,
        })
    }

    async fn post(&self, review: Bytes) -> Result<Bytes, String> {
        use http_body_util::BodyExt;
        let uri = self.client.base();
        let exchange = async {
            let json = "application/json";
            let resp = self
                .client
                .request(http::Method::POST, "", json, Some((json, review)))
                .await
                .map_err(|e| match e {
                    listwatch_kubeclient::Error::Send(
                        listwatch_kubeclient::SendError::Connect(_),
                    ) => format!("cannot connect to {uri}"),
                    e => format!("{uri}: {e}"),
                })?;
            if !resp.status().is_success() {
                return Err(format!("{uri} answered {}", resp.status()));
            }
            http_body_util::Limited::new(resp.into_body(), REVIEW_MAX_BODY)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| format!("{uri}: {e}"))
        };
        let timeout = self.client.response_timeout();
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| format!("{uri} did not answer within {timeout:?}"))?
    }
}

#[cfg(feature = "standalone")]
impl ReviewSender for ReviewClient {
    fn send(&self, review: Bytes) -> SendFuture<'_> {
        Box::pin(self.post(review))
    }
}

/// Answers kept at most.
const CACHE_ENTRIES: usize = 8192;

/// How long answers are kept: kube-apiserver's
/// `--authorization-webhook-cache-{authorized,unauthorized}-ttl` (5m, 30s).
#[derive(Clone, Copy, Debug)]
pub struct CacheTtl {
    /// For allowed requests.
    pub authorized: Duration,
    /// For the rest (denied, no opinion).
    pub unauthorized: Duration,
}

impl Default for CacheTtl {
    fn default() -> Self {
        CacheTtl {
            authorized: Duration::from_secs(300),
            unauthorized: Duration::from_secs(30),
        }
    }
}

/// The webhook authorizer: each request's attributes, unless cached, asked of the
/// [`ReviewSender`]. Failures are not cached.
pub struct WebhookAuthorizer {
    sender: Arc<dyn ReviewSender>,
    ttl: CacheTtl,
    /// The review's JSON (what was asked) → the answer.
    cache: TtlCache<Bytes, Decision>,
}

impl WebhookAuthorizer {
    /// Asks `sender`, keeping answers for `ttl`.
    pub fn new(sender: Arc<dyn ReviewSender>, ttl: CacheTtl) -> Self {
        WebhookAuthorizer {
            sender,
            ttl,
            cache: TtlCache::new(CACHE_ENTRIES),
        }
    }

    /// The cached answer for `review`, if one is still fresh.
    fn cached(&self, review: &Bytes) -> Option<Decision> {
        self.cache.get(review)
    }

    fn remember(&self, review: Bytes, d: &Decision) {
        let ttl = if d.allowed {
            self.ttl.authorized
        } else {
            self.ttl.unauthorized
        };
        self.cache.insert(review, d.clone(), ttl);
    }

    async fn ask(&self, review: Bytes) -> Decision {
        let answer = match self.sender.send(review.clone()).await {
            Ok(body) => body,
            Err(e) => return self.failed(e),
        };
        let d = match decision(&answer) {
            Ok(d) => d,
            Err(e) => return self.failed(e),
        };
        self.remember(review, &d);
        d
    }

    fn failed(&self, why: String) -> Decision {
        tracing::warn!(error = %why, "authorization webhook failed");
        Decision::failed(format!("authorization webhook: {why}"))
    }
}

impl Authorizer for WebhookAuthorizer {
    /// Only what is cached: the webhook itself is asked by [`Self::authorize_async`].
    fn authorize(&self, attributes: &Attributes) -> Decision {
        self.cached(&review(attributes))
            .unwrap_or_else(|| Decision::no_opinion(""))
    }

    fn authorize_async<'a>(&'a self, attributes: &'a Attributes) -> DecisionFuture<'a> {
        let review = review(attributes);
        Box::pin(async move {
            match self.cached(&review) {
                Some(d) => d,
                None => self.ask(review).await,
            }
        })
    }
}

/// The `SubjectAccessReview` kube-apiserver's webhook authorizer sends for `a`.
pub fn review(a: &Attributes) -> Bytes {
    let mut spec = json!({"user": a.user.name, "groups": a.user.groups});
    // As kube-apiserver's webhook authorizer: the UID and extras only when there are any
    // (a service account token's extras name its pod and credential).
    if !a.user.uid.is_empty() {
        spec["uid"] = a.user.uid.clone().into();
    }
    if !a.user.extra.is_empty() {
        spec["extra"] = json!(a.user.extra);
    }
    if a.resource_request {
        spec["resourceAttributes"] = json!({
            "namespace": a.namespace, "verb": a.verb, "group": a.api_group,
            "version": a.api_version, "resource": a.resource,
            "subresource": a.subresource, "name": a.name,
        });
    } else {
        spec["nonResourceAttributes"] = json!({"path": a.path, "verb": a.verb});
    }
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": {"allowed": false},
    });
    Bytes::from(review.to_string())
}

/// The decision an answered review carries: `status.allowed`, `status.denied`,
/// `status.reason`.
fn decision(answer: &[u8]) -> Result<Decision, String> {
    let v: Value =
        serde_json::from_slice(answer).map_err(|e| format!("not a SubjectAccessReview: {e}"))?;
    let status = &v["status"];
    let reason = status["reason"].as_str().unwrap_or_default();
    Ok(if status["allowed"] == Value::Bool(true) {
        Decision::allow(reason)
    } else if status["denied"] == Value::Bool(true) {
        Decision::deny(reason)
    } else {
        Decision::no_opinion(reason)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::User;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers from a fixed table by user name, counting what it is asked; `down` fails.
    struct Table {
        asked: AtomicUsize,
    }

    impl ReviewSender for Table {
        fn send(&self, review: Bytes) -> SendFuture<'_> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let v: Value = serde_json::from_slice(&review).map_err(|e| e.to_string())?;
                let status = match v["spec"]["user"].as_str() {
                    Some("alice") => json!({"allowed": true, "reason": "alice may"}),
                    Some("mallory") => json!({"allowed": false, "denied": true, "reason": "no"}),
                    Some("down") => return Err("connection refused".into()),
                    _ => json!({"allowed": false}),
                };
                Ok(Bytes::from(json!({"status": status}).to_string()))
            })
        }
    }

    fn asking(user: &str) -> Attributes {
        let info = listwatch_core::ResourceInfo::default();
        Attributes::resource(
            User::in_groups(user, "", ','),
            "list",
            &info,
            Some("ns"),
            "",
        )
    }

    #[tokio::test]
    async fn answers_are_cached_and_failures_are_not() {
        let table = Arc::new(Table {
            asked: AtomicUsize::new(0),
        });
        let authz = WebhookAuthorizer::new(table.clone(), CacheTtl::default());
        let asked = || table.asked.load(Ordering::SeqCst);
        let alice = asking("alice");
        assert_eq!(authz.authorize(&alice), Decision::no_opinion(""));
        assert_eq!(
            authz.authorize_async(&alice).await,
            Decision::allow("alice may")
        );
        assert_eq!(authz.authorize_async(&alice).await.reason, "alice may");
        assert_eq!(authz.authorize(&alice), Decision::allow("alice may"));
        assert_eq!(asked(), 1);
        assert_eq!(
            authz.authorize_async(&asking("mallory")).await,
            Decision::deny("no")
        );
        let down = authz.authorize_async(&asking("down")).await;
        assert!(!down.allowed && down.error.is_some());
        authz.authorize_async(&asking("down")).await;
        assert_eq!(asked(), 4);
    }

    #[tokio::test]
    async fn a_denial_stops_the_chain_and_errors_surface() {
        use crate::AnyOf;
        let table = Arc::new(Table {
            asked: AtomicUsize::new(0),
        });
        let webhook: Arc<dyn Authorizer> =
            Arc::new(WebhookAuthorizer::new(table, CacheTtl::default()));
        let chain = AnyOf(vec![webhook.clone(), Arc::new(crate::AlwaysAllow)]);
        assert!(chain.authorize_async(&asking("bob")).await.allowed);
        assert!(chain.authorize_async(&asking("mallory")).await.denied);
        let alone = AnyOf(vec![webhook]);
        let d = alone.authorize_async(&asking("down")).await;
        assert!(!d.allowed && !d.denied);
        assert!(d.error.unwrap().contains("connection refused"));
    }

    #[test]
    fn the_review_names_what_is_asked() {
        let v: Value = serde_json::from_slice(&review(&asking("alice"))).unwrap();
        assert_eq!(v["kind"], "SubjectAccessReview");
        assert_eq!(v["spec"]["user"], "alice");
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "list");
        assert_eq!(v["spec"]["resourceAttributes"]["namespace"], "ns");
        let info = User::anonymous();
        let path = Attributes::non_resource(info, "get", "/healthz");
        let v: Value = serde_json::from_slice(&review(&path)).unwrap();
        assert_eq!(v["spec"]["nonResourceAttributes"]["path"], "/healthz");
        assert_eq!(v["spec"]["groups"][0], "system:unauthenticated");
    }
}
