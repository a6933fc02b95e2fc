//! Counting a LIST's objects as its body streams past, keeping nothing but the list's own
//! metadata (resourceVersion, continue): by JSON structure, or by walking the protobuf
//! fields with `listwatch-protobuf`'s reader (the items are skipped by length, never read).

use listwatch_protobuf::wire::{FieldReader, Value, slice};

/// The list's `metadata`: what a reflector needs next (watch from `rv`, or the next page).
#[derive(Default, Clone, Debug, serde::Deserialize)]
pub struct ListMeta {
    /// `resourceVersion`.
    #[serde(rename = "resourceVersion")]
    pub rv: Option<String>,
    /// `continue` ("" or absent on the last page).
    #[serde(rename = "continue")]
    pub continue_token: Option<String>,
}

/// A LIST body's object counter, JSON or protobuf.
pub enum ListCounter {
    /// `{"kind":…,"metadata":{…},"items":[{…},…]}`.
    Json(JsonItems),
    /// `k8s\0` + `runtime.Unknown{raw = 2: List{metadata = 1, items = 2…}}`.
    Protobuf(ProtoItems),
}

impl ListCounter {
    /// A counter for one response in the given encoding.
    pub fn new(protobuf: bool) -> Self {
        if protobuf {
            ListCounter::Protobuf(ProtoItems::default())
        } else {
            ListCounter::Json(JsonItems::default())
        }
    }

    /// Reads the next bytes of the body.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), String> {
        match self {
            ListCounter::Json(c) => {
                c.feed(data);
                Ok(())
            }
            ListCounter::Protobuf(c) => c.feed(data),
        }
    }

    /// Items counted so far.
    pub fn items(&self) -> u64 {
        match self {
            ListCounter::Json(c) => c.items,
            ListCounter::Protobuf(c) => c.items,
        }
    }

    /// The list's metadata, once read.
    pub fn meta(&self) -> ListMeta {
        match self {
            ListCounter::Json(c) => c.meta(),
            ListCounter::Protobuf(c) => c.meta.clone(),
        }
    }
}

/// Counts objects whose parent is the array at depth 2 (`{"items":[{…},{…}]}`) and keeps the
/// body's first 4 KiB, where the list's metadata is.
#[derive(Default)]
pub struct JsonItems {
    stack: Vec<u8>,
    in_string: bool,
    escape: bool,
    items: u64,
    head: Vec<u8>,
}

impl JsonItems {
    fn feed(&mut self, data: &[u8]) {
        if self.head.len() < 4096 {
            let take = (4096 - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..take]);
        }
        for &c in data {
            if self.in_string {
                if self.escape {
                    self.escape = false;
                } else if c == b'\\' {
                    self.escape = true;
                } else if c == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match c {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    if c == b'{' && self.stack.len() == 2 && self.stack[1] == b'[' {
                        self.items += 1;
                    }
                    self.stack.push(c);
                }
                b'}' | b']' => {
                    self.stack.pop();
                }
                _ => {}
            }
        }
    }

    /// The list's metadata: the first `"metadata":{…}` (it precedes the items, and holds
    /// only strings and numbers).
    fn meta(&self) -> ListMeta {
        const KEY: &[u8] = br#""metadata":"#;
        let Some(i) = memchr::memmem::find(&self.head, KEY) else {
            return ListMeta::default();
        };
        let rest = &self.head[i + KEY.len()..];
        memchr::memchr(b'}', rest)
            .and_then(|end| serde_json::from_slice(&rest[..=end]).ok())
            .unwrap_or_default()
    }
}

/// Walks a protobuf list's fields across chunk boundaries: headers (a key and a length, at
/// most 20 bytes) are gathered and read with `FieldReader`, values skipped by count; the
/// list's `ListMeta` (resourceVersion 2, continue 3) is kept and read whole.
pub struct ProtoItems {
    magic_left: usize,
    head: Vec<u8>,
    skip: u64,
    /// Inside the envelope's `raw` (the list message): its bytes left.
    in_list: Option<u64>,
    /// Gathering the `ListMeta` field (its bytes so far).
    gathering: Option<Vec<u8>>,
    items: u64,
    meta: ListMeta,
}

impl Default for ProtoItems {
    fn default() -> Self {
        ProtoItems {
            magic_left: listwatch_protobuf::MAGIC.len(),
            head: Vec::new(),
            skip: 0,
            in_list: None,
            gathering: None,
            items: 0,
            meta: ListMeta::default(),
        }
    }
}

/// A field header's most bytes: two 10-byte varints.
const MAX_HEADER: usize = 20;

/// The field number, value length and header length at the start of `b`, if `b` holds the
/// whole header; every field of these messages is length-delimited.
fn header(b: &[u8]) -> Result<Option<(u64, u64, usize)>, String> {
    let mut r = FieldReader::new(b, 0, b.len());
    let (Ok(key), Ok(len)) = (r.varint(), r.varint()) else {
        return if b.len() >= MAX_HEADER {
            Err("malformed protobuf field header".into())
        } else {
            Ok(None) // the header goes on in the next chunk
        };
    };
    if key & 7 != 2 {
        return Err(format!(
            "protobuf list: field {} is not length-delimited",
            key >> 3
        ));
    }
    Ok(Some((key >> 3, len, b.len() - r.remaining())))
}

impl ProtoItems {
    fn feed(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            if self.magic_left > 0 {
                let n = self.magic_left.min(data.len());
                self.magic_left -= n;
                data = &data[n..];
                continue;
            }
            if self.skip > 0 {
                let n = self.skip.min(data.len() as u64) as usize;
                if let Some(g) = self.gathering.as_mut() {
                    g.extend_from_slice(&data[..n]);
                }
                self.consumed(n as u64);
                self.skip -= n as u64;
                data = &data[n..];
                if self.skip == 0
                    && let Some(g) = self.gathering.take()
                {
                    self.meta = list_meta(&g)?;
                }
                continue;
            }
            let had = self.head.len();
            let take = (MAX_HEADER - had).min(data.len());
            self.head.extend_from_slice(&data[..take]);
            let Some((tag, len, used)) = header(&self.head)? else {
                data = &data[take..];
                continue;
            };
            data = &data[used - had..];
            self.head.clear();
            self.consumed(used as u64);
            self.skip = len;
            match (self.in_list.is_some(), tag) {
                // The envelope's raw: the list message itself.
                (false, 2) => {
                    self.in_list = (len > 0).then_some(len);
                    self.skip = 0;
                }
                (true, 1) => self.gathering = Some(Vec::with_capacity(len as usize)),
                (true, 2) => self.items += 1,
                _ => {}
            }
            if self.skip == 0
                && let Some(g) = self.gathering.take()
            {
                self.meta = list_meta(&g)?;
            }
        }
        Ok(())
    }

    /// Counts bytes read inside the list message, leaving it at its end.
    fn consumed(&mut self, n: u64) {
        if let Some(left) = self.in_list.as_mut() {
            *left = left.saturating_sub(n);
            if *left == 0 {
                self.in_list = None;
            }
        }
    }
}

/// `ListMeta{resourceVersion = 2, continue = 3}`.
fn list_meta(b: &[u8]) -> Result<ListMeta, String> {
    let mut meta = ListMeta::default();
    let mut r = FieldReader::new(b, 0, b.len());
    while let Some((tag, v)) = r.next_field().map_err(|e| e.to_string())? {
        if let Value::Len(s, e) = v {
            let text = String::from_utf8_lossy(slice(b, s, e)).into_owned();
            match tag {
                2 => meta.rv = Some(text),
                3 => meta.continue_token = Some(text),
                _ => {}
            }
        }
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_protobuf::encode::{begin, end, put_bytes, write_envelope};

    /// `k8s\0` + a PodList of three 300-byte items (two-byte lengths) after its ListMeta.
    fn proto_list() -> Vec<u8> {
        let mut out = Vec::new();
        write_envelope(&mut out, "v1", "PodList", |o| {
            let m = begin(o, 1);
            put_bytes(o, 2, b"42");
            put_bytes(o, 3, b"next-page");
            end(o, m);
            for i in 0..3u8 {
                put_bytes(o, 2, &[i; 300]);
            }
            Ok::<(), ()>(())
        })
        .expect("envelope");
        out
    }

    #[test]
    fn a_protobuf_list_cut_anywhere_counts_its_items_and_reads_its_meta() {
        let body = proto_list();
        let mut pieces: Vec<Vec<&[u8]>> = (0..body.len())
            .map(|cut| {
                let (a, b) = body.split_at(cut);
                vec![a, b]
            })
            .collect();
        pieces.push(body.chunks(1).collect());
        for chunks in pieces {
            let mut c = ListCounter::new(true);
            for piece in &chunks {
                c.feed(piece).expect("feed");
            }
            assert_eq!(c.items(), 3, "{} pieces", chunks.len());
            let meta = c.meta();
            assert_eq!(meta.rv.as_deref(), Some("42"));
            assert_eq!(meta.continue_token.as_deref(), Some("next-page"));
        }
    }

    #[test]
    fn a_json_list_counts_items_not_nested_objects_and_reads_its_meta() {
        let body = br#"{"kind":"PodList","metadata":{"resourceVersion":"5","continue":"c1"},"items":[{"a":{"b":"}"}},{"s":"{["}]}"#;
        let mut c = ListCounter::new(false);
        for piece in body.chunks(7) {
            c.feed(piece).expect("feed");
        }
        assert_eq!(c.items(), 2);
        assert_eq!(c.meta().rv.as_deref(), Some("5"));
        assert_eq!(c.meta().continue_token.as_deref(), Some("c1"));
    }

    #[test]
    fn a_protobuf_list_with_a_varint_field_is_refused() {
        // `k8s\0`, then field 1 as a varint: not what a list response holds.
        assert!(ListCounter::new(true).feed(b"k8s\0\x08\x01").is_err());
    }
}
