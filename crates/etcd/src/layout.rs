//! Key layout: kube-apiserver stores an object at `<prefix><namespace>/<name>` (namespaced)
//! or `<prefix><name>` (cluster-scoped), where the prefix is per resource
//! (`ResourceInfo::etcd_prefix`, e.g. `/registry/pods/`, `/registry/deployments/`). The part
//! after the prefix is exactly the store key, so mapping is slicing, not parsing.

use listwatch_core::ResourceInfo;

/// The etcd key of the object with store key `key`.
pub fn etcd_key(info: &ResourceInfo, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(info.etcd_prefix.len() + key.len());
    k.extend_from_slice(info.etcd_prefix.as_bytes());
    k.extend_from_slice(key.as_bytes());
    k
}

/// The store key of etcd key `key`, or `None` when the key does not name one object of
/// this resource (another resource sharing the prefix's parent, a malformed key).
pub fn store_key<'a>(info: &ResourceInfo, key: &'a [u8]) -> Option<&'a str> {
    let rest = key.strip_prefix(info.etcd_prefix.as_bytes())?;
    let rest = std::str::from_utf8(rest).ok()?;
    let slashes = rest.bytes().filter(|b| *b == b'/').count();
    let parts_ok = rest.split('/').all(|p| !p.is_empty());
    let expected = usize::from(info.namespaced);
    (slashes == expected && parts_ok).then_some(rest)
}

/// The first key after every key starting with `prefix` (etcd's range end for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: no end, i.e. to the end of the keyspace.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> ResourceInfo {
        listwatch_core::builtin_resources()
            .into_iter()
            .find(|r| r.resource == "pods")
            .expect("pods")
    }

    #[test]
    fn keys_map_both_ways() {
        let info = pods();
        assert_eq!(
            etcd_key(&info, "ns1/web"),
            b"/registry/pods/ns1/web".to_vec()
        );
        assert_eq!(store_key(&info, b"/registry/pods/ns1/web"), Some("ns1/web"));
        assert_eq!(store_key(&info, b"/registry/pods/ns1"), None);
        assert_eq!(store_key(&info, b"/registry/pods/ns1/a/b"), None);
        assert_eq!(store_key(&info, b"/registry/pods//a"), None);
        assert_eq!(store_key(&info, b"/registry/podtemplates/ns/a"), None);
    }

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
    }
}
