//! What the upstream serves: `/api/v1` and every group-version under `/apis`, reduced to
//! the resources a follower can keep (list and watch, not subresources).

use listwatch_core::ResourceInfo;
use serde::Deserialize;
use tracing::{debug, warn};

use crate::UpstreamError;
use crate::client::Upstream;

#[derive(Deserialize)]
struct GroupList {
    #[serde(default)]
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    name: String,
    #[serde(default)]
    versions: Vec<GroupVersion>,
}

#[derive(Deserialize)]
struct GroupVersion {
    version: String,
}

#[derive(Deserialize)]
struct ResourceList {
    #[serde(default)]
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiResource {
    name: String,
    #[serde(default)]
    singular_name: String,
    #[serde(default)]
    namespaced: bool,
    kind: String,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
}

/// The URL path of a resource's collection (all namespaces).
pub(crate) fn collection_path(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        format!("/api/{}/{}", info.version, info.resource)
    } else {
        format!("/apis/{}/{}/{}", info.group, info.version, info.resource)
    }
}

/// What one discovery pass found.
pub(crate) struct Discovered {
    /// The resources a follower can keep.
    pub resources: Vec<ResourceInfo>,
    /// Group/versions the upstream lists whose own discovery failed (an aggregated API
    /// that is down): what was followed of them is kept rather than retired.
    pub unanswered: Vec<(String, String)>,
}

/// Every resource of the upstream this source can follow. Built-ins in their served
/// version get listwatch's own description (`builtin_resources`: field selectors, table
/// columns); other versions of a built-in (and the views listwatch derives itself) are
/// left out; anything else (custom resources, aggregated APIs' listable resources) is
/// described from discovery, as a CRD's resources are.
pub(crate) async fn discover(up: &Upstream) -> Result<Discovered, UpstreamError> {
    let builtins = listwatch_core::builtin_resources();
    let groups: GroupList = up.get_json("/apis").await?;
    let mut gvs = vec![(String::new(), "v1".to_string())];
    for g in groups.groups {
        for v in g.versions {
            gvs.push((g.name.clone(), v.version));
        }
    }
    let mut out = Vec::new();
    let mut unanswered = Vec::new();
    for (group, version) in gvs {
        let path = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let list: ResourceList = match up.get_json(&path).await {
            Ok(l) => l,
            Err(e) => {
                // An aggregated API that is down must not stop the rest from being served.
                warn!(%path, error = %e, "discovery failed; its resources are not served here");
                unanswered.push((group, version));
                continue;
            }
        };
        for r in list.resources {
            if r.name.contains('/')
                || !["list", "watch"]
                    .iter()
                    .all(|v| r.verbs.iter().any(|x| x == v))
            {
                continue;
            }
            if let Some(b) = builtins
                .iter()
                .find(|b| b.group == group && b.version == version && b.resource == r.name)
            {
                out.push(b.clone());
                continue;
            }
            if builtins
                .iter()
                .any(|b| (b.group == group || b.kind == r.kind) && b.resource == r.name)
            {
                // Another version of a built-in, or a view listwatch keeps itself.
                continue;
            }
            debug!(%group, %version, resource = %r.name, "a resource described by discovery");
            out.push(
                ResourceInfo {
                    group: group.clone(),
                    version: version.clone(),
                    resource: r.name,
                    singular: r.singular_name,
                    kind: r.kind,
                    namespaced: r.namespaced,
                    short_names: r.short_names,
                    categories: r.categories,
                    ..ResourceInfo::default()
                }
                .normalized(),
            );
        }
    }
    Ok(Discovered {
        resources: out,
        unanswered,
    })
}
