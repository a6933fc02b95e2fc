//! `ListOptions` for LIST, WATCH and watch-list: parsed from the query string and validated
//! in kube-apiserver's order (decode → validate → field labels → resourceVersion → continue),
//! so the first error a client sees is the one kube-apiserver would show.

use crate::continue_token::ContinueToken;
use crate::fields::FieldSelector;
use crate::labels::LabelSelector;
use crate::resource::ResourceInfo;
use crate::status::{ApiError, FieldError};

/// The `resourceVersion` parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceVersion {
    /// Not given: the most recent data, read consistently.
    Unset,
    /// `"0"`: any data the server has.
    Any,
    /// A specific RV.
    At(u64),
}

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RvMatch {
    /// `NotOlderThan`: data at least as new as the RV.
    NotOlderThan,
    /// `Exact`: data at exactly the RV.
    Exact,
}

/// Parsed and validated list/watch options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListOptions {
    /// `resourceVersion`.
    pub resource_version: ResourceVersion,
    /// `resourceVersionMatch`.
    pub rv_match: Option<RvMatch>,
    /// `limit` (None when absent or ≤ 0).
    pub limit: Option<u64>,
    /// `continue`, decoded against the request's key prefix.
    pub continue_token: Option<ContinueToken>,
    /// `labelSelector`.
    pub label_selector: LabelSelector,
    /// `fieldSelector`.
    pub field_selector: FieldSelector,
    /// `watch`, `allowWatchBookmarks`, `sendInitialEvents`.
    pub flags: WatchFlags,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<i64>,
}

/// The watch flags of a read's query, with Go's bool conversion: what
/// [`QueryParams::decode`] reads and [`ListOptions`] keeps (they need no validation of
/// their own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchFlags {
    /// `watch`.
    pub watch: bool,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: bool,
    /// `sendInitialEvents`, when given.
    pub send_initial_events: Option<bool>,
}

/// Go's `strconv.ParseInt`/`ParseUint` error text.
fn go_parse_int_error(func: &str, s: &str, e: &std::num::ParseIntError) -> String {
    use std::num::IntErrorKind::*;
    let why = match e.kind() {
        PosOverflow | NegOverflow => "value out of range",
        _ => "invalid syntax",
    };
    format!(
        "strconv.{func}: parsing {}: {why}",
        crate::json::go_string(s)
    )
}

fn parse_i64(s: &str) -> Result<i64, ApiError> {
    // Go accepts a leading '+'; Rust does too.
    s.parse::<i64>()
        .map_err(|e| ApiError::BadRequest(go_parse_int_error("ParseInt", s, &e)))
}

/// An integer parameter, `None` when absent or empty.
fn parse_given_i64(v: Option<&str>) -> Result<Option<i64>, ApiError> {
    v.filter(|s| !s.is_empty()).map(parse_i64).transpose()
}

/// Go's query-to-bool conversion: only "0", "f" and "false" (any case) are false.
fn parse_bool(s: &str) -> bool {
    !matches!(s.to_ascii_lowercase().as_str(), "0" | "f" | "false")
}

/// The query parameters of a read, decoded once (first value of a repeated parameter wins,
/// as Go's `Query().Get`). Validation is [`ListOptions::from_params`]'s, so a request's
/// errors still surface in kube-apiserver's order, after authorization.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryParams {
    /// `resourceVersion` (empty when absent).
    pub resource_version: String,
    /// `resourceVersionMatch` (empty when absent).
    pub resource_version_match: String,
    /// `limit`, undecoded.
    pub limit: Option<String>,
    /// `continue` (empty when absent).
    pub continue_token: String,
    /// `labelSelector`.
    pub label_selector: String,
    /// `fieldSelector`.
    pub field_selector: String,
    /// `watch`, `allowWatchBookmarks`, `sendInitialEvents`.
    pub flags: WatchFlags,
    /// `timeoutSeconds`, undecoded.
    pub timeout_seconds: Option<String>,
    /// `includeObject` (Tables: `None`, `Metadata`, `Object`).
    pub include_object: Option<String>,
    /// Every `dryRun` value, in order (the one parameter a write repeats).
    pub dry_run: Vec<String>,
    /// `verbose` given (health checks list every check, as kube-apiserver's).
    pub verbose: bool,
    /// `propagationPolicy` (DELETE).
    pub propagation_policy: Option<String>,
    /// `orphanDependents` (DELETE, deprecated), undecoded.
    pub orphan_dependents: Option<String>,
    /// `gracePeriodSeconds` (DELETE), undecoded.
    pub grace_period_seconds: Option<String>,
}

impl QueryParams {
    /// Decodes a raw URL query in one pass.
    pub fn decode(query: &str) -> Self {
        let mut p = QueryParams::default();
        let mut seen = std::collections::HashSet::new();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            if k == "dryRun" {
                p.dry_run.push(v.into_owned());
                continue;
            }
            if !seen.insert(k.clone()) {
                continue;
            }
            match k.as_ref() {
                "resourceVersion" => p.resource_version = v.into_owned(),
                "resourceVersionMatch" => p.resource_version_match = v.into_owned(),
                "limit" => p.limit = Some(v.into_owned()),
                "continue" => p.continue_token = v.into_owned(),
                "labelSelector" => p.label_selector = v.into_owned(),
                "fieldSelector" => p.field_selector = v.into_owned(),
                "watch" => p.flags.watch = parse_bool(&v),
                "allowWatchBookmarks" => p.flags.allow_watch_bookmarks = parse_bool(&v),
                "sendInitialEvents" => p.flags.send_initial_events = Some(parse_bool(&v)),
                "timeoutSeconds" => p.timeout_seconds = Some(v.into_owned()),
                "includeObject" => p.include_object = Some(v.into_owned()),
                "verbose" => p.verbose = true,
                "propagationPolicy" => p.propagation_policy = Some(v.into_owned()),
                "orphanDependents" => p.orphan_dependents = Some(v.into_owned()),
                "gracePeriodSeconds" => p.grace_period_seconds = Some(v.into_owned()),
                _ => {}
            }
        }
        p
    }
}

/// What a write may ask for besides its body (kube-apiserver's `CreateOptions`,
/// `UpdateOptions`, `DeleteOptions`, as far as listwatch honours them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer as the write would, commit nothing.
    pub dry_run: bool,
    /// DELETE: what happens to the object's dependents (`ownerReferences` naming it).
    pub propagation: Propagation,
    /// DELETE: `gracePeriodSeconds`, when given (only pods have graceful deletion).
    pub grace_period_seconds: Option<i64>,
}

/// `DeleteOptions.propagationPolicy`, as kube's garbage collector reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are deleted after the owner (kube's default for every served kind).
    #[default]
    Background,
    /// Dependents are deleted before the owner goes.
    Foreground,
    /// Dependents stay, their `ownerReferences` to the owner removed.
    Orphan,
}

impl WriteOptions {
    /// The options of a `verb` write from its query, validated as kube-apiserver's
    /// `ValidateDryRun` does: every value must be `All` (else 422 on `<Verb>Options`).
    pub fn from_params(params: &QueryParams, verb: crate::Verb) -> Result<Self, ApiError> {
        Self::from_dry_run(&params.dry_run, verb)
    }

    /// The options of a DELETE, whose `DeleteOptions` may come in the body as well as the
    /// query (kubectl sends them in the body): `body` is its JSON, if any.
    pub fn for_delete(params: &QueryParams, body: &[u8]) -> Result<Self, ApiError> {
        use serde_json::Value;
        let mut dry_run = params.dry_run.clone();
        let mut policy = params.propagation_policy.clone();
        let mut orphan = params.orphan_dependents.is_some();
        let bad_query = |what: &str, v: &str| {
            ApiError::BadRequest(format!(
                "failed to parse {what} {}",
                crate::json::go_string(v)
            ))
        };
        let mut grace = match &params.grace_period_seconds {
            Some(v) => Some(
                v.parse::<i64>()
                    .map_err(|_| bad_query("gracePeriodSeconds", v))?,
            ),
            None => None,
        };
        if !body.trim_ascii().is_empty() {
            let options: Value = serde_json::from_slice(body).map_err(|e| {
                ApiError::BadRequest(format!(
                    "the body of the request could not be read as DeleteOptions: {e}"
                ))
            })?;
            if let Some(values) = options.get("dryRun").and_then(Value::as_array) {
                dry_run.extend(values.iter().map(|v| v.as_str().unwrap_or("").to_string()));
            }
            if let Some(p) = options.get("propagationPolicy").and_then(Value::as_str) {
                policy = Some(p.to_string());
            }
            orphan |= options
                .get("orphanDependents")
                .is_some_and(|v| !v.is_null());
            if let Some(g) = options.get("gracePeriodSeconds").and_then(Value::as_i64) {
                grace = Some(g);
            }
        }
        // kube's ValidateDeleteOptions.
        let invalid = |error: crate::FieldError| ApiError::InvalidObject {
            kind: "DeleteOptions".into(),
            group: "meta.k8s.io".into(),
            name: String::new(),
            causes: vec![error],
        };
        if let (true, Some(p)) = (orphan, &policy) {
            return Err(invalid(crate::FieldError {
                field: "propagationPolicy".into(),
                kind: crate::status::FieldErrorKind::Invalid(format!("\"{p}\"")),
                detail: "orphanDependents and deletionPropagation cannot be both set".into(),
            }));
        }
        let propagation = match policy.as_deref() {
            None | Some("Background") => Propagation::Background,
            Some("Foreground") => Propagation::Foreground,
            Some("Orphan") => Propagation::Orphan,
            Some(other) => {
                return Err(invalid(crate::FieldError::not_supported(
                    "propagationPolicy",
                    other,
                    &["Foreground", "Background", "Orphan", "nil"],
                )));
            }
        };
        let mut options = Self::from_dry_run(&dry_run, crate::Verb::Delete)?;
        options.propagation = propagation;
        options.grace_period_seconds = grace;
        Ok(options)
    }

    fn from_dry_run(dry_run: &[String], verb: crate::Verb) -> Result<Self, ApiError> {
        if dry_run.iter().any(|v| v != "All") {
            let kind = match verb {
                crate::Verb::Delete => "DeleteOptions",
                crate::Verb::Update => "UpdateOptions",
                crate::Verb::Patch | crate::Verb::Apply => "PatchOptions",
                _ => "CreateOptions",
            };
            // Go prints the bad value as the []string it is.
            let values: Vec<String> = dry_run.iter().map(|v| crate::json::go_string(v)).collect();
            let mut error = crate::FieldError::not_supported("dryRun", "", &["All"]);
            error.detail = format!("[]string{{{}}}", values.join(", "));
            return Err(ApiError::InvalidObject {
                kind: kind.into(),
                group: "meta.k8s.io".into(),
                name: String::new(),
                causes: vec![error],
            });
        }
        Ok(WriteOptions {
            dry_run: !dry_run.is_empty(),
            ..WriteOptions::default()
        })
    }
}

/// Parses an RV string as kube-apiserver's versioner does.
pub fn parse_resource_version(s: &str) -> Result<u64, ApiError> {
    // Go's ParseUint rejects a sign, Rust's accepts '+'.
    let r = if s.starts_with('+') {
        "x".parse::<u64>()
    } else {
        s.parse::<u64>()
    };
    r.map_err(|e| {
        ApiError::BadRequest(format!(
            "invalid resource version: resourceVersion: Invalid value: {}: {}",
            crate::json::go_string(s),
            go_parse_int_error("ParseUint", s, &e)
        ))
    })
}

impl ListOptions {
    /// Parses `query` (the raw URL query) for a request on `info` scoped to `namespace`
    /// (`None` for all namespaces or cluster-scoped types).
    pub fn parse(
        query: &str,
        info: &ResourceInfo,
        namespace: Option<&str>,
    ) -> Result<Self, ApiError> {
        Self::from_params(&QueryParams::decode(query), info, namespace)
    }

    /// Validates decoded parameters for a request on `info` scoped to `namespace`.
    pub fn from_params(
        p: &QueryParams,
        info: &ResourceInfo,
        namespace: Option<&str>,
    ) -> Result<Self, ApiError> {
        let rv = &p.resource_version;
        let rv_match = &p.resource_version_match;
        let cont = &p.continue_token;
        let watch = p.flags.watch;
        let initial = p.flags.send_initial_events;
        // 1. Decoding (400): numbers, then selectors, in Go's conversion order.
        let timeout_seconds = parse_given_i64(p.timeout_seconds.as_deref())?;
        let limit = parse_given_i64(p.limit.as_deref())?;
        let label_selector =
            LabelSelector::parse(&p.label_selector).map_err(ApiError::BadRequest)?;
        let field_selector =
            FieldSelector::parse(&p.field_selector).map_err(ApiError::BadRequest)?;

        // 2. Validation (422).
        let errs = validate(watch, rv, rv_match, cont, initial);
        if !errs.is_empty() {
            return Err(ApiError::InvalidListOptions(errs));
        }
        let rv_match = match rv_match.as_str() {
            "" => None,
            "Exact" => Some(RvMatch::Exact),
            _ => Some(RvMatch::NotOlderThan),
        };

        // 3. Field labels (400).
        field_selector
            .check_supported(info)
            .map_err(ApiError::BadRequest)?;

        // 4. Continue token and resourceVersion (400).
        let mut continue_token = None;
        let resource_version;
        if !cont.is_empty() && !watch {
            let prefix = list_prefix(info, namespace);
            let token = ContinueToken::decode(cont, &prefix)
                .map_err(|e| ApiError::BadRequest(format!("invalid continue token: {e}")))?;
            if !rv.is_empty() && rv != "0" {
                return Err(ApiError::BadRequest(
                    "specifying resource version is not allowed when using continue".into(),
                ));
            }
            continue_token = Some(token);
            resource_version = ResourceVersion::Unset;
        } else if rv.is_empty() {
            resource_version = ResourceVersion::Unset;
        } else {
            resource_version = match parse_resource_version(rv)? {
                0 => ResourceVersion::Any,
                n => ResourceVersion::At(n),
            };
        }

        Ok(ListOptions {
            resource_version,
            rv_match,
            limit: limit.filter(|l| *l > 0).map(|l| l as u64),
            continue_token,
            label_selector,
            field_selector,
            flags: p.flags,
            timeout_seconds,
        })
    }

    /// The page size a LIST is served with. `limit` is ignored when the request accepts any
    /// data not older than an RV — `resourceVersion=0`, or `resourceVersionMatch=NotOlderThan`
    /// — as kube-apiserver's watch cache does: client-go's reflector lists with
    /// `resourceVersion=0&limit=500`, and paging it would cost every informer a rate-limited
    /// round trip per 500 objects for no memory saved (a LIST streams in bounded chunks
    /// whatever its length). Consistent, exact and continued lists honour it
    /// (docs/semantics.md, "limit").
    pub fn page_limit(&self) -> Option<u64> {
        match (self.resource_version, self.rv_match) {
            (ResourceVersion::Any, _) => None,
            (ResourceVersion::At(_), Some(RvMatch::NotOlderThan)) => None,
            _ => self.limit,
        }
    }

    /// Whether this watch starts with the initial state (synthetic ADDED events): explicit
    /// `sendInitialEvents=true`, or the legacy rule for RV unset or "0".
    pub fn wants_initial_events(&self) -> bool {
        match self.flags.send_initial_events {
            Some(v) => v,
            None => matches!(
                self.resource_version,
                ResourceVersion::Unset | ResourceVersion::Any
            ),
        }
    }
}

/// The store-key prefix a list covers: `"ns/"` for a namespaced request, `""` otherwise.
pub fn list_prefix(info: &ResourceInfo, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if info.namespaced => format!("{ns}/"),
        _ => String::new(),
    }
}

fn validate(
    watch: bool,
    rv: &str,
    rv_match: &str,
    cont: &str,
    initial: Option<bool>,
) -> Vec<FieldError> {
    const M: &str = "resourceVersionMatch";
    let mut errs = Vec::new();
    if watch {
        if initial.is_some() && rv_match != "NotOlderThan" {
            errs.push(FieldError::forbidden(
                M,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !rv_match.is_empty() {
            if initial.is_none() {
                errs.push(FieldError::forbidden(
                    M,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if rv_match != "NotOlderThan" {
                errs.push(FieldError::not_supported(M, rv_match, &["NotOlderThan"]));
            }
            if !cont.is_empty() {
                errs.push(FieldError::forbidden(
                    M,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        return errs;
    }
    if !rv_match.is_empty() {
        if rv.is_empty() {
            errs.push(FieldError::forbidden(
                M,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !cont.is_empty() {
            errs.push(FieldError::forbidden(
                M,
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if rv_match != "Exact" && rv_match != "NotOlderThan" {
            errs.push(FieldError::not_supported(
                M,
                rv_match,
                &["Exact", "NotOlderThan", ""],
            ));
        }
        if rv_match == "Exact" && rv == "0" {
            errs.push(FieldError::forbidden(
                M,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if initial.is_some() {
        errs.push(FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_resource;

    fn cm() -> ResourceInfo {
        builtin_resource("configmaps").unwrap()
    }

    fn status(q: &str) -> String {
        let e = ListOptions::parse(q, &cm(), None).unwrap_err();
        String::from_utf8(e.to_status().body).unwrap()
    }

    #[test]
    fn watch_list_options() {
        let o = ListOptions::parse(
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2",
            &cm(),
            None,
        )
        .unwrap();
        assert!(o.flags.watch && o.flags.allow_watch_bookmarks && o.wants_initial_events());
        assert_eq!(o.timeout_seconds, Some(2));
        assert_eq!(o.rv_match, Some(RvMatch::NotOlderThan));
    }

    #[test]
    fn limits_and_rv() {
        let o = ListOptions::parse("limit=0&resourceVersion=0", &cm(), None).unwrap();
        assert_eq!(o.limit, None);
        assert_eq!(o.resource_version, ResourceVersion::Any);
        let o = ListOptions::parse(
            "limit=-1&resourceVersion=12&resourceVersionMatch=Exact",
            &cm(),
            None,
        )
        .unwrap();
        assert_eq!(o.limit, None);
        assert_eq!(o.resource_version, ResourceVersion::At(12));
        assert_eq!(o.rv_match, Some(RvMatch::Exact));
    }

    #[test]
    fn limit_is_ignored_where_any_newer_data_will_do() {
        let page = |q: &str| ListOptions::parse(q, &cm(), None).unwrap().page_limit();
        assert_eq!(page("limit=500&resourceVersion=0"), None);
        assert_eq!(
            page("limit=500&resourceVersion=0&resourceVersionMatch=NotOlderThan"),
            None
        );
        assert_eq!(
            page("limit=500&resourceVersion=7&resourceVersionMatch=NotOlderThan"),
            None
        );
        assert_eq!(page("limit=500"), Some(500));
        assert_eq!(page("limit=500&resourceVersion=7"), Some(500));
        assert_eq!(
            page("limit=500&resourceVersion=7&resourceVersionMatch=Exact"),
            Some(500)
        );
    }

    #[test]
    fn more_validation() {
        assert!(
            status("resourceVersion=0&resourceVersionMatch=Exact").contains(
                r#"resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""#
            )
        );
        assert!(status("resourceVersion=1&resourceVersionMatch=Bogus").contains(r#"Unsupported value: \"Bogus\": supported values: \"Exact\", \"NotOlderThan\", \"\""#));
        assert!(
            status("watch=1&sendInitialEvents=true").contains(
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            )
        );
        assert!(status("resourceVersion=99999999999999999999999").contains("value out of range"));
    }
}
