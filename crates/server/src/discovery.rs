//! Discovery (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`, `/version`: the documents are
//! built by `listwatch_openapi::discovery`) and the operational endpoints (`/healthz`,
//! `/livez`, `/readyz`, `/metrics`), answered by [`Discovery::respond`].

use http::{HeaderValue, StatusCode, header};
use listwatch_openapi::discovery::{
    aggregated, api, apis, group, resource_list, version, wants_aggregated,
};
use listwatch_sources::{Registry, Source};
use serde_json::Value;

use crate::metrics::Metrics;
use crate::response::{self, Answer};
use crate::routes::DiscoveryPath;
use listwatch_core::ApiError;

/// What discovery and the operational endpoints are answered from.
pub struct Discovery<'a> {
    /// The served resources.
    pub registry: &'a Registry,
    /// The source (writable or not, healthy or not).
    pub source: &'a dyn Source,
    /// Address advertised in `/api`.
    pub advertise: &'a str,
    /// The metrics `/metrics` renders.
    pub metrics: &'a Metrics,
    /// The pass-through, whose metrics `/metrics` adds.
    pub pass_through: Option<&'a dyn crate::PassThrough>,
    /// `Some(false)` until the housekeeping loop has measured the loaded collections'
    /// protobuf lengths once; `None` when no loop was started.
    pub lengths_measured: Option<bool>,
    /// The server is shutting down: `/readyz` fails.
    pub shutting_down: bool,
    /// `/version`'s `gitCommit`.
    pub git_commit: &'a str,
}

impl Discovery<'_> {
    /// The response to a GET of `path`; `accept` picks aggregated discovery, `verbose`
    /// lists every readiness check.
    pub fn respond(&self, path: DiscoveryPath, accept: Option<&str>, verbose: bool) -> Answer {
        let ok = |v: Value| Ok(response::json_value(StatusCode::OK, &v));
        let writable = self.source.writer().is_some();
        match path {
            DiscoveryPath::Api | DiscoveryPath::Apis => {
                let core = matches!(path, DiscoveryPath::Api);
                match (wants_aggregated(accept), core) {
                    (Some(v), _) => Ok(self.aggregated(core, writable, v)),
                    (None, true) => ok(api(self.advertise)),
                    (None, false) => ok(apis(self.registry)),
                }
            }
            DiscoveryPath::Group(g) => {
                group(self.registry, &g).map_or(Err(ApiError::UnknownPath), ok)
            }
            DiscoveryPath::GroupVersion(g, v) => resource_list(self.registry, &g, &v, writable)
                .map_or(Err(ApiError::UnknownPath), ok),
            DiscoveryPath::Version => ok(version(self.git_commit)),
            // Parsed as its own request kind (it negotiates by headers).
            DiscoveryPath::OpenApi => Err(ApiError::UnknownPath),
            DiscoveryPath::Health => Ok(response::text(StatusCode::OK, TEXT, "ok")),
            DiscoveryPath::Ready => Ok(self.readyz(verbose)),
            DiscoveryPath::Metrics => {
                let mut text = self
                    .metrics
                    .render(self.registry.stores().iter(), self.source.skipped_values());
                let end = text.rfind("# EOF").unwrap_or(text.len());
                let mut more = self.source.metrics_text();
                if let Some(p) = self.pass_through {
                    more.push_str(&p.metrics_text());
                }
                text.insert_str(end, &more);
                Ok(response::text(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                ))
            }
        }
    }

    fn aggregated(
        &self,
        core: bool,
        writable: bool,
        api_version: &str,
    ) -> http::Response<crate::body::ResponseBody> {
        let mut r = response::json_value(
            StatusCode::OK,
            &aggregated(self.registry, core, writable, api_version),
        );
        let ct = format!(
            "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
            api_version.rsplit('/').next().unwrap_or("v2")
        );
        if let Ok(v) = HeaderValue::from_str(&ct) {
            r.headers_mut().insert(header::CONTENT_TYPE, v);
        }
        r.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("Accept"));
        r
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
