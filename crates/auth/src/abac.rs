//! kube-apiserver's ABAC authorizer (`--authorization-mode=ABAC` with
//! `--authorization-policy-file`): JSON-lines policies matched against a request's
//! [`Attributes`].

use std::path::Path;

use crate::authorizer::{Attributes, Authorizer, Decision};
use crate::config::{ConfigError, invalid, read};

/// One ABAC rule (one JSON object per line):
/// `{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy",
/// "spec":{"user":"alice","namespace":"team-a","resource":"pods","readonly":true}}`.
#[derive(Debug, serde::Deserialize)]
struct Policy {
    spec: PolicySpec,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicySpec {
    #[serde(default)]
    user: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    readonly: bool,
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    non_resource_path: String,
}

/// Authorizes by an ABAC policy file: a request is allowed when one rule matches its user
/// (or one of its groups), its verb (`readonly` rules allow get, list and watch only) and
/// its resource, API group and namespace — or, for a non-resource request, its path. `*`
/// matches anything (a trailing `*` in a path, any path with that prefix). A rule with a
/// namespace never matches a cluster-wide request, so a user allowed some namespaces gets
/// 403 for a LIST across all of them, as with RBAC.
pub struct PolicyAuthorizer {
    rules: Vec<PolicySpec>,
}

impl PolicyAuthorizer {
    /// Reads the policy file (JSON lines; blank lines and `#` comments skipped).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let data = read(path)?;
        let text = String::from_utf8(data).map_err(|e| invalid(path, e))?;
        let mut rules = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let p: Policy = serde_json::from_str(line)
                .map_err(|e| invalid(path, format!("line {}: {e}", i + 1)))?;
            rules.push(p.spec);
        }
        Ok(PolicyAuthorizer { rules })
    }
}

fn matches(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

impl PolicySpec {
    fn applies(&self, a: &Attributes) -> bool {
        let who = (!self.user.is_empty() && matches(&self.user, &a.user.name))
            || (!self.group.is_empty() && a.user.groups.iter().any(|g| matches(&self.group, g)));
        if !who || (self.readonly && !a.is_read_only()) {
            return false;
        }
        if a.resource_request {
            // An empty namespace in a rule matches only cluster-wide requests.
            matches(&self.namespace, &a.namespace)
                && matches(&self.resource, &a.resource)
                && matches(&self.api_group, &a.api_group)
        } else {
            let p = &self.non_resource_path;
            matches(p, &a.path)
                || p.strip_suffix('*')
                    .is_some_and(|pre| a.path.starts_with(pre))
        }
    }
}

impl Authorizer for PolicyAuthorizer {
    fn authorize(&self, a: &Attributes) -> Decision {
        if self.rules.iter().any(|r| r.applies(a)) {
            Decision::allow("")
        } else {
            Decision::no_opinion("No policy matched.")
        }
    }
}
