//! A minimal apiserver-like host: it owns ConfigMap writes (POST, DELETE) and its own RV
//! counter, feeds every committed change to listwatch, and mounts listwatch for all reads.
//! Users come from an `X-Remote-User` header (standing in for the host's authentication);
//! "alice" may read only namespace `team-a`.
//!
//! Run: `cargo run -p listwatch --example host -- 127.0.0.1:8081`, then
//! `kubectl --server http://127.0.0.1:8081 get cm -A`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use listwatch::{
    Attributes, Authorizer, Builder, Decision, Feed, ListWatch, Outcome, Relisted, ResponseBody,
    User,
};

/// The host's own storage: RV counter and ConfigMaps by (namespace, name).
#[derive(Default)]
pub struct HostState {
    rv: u64,
    configmaps: BTreeMap<(String, String), serde_json::Value>,
}

/// "alice" reads only `team-a`; everyone else reads everything.
struct NamespacePolicy;

impl Authorizer for NamespacePolicy {
    fn authorize(&self, a: &Attributes) -> Decision {
        if a.user.name != "alice" || a.namespace == "team-a" {
            Decision::allow("")
        } else {
            Decision::no_opinion("alice reads only team-a")
        }
    }
}

/// The host: its state, and listwatch with the feed.
pub struct Host {
    state: Arc<Mutex<HostState>>,
    lw: ListWatch,
    feed: Feed,
}

impl Host {
    /// Builds the host and its embedded listwatch.
    pub fn new() -> Arc<Host> {
        let state = Arc::new(Mutex::new(HostState {
            rv: 1,
            ..Default::default()
        }));
        let relist_state = state.clone();
        let (lw, feed) = Builder::new()
            .authorizer(NamespacePolicy)
            .host_fed(move |info| {
                let s = relist_state.lock().map_err(|e| e.to_string())?;
                let objects = if info.resource == "configmaps" {
                    s.configmaps
                        .values()
                        .map(|v| serde_json::to_vec(v).unwrap_or_default())
                        .collect()
                } else {
                    Vec::new()
                };
                Ok(Relisted { rv: s.rv, objects })
            });
        lw.spawn_maintenance();
        Arc::new(Host { state, lw, feed })
    }

    fn reply(code: StatusCode, body: Vec<u8>) -> Response<ResponseBody> {
        let mut r = Response::new(listwatch::full_body(body));
        *r.status_mut() = code;
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        r
    }

    /// The host's own write path: commit, then feed listwatch at the committed RV.
    async fn write(&self, req: Request<Incoming>) -> Response<ResponseBody> {
        let path: Vec<String> = req.uri().path().split('/').map(str::to_string).collect();
        // /api/v1/namespaces/{ns}/configmaps[/{name}]
        let (ns, name) = match path.as_slice() {
            [_, api, v1, nss, ns, cms, rest @ ..] if api == "api" && v1 == "v1" && nss == "namespaces" && cms == "configmaps" => {
                (ns.clone(), rest.first().cloned())
            }
            _ => return Self::reply(StatusCode::NOT_FOUND, b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"reason\":\"NotFound\",\"code\":404}\n".to_vec()),
        };
        let method = req.method().clone();
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let Ok(mut st) = self.state.lock() else {
            return Self::reply(StatusCode::INTERNAL_SERVER_ERROR, Vec::new());
        };
        match (method, name) {
            (Method::POST, None) => {
                let Ok(mut obj) = serde_json::from_slice::<serde_json::Value>(&body) else {
                    return Self::reply(StatusCode::BAD_REQUEST, Vec::new());
                };
                let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
                obj["metadata"]["namespace"] = ns.clone().into();
                st.rv += 1;
                let rv = st.rv;
                obj["metadata"]["resourceVersion"] = rv.to_string().into();
                let json = serde_json::to_vec(&obj).unwrap_or_default();
                st.configmaps.insert((ns, name), obj);
                // Fed while holding the lock: listwatch sees changes in commit order.
                if let Err(e) = self.feed.put("", "v1", "configmaps", rv, &json) {
                    eprintln!("feed: {e}");
                }
                Self::reply(StatusCode::CREATED, json)
            }
            (Method::DELETE, Some(name)) => {
                if st.configmaps.remove(&(ns.clone(), name.clone())).is_none() {
                    return Self::reply(StatusCode::NOT_FOUND, Vec::new());
                }
                st.rv += 1;
                let rv = st.rv;
                if let Err(e) = self.feed.delete("", "v1", "configmaps", rv, &ns, &name) {
                    eprintln!("feed: {e}");
                }
                Self::reply(StatusCode::OK, b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\"}\n".to_vec())
            }
            _ => Self::reply(StatusCode::METHOD_NOT_ALLOWED, Vec::new()),
        }
    }

    /// Routes one request: authenticate, let listwatch answer reads, handle the rest.
    pub async fn handle(self: Arc<Self>, mut req: Request<Incoming>) -> Response<ResponseBody> {
        if let Some(user) = req
            .headers()
            .get("x-remote-user")
            .and_then(|v| v.to_str().ok())
        {
            let user = User {
                name: user.to_string(),
                ..User::default()
            };
            req.extensions_mut().insert(user);
        }
        let req = match self.lw.handle(req).await {
            Outcome::Handled(resp) => return resp,
            Outcome::NotHandled(req) => req,
        };
        // This host has no discovery of its own: listwatch's lets kubectl find configmaps.
        match self.lw.handle_discovery(req).await {
            Outcome::Handled(resp) => resp,
            Outcome::NotHandled(req) => self.write(req).await,
        }
    }
}

/// Serves the host on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener) {
    let host = Host::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let host = host.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let host = host.clone();
                async move { Ok::<_, Infallible>(host.handle(req).await) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[allow(dead_code)]
#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8081".into());
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
    println!("host listening on {addr}");
    serve(listener).await;
}
