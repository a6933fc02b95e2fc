//! A minimal JSON structure scanner over bytes: finds the byte spans of members and values
//! so ingest can splice `metadata.resourceVersion` and index labels without re-serializing.
//! Every function is total: on malformed input it returns `None`, never panics.

/// A half-open byte range `[start, end)`.
pub type Span = (usize, usize);

/// Index of the first non-whitespace byte at or after `i`.
pub fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// End (exclusive) of the string starting with the quote at `i`.
#[inline]
pub fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() {
        j = quote_or_backslash(b, j)?;
        match b[j] {
            b'"' => return Some(j + 1),
            _ => j += 2,
        }
    }
    None
}

/// The first `"` or `\\` at or after `from`. Most strings in an object (names, keys,
/// labels) are short, where memchr's set-up costs more than the search: the first 32
/// bytes are read eight at a time in plain registers, then memchr jumps over the rest
/// (ConfigMap and Secret values run to MiBs).
#[inline]
pub fn quote_or_backslash(b: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut j = from;
    let short_end = from.saturating_add(32).min(b.len());
    while j + 8 <= short_end {
        let mut word = [0u8; 8];
        word.copy_from_slice(&b[j..j + 8]);
        let w = u64::from_le_bytes(word);
        // A byte of `x` is zero where `w` has the sought byte; the lowest flagged byte is
        // exact (borrows only flag bytes above a real match).
        let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
        let found = zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
        if found != 0 {
            return Some(j + (found.trailing_zeros() / 8) as usize);
        }
        j += 8;
    }
    if short_end == b.len() {
        return b[j..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\')
            .map(|p| j + p);
    }
    memchr::memchr2(b'"', b'\\', b.get(j..)?).map(|p| j + p)
}

/// End (exclusive) of the JSON value starting at `i` (no leading whitespace).
pub fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j)?;
                        // managedFields' `fieldsV1` (half of a typical pod) is mostly
                        // leaves `"f:name":{}`: the empty value stepped over at once.
                        if b.get(j) == Some(&b':')
                            && b.get(j + 1) == Some(&b'{')
                            && b.get(j + 2) == Some(&b'}')
                        {
                            j += 3;
                        }
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// One object member: the key's content span (without quotes) and the value's span.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    /// Key bytes, without the quotes (escapes left as written).
    pub key: Span,
    /// The whole value.
    pub value: Span,
}

/// Calls `f` for each member of the object whose `{` is at `start`; returns the end of the
/// object, or `None` if it is malformed.
pub fn for_each_member(b: &[u8], start: usize, mut f: impl FnMut(Member)) -> Option<usize> {
    for_each_entry(b, start, (b'{', b'}'), |i| {
        let m = member_at(b, i)?;
        f(m);
        Some(m.value.1)
    })
}

/// The member whose key's opening quote is at `i`.
#[inline]
fn member_at(b: &[u8], i: usize) -> Option<Member> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let kend = skip_string(b, i)?;
    let key = (i + 1, kend - 1);
    let colon = skip_ws(b, kend);
    if b.get(colon) != Some(&b':') {
        return None;
    }
    let v = skip_ws(b, colon + 1);
    let vend = skip_value(b, v)?;
    Some(Member {
        key,
        value: (v, vend),
    })
}

/// Walks the comma-separated entries of the object or array `brackets` enclose, opened at
/// `start`: `entry(i)` reads the entry beginning at `i` and returns where it ends. Returns
/// the end of the container, or `None` if it (or an entry) is malformed.
#[inline]
fn for_each_entry(
    b: &[u8],
    start: usize,
    (open, close): (u8, u8),
    mut entry: impl FnMut(usize) -> Option<usize>,
) -> Option<usize> {
    if b.get(start) != Some(&open) {
        return None;
    }
    let mut i = skip_ws(b, start + 1);
    if b.get(i) == Some(&close) {
        return Some(i + 1);
    }
    loop {
        i = skip_ws(b, entry(i)?);
        match *b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            c if c == close => return Some(i + 1),
            _ => return None,
        }
    }
}

/// The value span of member `key` of the object at `start`.
pub fn find_member(b: &[u8], start: usize, key: &str) -> Option<Span> {
    if b.get(start) != Some(&b'{') {
        return None;
    }
    let mut i = skip_ws(b, start + 1);
    // Stops at the member found: the values after it are never scanned.
    while b.get(i) == Some(&b'"') {
        let m = member_at(b, i)?;
        if &b[m.key.0..m.key.1] == key.as_bytes() {
            return Some(m.value);
        }
        i = skip_ws(b, m.value.1);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            _ => return None,
        }
    }
    None
}

/// The value span at a dotted path of object members (e.g. `["spec", "nodeName"]`) from
/// the value at `start`.
pub fn find_path(b: &[u8], start: usize, path: &[&str]) -> Option<Span> {
    find_path_from(b, (start, skip_value(b, start)?), path)
}

/// [`find_path`] from a value span already known (no rescan of that value).
pub fn find_path_from(b: &[u8], mut span: Span, path: &[&str]) -> Option<Span> {
    for p in path {
        span = find_member(b, span.0, p)?;
    }
    Some(span)
}

/// For a string value span, the span of its contents when it has no escapes; for a scalar
/// (number, bool) the span itself; `None` for objects, arrays, null or escaped strings.
pub fn plain_scalar(b: &[u8], v: Span) -> Option<Span> {
    match b.get(v.0)? {
        b'"' => {
            let inner = (v.0 + 1, v.1 - 1);
            (!b[inner.0..inner.1].contains(&b'\\')).then_some(inner)
        }
        b'{' | b'[' | b'n' => None,
        _ => Some(v),
    }
}

/// For a string value span without escapes, the span of its contents; `None` otherwise
/// (names, namespaces and label values must be JSON strings).
pub fn plain_string(b: &[u8], v: Span) -> Option<Span> {
    (b.get(v.0) == Some(&b'"'))
        .then(|| plain_scalar(b, v))
        .flatten()
}

/// Calls `f` with the span of each element of the array whose `[` is at `start`.
pub fn for_each_element(b: &[u8], start: usize, mut f: impl FnMut(Span)) -> Option<usize> {
    for_each_entry(b, start, (b'[', b']'), |i| {
        let end = skip_value(b, i)?;
        f((i, end));
        Some(end)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Real JSON (strings with quotes, escapes and brackets; nesting), compact and
        /// pretty, followed by more: skipped to its exact end.
        #[test]
        fn json_values_are_skipped_whole(
            v in json_value(), pad in 0usize..9, pretty in any::<bool>()
        ) {
            let text = if pretty {
                serde_json::to_vec_pretty(&v)
            } else {
                serde_json::to_vec(&v)
            }
            .expect("serializes");
            let mut b = vec![b' '; pad];
            b.extend_from_slice(&text);
            b.extend_from_slice(b",{\"next\":[1]}]");
            prop_assert_eq!(skip_value(&b, pad), Some(pad + text.len()));
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let text = "[a-z\"\\\\{}\\[\\]:, é]{0,24}";
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<i64>().prop_map(serde_json::Value::from),
            text.prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(5, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
                prop::collection::btree_map(text, inner, 0..8)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn quote_or_backslash_finds_the_first_at_every_offset_and_length() {
        // Against a plain search: the sought byte at each place in strings shorter and
        // longer than the word-at-a-time window, and none at all.
        for len in 0..80 {
            for at in 0..=len {
                for c in [b'"', b'\\'] {
                    let mut b = vec![b'a'; len];
                    if at < len {
                        b[at] = c;
                        // A second one later must not be reported first.
                        if at + 3 < len {
                            b[at + 3] = b'"';
                        }
                    }
                    for from in [0, at.min(len), at.saturating_sub(5)] {
                        let want = b[from.min(len)..]
                            .iter()
                            .position(|&x| x == b'"' || x == b'\\')
                            .map(|p| p + from.min(len));
                        assert_eq!(
                            quote_or_backslash(&b, from.min(len)),
                            want,
                            "{len} {at} {from}"
                        );
                    }
                }
            }
        }
        // fieldsV1-shaped objects (leaves `"f:x":{}`, keys holding JSON) end where they end.
        let fields = br#"{"f:a":{},"f:b":{"f:c":{},".":{}},"k:{\"x\":1}":{}}tail"#;
        assert_eq!(skip_value(fields, 0), Some(fields.len() - 4));
        assert_eq!(skip_value(br#"["a:{}",{"b":{}}]"#, 0), Some(17));
        // High bytes (UTF-8) next to the sought byte are not taken for it.
        let b = "ééé\"x".as_bytes();
        assert_eq!(quote_or_backslash(b, 0), Some(6));
        assert_eq!(skip_string(br#""a\"b\\"c"#, 0), Some(8));
    }

    #[test]
    fn finds_nested_members() {
        let b = br#"{"a":1,"metadata":{"name":"x\"y","labels":{"k":"v"}},"s":[1,{"z":"}"}]}"#;
        let md = find_member(b, 0, "metadata").unwrap();
        assert_eq!(&b[md.0..md.1], br#"{"name":"x\"y","labels":{"k":"v"}}"#);
        let v = find_path(b, 0, &["metadata", "labels", "k"]).unwrap();
        assert_eq!(plain_scalar(b, v).map(|s| &b[s.0..s.1]), Some(&b"v"[..]));
        let n = find_path(b, 0, &["metadata", "name"]).unwrap();
        assert_eq!(plain_scalar(b, n), None);
        assert!(find_path(b, 0, &["s", "z"]).is_none());
    }

    #[test]
    fn strings_end_at_their_first_unescaped_quote() {
        let long = "x".repeat(100_000);
        for (s, end) in [
            (format!(r#""{long}\"{long}" tail"#), 2 * long.len() + 4),
            (r#""a\\" tail"#.to_string(), 5),
            (r#""\\\"" tail"#.to_string(), 6),
        ] {
            assert_eq!(
                skip_string(s.as_bytes(), 0),
                Some(end),
                "{}",
                &s[..20.min(s.len())]
            );
        }
        for cut in [r#""abc"#, r#""abc\"#, r#""abc\""#] {
            assert_eq!(skip_string(cut.as_bytes(), 0), None, "{cut}");
        }
    }

    #[test]
    fn malformed_is_none_not_panic() {
        for bad in [
            &b"{"[..],
            b"{\"a\"",
            b"{\"a\":",
            b"{\"a\":1,",
            b"[",
            b"\"",
            b"{\"a\":1 x}",
        ] {
            let _ = for_each_member(bad, 0, |_| {});
            let _ = skip_value(bad, 0);
        }
    }
}
