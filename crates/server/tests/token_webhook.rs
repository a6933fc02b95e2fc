//! The token webhook: tokens nothing else knows are asked of a `TokenReview` endpoint (a
//! real HTTP server in the test), answers are cached for the TTL, refusals briefly, and a
//! webhook that is down means 401, never a guess.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use listwatch_auth::authn::Authenticator;
use listwatch_auth::tokens::WebhookTokens;
use listwatch_auth::{Attributes, Authorizer, Decision};

/// Allows the webhook's user, in its group, everything.
struct WebhookUserOnly;

impl Authorizer for WebhookUserOnly {
    fn authorize(&self, a: &Attributes) -> Decision {
        let u = &a.user;
        if u.name == "wh-user" && u.groups.iter().any(|g| g == "wh-devs") {
            Decision::allow("")
        } else {
            Decision::no_opinion("")
        }
    }
}

/// A TokenReview endpoint (over TLS with `tls`): `good-token` is wh-user in wh-devs,
/// anything else is refused. Returns its URL, the count of reviews it answered and a switch
/// that stops it.
async fn webhook(
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (String, Arc<AtomicUsize>, tokio::sync::oneshot::Sender<()>) {
    let (listener, addr) = listwatch_testkit::listen_local().await;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let serve = async {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let counted = counted.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let counted = counted.clone();
                            async move {
                                let body =
                                    req.into_body().collect().await.expect("body").to_bytes();
                                let review: serde_json::Value =
                                    serde_json::from_slice(&body).expect("review");
                                assert_eq!(review["kind"], "TokenReview");
                                counted.fetch_add(1, Ordering::SeqCst);
                                let status = if review["spec"]["token"] == "good-token" {
                                    serde_json::json!({"authenticated": true, "user": {"username": "wh-user", "groups": ["wh-devs"]}})
                                } else {
                                    serde_json::json!({"authenticated": false})
                                };
                                let answer = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status});
                                Ok::<_, std::convert::Infallible>(http::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from(
                                        answer.to_string(),
                                    )),
                                ))
                            }
                        },
                    );
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match tls {
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(s) => {
                                http.serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                                    .await
                            }
                            Err(_) => return,
                        },
                        None => {
                            http.serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                                .await
                        }
                    };
                });
            }
        };
        tokio::select! {
            () = serve => {}
            _ = stopped => {}
        }
    });
    (format!("{scheme}://{addr}/review"), calls, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_answers_are_cached_and_a_dead_webhook_is_a_401() {
    let (url, calls, stop) = webhook(None).await;
    let hook =
        WebhookTokens::new(&url, None, vec![], Duration::from_millis(1500)).expect("webhook");
    let authenticator = Authenticator::certificates_only(false).with_webhook(Arc::new(hook));
    let s = common::start(3, listwatch_server::ServerConfig::default()).await;
    let app = listwatch_server::App::new(
        s.source.clone(),
        listwatch_server::ServerConfig::default(),
        Some(Arc::new(WebhookUserOnly)),
    );
    let addr = common::serve_authenticated(app, Arc::new(authenticator)).await;
    let get = |token: &'static str| async move {
        let auth = format!("Bearer {token}");
        listwatch_testkit::get_with(addr, "/api/v1/pods", &[("Authorization", auth.as_str())])
            .await
            .status
    };
    let calls = || calls.load(Ordering::SeqCst);
    assert_eq!(get("good-token").await, 200);
    assert_eq!(calls(), 1);
    assert_eq!(get("good-token").await, 200, "cached");
    assert_eq!(calls(), 1);
    assert_eq!(get("bad-token").await, 401);
    assert_eq!(get("bad-token").await, 401, "refusal cached");
    assert_eq!(calls(), 2);
    // After the TTL the webhook is asked again.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(get("good-token").await, 200);
    assert_eq!(calls(), 3);
    // A webhook that is gone: an unknown token is a 401 (and not cached as a refusal).
    let _ = stop.send(());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(get("other-token").await, 401);
    assert_eq!(calls(), 3);
}

/// Over https, the webhook's certificate is verified against the CA file: the right CA
/// authenticates, another CA's trust is a 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_webhook_is_verified_against_its_ca() {
    let dir = std::env::temp_dir().join(format!("lw-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let ca = common::tls::Ca::new("webhook-ca");
    let leaf = ca.server();
    let cert = common::tls::write(&dir, "wh.crt", &leaf.cert_pem);
    let key = common::tls::write(&dir, "wh.key", &leaf.key_pem);
    let ca_file = common::tls::write(&dir, "ca.crt", &ca.cert_pem);
    let other_ca = common::tls::write(&dir, "other.crt", &common::tls::Ca::new("other").cert_pem);
    let config = listwatch_auth::tls::tls_config(&cert, &key, None).expect("tls");
    let (url, calls, _stop) = webhook(Some(tokio_rustls::TlsAcceptor::from(config))).await;
    let s = common::start(1, listwatch_server::ServerConfig::default()).await;
    for (trust, want) in [(&ca_file, 200), (&other_ca, 401)] {
        let hook = WebhookTokens::new(&url, Some(trust), vec![], Duration::from_secs(60))
            .expect("webhook");
        let authenticator = Authenticator::certificates_only(false).with_webhook(Arc::new(hook));
        let app = listwatch_server::App::new(
            s.source.clone(),
            listwatch_server::ServerConfig::default(),
            Some(Arc::new(WebhookUserOnly)),
        );
        let addr = common::serve_authenticated(app, Arc::new(authenticator)).await;
        let r = listwatch_testkit::get_with(
            addr,
            "/api/v1/pods",
            &[("Authorization", "Bearer good-token")],
        )
        .await;
        assert_eq!(r.status, want, "trusting {}", trust.display());
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the verified connection reached it"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
