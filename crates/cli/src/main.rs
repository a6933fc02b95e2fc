//! The `listwatch` binary: `listwatch serve` runs the server on the embedded store (or, built
//! with the `etcd` feature, in front of etcd). Everything an operator configures — flags,
//! logging, the allocator, TLS and token files — lives here; the serving is the library's.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use clap::{Parser, Subcommand};
use listwatch_auth::abac::PolicyAuthorizer;
use listwatch_auth::authn::Authenticator;
use listwatch_auth::tls::{tls_config, tls_config_with_front_proxy};
use listwatch_core::{ResourceInfo, builtin_resources};
use listwatch_server::limits::LimitConfig;
use listwatch_server::{App, ServeOptions, ServerConfig, serve_with};
use listwatch_sources::{EmbeddedSource, Registry, Source, demo, load};
use listwatch_store::StoreConfig;

#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// `listwatch --version`: the crate's version and the commit built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("LISTWATCH_GIT_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "listwatch",
    version = VERSION,
    about = "Kubernetes LIST/WATCH/watch-list server with flat memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Kubernetes read path (and writes) from the embedded store or etcd.
    Serve(ServeArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SourceKind {
    Embedded,
    Etcd,
    /// Follow the `--upstream` kube-apiserver (reads served here, the rest passed on).
    Apiserver,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum UpstreamIdentity {
    FrontProxy,
    Impersonate,
    Forward,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Pass every request listwatch does not serve itself (writes, subresources, logs,
    /// exec, aggregated APIs, discovery, /openapi, /version) to this apiserver
    /// (docs/gateway.md).
    #[arg(long)]
    upstream: Option<String>,
    /// kubeconfig for the upstream: its CA, and listwatch's own credential (with
    /// `--upstream-identity impersonate`); its server when `--upstream` is not given.
    #[arg(long)]
    upstream_kubeconfig: Option<PathBuf>,
    /// How the client's identity reaches the upstream: `front-proxy` (X-Remote-* headers
    /// over `--proxy-client-cert-file`), `impersonate` (Impersonate-* headers with the
    /// kubeconfig's credential) or `forward` (the client's own bearer token). Default:
    /// front-proxy with a proxy certificate, else impersonate with a kubeconfig
    /// credential, else forward.
    #[arg(long, value_enum)]
    upstream_identity: Option<UpstreamIdentity>,
    /// Client certificate (PEM) the upstream trusts as a front proxy (kube-apiserver's flag).
    #[arg(long, requires = "proxy_client_key_file")]
    proxy_client_cert_file: Option<PathBuf>,
    /// The front-proxy certificate's private key (PEM).
    #[arg(long, requires = "proxy_client_cert_file")]
    proxy_client_key_file: Option<PathBuf>,
    /// Seconds the upstream has to answer a passed-through request's head (504 after).
    #[arg(long, default_value_t = 60)]
    upstream_timeout: u64,
    /// Requests in flight to the upstream at once, streams included (429 beyond).
    #[arg(long, default_value_t = 2048)]
    upstream_max_in_flight: usize,
    /// Where objects live: `embedded` (in-process, default), `etcd` (needs a binary
    /// built with `--features etcd`) or `apiserver` (the `--upstream` apiserver, followed
    /// by watch).
    #[arg(long, value_enum, default_value = "embedded")]
    source: SourceKind,
    /// etcd client URLs, comma-separated (with `--source etcd`; kube-apiserver's
    /// `--etcd-servers`, also spelled `--etcd-endpoints`).
    #[arg(
        long = "etcd-servers",
        alias = "etcd-endpoints",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    etcd_endpoints: Vec<String>,
    /// The prefix kube-apiserver keeps its objects under in etcd (its `--etcd-prefix`).
    #[arg(long, default_value = "/registry")]
    etcd_prefix: String,
    /// CA bundle (PEM) etcd's serving certificate is verified against, host name included
    /// (kube-apiserver's flag; needed for https:// endpoints).
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate (PEM) presented to etcd (kube-apiserver's flag).
    #[arg(long, requires = "etcd_keyfile")]
    etcd_certfile: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "etcd_certfile")]
    etcd_keyfile: Option<PathBuf>,
    /// Accept writes and commit them straight into etcd, BYPASSING kube-apiserver's
    /// admission, defaulting, validation and encryption at rest. Tests and labs only;
    /// without it the etcd source is read-only (writes are 405).
    #[arg(long)]
    etcd_unsafe_direct_writes: bool,
    /// Seconds between progress requests to etcd (keeps idle resources' RVs fresh).
    #[arg(long, default_value_t = 5)]
    etcd_progress_interval: u64,
    /// kube-apiserver's `EncryptionConfiguration` (its `--encryption-provider-config`), to
    /// read values encrypted at rest with aescbc, aesgcm or secretbox (with `--source etcd`).
    #[arg(long)]
    encryption_provider_config: Option<std::path::PathBuf>,
    /// Address to listen on (HOST:PORT); `--bind-address` and `--secure-port` say the same
    /// in kube-apiserver's words.
    #[arg(long, default_value = "127.0.0.1:8080", conflicts_with_all = ["bind_address", "secure_port"])]
    listen: String,
    /// The address to serve on (kube-apiserver's flag; with `--secure-port`).
    #[arg(long)]
    bind_address: Option<String>,
    /// The port to serve on (kube-apiserver's flag; with `--bind-address`, default 0.0.0.0).
    #[arg(long)]
    secure_port: Option<u16>,
    /// Extra resource types (JSON array of {group, version, resource, kind, namespaced,
    /// fieldSelectors}).
    #[arg(long)]
    resources: Option<PathBuf>,
    /// Seed this many demo pods.
    #[arg(long, default_value_t = 0)]
    demo_pods: usize,
    /// Spread demo pods over this many namespaces.
    #[arg(long, default_value_t = 10)]
    demo_namespaces: usize,
    /// Load objects from a JSON list or NDJSON file (gzip allowed); repeatable.
    #[arg(long)]
    load: Vec<PathBuf>,
    /// Log level (error, warn, info, debug, trace) or a tracing filter.
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
    /// Request-log lines at INFO per second (0: one per request). Beyond it requests are
    /// logged at DEBUG and counted in listwatch_request_log_lines_suppressed_total, and
    /// the next INFO line says how many were left out.
    #[arg(long, default_value_t = 20)]
    request_log_per_second: u32,
    /// Watch bookmark period in seconds.
    #[arg(long, default_value_t = 60)]
    bookmark_interval: u64,
    /// TLS certificate (PEM; kube-apiserver's `--tls-cert-file`, also `--tls-cert`); with
    /// the key, serves HTTPS with HTTP/2 by ALPN. Read again when the file changes (new
    /// connections get the new certificate; open ones keep theirs).
    #[arg(long = "tls-cert-file", alias = "tls-cert", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM; `--tls-private-key-file`, also `--tls-key`).
    #[arg(
        long = "tls-private-key-file",
        alias = "tls-key",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// CA bundle (PEM) for client certificates: CN is the user, O the groups.
    #[arg(long, requires = "tls_cert")]
    client_ca_file: Option<PathBuf>,
    /// CA bundle (PEM) of front proxies: a client certificate it signed (with a name in
    /// --requestheader-allowed-names) vouches for the user in the request headers.
    #[arg(long, requires = "tls_cert")]
    requestheader_client_ca_file: Option<PathBuf>,
    /// Common names a front proxy's certificate may have (empty: any the CA signed).
    #[arg(long, value_delimiter = ',')]
    requestheader_allowed_names: Vec<String>,
    /// Headers naming the user, the first with a value wins.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-User")]
    requestheader_username_headers: Vec<String>,
    /// Headers naming the user's groups (every value of each).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Group")]
    requestheader_group_headers: Vec<String>,
    /// Prefixes of headers naming user extras (carried into access reviews and across
    /// the hop).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Extra-")]
    requestheader_extra_headers_prefix: Vec<String>,
    /// Static bearer tokens in kube-apiserver's CSV format: token,user,uid,"group1,group2".
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// PEM files of the keys service-account tokens are signed with (public keys, or the
    /// private key file itself; RSA or ECDSA P-256; repeatable, as kube-apiserver's).
    #[arg(long)]
    service_account_key_file: Vec<PathBuf>,
    /// Issuers of bound service-account tokens (`iss`; repeatable). Legacy Secret-based
    /// tokens (`kubernetes/serviceaccount`) are accepted whenever keys are given.
    #[arg(long)]
    service_account_issuer: Vec<String>,
    /// Audiences a bound token must name one of (default: the issuers).
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// OIDC: the issuer ID tokens must come from (`iss`).
    #[arg(long, requires_all = ["oidc_client_id", "oidc_jwks_file"])]
    oidc_issuer_url: Option<String>,
    /// OIDC: the audience ID tokens must name.
    #[arg(long)]
    oidc_client_id: Option<String>,
    /// OIDC: the issuer's signing keys as a JWKS file (read at start, never fetched).
    #[arg(long)]
    oidc_jwks_file: Option<PathBuf>,
    /// OIDC: the claim that names the user.
    #[arg(long, default_value = "sub")]
    oidc_username_claim: String,
    /// OIDC: prefix of user names (default `<issuer>#`, none for `email`; `-` for none).
    #[arg(long)]
    oidc_username_prefix: Option<String>,
    /// OIDC: the claim that lists the user's groups.
    #[arg(long)]
    oidc_groups_claim: Option<String>,
    /// OIDC: prefix of group names.
    #[arg(long, default_value = "")]
    oidc_groups_prefix: String,
    /// A token webhook (`TokenReview` POSTed there) for tokens nothing else knows.
    #[arg(long)]
    authentication_token_webhook_url: Option<String>,
    /// CA bundle (PEM) the https token webhook is verified against.
    #[arg(long)]
    authentication_token_webhook_ca_file: Option<PathBuf>,
    /// Seconds the token webhook's answers are cached (refusals: 10 s).
    #[arg(long, default_value_t = 120)]
    authentication_token_webhook_cache_ttl: u64,
    /// With an authenticator configured, let requests without credentials in as
    /// system:anonymous (off by default).
    #[arg(long)]
    anonymous_auth: bool,
    /// In front of a cluster, bearer tokens no configured authenticator knows are
    /// authenticated by the upstream's TokenReview API with listwatch's own credential
    /// (cached for `--authentication-token-webhook-cache-ttl`), keeping the user's UID,
    /// groups and extras, as a delegating apiserver does. On by default when the
    /// `--upstream-kubeconfig` has a credential and no token webhook is named.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    upstream_token_review: bool,
    /// Authorization modes, in kube-apiserver's spelling, asked in the order given: `Node`
    /// and `RBAC` evaluate the cluster's own RBAC objects and pods from the cache (and
    /// answer SubjectAccessReviews); `ABAC` with `--authorization-policy-file`; `Webhook`
    /// asks `--authorization-webhook-config-file`'s webhook, or without one the upstream's
    /// SubjectAccessReviews; `AlwaysAllow`. Default: the cluster's own rules in front of a
    /// cluster (`Webhook` when an upstream can be asked with listwatch's own credential,
    /// else `Node,RBAC`), `AlwaysAllow` only on the embedded store with no upstream.
    #[arg(long, value_delimiter = ',')]
    authorization_mode: Option<Vec<String>>,
    /// ABAC policy file (kube-apiserver's JSON-lines format); without it every
    /// authenticated request is allowed.
    #[arg(long)]
    authorization_policy_file: Option<PathBuf>,
    /// kubeconfig naming the authorization webhook (its server is the URL reviews are
    /// POSTed to) and the CA and credential to call it with.
    #[arg(long)]
    authorization_webhook_config_file: Option<PathBuf>,
    /// How long the webhook's allowed answers are cached (Go duration).
    #[arg(long, default_value = "5m0s", value_parser = go_duration)]
    authorization_webhook_cache_authorized_ttl: std::time::Duration,
    /// How long its other answers are cached (Go duration).
    #[arg(long, default_value = "30s", value_parser = go_duration)]
    authorization_webhook_cache_unauthorized_ttl: std::time::Duration,
    /// LISTs and watch-lists streaming at once (429 beyond).
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// LISTs and watch-lists one user may have streaming at once (429 beyond; 0: no cap).
    #[arg(long, default_value_t = 100)]
    max_lists_per_user: usize,
    /// Watches open at once (429 beyond).
    #[arg(long, default_value_t = 100_000)]
    max_watches: usize,
    /// Watches one user may hold (429 beyond).
    #[arg(long, default_value_t = 10_000)]
    max_watches_per_user: usize,
    /// MiB all in-flight LIST responses may buffer together (429 beyond).
    #[arg(long, default_value_t = 256)]
    response_buffer_mib: usize,
    /// On SIGTERM/SIGINT, `/readyz` fails for this long while everything is still served
    /// (so load balancers and Services take this replica out first), then the drain starts
    /// (kube-apiserver's flag; Go duration).
    #[arg(long, default_value = "0s", value_parser = go_duration)]
    shutdown_delay_duration: std::time::Duration,
    /// On SIGTERM/SIGINT, end open watches spread over this many seconds.
    #[arg(long, default_value_t = 10)]
    shutdown_watch_termination_grace_period: u64,
    /// On SIGTERM/SIGINT, seconds LISTs in flight may take to finish before their
    /// connections are closed (cut responses end without a terminating chunk).
    #[arg(long, default_value_t = 60)]
    shutdown_list_grace_period: u64,
    /// Response chunk size in bytes.
    #[arg(long, default_value_t = listwatch_codec::DEFAULT_CHUNK)]
    chunk_bytes: usize,
}

fn main() -> std::process::ExitCode {
    #[cfg(feature = "dhat-heap")]
    let _profiler = start_heap_profile();
    // jemalloc's background thread returns freed pages to the system (after its decay
    // time) even while the server is idle; without it, pages freed after a LIST storm stay
    // resident until allocation picks up again.
    #[cfg(not(feature = "dhat-heap"))]
    if let Err(e) = tikv_jemalloc_ctl::max_background_threads::write(1)
        .and_then(|()| tikv_jemalloc_ctl::background_thread::write(true))
    {
        eprintln!("listwatch: jemalloc's background thread could not be started: {e}");
    }
    let cli = Cli::parse();
    let Command::Serve(args) = cli.command;
    match serve(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line a person can act on: what (flag, file, address), then why.
            eprintln!("listwatch: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Starts dhat. With `LISTWATCH_DHAT_SECONDS=N` the profile is written N s after start, so
/// its t-end shows what a server in steady state holds (watches still open), not what is left
/// after shutdown; otherwise it is written when `main` returns.
#[cfg(feature = "dhat-heap")]
fn start_heap_profile() -> Option<dhat::Profiler> {
    let profiler = dhat::Profiler::new_heap();
    let Some(seconds) = std::env::var("LISTWATCH_DHAT_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Some(profiler);
    };
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(seconds));
        drop(profiler);
    });
    None
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .map_err(|e| anyhow!("--log-level {:?}: {e}", args.log_level))?;
    if args.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
        tracing_subscriber::fmt()
            .with_ansi(ansi)
            .with_env_filter(filter)
            .init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(run(args))
}

/// Connections the kernel may hold completed for us before we accept them. tokio's default
/// (1,024) overflows when thousands of clients reconnect at once (a kubelet storm: 1,632 of
/// 5,000 connections reset); the kernel caps this at `net.core.somaxconn`, which is what Go's
/// listener, kube-apiserver's, asks for.
const LISTEN_BACKLOG: u32 = 65_535;

/// `TcpListener::bind` with [`LISTEN_BACKLOG`]: the first of `addr`'s addresses that binds.
async fn bind_with_backlog(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(LISTEN_BACKLOG)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no address to bind")
    }))
}

/// Binds `--listen`, with an error that names the address and says what to do.
async fn listen(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    if !addr.contains(':') {
        bail!("--listen {addr:?}: expected HOST:PORT, for example 127.0.0.1:{addr}");
    }
    bind_with_backlog(addr).await.map_err(|e| {
        use std::io::ErrorKind;
        let hint = match e.kind() {
            ErrorKind::AddrInUse => {
                "; another process listens there: stop it or choose another port with --listen"
            }
            ErrorKind::PermissionDenied => {
                "; ports below 1024 need privileges: choose a higher port with --listen"
            }
            ErrorKind::AddrNotAvailable => "; that address is not one of this machine's",
            _ => "",
        };
        anyhow!("--listen {addr}: cannot listen: {e}{hint}")
    })
}

async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut resources = builtin_resources();
    if let Some(path) = &args.resources {
        let flag = || format!("--resources {}", path.display());
        let bytes = std::fs::read(path).with_context(flag)?;
        let extra: Vec<ResourceInfo> = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{}: expected a JSON array of {{group, version, resource, kind, namespaced}}",
                flag()
            )
        })?;
        resources.extend(extra.into_iter().map(ResourceInfo::normalized));
    }
    if args.source == SourceKind::Etcd {
        resources = resources
            .into_iter()
            .map(|r| r.under_etcd_root(&args.etcd_prefix))
            .collect();
    }
    let registry = Registry::new(resources, 1, &StoreConfig::default());
    let addr = match (&args.bind_address, args.secure_port) {
        (None, None) => args.listen.clone(),
        (bind, port) => {
            let host = bind.as_deref().unwrap_or("0.0.0.0");
            let port = port.ok_or_else(|| anyhow!("--bind-address {host} needs --secure-port"))?;
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
    };
    let listener = listen(&addr).await?;
    let local = listener.local_addr().context("--listen")?;
    let config = ServerConfig {
        advertise: local.to_string(),
        git_commit: env!("LISTWATCH_GIT_COMMIT").into(),
        bookmark_interval: std::time::Duration::from_secs(args.bookmark_interval.max(1)),
        request_log_per_second: args.request_log_per_second,
        shutdown_list_grace: std::time::Duration::from_secs(args.shutdown_list_grace_period),
        chunk_bytes: args.chunk_bytes.max(4096),
        limits: LimitConfig {
            max_lists: args.max_requests_inflight,
            max_watches: args.max_watches,
            max_watches_per_user: args.max_watches_per_user,
            max_lists_per_user: args.max_lists_per_user,
            response_buffer_budget: args.response_buffer_mib << 20,
            ..LimitConfig::default()
        },
        ..ServerConfig::default()
    };
    let (tls, client_certs) = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => match &args.requestheader_client_ca_file {
            Some(ca) => {
                let trust = listwatch_auth::tls::FrontProxyTrust {
                    ca: ca.clone(),
                    allowed_names: args.requestheader_allowed_names.clone(),
                };
                let client_ca = args.client_ca_file.as_deref();
                let (tls, certs) = tls_config_with_front_proxy(c, k, client_ca, &trust)
                    .map_err(|e| {
                        anyhow!(
                            "--tls-cert-file/--tls-private-key-file/--client-ca-file/--requestheader-client-ca-file: {e}"
                        )
                    })?;
                (Some(tls), Some(Arc::new(certs)))
            }
            None => (
                Some(
                    tls_config(c, k, args.client_ca_file.as_deref()).map_err(|e| {
                        anyhow!("--tls-cert-file/--tls-private-key-file/--client-ca-file: {e}")
                    })?,
                ),
                None,
            ),
        },
        _ => (None, None),
    };
    let source: Arc<dyn Source> = match args.source {
        SourceKind::Embedded => embedded_source(&args, registry)?,
        SourceKind::Etcd => etcd_source(&args, registry).await?,
        SourceKind::Apiserver => apiserver_source(&args).await?,
    };
    // events.k8s.io/v1 Events and autoscaling/v1 HPAs: views of the stored versions.
    let source: Arc<dyn Source> = listwatch_sources::Views::start(source, &StoreConfig::default());
    let options = ServeOptions {
        tls,
        client_certs,
        authenticator: authenticator(&args, source.registry())?,
        watch_grace: std::time::Duration::from_secs(args.shutdown_watch_termination_grace_period),
    };
    let authorizer = authorizer(&args, source.registry())?;
    let app = App::new(source.clone(), config, authorizer);
    if let Some(gateway) = gateway(&args)? {
        tracing::info!(upstream = %gateway.upstream(), "passing what is not served here to the upstream");
        app.set_pass_through(gateway);
    }
    tracing::info!(listen = %local, "serving");
    // On a worker, not on `block_on`'s thread: connection tasks spawned from a worker go to
    // its own run queue and start at once, while those spawned from outside wait in the
    // global queue, which busy workers look at only now and then (64 concurrent LISTs: the
    // last connection's first poll came 310 ms after its accept).
    let delay = args.shutdown_delay_duration;
    let shutdown = {
        let app = app.clone();
        async move {
            shutdown_signal().await;
            if !delay.is_zero() {
                app.begin_shutdown();
                tracing::info!(
                    ?delay,
                    "shutting down: not ready, still serving until the delay passes"
                );
                tokio::time::sleep(delay).await;
            }
        }
    };
    tokio::spawn(serve_with(app, listener, options, shutdown))
        .await
        .context("the serving task failed")?
        .context("serving")?;
    source.close().await;
    Ok(())
}

/// The authorizer chain `--authorization-mode` names, in its order (kube-apiserver's union:
/// the first that allows or denies decides); `None` when everything is allowed.
fn authorizer(
    args: &ServeArgs,
    registry: &Registry,
) -> anyhow::Result<Option<Arc<dyn listwatch_auth::Authorizer>>> {
    use listwatch_auth::Authorizer;
    let (named, why) = authorization_modes(args)?;
    tracing::info!(mode = %named.join(","), why, "authorizing the requests served here");
    let mut modes: Vec<&str> = named.iter().map(String::as_str).collect();
    if args.authorization_policy_file.is_some() && !modes.contains(&"ABAC") {
        // A policy file alone means ABAC (as before the mode had to be named): in
        // AlwaysAllow's place, else after the other modes.
        match modes.iter().position(|m| *m == "AlwaysAllow") {
            Some(i) => modes[i] = "ABAC",
            None => modes.push("ABAC"),
        }
    }
    if modes == ["AlwaysAllow"] {
        return Ok(None);
    }
    let mut chain: Vec<Arc<dyn Authorizer>> = Vec::new();
    let mut cluster = false;
    for mode in modes {
        match mode {
            // Node and RBAC are one authorizer here (Node's decisions first).
            "Node" | "RBAC" if cluster => {}
            "Node" | "RBAC" => {
                cluster = true;
                chain.push(Arc::new(listwatch_auth::rbac::ClusterAuthorizer::new(
                    registry,
                )));
            }
            "ABAC" => {
                let Some(p) = &args.authorization_policy_file else {
                    bail!("--authorization-mode ABAC needs --authorization-policy-file");
                };
                chain.push(Arc::new(PolicyAuthorizer::from_file(p).map_err(|e| {
                    anyhow!("--authorization-policy-file {}: {e}", p.display())
                })?));
            }
            "Webhook" => chain.push(webhook_authorizer(args)?),
            "AlwaysAllow" => chain.push(Arc::new(listwatch_auth::AlwaysAllow)),
            bad => bail!(
                "--authorization-mode {bad:?}: unknown mode (Node, RBAC, ABAC, Webhook, AlwaysAllow)"
            ),
        }
    }
    Ok(match chain.len() {
        0 => None,
        1 => chain.pop(),
        _ => Some(Arc::new(listwatch_auth::AnyOf(chain))),
    })
}

/// The authorization modes to run and why: those `--authorization-mode` names, else the
/// cluster's own rules wherever a cluster is behind listwatch (its SubjectAccessReviews when
/// an upstream can be asked with listwatch's own credential, else Node and RBAC over the
/// followed objects), and `AlwaysAllow` only for the embedded store with no upstream.
fn authorization_modes(args: &ServeArgs) -> anyhow::Result<(Vec<String>, &'static str)> {
    if let Some(named) = &args.authorization_mode {
        return Ok((named.clone(), "--authorization-mode"));
    }
    let modes = |m: &[&str]| m.iter().map(|s| s.to_string()).collect();
    if own_upstream_credential(args)? {
        return Ok((
            modes(&["Webhook"]),
            "in front of a cluster: the upstream's SubjectAccessReviews (default)",
        ));
    }
    if args.source != SourceKind::Embedded || args.upstream.is_some() {
        return Ok((
            modes(&["Node", "RBAC"]),
            "in front of a cluster with no credential to ask it: Node and RBAC over the followed objects (default)",
        ));
    }
    Ok((
        modes(&["AlwaysAllow"]),
        "the embedded store with no upstream (default)",
    ))
}

/// Whether an upstream is named and listwatch has its own credential for it (a client
/// certificate or token in `--upstream-kubeconfig`): what asking it for access and token
/// reviews needs.
fn own_upstream_credential(args: &ServeArgs) -> anyhow::Result<bool> {
    Ok(upstream_target(args)?.is_some_and(|(_, k)| has_credential(&k)))
}

/// Whether `k` names listwatch's own credential (a client certificate or a token).
fn has_credential(k: &listwatch_kubeclient::Kubeconfig) -> bool {
    k.client_cert.is_some() || k.token.is_some()
}

/// `--authorization-mode Webhook`: the `--authorization-webhook-config-file` webhook, or the
/// upstream's SubjectAccessReviews with listwatch's own `--upstream-kubeconfig` credential.
fn webhook_authorizer(args: &ServeArgs) -> anyhow::Result<Arc<dyn listwatch_auth::Authorizer>> {
    use listwatch_auth::webhook::ReviewClient;
    use listwatch_auth::webhook::{CacheTtl, WebhookAuthorizer};
    use listwatch_kubeclient::{ClientConfig, Kubeconfig};
    let (url, kubeconfig, flag) = match &args.authorization_webhook_config_file {
        Some(p) => {
            let k = Kubeconfig::from_file(p)
                .map_err(|e| anyhow!("--authorization-webhook-config-file {e}"))?;
            let url = k.server.clone().ok_or_else(|| {
                anyhow!(
                    "--authorization-webhook-config-file {}: names no server",
                    p.display()
                )
            })?;
            (url, k, "--authorization-webhook-config-file")
        }
        None => match upstream_target(args)? {
            Some((base, k)) => (
                format!(
                    "{}/apis/authorization.k8s.io/v1/subjectaccessreviews",
                    base.trim_end_matches('/')
                ),
                k,
                "--upstream",
            ),
            None => bail!(
                "--authorization-mode Webhook needs --authorization-webhook-config-file or an --upstream to ask"
            ),
        },
    };
    let mut config = ClientConfig::with_own_credential(url.clone(), kubeconfig);
    config.response_timeout = std::time::Duration::from_secs(10);
    let client = ReviewClient::new(&config).map_err(|e| anyhow!("{flag} {url}: {e}"))?;
    let ttl = CacheTtl {
        authorized: args.authorization_webhook_cache_authorized_ttl,
        unauthorized: args.authorization_webhook_cache_unauthorized_ttl,
    };
    Ok(Arc::new(WebhookAuthorizer::new(Arc::new(client), ttl)))
}

/// A Go duration flag value (`5m0s`, `30s`).
fn go_duration(s: &str) -> Result<std::time::Duration, String> {
    listwatch_core::time::parse_go_duration(s)
        .and_then(|n| u64::try_from(n).ok())
        .map(std::time::Duration::from_nanos)
        .ok_or_else(|| format!("{s:?} is not a duration (5m0s, 30s)"))
}

/// The authenticator the flags describe: static tokens, service-account and OIDC tokens,
/// a token webhook, client certificates; `None` (everyone is anonymous) when none is configured.
fn authenticator(
    args: &ServeArgs,
    registry: &Registry,
) -> Result<Option<Arc<dyn listwatch_auth::Authenticate>>, anyhow::Error> {
    use listwatch_auth::tokens::{OidcConfig, OidcTokens, ServiceAccountTokens, WebhookTokens};
    let reviewer = token_reviewer(args)?;
    let jwt = !args.service_account_key_file.is_empty()
        || args.oidc_issuer_url.is_some()
        || reviewer.is_some();
    let front_proxy = args.requestheader_client_ca_file.is_some();
    if args.token_auth_file.is_none() && args.client_ca_file.is_none() && !jwt && !front_proxy {
        return Ok(None);
    }
    let mut a = match &args.token_auth_file {
        Some(p) => Authenticator::from_token_file(p, args.anonymous_auth)
            .map_err(|e| anyhow!("--token-auth-file {e}"))?,
        None => Authenticator::certificates_only(args.anonymous_auth),
    };
    if !args.service_account_key_file.is_empty() {
        a = a.with_token_authenticator(Arc::new(
            ServiceAccountTokens::from_key_files(
                &args.service_account_key_file,
                args.service_account_issuer.clone(),
                args.api_audiences.clone(),
                registry.clone(),
            )
            .map_err(|e| anyhow!("--service-account-key-file {e}"))?,
        ));
    }
    if let (Some(issuer), Some(client_id), Some(jwks)) = (
        &args.oidc_issuer_url,
        &args.oidc_client_id,
        &args.oidc_jwks_file,
    ) {
        let config = OidcConfig {
            issuer: issuer.clone(),
            client_id: client_id.clone(),
            username_claim: args.oidc_username_claim.clone(),
            username_prefix: args.oidc_username_prefix.clone(),
            groups_claim: args.oidc_groups_claim.clone(),
            groups_prefix: args.oidc_groups_prefix.clone(),
        };
        a = a.with_token_authenticator(Arc::new(
            OidcTokens::new(config, jwks).map_err(|e| anyhow!("--oidc-jwks-file {e}"))?,
        ));
    }
    if front_proxy {
        a.request_headers = Some(listwatch_auth::authn::RequestHeaderNames {
            user: args.requestheader_username_headers.clone(),
            group: args.requestheader_group_headers.clone(),
            extra_prefixes: args.requestheader_extra_headers_prefix.clone(),
        });
    }
    if let Some(reviewer) = reviewer {
        a = a.with_webhook(Arc::new(WebhookTokens::new(
            reviewer,
            args.api_audiences.clone(),
            std::time::Duration::from_secs(args.authentication_token_webhook_cache_ttl),
        )));
    }
    Ok(Some(Arc::new(a)))
}

/// Where tokens nothing else knows are reviewed: the `--authentication-token-webhook-url`,
/// else (with `--upstream-token-review`, the default) the upstream's own `tokenreviews`
/// when listwatch has a credential to ask it with; `None` when neither applies.
fn token_reviewer(
    args: &ServeArgs,
) -> anyhow::Result<Option<Arc<dyn listwatch_auth::webhook::ReviewSender>>> {
    use listwatch_auth::webhook::ReviewClient;
    use listwatch_kubeclient::{ClientConfig, Kubeconfig};
    let timeout = std::time::Duration::from_secs(10);
    if let Some(url) = &args.authentication_token_webhook_url {
        let flag = "--authentication-token-webhook-url";
        if !url.starts_with("https://") && !url.starts_with("http://") {
            bail!("{flag} {url}: the URL must be http:// or https://");
        }
        let ca_pem = match &args.authentication_token_webhook_ca_file {
            Some(p) => Some(std::fs::read(p).with_context(|| {
                format!("--authentication-token-webhook-ca-file {}", p.display())
            })?),
            None if url.starts_with("https://") => {
                bail!("{flag} {url}: https needs --authentication-token-webhook-ca-file")
            }
            None => None,
        };
        let kubeconfig = Kubeconfig {
            ca_pem,
            // Read again as it changes, as a kubeconfig's CA file.
            ca_file: args.authentication_token_webhook_ca_file.clone(),
            ..Kubeconfig::default()
        };
        let mut config = ClientConfig::with_own_credential(url.clone(), kubeconfig);
        config.response_timeout = timeout;
        let client = ReviewClient::new(&config).map_err(|e| anyhow!("{flag} {url}: {e}"))?;
        return Ok(Some(Arc::new(client)));
    }
    if !args.upstream_token_review {
        return Ok(None);
    }
    // One read of the kubeconfig (or the pod's mount) for both the check and the client.
    let Some((base, kubeconfig)) = upstream_target(args)?.filter(|(_, k)| has_credential(k)) else {
        return Ok(None);
    };
    let url = format!(
        "{}/apis/authentication.k8s.io/v1/tokenreviews",
        base.trim_end_matches('/')
    );
    let mut config = ClientConfig::with_own_credential(url.clone(), kubeconfig);
    config.response_timeout = timeout;
    let client = ReviewClient::new(&config).map_err(|e| anyhow!("--upstream {base}: {e}"))?;
    tracing::info!(url = %url, "bearer tokens not known here are reviewed by the upstream");
    Ok(Some(Arc::new(client)))
}

/// The upstream's URL (`--upstream`, else the kubeconfig's server) and the
/// `--upstream-kubeconfig`, when an upstream is named; with `--source apiserver` and neither
/// given, inside a pod, the in-cluster apiserver as client-go finds it (its service
/// account's token kept current as the kubelet rotates it).
fn upstream_target(
    args: &ServeArgs,
) -> anyhow::Result<Option<(String, listwatch_kubeclient::Kubeconfig)>> {
    let kubeconfig = match &args.upstream_kubeconfig {
        Some(p) => listwatch_kubeclient::Kubeconfig::from_file(p)
            .map_err(|e| anyhow!("--upstream-kubeconfig {e}"))?,
        None if args.upstream.is_none() && args.source == SourceKind::Apiserver => {
            let dir = std::env::var_os("LISTWATCH_SERVICE_ACCOUNT_DIR").map_or_else(
                || PathBuf::from(listwatch_kubeclient::SERVICE_ACCOUNT_DIR),
                PathBuf::from,
            );
            return listwatch_kubeclient::Kubeconfig::in_cluster(&dir)
                .map_err(|e| anyhow!("in-cluster configuration (no --upstream): {e}"));
        }
        None => listwatch_kubeclient::Kubeconfig::default(),
    };
    Ok(args
        .upstream
        .clone()
        .or(kubeconfig.server.clone())
        .map(|url| (url, kubeconfig)))
}

/// The apiserver source: follows the upstream with listwatch's own credential from the
/// `--upstream-kubeconfig` (it must be allowed to list and watch what it serves).
async fn apiserver_source(args: &ServeArgs) -> anyhow::Result<Arc<dyn Source>> {
    use listwatch_kubeclient::ClientConfig;
    let Some((url, kubeconfig)) = upstream_target(args)? else {
        bail!(
            "--source apiserver needs --upstream (or an --upstream-kubeconfig naming the server), or to run in a pod (KUBERNETES_SERVICE_HOST/PORT and its service account's token)"
        );
    };
    let mut config = ClientConfig::with_own_credential(url.clone(), kubeconfig);
    config.response_timeout = std::time::Duration::from_secs(args.upstream_timeout.max(1));
    let source = listwatch_upstream::UpstreamSource::start(&config, &StoreConfig::default())
        .await
        .map_err(|e| anyhow!("--source apiserver --upstream {url}: {e}"))?;
    tracing::info!(upstream = %url, resources = source.registry().stores().len(), "following the upstream apiserver");
    Ok(source)
}

/// The pass-through to the upstream the flags describe, if any.
fn gateway(args: &ServeArgs) -> anyhow::Result<Option<Arc<listwatch_gateway::Gateway>>> {
    use listwatch_gateway::{Gateway, GatewayConfig, Identity};
    let Some((url, kubeconfig)) = upstream_target(args)? else {
        return Ok(None);
    };
    let read = |flag: &str, p: &PathBuf| {
        std::fs::read(p).with_context(|| format!("--{flag} {}", p.display()))
    };
    let proxy_cert = match (&args.proxy_client_cert_file, &args.proxy_client_key_file) {
        (Some(c), Some(k)) => {
            // Readable now, so a wrong path names its flag; read again as they are renewed.
            read("proxy-client-cert-file", c)?;
            read("proxy-client-key-file", k)?;
            Some(listwatch_gateway::ClientCert::Files {
                cert: c.clone(),
                key: k.clone(),
            })
        }
        _ => None,
    };
    let own = has_credential(&kubeconfig);
    let identity = match args.upstream_identity {
        Some(UpstreamIdentity::FrontProxy) => Identity::FrontProxy,
        Some(UpstreamIdentity::Impersonate) => Identity::Impersonate,
        Some(UpstreamIdentity::Forward) => Identity::Forward,
        None if proxy_cert.is_some() => Identity::FrontProxy,
        None if own => Identity::Impersonate,
        None => Identity::Forward,
    };
    let mut config = GatewayConfig::new(url.clone(), identity);
    config.client.ca_pem = kubeconfig.ca_pem;
    config.client.ca_file = kubeconfig.ca_file;
    config.client.client_cert = match identity {
        Identity::FrontProxy => proxy_cert,
        _ => kubeconfig.client_cert,
    };
    config.client.token = kubeconfig
        .token
        .filter(|_| identity == Identity::Impersonate);
    config.client.response_timeout = std::time::Duration::from_secs(args.upstream_timeout.max(1));
    config.max_in_flight = args.upstream_max_in_flight;
    Ok(Some(
        Gateway::new(config).map_err(|e| anyhow!("--upstream {url}: {e}"))?,
    ))
}

/// The etcd source the flags describe.
#[cfg(feature = "etcd")]
async fn etcd_source(
    args: &ServeArgs,
    registry: Registry,
) -> Result<Arc<dyn Source>, anyhow::Error> {
    use listwatch_etcd::{Decryptor, EtcdConfig, EtcdSource, ValueDecoder};
    let decryptor = match &args.encryption_provider_config {
        Some(path) => Some(
            Decryptor::from_file(path).map_err(|e| anyhow!("--encryption-provider-config {e}"))?,
        ),
        None => None,
    };
    if args.demo_pods > 0 || !args.load.is_empty() {
        bail!(
            "--demo-pods and --load fill the embedded store; with etcd, write the objects to etcd"
        );
    }
    let tls = listwatch_etcd::EtcdTlsFiles {
        ca: args.etcd_cafile.clone(),
        cert: args.etcd_certfile.clone(),
        key: args.etcd_keyfile.clone(),
    }
    .read()
    .map_err(|e| anyhow::anyhow!("--etcd-cafile/--etcd-certfile/--etcd-keyfile {e}"))?;
    let https = args
        .etcd_endpoints
        .iter()
        .any(|e| e.starts_with("https://"));
    if https && tls.ca_pem.is_none() {
        bail!(
            "--etcd-endpoints {}: https needs --etcd-cafile (the CA that signed etcd's serving certificate)",
            args.etcd_endpoints.join(",")
        );
    }
    let etcd = EtcdSource::start(
        registry,
        EtcdConfig {
            endpoints: args.etcd_endpoints.clone(),
            progress_interval: std::time::Duration::from_secs(args.etcd_progress_interval.max(1)),
            decoder: ValueDecoder::new(decryptor),
            unsafe_direct_writes: args.etcd_unsafe_direct_writes,
            tls: https.then_some(tls),
            prefix: args.etcd_prefix.clone(),
            ..EtcdConfig::default()
        },
    )
    .await
    .map_err(|e| {
        anyhow!(
            "--etcd-endpoints {}: {e}{}",
            args.etcd_endpoints.join(","),
            e.hint()
        )
    })?;
    if args.etcd_unsafe_direct_writes {
        tracing::warn!(
            "--etcd-unsafe-direct-writes: writes go straight into etcd, bypassing kube-apiserver's admission, defaulting, validation and encryption at rest"
        );
    }
    tracing::info!(endpoints = ?args.etcd_endpoints, "following etcd");
    Ok(etcd)
}

/// Without the `etcd` feature: say how to get it.
#[cfg(not(feature = "etcd"))]
async fn etcd_source(_: &ServeArgs, _: Registry) -> Result<Arc<dyn Source>, anyhow::Error> {
    bail!(
        "--source etcd: this listwatch was built without etcd support; rebuild with `cargo build --release -p listwatch-cli --features etcd` (needs protoc: `apt-get install protobuf-compiler`)"
    )
}

/// SIGTERM (what a kubelet or systemd sends) or Ctrl-C.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt"),
    }
}

/// The embedded store with the demo pods and files the flags ask for.
fn embedded_source(
    args: &ServeArgs,
    registry: Registry,
) -> Result<Arc<EmbeddedSource>, anyhow::Error> {
    let source = EmbeddedSource::new(registry);
    if args.demo_pods > 0 {
        let pods = source
            .registry()
            .get("", "v1", "pods")
            .context("--demo-pods: no pods resource is served")?
            .clone();
        let n = source
            .seed(&pods, demo::demo_pods(args.demo_pods, args.demo_namespaces))
            .map_err(|e| anyhow!("--demo-pods: {e}"))?;
        tracing::info!(pods = n, rv = source.revision(), "seeded demo pods");
    }
    for path in &args.load {
        // Ingest as we read: only the final records are kept, never the raw file contents.
        let mut by_store: std::collections::BTreeMap<
            String,
            (Arc<listwatch_store::Store>, Vec<listwatch_store::Record>),
        > = Default::default();
        let registry = source.registry().clone();
        load::read_objects(path, |o| {
            let store = registry.by_kind(&o.api_version, &o.kind).ok_or_else(|| {
                format!(
                    "no resource serves {} {} (add it with --resources)",
                    o.api_version, o.kind
                )
            })?;
            let record = source
                .ingest_for_seed(&store, &o.json)
                .map_err(|e| e.to_string())?;
            by_store
                .entry(store.info().resource.clone())
                .or_insert_with(|| (store.clone(), Vec::new()))
                .1
                .push(record);
            Ok(())
        })
        .map_err(|e| anyhow!("--load {e}"))?;
        for (resource, (store, records)) in by_store {
            let n = records.len();
            source.install(&store, records);
            tracing::info!(file = %path.display(), resource, objects = n, "loaded");
        }
    }
    Ok(source)
}
