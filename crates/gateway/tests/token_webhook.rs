//! The token webhook: tokens nothing else knows are asked of a `TokenReview` endpoint (a
//! real HTTP server in the test) through listwatch-auth's review client (on
//! listwatch-kubeclient), the transport the upstream's own TokenReviews use too; answers are cached for the TTL, refusals briefly, a
//! webhook that is down means 401, never a guess, and an https webhook is verified against
//! its CA.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use listwatch_auth::authn::Authenticator;
use listwatch_auth::tokens::WebhookTokens;
use listwatch_auth::webhook::ReviewClient;
use listwatch_auth::{Attributes, Authorizer, Decision};
use listwatch_kubeclient::{ClientConfig, Kubeconfig};
use listwatch_server::{App, ServeOptions, ServerConfig, serve_with};
use listwatch_testkit::tls::{Ca, write};

/// Allows the webhook's user, in its group, everything.
struct WebhookUserOnly;

impl Authorizer for WebhookUserOnly {
    fn authorize(&self, a: &Attributes) -> Decision {
        let u = &a.user;
        // The review's UID and extras come along with its groups.
        if u.name == "wh-user"
            && u.groups.iter().any(|g| g == "wh-devs")
            && u.uid == "wh-uid"
            && u.extra.get("team") == Some(&vec!["a".to_string()])
        {
            Decision::allow("")
        } else {
            Decision::no_opinion("")
        }
    }
}

/// A TokenReview endpoint (over TLS with `tls`): `good-token` is wh-user in wh-devs,
/// anything else is refused. Returns its URL, the count of reviews it answered and a switch
/// that stops it, its open connections included.
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
            // Dropped with this future when stopped: every open connection goes too (the
            // review client keeps its connections for reuse).
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let counted = counted.clone();
                let tls = tls.clone();
                connections.spawn(async move {
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
                                    serde_json::json!({"authenticated": true, "user": {"username": "wh-user", "uid": "wh-uid", "groups": ["wh-devs"], "extra": {"team": ["a"]}}})
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

/// The token webhook at `url` (trusting the CA bundle `ca_pem`), answers kept for `ttl`.
fn hook(url: &str, ca_pem: Option<Vec<u8>>, ttl: Duration) -> WebhookTokens {
    let kubeconfig = Kubeconfig {
        ca_pem,
        ..Kubeconfig::default()
    };
    let mut config = ClientConfig::with_own_credential(url, kubeconfig);
    config.response_timeout = Duration::from_secs(10);
    let client = ReviewClient::new(&config).expect("review client");
    WebhookTokens::new(Arc::new(client), vec![], ttl)
}

/// listwatch on an embedded store of demo pods, authenticating with `authenticator` and
/// letting the webhook's user read.
async fn serve(authenticator: Authenticator) -> SocketAddr {
    let registry = listwatch_sources::Registry::new(
        listwatch_core::builtin_resources(),
        1,
        &Default::default(),
    );
    let source = listwatch_sources::EmbeddedSource::new(registry);
    let app = App::new(
        source,
        ServerConfig::default(),
        Some(Arc::new(WebhookUserOnly)),
    );
    let (listener, addr) = listwatch_testkit::listen_local().await;
    let options = ServeOptions {
        authenticator: Some(Arc::new(authenticator)),
        ..ServeOptions::default()
    };
    tokio::spawn(serve_with(app, listener, options, std::future::pending()));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_answers_are_cached_and_a_dead_webhook_is_a_401() {
    let (url, calls, stop) = webhook(None).await;
    let hook = hook(&url, None, Duration::from_millis(1500));
    let authenticator = Authenticator::certificates_only(false).with_webhook(Arc::new(hook));
    let addr = serve(authenticator).await;
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
    let webhook_ca = Ca::new("webhook-ca");
    let other_ca = Ca::new("other");
    let leaf = webhook_ca.server();
    let cert = write(&dir, "wh.crt", &leaf.cert_pem);
    let key_file = write(&dir, "wh.key", &leaf.key_pem);
    let config = listwatch_auth::tls::tls_config(&cert, &key_file, None).expect("tls");
    let (url, calls, _stop) = webhook(Some(tokio_rustls::TlsAcceptor::from(config))).await;
    for (trust, want) in [(&webhook_ca.cert_pem, 200), (&other_ca.cert_pem, 401)] {
        let hook = hook(
            &url,
            Some(trust.clone().into_bytes()),
            Duration::from_secs(60),
        );
        let authenticator = Authenticator::certificates_only(false).with_webhook(Arc::new(hook));
        let addr = serve(authenticator).await;
        let r = listwatch_testkit::get_with(
            addr,
            "/api/v1/pods",
            &[("Authorization", "Bearer good-token")],
        )
        .await;
        assert_eq!(r.status, want, "trusting {trust}");
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the verified connection reached it"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
