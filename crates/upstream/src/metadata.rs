//! A collection's metadata alone, as kube-apiserver serves it to metadata informers
//! (`PartialObjectMetadataList`, protobuf where the upstream offers it, else JSON): what a
//! consistent read needs to prove the cache current — each object's key and
//! resourceVersion — without the objects' bodies.

use listwatch_protobuf::wire::{FieldReader, Value, slice};

use crate::UpstreamError;
use crate::client::{Pages, Upstream};

/// The `Accept` of a metadata LIST: protobuf first (the smallest), JSON when the upstream
/// cannot encode it so.
pub(crate) const ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json;q=0.9";

/// One object's identity and version.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ItemMeta {
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
}

/// One page of a metadata LIST.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct MetaPage {
    pub resource_version: String,
    pub continue_: String,
    pub items: Vec<ItemMeta>,
}

/// kube-apiserver's protobuf envelope: this magic, then a `runtime.Unknown` message.
const MAGIC: &[u8] = b"k8s\0";
/// The whole collection at `path` as metadata only (`PartialObjectMetadataList`, by pages of
/// `page`, at the first page's RV): the RV, every object's namespace, name and RV, and the
/// bytes the upstream sent.
pub(crate) async fn list_all(
    up: &Upstream,
    path: &str,
    page: usize,
) -> Result<(u64, Vec<ItemMeta>, usize), UpstreamError> {
    let (mut pages, mut items, mut bytes) = (Pages::new(path, page), Vec::new(), 0);
    while let Some(q) = pages.next_query() {
        let (content_type, body) = up.get_body_as(&q, ACCEPT).await?;
        bytes += body.len();
        let p = parse(&content_type, &body)?;
        pages.read(&p.resource_version, p.continue_)?;
        items.extend(p.items);
    }
    Ok((pages.rv(), items, bytes))
}

/// The page in `body`, encoded as `content_type` says.
pub(crate) fn parse(content_type: &str, body: &[u8]) -> Result<MetaPage, UpstreamError> {
    if content_type.starts_with("application/vnd.kubernetes.protobuf") {
        parse_protobuf(body)
            .map_err(|e| UpstreamError::Json(format!("PartialObjectMetadataList (protobuf): {e}")))
    } else {
        parse_json(body)
    }
}

fn parse_json(body: &[u8]) -> Result<MetaPage, UpstreamError> {
    #[derive(serde::Deserialize)]
    struct Page {
        #[serde(default)]
        metadata: crate::client::ListMeta,
        #[serde(default)]
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        metadata: Meta,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default)]
        namespace: String,
        name: String,
        resource_version: String,
    }
    let p: Page = serde_json::from_slice(body)
        .map_err(|e| UpstreamError::Json(format!("PartialObjectMetadataList: {e}")))?;
    Ok(MetaPage {
        resource_version: p.metadata.resource_version,
        continue_: p.metadata.continue_,
        items: p
            .items
            .into_iter()
            .map(|i| ItemMeta {
                namespace: i.metadata.namespace,
                name: i.metadata.name,
                resource_version: i.metadata.resource_version,
            })
            .collect(),
    })
}

/// Field numbers (k8s.io/apimachinery's generated.proto).
mod field {
    /// `runtime.Unknown.raw`.
    pub const UNKNOWN_RAW: u32 = 2;
    /// `PartialObjectMetadataList.metadata` (a `ListMeta`), `.items`.
    pub const LIST_METADATA: u32 = 1;
    pub const LIST_ITEMS: u32 = 2;
    /// `ListMeta.resourceVersion`, `.continue`.
    pub const LIST_RV: u32 = 2;
    pub const LIST_CONTINUE: u32 = 3;
    /// `PartialObjectMetadata.metadata` (an `ObjectMeta`).
    pub const ITEM_METADATA: u32 = 1;
    /// `ObjectMeta.name`, `.namespace`, `.resourceVersion`.
    pub const NAME: u32 = 1;
    pub const NAMESPACE: u32 = 3;
    pub const RV: u32 = 6;
}

fn parse_protobuf(body: &[u8]) -> Result<MetaPage, String> {
    let rest = body.strip_prefix(MAGIC).ok_or("no protobuf envelope")?;
    let off = MAGIC.len();
    let raw = only_field(body, off, off + rest.len(), field::UNKNOWN_RAW)?
        .ok_or("no object in the envelope")?;
    let mut page = MetaPage::default();
    let mut list = FieldReader::new(body, raw.0, raw.1);
    while let Some((tag, v)) = list.next_field().map_err(|e| e.to_string())? {
        let Value::Len(s, e) = v else { continue };
        match tag {
            field::LIST_METADATA => {
                let mut meta = FieldReader::new(body, s as usize, e as usize);
                while let Some((t, v)) = meta.next_field().map_err(|e| e.to_string())? {
                    match (t, v) {
                        (field::LIST_RV, Value::Len(a, b)) => {
                            page.resource_version = text(body, a, b)?;
                        }
                        (field::LIST_CONTINUE, Value::Len(a, b)) => {
                            page.continue_ = text(body, a, b)?;
                        }
                        _ => {}
                    }
                }
            }
            field::LIST_ITEMS => {
                let (ms, me) = only_field(body, s as usize, e as usize, field::ITEM_METADATA)?
                    .ok_or("an item without metadata")?;
                let mut item = ItemMeta {
                    namespace: String::new(),
                    name: String::new(),
                    resource_version: String::new(),
                };
                let mut meta = FieldReader::new(body, ms, me);
                while let Some((t, v)) = meta.next_field().map_err(|e| e.to_string())? {
                    let Value::Len(a, b) = v else { continue };
                    match t {
                        field::NAME => item.name = text(body, a, b)?,
                        field::NAMESPACE => item.namespace = text(body, a, b)?,
                        field::RV => item.resource_version = text(body, a, b)?,
                        _ => {}
                    }
                }
                page.items.push(item);
            }
            _ => {}
        }
    }
    Ok(page)
}

/// The position of the (last) length-delimited field `tag` of the message in
/// `body[start..end]`.
fn only_field(
    body: &[u8],
    start: usize,
    end: usize,
    tag: u32,
) -> Result<Option<(usize, usize)>, String> {
    let mut r = FieldReader::new(body, start, end);
    let mut found = None;
    while let Some((t, v)) = r.next_field().map_err(|e| e.to_string())? {
        if let (true, Value::Len(s, e)) = (t == tag, v) {
            found = Some((s as usize, e as usize));
        }
    }
    Ok(found)
}

fn text(body: &[u8], start: u32, end: u32) -> Result<String, String> {
    std::str::from_utf8(slice(body, start, end))
        .map(str::to_string)
        .map_err(|_| "a string that is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn len_field(tag: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![u8::try_from(tag << 3 | 2).expect("small tag")];
        let mut n = bytes.len();
        loop {
            let b = u8::try_from(n & 0x7f).expect("7 bits");
            n >>= 7;
            out.push(if n == 0 { b } else { b | 0x80 });
            if n == 0 {
                break;
            }
        }
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn protobuf_and_json_pages_read_the_same() {
        let object_meta = |ns: &str, name: &str, rv: &str| {
            [
                len_field(field::NAME, name.as_bytes()),
                len_field(field::NAMESPACE, ns.as_bytes()),
                len_field(5, b"uid-is-skipped"),
                len_field(field::RV, rv.as_bytes()),
            ]
            .concat()
        };
        let item =
            |ns, name, rv| len_field(field::LIST_ITEMS, &len_field(1, &object_meta(ns, name, rv)));
        let list_meta = [
            len_field(field::LIST_RV, b"42"),
            len_field(field::LIST_CONTINUE, b"next"),
        ]
        .concat();
        let list = [
            len_field(field::LIST_METADATA, &list_meta),
            item("a", "p1", "40"),
            item("b", "p2", "41"),
        ]
        .concat();
        let envelope = [
            MAGIC.to_vec(),
            len_field(
                1,
                &[
                    len_field(1, b"meta.k8s.io/v1"),
                    len_field(2, b"PartialObjectMetadataList"),
                ]
                .concat(),
            ),
            len_field(field::UNKNOWN_RAW, &list),
        ]
        .concat();
        let proto = parse(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList",
            &envelope,
        )
        .expect("protobuf");
        let json = parse(
            "application/json",
            br#"{"kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"42","continue":"next"},
                "items":[{"metadata":{"name":"p1","namespace":"a","uid":"x","resourceVersion":"40"}},
                         {"metadata":{"name":"p2","namespace":"b","resourceVersion":"41"}}]}"#,
        )
        .expect("json");
        assert_eq!(proto, json);
        assert_eq!(proto.items.len(), 2);
        assert_eq!(proto.items[1].resource_version, "41");
        assert!(parse("application/vnd.kubernetes.protobuf", b"k8s\0\x12\x05ab").is_err());
    }
}
