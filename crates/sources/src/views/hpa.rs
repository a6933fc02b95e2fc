//! `autoscaling/v2` HorizontalPodAutoscaler → `autoscaling/v1`, as kube-apiserver converts
//! a stored HPA for v1 clients (`pkg/apis/autoscaling/v1/conversion.go`): the first CPU
//! resource metric becomes `targetCPUUtilizationPercentage` (and its current value
//! `currentCPUUtilizationPercentage`); what v1 cannot express travels in the
//! `autoscaling.alpha.kubernetes.io/*` annotations, so a v1 client that writes the object
//! back loses nothing: the other metrics (as v1 `MetricSpec`s), every current metric (v1
//! `MetricStatus`es), the conditions and the behavior.

use listwatch_core::ResourceInfo;
use serde_json::{Map, Value, json};

use super::json::{ConvertError, go_json, non_empty, present};

/// Non-CPU-utilization metric specs (`autoscaling.MetricSpecsAnnotation`).
pub const METRIC_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// Current metric statuses (`autoscaling.MetricStatusesAnnotation`).
pub const METRIC_STATUSES_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// Status conditions (`autoscaling.HorizontalPodAutoscalerConditionsAnnotation`).
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// Scaling behavior (`autoscaling.BehaviorSpecsAnnotation`).
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// The round-trip annotations kube drops from the object before it sets its own
/// (`DropRoundTripHorizontalPodAutoscalerAnnotations`, tolerances included).
const ROUND_TRIP: [&str; 6] = [
    METRIC_SPECS_ANNOTATION,
    METRIC_STATUSES_ANNOTATION,
    CONDITIONS_ANNOTATION,
    BEHAVIOR_ANNOTATION,
    "autoscaling.alpha.kubernetes.io/scale-down-tolerance",
    "autoscaling.alpha.kubernetes.io/scale-up-tolerance",
];

/// What kube-apiserver 1.36 serves `autoscaling/v1` HPAs as.
pub(super) fn info() -> ResourceInfo {
    ResourceInfo {
        group: "autoscaling".into(),
        version: "v1".into(),
        resource: "horizontalpodautoscalers".into(),
        singular: String::new(),
        kind: "HorizontalPodAutoscaler".into(),
        namespaced: true,
        field_selectors: Vec::new(),
        short_names: vec!["hpa".into()],
        categories: vec!["all".into()],
        columns: Vec::new(),
        empty_object_tail: r#""spec":{"scaleTargetRef":{"kind":"","name":""},"maxReplicas":0},"status":{"currentReplicas":0,"desiredReplicas":0}"#.into(),
        etcd_prefix: "/registry/horizontalpodautoscalers/".into(),
    status_subresource: false,
    }
    .normalized()
}

fn or<'a>(v: Option<&'a Value>, default: &'a Value) -> &'a Value {
    v.unwrap_or(default)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A `Quantity` v1 declares without a pointer: the zero quantity is `"0"`.
fn quantity(v: &Value, key: &str) -> Value {
    present(v, key).cloned().unwrap_or(json!("0"))
}

fn copy(out: &mut Map<String, Value>, to: &str, from: &Value, key: &str) {
    if let Some(v) = present(from, key) {
        out.insert(to.into(), v.clone());
    }
}

/// `CrossVersionObjectReference` (kind, name, apiVersion omitempty).
fn reference(r: &Value) -> Value {
    let mut o = Map::new();
    o.insert("kind".into(), json!(str_of(r, "kind")));
    o.insert("name".into(), json!(str_of(r, "name")));
    if let Some(v) = non_empty(r, "apiVersion") {
        o.insert("apiVersion".into(), v.clone());
    }
    Value::Object(o)
}

fn is_cpu_resource(m: &Value) -> bool {
    str_of(m, "type") == "Resource"
        && present(m, "resource").is_some_and(|r| str_of(r, "name") == "cpu")
}

/// Which half of a metric [`metric`] converts: v1 names a spec's values `target…` (read from
/// v2's `target`) and a status's `current…` (from `current`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Half {
    Spec,
    Status,
}

/// A v2 `MetricSpec` or `MetricStatus` as a v1 one (members in v1's order). v1 declares
/// some values without a pointer: always written (`"0"` when unset), the others only when
/// set; which ones differs between the halves.
fn metric(m: &Value, half: Half) -> Value {
    let side = match half {
        Half::Spec => "target",
        Half::Status => "current",
    };
    let named = |field: &str| format!("{side}{field}");
    // Without a pointer in the status only.
    let status_value = |v: &mut Map<String, Value>, to: String, from: &Value, key: &str| {
        if half == Half::Status {
            v.insert(to, quantity(from, key));
        } else {
            copy(v, &to, from, key);
        }
    };
    let empty = json!({});
    let mut o = Map::new();
    o.insert("type".into(), json!(str_of(m, "type")));
    if let Some(src) = present(m, "object") {
        let metric = or(present(src, "metric"), &empty);
        let values = or(present(src, side), &empty);
        let mut v = Map::new();
        v.insert(
            "target".into(),
            reference(or(present(src, "describedObject"), &empty)),
        );
        v.insert("metricName".into(), json!(str_of(metric, "name")));
        v.insert(named("Value"), quantity(values, "value"));
        copy(&mut v, "selector", metric, "selector");
        copy(&mut v, "averageValue", values, "averageValue");
        o.insert("object".into(), Value::Object(v));
    }
    if let Some(src) = present(m, "pods") {
        let metric = or(present(src, "metric"), &empty);
        let values = or(present(src, side), &empty);
        let mut v = Map::new();
        v.insert("metricName".into(), json!(str_of(metric, "name")));
        v.insert(named("AverageValue"), quantity(values, "averageValue"));
        copy(&mut v, "selector", metric, "selector");
        o.insert("pods".into(), Value::Object(v));
    }
    for (key, container) in [("resource", false), ("containerResource", true)] {
        if let Some(src) = present(m, key) {
            let values = or(present(src, side), &empty);
            let mut v = Map::new();
            v.insert("name".into(), json!(str_of(src, "name")));
            copy(
                &mut v,
                &named("AverageUtilization"),
                values,
                "averageUtilization",
            );
            status_value(&mut v, named("AverageValue"), values, "averageValue");
            if container {
                v.insert("container".into(), json!(str_of(src, "container")));
            }
            o.insert(key.into(), Value::Object(v));
        }
    }
    if let Some(src) = present(m, "external") {
        let metric = or(present(src, "metric"), &empty);
        let values = or(present(src, side), &empty);
        let mut v = Map::new();
        v.insert("metricName".into(), json!(str_of(metric, "name")));
        copy(&mut v, "metricSelector", metric, "selector");
        status_value(&mut v, named("Value"), values, "value");
        copy(&mut v, &named("AverageValue"), values, "averageValue");
        o.insert("external".into(), Value::Object(v));
    }
    Value::Object(o)
}

/// A v2 condition as v1's (`lastTransitionTime` is `null` when unset, as Go writes a zero
/// `metav1.Time`).
fn condition(c: &Value) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), json!(str_of(c, "type")));
    o.insert("status".into(), json!(str_of(c, "status")));
    o.insert(
        "lastTransitionTime".into(),
        present(c, "lastTransitionTime")
            .cloned()
            .unwrap_or(Value::Null),
    );
    for k in ["reason", "message"] {
        if let Some(v) = non_empty(c, k) {
            o.insert(k.into(), v.clone());
        }
    }
    Value::Object(o)
}

/// The behavior as kube writes it into the annotation: its *internal* Go type marshalled
/// without JSON tags, so the keys are Go's field names and every field is written.
fn internal_behavior(b: &Value) -> Value {
    let rules = |r: Option<&Value>| -> Value {
        let Some(r) = r else {
            return Value::Null;
        };
        let policies = present(r, "policies").and_then(Value::as_array).map(|ps| {
            ps.iter()
                .map(|p| {
                    json!({
                        "Type": str_of(p, "type"),
                        "Value": or(present(p, "value"), &json!(0)),
                        "PeriodSeconds": or(present(p, "periodSeconds"), &json!(0)),
                    })
                })
                .collect::<Vec<_>>()
        });
        json!({
            "StabilizationWindowSeconds": present(r, "stabilizationWindowSeconds"),
            "SelectPolicy": present(r, "selectPolicy"),
            "Policies": policies,
            "Tolerance": present(r, "tolerance"),
        })
    };
    json!({
        "ScaleUp": rules(present(b, "scaleUp")),
        "ScaleDown": rules(present(b, "scaleDown")),
    })
}

/// Converts a stored `autoscaling/v2` HPA (JSON) into the `autoscaling/v1` JSON
/// kube-apiserver serves for it.
pub fn hpa_v2_to_v1(v2: &Value) -> Result<Vec<u8>, ConvertError> {
    if !v2.is_object() {
        return Err(ConvertError::Shape("an HPA is a JSON object"));
    }
    let empty = json!({});
    let spec = or(present(v2, "spec"), &empty);
    let status = or(present(v2, "status"), &empty);
    let metrics: &[Value] = present(spec, "metrics")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let current: &[Value] = present(status, "currentMetrics")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let conditions: &[Value] = present(status, "conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let cpu_target = |m: &Value| {
        present(m, "resource")
            .and_then(|r| present(r, "target"))
            .and_then(|t| present(t, "averageUtilization"))
            .cloned()
    };

    // metadata, with the round-trip annotations replaced by this conversion's own.
    let mut metadata = present(v2, "metadata").cloned().unwrap_or(json!({}));
    let mut annotations: Vec<(String, Value)> = metadata
        .get("annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !ROUND_TRIP.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let other: Vec<Value> = metrics
        .iter()
        .filter(|m| !(is_cpu_resource(m) && cpu_target(m).is_some()))
        .map(|m| metric(m, Half::Spec))
        .collect();
    let text = |v: Value| Value::String(String::from_utf8(go_json(&v)).unwrap_or_default());
    if !other.is_empty() {
        annotations.push((METRIC_SPECS_ANNOTATION.into(), text(Value::Array(other))));
    }
    if !current.is_empty() {
        let statuses = current.iter().map(|m| metric(m, Half::Status)).collect();
        annotations.push((
            METRIC_STATUSES_ANNOTATION.into(),
            text(Value::Array(statuses)),
        ));
    }
    if !conditions.is_empty() {
        let cs = conditions.iter().map(condition).collect();
        annotations.push((CONDITIONS_ANNOTATION.into(), text(Value::Array(cs))));
    }
    if let Some(b) = present(spec, "behavior") {
        annotations.push((BEHAVIOR_ANNOTATION.into(), text(internal_behavior(b))));
    }
    if let Some(meta) = metadata.as_object_mut() {
        if annotations.is_empty() {
            meta.shift_remove("annotations");
        } else {
            // Go writes a map's keys sorted.
            annotations.sort_by(|a, b| a.0.cmp(&b.0));
            let map: Map<String, Value> = annotations.into_iter().collect();
            match meta.get_mut("annotations") {
                Some(slot) => *slot = Value::Object(map),
                None => insert_annotations(meta, map),
            }
        }
    }

    let mut s = Map::new();
    s.insert(
        "scaleTargetRef".into(),
        reference(or(present(spec, "scaleTargetRef"), &empty)),
    );
    copy(&mut s, "minReplicas", spec, "minReplicas");
    s.insert(
        "maxReplicas".into(),
        present(spec, "maxReplicas").cloned().unwrap_or(json!(0)),
    );
    // The first CPU resource metric decides, whether or not it is a utilization.
    if let Some(pct) = metrics
        .iter()
        .find(|m| is_cpu_resource(m))
        .and_then(cpu_target)
    {
        s.insert("targetCPUUtilizationPercentage".into(), pct);
    }

    let mut st = Map::new();
    copy(&mut st, "observedGeneration", status, "observedGeneration");
    copy(&mut st, "lastScaleTime", status, "lastScaleTime");
    st.insert(
        "currentReplicas".into(),
        present(status, "currentReplicas")
            .cloned()
            .unwrap_or(json!(0)),
    );
    st.insert(
        "desiredReplicas".into(),
        present(status, "desiredReplicas")
            .cloned()
            .unwrap_or(json!(0)),
    );
    // Every CPU resource status is looked at; the last with a utilization wins (looked
    // for from the end).
    if let Some(pct) = current
        .iter()
        .rev()
        .filter(|m| is_cpu_resource(m))
        .find_map(|m| {
            present(m, "resource")
                .and_then(|r| present(r, "current"))
                .and_then(|c| present(c, "averageUtilization"))
        })
    {
        st.insert("currentCPUUtilizationPercentage".into(), pct.clone());
    }

    let mut o = Map::new();
    o.insert("kind".into(), json!("HorizontalPodAutoscaler"));
    o.insert("apiVersion".into(), json!("autoscaling/v1"));
    o.insert("metadata".into(), metadata);
    o.insert("spec".into(), Value::Object(s));
    o.insert("status".into(), Value::Object(st));
    Ok(go_json(&Value::Object(o)))
}

/// Puts `annotations` where ObjectMeta declares it (after `labels`, before
/// `ownerReferences`).
fn insert_annotations(meta: &mut Map<String, Value>, annotations: Map<String, Value>) {
    let before = crate::objects::metadata_fields_before("annotations");
    let at = meta
        .keys()
        .position(|k| !before.contains(&k.as_str()))
        .unwrap_or(meta.len());
    meta.shift_insert(at, "annotations".into(), Value::Object(annotations));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::converted_text;

    #[test]
    fn a_cpu_utilization_target_becomes_the_v1_percentage() {
        let v2 = r#"{"kind":"HorizontalPodAutoscaler","apiVersion":"autoscaling/v2","metadata":{"name":"web","namespace":"a","resourceVersion":"253","labels":{"t":"b"},"annotations":{"note":"x"}},"spec":{"scaleTargetRef":{"kind":"Deployment","name":"web","apiVersion":"apps/v1"},"minReplicas":2,"maxReplicas":10,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":70}}}]},"status":{"currentMetrics":null,"desiredReplicas":0}}"#;
        assert_eq!(
            converted_text(hpa_v2_to_v1, v2),
            r#"{"kind":"HorizontalPodAutoscaler","apiVersion":"autoscaling/v1","metadata":{"name":"web","namespace":"a","resourceVersion":"253","labels":{"t":"b"},"annotations":{"note":"x"}},"spec":{"scaleTargetRef":{"kind":"Deployment","name":"web","apiVersion":"apps/v1"},"minReplicas":2,"maxReplicas":10,"targetCPUUtilizationPercentage":70},"status":{"currentReplicas":0,"desiredReplicas":0}}"#
        );
    }

    #[test]
    fn what_v1_cannot_express_travels_in_annotations() {
        let v2 = r#"{"metadata":{"name":"h","uid":"u","labels":{"a":"b"},"managedFields":[]},"spec":{"scaleTargetRef":{"kind":"Deployment","name":"d"},"maxReplicas":5,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":50}}},{"type":"Pods","pods":{"metric":{"name":"qps"},"target":{"type":"AverageValue","averageValue":"1k"}}},{"type":"External","external":{"metric":{"name":"queue","selector":{"matchLabels":{"q":"w"}}},"target":{"type":"Value","value":"30"}}},{"type":"Resource","resource":{"name":"memory","target":{"type":"AverageValue","averageValue":"100Mi"}}}],"behavior":{"scaleDown":{"stabilizationWindowSeconds":300,"selectPolicy":"Max","policies":[{"type":"Percent","value":100,"periodSeconds":15}]}}},"status":{"observedGeneration":3,"lastScaleTime":"2026-11-23T06:57:51Z","currentReplicas":2,"desiredReplicas":3,"currentMetrics":[{"type":"Resource","resource":{"name":"cpu","current":{"averageValue":"250m","averageUtilization":62}}}],"conditions":[{"type":"AbleToScale","status":"True","lastTransitionTime":"2026-11-23T06:57:51Z","reason":"ReadyForNewScale","message":"recommended size matches current size"}]}}"#;
        let got: Value = serde_json::from_str(&converted_text(hpa_v2_to_v1, v2)).unwrap();
        let a = &got["metadata"]["annotations"];
        let keys: Vec<&String> = a.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                BEHAVIOR_ANNOTATION,
                CONDITIONS_ANNOTATION,
                METRIC_STATUSES_ANNOTATION,
                METRIC_SPECS_ANNOTATION,
            ],
            "sorted as Go writes a map"
        );
        assert_eq!(
            a[METRIC_SPECS_ANNOTATION],
            r#"[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"1k"}},{"type":"External","external":{"metricName":"queue","metricSelector":{"matchLabels":{"q":"w"}},"targetValue":"30"}},{"type":"Resource","resource":{"name":"memory","targetAverageValue":"100Mi"}}]"#
        );
        assert_eq!(
            a[METRIC_STATUSES_ANNOTATION],
            r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":62,"currentAverageValue":"250m"}}]"#
        );
        assert_eq!(
            a[CONDITIONS_ANNOTATION],
            r#"[{"type":"AbleToScale","status":"True","lastTransitionTime":"2026-11-23T06:57:51Z","reason":"ReadyForNewScale","message":"recommended size matches current size"}]"#
        );
        assert_eq!(
            a[BEHAVIOR_ANNOTATION],
            r#"{"ScaleUp":null,"ScaleDown":{"StabilizationWindowSeconds":300,"SelectPolicy":"Max","Policies":[{"Type":"Percent","Value":100,"PeriodSeconds":15}],"Tolerance":null}}"#
        );
        let meta: Vec<&String> = got["metadata"].as_object().unwrap().keys().collect();
        assert_eq!(
            meta,
            ["name", "uid", "labels", "annotations", "managedFields"]
        );
        assert_eq!(
            got["spec"],
            json!({"scaleTargetRef":{"kind":"Deployment","name":"d"},"maxReplicas":5,"targetCPUUtilizationPercentage":50})
        );
        assert_eq!(
            got["status"],
            json!({"observedGeneration":3,"lastScaleTime":"2026-11-23T06:57:51Z","currentReplicas":2,"desiredReplicas":3,"currentCPUUtilizationPercentage":62})
        );
    }

    #[test]
    fn stale_round_trip_annotations_alone_are_dropped() {
        let v2 = r#"{"metadata":{"name":"h","annotations":{"autoscaling.alpha.kubernetes.io/conditions":"[]"}},"spec":{"scaleTargetRef":{"kind":"Deployment","name":"d"},"maxReplicas":1,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"AverageValue","averageValue":"500m"}}}]},"status":{"desiredReplicas":1}}"#;
        assert_eq!(
            converted_text(hpa_v2_to_v1, v2),
            r#"{"kind":"HorizontalPodAutoscaler","apiVersion":"autoscaling/v1","metadata":{"name":"h","annotations":{"autoscaling.alpha.kubernetes.io/metrics":"[{\"type\":\"Resource\",\"resource\":{\"name\":\"cpu\",\"targetAverageValue\":\"500m\"}}]"}},"spec":{"scaleTargetRef":{"kind":"Deployment","name":"d"},"maxReplicas":1},"status":{"currentReplicas":0,"desiredReplicas":1}}"#,
            "a CPU target that is not a utilization sets no percentage and is kept as a metric"
        );
        let only = r#"{"metadata":{"name":"h","annotations":{"autoscaling.alpha.kubernetes.io/conditions":"[]"}},"spec":{}}"#;
        let tail = info().empty_object_tail;
        assert_eq!(
            converted_text(hpa_v2_to_v1, only),
            format!(
                r#"{{"kind":"HorizontalPodAutoscaler","apiVersion":"autoscaling/v1","metadata":{{"name":"h"}},{tail}}}"#
            )
        );
    }
}
