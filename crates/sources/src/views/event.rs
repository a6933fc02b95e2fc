//! `core/v1` Event → `events.k8s.io/v1` Event, as kube-apiserver converts a stored Event
//! for the events group (`pkg/apis/core/v1` to internal, then `pkg/apis/events/v1`'s
//! `Convert_core_Event_To_v1_Event`): `involvedObject` → `regarding`, `message` → `note`,
//! `reportingComponent` → `reportingController`, `source` → `deprecatedSource`,
//! `firstTimestamp`/`lastTimestamp`/`count` → `deprecated*`; the rest keeps its name.

use listwatch_core::ResourceInfo;
use serde_json::{Map, Value, json};

use super::json::{ConvertError, go_json, non_empty, present};

/// What kube-apiserver 1.36 serves `events.k8s.io/v1` events as (discovery, selectors).
pub(super) fn info() -> ResourceInfo {
    ResourceInfo {
        group: "events.k8s.io".into(),
        version: "v1".into(),
        resource: "events".into(),
        singular: String::new(),
        kind: "Event".into(),
        namespaced: true,
        // The field labels events.k8s.io/v1 accepts (its field label conversion): the
        // core ones under their events.k8s.io names.
        field_selectors: [
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "source",
            "type",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        short_names: vec!["ev".into()],
        categories: Vec::new(),
        columns: Vec::new(),
        empty_object_tail: r#""eventTime":null,"regarding":{},"deprecatedSource":{},"deprecatedFirstTimestamp":null,"deprecatedLastTimestamp":null"#.into(),
        etcd_prefix: "/registry/events/".into(),
    status_subresource: false,
    }
    .normalized()
}

/// Converts a stored `core/v1` Event (JSON) into the `events.k8s.io/v1` Event JSON
/// kube-apiserver serves for it: members in the Go type's order, `omitempty` as its tags
/// say (`eventTime` and the deprecated timestamps are written as `null` when unset,
/// `regarding` and `deprecatedSource` as `{}`).
pub fn core_event_to_events_v1(core: &Value) -> Result<Vec<u8>, ConvertError> {
    if !core.is_object() {
        return Err(ConvertError::Shape("an Event is a JSON object"));
    }
    let mut o = Map::new();
    o.insert("kind".into(), json!("Event"));
    o.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    o.insert(
        "metadata".into(),
        present(core, "metadata").cloned().unwrap_or(json!({})),
    );
    o.insert(
        "eventTime".into(),
        present(core, "eventTime").cloned().unwrap_or(Value::Null),
    );
    if let Some(series) = present(core, "series") {
        // events.k8s.io's EventSeries writes both members always.
        let mut s = Map::new();
        s.insert(
            "count".into(),
            present(series, "count").cloned().unwrap_or(json!(0)),
        );
        s.insert(
            "lastObservedTime".into(),
            present(series, "lastObservedTime")
                .cloned()
                .unwrap_or(Value::Null),
        );
        o.insert("series".into(), Value::Object(s));
    }
    let string = |o: &mut Map<String, Value>, to: &str, from: &str| {
        if let Some(v) = non_empty(core, from) {
            o.insert(to.into(), v.clone());
        }
    };
    string(&mut o, "reportingController", "reportingComponent");
    string(&mut o, "reportingInstance", "reportingInstance");
    string(&mut o, "action", "action");
    string(&mut o, "reason", "reason");
    o.insert(
        "regarding".into(),
        present(core, "involvedObject")
            .cloned()
            .unwrap_or(json!({})),
    );
    if let Some(related) = present(core, "related") {
        o.insert("related".into(), related.clone());
    }
    string(&mut o, "note", "message");
    string(&mut o, "type", "type");
    o.insert(
        "deprecatedSource".into(),
        present(core, "source").cloned().unwrap_or(json!({})),
    );
    o.insert(
        "deprecatedFirstTimestamp".into(),
        present(core, "firstTimestamp")
            .cloned()
            .unwrap_or(Value::Null),
    );
    o.insert(
        "deprecatedLastTimestamp".into(),
        present(core, "lastTimestamp")
            .cloned()
            .unwrap_or(Value::Null),
    );
    if let Some(n) = present(core, "count").filter(|n| n.as_i64() != Some(0)) {
        o.insert("deprecatedCount".into(), n.clone());
    }
    Ok(go_json(&Value::Object(o)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::converted_text;

    #[test]
    fn a_kubelet_event_moves_to_the_events_names() {
        let core = r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"p.1","namespace":"a","resourceVersion":"7"},"involvedObject":{"kind":"Pod","namespace":"a","name":"p","apiVersion":"v1","fieldPath":"spec.containers{app}"},"reason":"BackOff","message":"Back-off <restarting>","source":{"component":"kubelet","host":"node-1"},"firstTimestamp":"2026-11-23T06:57:51Z","lastTimestamp":"2026-11-23T06:58:51Z","count":6,"type":"Warning","eventTime":null,"reportingComponent":"kubelet","reportingInstance":"node-1"}"#;
        assert_eq!(
            converted_text(core_event_to_events_v1, core),
            r#"{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{"name":"p.1","namespace":"a","resourceVersion":"7"},"eventTime":null,"reportingController":"kubelet","reportingInstance":"node-1","reason":"BackOff","regarding":{"kind":"Pod","namespace":"a","name":"p","apiVersion":"v1","fieldPath":"spec.containers{app}"},"note":"Back-off \u003crestarting\u003e","type":"Warning","deprecatedSource":{"component":"kubelet","host":"node-1"},"deprecatedFirstTimestamp":"2026-11-23T06:57:51Z","deprecatedLastTimestamp":"2026-11-23T06:58:51Z","deprecatedCount":6}"#
        );
    }

    #[test]
    fn a_new_style_event_keeps_series_related_and_action() {
        let core = r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"e"},"involvedObject":{},"source":{},"firstTimestamp":null,"lastTimestamp":null,"type":"Normal","eventTime":"2026-11-23T06:57:51.000000Z","series":{"count":2,"lastObservedTime":"2026-11-23T06:59:00.000000Z"},"action":"Reconcile","related":{"kind":"Node","name":"n"},"reportingComponent":"ctl","reportingInstance":""}"#;
        assert_eq!(
            converted_text(core_event_to_events_v1, core),
            r#"{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{"name":"e"},"eventTime":"2026-11-23T06:57:51.000000Z","series":{"count":2,"lastObservedTime":"2026-11-23T06:59:00.000000Z"},"reportingController":"ctl","action":"Reconcile","regarding":{},"related":{"kind":"Node","name":"n"},"type":"Normal","deprecatedSource":{},"deprecatedFirstTimestamp":null,"deprecatedLastTimestamp":null}"#
        );
    }

    #[test]
    fn an_empty_event_is_the_kinds_empty_object() {
        let got = converted_text(core_event_to_events_v1, r#"{"metadata":{}}"#);
        let tail = info().empty_object_tail;
        assert_eq!(
            got,
            format!(r#"{{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{{}},{tail}}}"#)
        );
        assert!(core_event_to_events_v1(&json!([])).is_err());
    }
}
