//! Discovery (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`, `/version`: answered by
//! `listwatch_openapi::discovery`) and the operational endpoints (`/healthz`, `/livez`,
//! `/readyz`, `/metrics`: rendered by `listwatch_metrics`), answered by [`Discovery::respond`].

use http::StatusCode;
use listwatch_metrics::Metrics;
use listwatch_openapi::discovery::{self, ServerInfo};
use listwatch_sources::{Registry, Source};

use crate::response::{self, Answer};
use crate::routes::DiscoveryPath;
use listwatch_core::ApiError;

/// What discovery and the operational endpoints are answered from.
pub struct Discovery<'a> {
    /// The served resources.
    pub registry: &'a Registry,
    /// The source (writable or not, healthy or not).
    pub source: &'a dyn Source,
    /// The address `/api` advertises and `/version`'s commit.
    pub server: ServerInfo<'a>,
    /// The metrics `/metrics` renders.
    pub metrics: &'a Metrics,
    /// The pass-through, whose metrics `/metrics` adds.
    pub pass_through: Option<&'a dyn crate::PassThrough>,
    /// `Some(false)` until the housekeeping loop has measured the loaded collections'
    /// protobuf lengths once; `None` when no loop was started.
    pub lengths_measured: Option<bool>,
    /// The server is shutting down: `/readyz` fails.
    pub shutting_down: bool,
}

impl Discovery<'_> {
    /// The response to a GET of `path`; `accept` picks aggregated discovery, `verbose`
    /// lists every readiness check.
    pub fn respond(&self, path: DiscoveryPath, accept: Option<&str>, verbose: bool) -> Answer {
        match path {
            DiscoveryPath::Document(doc) => {
                discovery::respond(self.registry, &self.server, &doc, accept)
                    .map(|r| r.map(crate::body::full))
            }
            // Parsed as its own request kind (it negotiates by headers).
            DiscoveryPath::OpenApi => Err(ApiError::UnknownPath),
            DiscoveryPath::Health => Ok(response::text(StatusCode::OK, TEXT, "ok")),
            DiscoveryPath::Ready => Ok(self.readyz(verbose)),
            DiscoveryPath::Metrics => {
                let mut more = self.source.metrics_text();
                if let Some(p) = self.pass_through {
                    more.push_str(&p.metrics_text());
                }
                let stores = self.registry.stores();
                let skipped = self.source.skipped_values();
                Ok(response::text(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    self.metrics.render(stores.iter(), skipped, &more),
                ))
            }
        }
    }

    /// kube-apiserver's `/readyz`: one `[+]`/`[-]` line per check when failing or asked
    /// (`?verbose`), a bare "ok" otherwise; a failed check's reason is withheld (the probe
    /// needs no credentials; the log has the cause).
    fn readyz(&self, verbose: bool) -> http::Response<crate::body::ResponseBody> {
        let source_ok = self.source.health().is_ok();
        let check = self.source.health_check_name();
        let mut text = if source_ok {
            format!("[+]{check} ok\n")
        } else {
            format!("[-]{check} failed: reason withheld\n")
        };
        let mut ok = source_ok;
        for s in self.registry.stores() {
            let ready = s.is_ready();
            ok &= ready;
            let i = s.info();
            text.push_str(&format!(
                "[{}]cache {}{}{} {}\n",
                if ready { '+' } else { '-' },
                i.resource,
                if i.group.is_empty() { "" } else { "." },
                i.group,
                if ready { "ok" } else { "not ready" }
            ));
        }
        if let Some(measured) = self.lengths_measured {
            ok &= measured;
            text.push_str(if measured {
                "[+]protobuf-lengths ok\n"
            } else {
                "[-]protobuf-lengths not measured yet\n"
            });
        }
        if self.shutting_down {
            ok = false;
            text.push_str("[-]shutdown failed: reason withheld\n");
        }
        if ok && !verbose {
            text = "ok".into();
        } else if ok {
            text.push_str("readyz check passed\n");
        } else {
            text.push_str("readyz check failed\n");
        }
        let code = if ok {
            StatusCode::OK
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        response::text(code, TEXT, text)
    }
}

/// Probes' `Content-Type`.
const TEXT: &str = "text/plain; charset=utf-8";
