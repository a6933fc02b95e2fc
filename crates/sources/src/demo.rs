//! Demo data: pods of the realistic ~4 KiB shape kube-apiserver serves (8 labels,
//! 10 annotations, two init containers, two containers with env and requests, volumes).

use crate::objects::{rfc3339_now, uuid_v4};

/// The JSON of demo pod `i` (namespace `demo-<i % namespaces>`), without resourceVersion.
pub fn demo_pod(i: usize, namespaces: usize) -> Vec<u8> {
    let ns = format!("demo-{}", i % namespaces.max(1) + 1);
    let name = format!("pod-{i}");
    let phase = if i.is_multiple_of(10) {
        "Pending"
    } else {
        "Running"
    };
    let node = format!("node-{}", i % 50);
    let ip = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
    let env = |c: &str| {
        format!(
            r#"[{{"name":"POD_NAME","valueFrom":{{"fieldRef":{{"apiVersion":"v1","fieldPath":"metadata.name"}}}}}},{{"name":"POD_NAMESPACE","valueFrom":{{"fieldRef":{{"apiVersion":"v1","fieldPath":"metadata.namespace"}}}}}},{{"name":"NODE_NAME","valueFrom":{{"fieldRef":{{"apiVersion":"v1","fieldPath":"spec.nodeName"}}}}}},{{"name":"POD_IP","valueFrom":{{"fieldRef":{{"apiVersion":"v1","fieldPath":"status.podIP"}}}}}},{{"name":"GOMAXPROCS","valueFrom":{{"resourceFieldRef":{{"containerName":"{c}","resource":"limits.cpu","divisor":"0"}}}}}},{{"name":"GOMEMLIMIT","valueFrom":{{"resourceFieldRef":{{"containerName":"{c}","resource":"limits.memory","divisor":"0"}}}}}},{{"name":"JAVA_TOOL_OPTIONS","value":"-XX:MaxRAMPercentage=75.0"}},{{"name":"REDIS_URL","value":"redis://main:6379/0"}},{{"name":"PYTHONUNBUFFERED","value":"1"}},{{"name":"NODE_ENV","value":"prod"}}]"#
        )
    };
    let init = |n: usize| {
        format!(
            r#"{{"name":"init-{n}","image":"registry.k8s.io/e2e-test-images/agnhost:2.53","command":["/bin/sh","-c","sleep 1"],"resources":{{}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}"#
        )
    };
    let container = |c: &str, mounts: &str| {
        format!(
            r#"{{"name":"{c}","image":"registry.k8s.io/pause:3.9","env":{},"resources":{{"requests":{{"cpu":"5m","memory":"20M"}}}},{mounts}"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}"#,
            env(c)
        )
    };
    let mounts = r#""volumeMounts":[{"name":"configmap","mountPath":"/var/configmap"},{"name":"secret","mountPath":"/var/secret"}],"#;
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","uid":"{uid}","generation":1,"creationTimestamp":"{ts}","labels":{{"app.kubernetes.io/component":"backend","app.kubernetes.io/instance":"payment-service-primary","app.kubernetes.io/name":"payment-service","app.kubernetes.io/part-of":"ecommerce-platform","app.kubernetes.io/version":"v2.1.4","env":"production","group":"g-{g}","track":"{track}"}},"annotations":{{"argocd.argoproj.io/hook":"PreSync","argocd.argoproj.io/hook-delete-policy":"HookSucceeded","cluster-autoscaler.kubernetes.io/safe-to-evict":"false","fluentbit.io/parser":"json","prometheus.io/path":"/metrics","prometheus.io/port":"8080","prometheus.io/scrape":"false","sidecar.istio.io/inject":"false","vault.hashicorp.com/agent-inject":"false","vault.hashicorp.com/role":"my-app-db-role"}}}},"spec":{{"volumes":[{{"name":"configmap","configMap":{{"name":"{name}","defaultMode":420,"optional":true}}}},{{"name":"secret","secret":{{"secretName":"{name}","defaultMode":420,"optional":true}}}}],"initContainers":[{i0},{i1}],"containers":[{c0},{c1}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","nodeName":"{node}","securityContext":{{}},"schedulerName":"default-scheduler","tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}},{{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"}},"status":{{"phase":"{phase}","podIP":"{ip}","qosClass":"Burstable"}}}}"#,
        uid = uuid_v4(),
        ts = rfc3339_now(),
        g = i % 100,
        track = if i.is_multiple_of(4) { "canary" } else { "stable" },
        i0 = init(0),
        i1 = init(1),
        c0 = container("main", mounts),
        c1 = container("sidecar", ""),
    )
    .into_bytes()
}

/// `n` demo pods spread over `namespaces` namespaces.
pub fn demo_pods(n: usize, namespaces: usize) -> impl Iterator<Item = Vec<u8>> {
    (0..n).map(move |i| demo_pod(i, namespaces))
}

/// An embedded source over the built-in resources (one shard each, default store config)
/// and its `v1/pods` store: what the tests and benches that serve pods start from.
pub fn pods_source() -> (
    std::sync::Arc<crate::EmbeddedSource>,
    std::sync::Arc<listwatch_store::Store>,
) {
    let registry = crate::Registry::new(
        listwatch_core::builtin_resources(),
        1,
        &listwatch_store::StoreConfig::default(),
    );
    let source = crate::EmbeddedSource::new(registry);
    let pods = source
        .registry()
        .get("", "v1", "pods")
        .expect("v1/pods is a built-in resource");
    (source, pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_pod_is_valid_json_of_about_4k() {
        let p = demo_pod(7, 10);
        let v: serde_json::Value = serde_json::from_slice(&p).expect("json");
        assert_eq!(v["metadata"]["namespace"], "demo-8");
        assert!((3500..5500).contains(&p.len()), "{}", p.len());
    }
}
