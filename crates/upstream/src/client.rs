//! Requests to the upstream apiserver over listwatch-kubeclient: one-shot JSON GETs
//! (discovery, LIST pages) and watch streams read line by line.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode, header};
use http_body_util::BodyExt;
use listwatch_kubeclient::{Client, ClientConfig, ResponseBody, percent_encode};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::UpstreamError;

/// The upstream: its base URL, listwatch's own credential and a pooled client.
pub(crate) struct Upstream {
    client: Client,
    timeout: Duration,
}

/// One page of a LIST: the collection's RV, the continue token, the items as JSON.
#[derive(Deserialize)]
pub(crate) struct ListPage {
    #[serde(default)]
    pub metadata: ListMeta,
    #[serde(default)]
    pub items: Vec<Box<RawValue>>,
}

/// A list's metadata.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListMeta {
    #[serde(default)]
    pub resource_version: String,
    #[serde(default, rename = "continue")]
    pub continue_: String,
}

impl Upstream {
    /// A client for the upstream `config` names (URL, CA, client certificate, token).
    pub(crate) fn new(config: &ClientConfig) -> Result<Upstream, UpstreamError> {
        Ok(Upstream {
            client: Client::new(config).map_err(|e| UpstreamError::Config(e.to_string()))?,
            timeout: config.response_timeout,
        })
    }

    /// Sends `GET path_and_query`; the response head within the timeout.
    pub(crate) async fn get(
        &self,
        path_and_query: &str,
    ) -> Result<http::Response<ResponseBody>, UpstreamError> {
        self.get_as(path_and_query, "application/json").await
    }

    /// Sends `GET path_and_query` asking for `accept`; the response head within the timeout.
    async fn get_as(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<http::Response<ResponseBody>, UpstreamError> {
        match self
            .client
            .request(Method::GET, path_and_query, accept, None)
            .await
        {
            Ok(r) => Ok(r),
            Err(listwatch_kubeclient::Error::Config(e)) => Err(UpstreamError::Config(e)),
            Err(e) => Err(UpstreamError::Http(e.to_string())),
        }
    }

    /// `GET path_and_query`, the whole body; a non-2xx answer is [`UpstreamError::Status`].
    pub(crate) async fn get_body(&self, path_and_query: &str) -> Result<Bytes, UpstreamError> {
        Ok(self
            .get_body_as(path_and_query, "application/json")
            .await?
            .1)
    }

    /// `GET path_and_query` asking for `accept`: the `Content-Type` and the whole body; a
    /// non-2xx answer is [`UpstreamError::Status`].
    pub(crate) async fn get_body_as(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<(String, Bytes), UpstreamError> {
        let resp = self.get_as(path_and_query, accept).await?;
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = tokio::time::timeout(self.timeout, resp.into_body().collect())
            .await
            .map_err(|_| UpstreamError::Http("body timed out".into()))?
            .map_err(|e| UpstreamError::Http(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(UpstreamError::Status(
                status.as_u16(),
                String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
            ));
        }
        Ok((content_type, body))
    }

    /// `GET path_and_query` decoded as JSON.
    pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path_and_query: &str,
    ) -> Result<T, UpstreamError> {
        let body = self.get_body(path_and_query).await?;
        serde_json::from_slice(&body)
            .map_err(|e| UpstreamError::Json(format!("{path_and_query}: {e}")))
    }

    /// The whole collection at `path` by pages of `page` (one consistent RV: the first
    /// page's): the RV and every item.
    pub(crate) async fn list_all(
        &self,
        path: &str,
        page: usize,
    ) -> Result<(u64, Vec<Box<RawValue>>), UpstreamError> {
        let (mut pages, mut items) = (Pages::new(path, page), Vec::new());
        while let Some(q) = pages.next_query() {
            let p: ListPage = self.get_json(&q).await?;
            pages.read(&p.metadata.resource_version, p.metadata.continue_)?;
            items.extend(p.items);
        }
        Ok((pages.rv(), items))
    }
}

/// The walk through a LIST's pages (`limit`, then each page's `continue`), at the first
/// page's RV: the one the whole LIST is consistent at.
pub(crate) struct Pages<'a> {
    path: &'a str,
    page: usize,
    /// `None` once the last page was read; `Some("")` before the first.
    next: Option<String>,
    rv: Option<u64>,
}

impl<'a> Pages<'a> {
    /// The pages of `path`, `page` items each.
    pub(crate) fn new(path: &'a str, page: usize) -> Self {
        Pages {
            path,
            page,
            next: Some(String::new()),
            rv: None,
        }
    }

    /// The next page's path and query, `None` after the last.
    pub(crate) fn next_query(&self) -> Option<String> {
        let cont = self.next.as_deref()?;
        let mut q = format!("{}?limit={}", self.path, self.page);
        if !cont.is_empty() {
            q.push_str("&continue=");
            q.push_str(&percent_encode(cont));
        }
        Some(q)
    }

    /// Records a page's RV and continue token.
    pub(crate) fn read(&mut self, rv: &str, cont: String) -> Result<(), UpstreamError> {
        if self.rv.is_none() {
            self.rv = Some(parse_rv(rv)?);
        }
        self.next = (!cont.is_empty()).then_some(cont);
        Ok(())
    }

    /// The LIST's RV (the first page's).
    pub(crate) fn rv(&self) -> u64 {
        self.rv.unwrap_or(0)
    }
}

/// A resourceVersion as the number listwatch's stores keep.
pub(crate) fn parse_rv(rv: &str) -> Result<u64, UpstreamError> {
    rv.parse()
        .map_err(|_| UpstreamError::Json(format!("resourceVersion {rv:?} is not a number")))
}

/// A watch response body read one newline-terminated JSON event at a time.
pub(crate) struct Lines {
    body: ResponseBody,
    buf: BytesMut,
    /// How much of `buf` is known to hold no newline (a large object arrives in many
    /// frames: each is searched once).
    searched: usize,
}

impl Lines {
    /// Reads the events of `resp` (a 200 to a watch).
    pub(crate) fn new(resp: http::Response<ResponseBody>) -> Lines {
        Lines {
            body: resp.into_body(),
            buf: BytesMut::new(),
            searched: 0,
        }
    }

    /// The next event line; `Ok(None)` at the end of the stream; an error when the stream
    /// breaks or stays silent for `idle`.
    pub(crate) async fn next(&mut self, idle: Duration) -> Result<Option<Bytes>, String> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.searched..]) {
                let line = self.buf.split_to(self.searched + i + 1).freeze();
                self.searched = 0;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            match tokio::time::timeout(idle, self.body.frame()).await {
                Err(_) => return Err(format!("no event or bookmark for {idle:?}")),
                Ok(None) => {
                    if self.buf.iter().all(u8::is_ascii_whitespace) {
                        return Ok(None);
                    }
                    return Ok(Some(std::mem::take(&mut self.buf).freeze()));
                }
                Ok(Some(Err(e))) => return Err(e.to_string()),
                Ok(Some(Ok(f))) => {
                    self.searched = self.buf.len();
                    if let Ok(d) = f.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
            }
        }
    }
}

/// Whether a response status means "this watch form is not supported here" (watch-list
/// on an apiserver without the feature), as opposed to a transient failure.
pub(crate) fn unsupported(status: StatusCode) -> bool {
    matches!(status.as_u16(), 400 | 403 | 422 | 500 | 501)
}
