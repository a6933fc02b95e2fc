//! One RBAC policy rule and whether it allows a request: what the RBAC authorizer
//! ([`crate::rbac`]) evaluates from Roles and the Node authorizer ([`crate::node`]) from its
//! fixed rules. A leaf, so those two do not import each other.

use serde::Deserialize;

use crate::authorizer::Attributes;

/// One RBAC `PolicyRule` (`rules[]` of a Role or ClusterRole).
#[derive(Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Verbs (`*` for all).
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups (`""` for core, `*` for all).
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// Resources, `resource/subresource` for subresources (`*`, `*/sub`).
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names the rule is limited to (empty: any).
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// Non-resource paths (a trailing `*` matches a prefix).
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

pub(crate) fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

/// Whether one policy rule allows `a` (kube's `RuleAllows`).
pub(crate) fn rule_allows(rule: &Rule, a: &Attributes) -> bool {
    if !has(&rule.verbs, &a.verb) {
        return false;
    }
    if !a.resource_request {
        return rule.non_resource_urls.iter().any(|u| {
            u == "*" || *u == a.path || (u.ends_with('*') && a.path.starts_with(&u[..u.len() - 1]))
        });
    }
    if !has(&rule.api_groups, &a.api_group) {
        return false;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource_ok = rule.resources.iter().any(|x| {
        x == "*"
            || *x == combined
            || (!a.subresource.is_empty() && *x == format!("*/{}", a.subresource))
    });
    resource_ok
        && (rule.resource_names.is_empty()
            || (!a.name.is_empty() && rule.resource_names.contains(&a.name)))
}
