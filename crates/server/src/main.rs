//! The `listwatch` binary: `listwatch serve` runs the server on the embedded store.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use listwatch_core::{ResourceInfo, builtin_resources};
use listwatch_etcd::{EtcdConfig, EtcdSource};
use listwatch_server::{App, Backend, ServerConfig, serve};
use listwatch_sources::{EmbeddedSource, Registry, demo, load};
use listwatch_store::StoreConfig;

#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[derive(Parser)]
#[command(
    name = "listwatch",
    version,
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
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Where objects live: `embedded` (in-process, default) or `etcd`.
    #[arg(long, value_enum, default_value = "embedded")]
    source: SourceKind,
    /// etcd client URLs, comma-separated (with `--source etcd`).
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    etcd_endpoints: Vec<String>,
    /// Seconds between progress requests to etcd (keeps idle resources' RVs fresh).
    #[arg(long, default_value_t = 5)]
    etcd_progress_interval: u64,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
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
    /// Watch bookmark period in seconds.
    #[arg(long, default_value_t = 60)]
    bookmark_interval: u64,
    /// Response chunk size in bytes.
    #[arg(long, default_value_t = listwatch_codec::DEFAULT_CHUNK)]
    chunk_bytes: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "dhat-heap")]
    let _profiler = dhat::Profiler::new_heap();
    let cli = Cli::parse();
    let Command::Serve(args) = cli.command;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)?;
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
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut resources = builtin_resources();
    if let Some(path) = &args.resources {
        let extra: Vec<ResourceInfo> = serde_json::from_slice(&std::fs::read(path)?)?;
        resources.extend(extra.into_iter().map(ResourceInfo::normalized));
    }
    let registry = Registry::new(resources, 1, &StoreConfig::default());
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    let config = ServerConfig {
        advertise: listener.local_addr()?.to_string(),
        bookmark_interval: std::time::Duration::from_secs(args.bookmark_interval.max(1)),
        chunk_bytes: args.chunk_bytes.max(4096),
        ..ServerConfig::default()
    };
    let app = match args.source {
        SourceKind::Embedded => App::embedded(embedded_source(&args, registry)?, config),
        SourceKind::Etcd => {
            if args.demo_pods > 0 || !args.load.is_empty() {
                return Err("--demo-pods and --load fill the embedded store; with etcd, write the objects to etcd".into());
            }
            let etcd = EtcdSource::start(
                registry.clone(),
                EtcdConfig {
                    endpoints: args.etcd_endpoints.clone(),
                    progress_interval: std::time::Duration::from_secs(
                        args.etcd_progress_interval.max(1),
                    ),
                    ..EtcdConfig::default()
                },
            )
            .await?;
            tracing::info!(endpoints = ?args.etcd_endpoints, "following etcd");
            App::new(registry, Backend::Etcd(etcd), config, None)
        }
    };
    tracing::info!(listen = %listener.local_addr()?, "serving");
    serve(app, listener, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// The embedded store with the demo pods and files the flags ask for.
fn embedded_source(
    args: &ServeArgs,
    registry: Registry,
) -> Result<Arc<EmbeddedSource>, Box<dyn std::error::Error>> {
    let source = EmbeddedSource::new(registry);
    if args.demo_pods > 0 {
        let pods = source
            .registry()
            .get("", "v1", "pods")
            .ok_or("no pods resource")?
            .clone();
        let n = source.seed(&pods, demo::demo_pods(args.demo_pods, args.demo_namespaces))?;
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
                    "{}: no resource serves {} {}",
                    path.display(),
                    o.api_version,
                    o.kind
                )
            })?;
            let record = source.ingest_for_seed(store, &o.json)?;
            by_store
                .entry(store.info().resource.clone())
                .or_insert_with(|| (store.clone(), Vec::new()))
                .1
                .push(record);
            Ok(())
        })?;
        for (resource, (store, records)) in by_store {
            let n = records.len();
            source.install(&store, records);
            tracing::info!(file = %path.display(), resource, objects = n, "loaded");
        }
    }
    Ok(source)
}
