//! Field selectors (`k8s.io/apimachinery/pkg/fields`): `a=b`, `a==b`, `a!=b`, comma-joined,
//! with `\,`, `\=` and `\\` escapes.

use crate::resource::ResourceInfo;

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTerm {
    /// Field label, e.g. `spec.nodeName`.
    pub field: String,
    /// Unescaped value.
    pub value: String,
    /// True for `!=`.
    pub negated: bool,
}

/// A parsed field selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// Terms, all of which must hold, sorted as Go sorts them.
    pub terms: Vec<FieldTerm>,
}

fn split_terms(s: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == ',' {
            terms.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    terms.push(cur);
    terms
}

fn split_term(term: &str) -> Option<(&str, &str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{e}"
                    ));
                }
                None => return Err("invalid field selector: invalid escape sequence: \\".into()),
            },
            ',' | '=' => {
                return Err(format!("invalid field selector: unescaped character {c:?}"));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses the selector syntax (no knowledge of which fields exist).
    pub fn parse(selector: &str) -> Result<Self, String> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts.iter().filter(|p| !p.is_empty()) {
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                ));
            };
            terms.push(FieldTerm {
                field: lhs.to_string(),
                value: unescape(rhs)?,
                negated: op == "!=",
            });
        }
        Ok(FieldSelector { terms })
    }

    /// Checks every field label against the resource's supported set (kube-apiserver's
    /// field-label conversion step).
    pub fn check_supported(&self, info: &ResourceInfo) -> Result<(), String> {
        match self.terms.iter().find(|t| !info.supports_field(&t.field)) {
            Some(t) => Err(info.unsupported_field_message(&t.field)),
            None => Ok(()),
        }
    }

    /// Whether the selector has no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value a `metadata.name=X` term pins, if any (lets GET-like watches skip work).
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| !t.negated && t.field == field)
            .map(|t| t.value.as_str())
    }

    /// Whether an object satisfies the selector; `get` returns a field's value as a string
    /// (missing fields read as "").
    pub fn matches<'a, F>(&self, get: F) -> bool
    where
        F: Fn(&str) -> &'a str,
    {
        self.terms
            .iter()
            .all(|t| (get(&t.field) == t.value) != t.negated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_resources;

    #[test]
    fn parse_and_match() {
        let s = FieldSelector::parse("metadata.name=a,status.phase!=Running").unwrap();
        let get = |f: &str| match f {
            "metadata.name" => "a",
            "status.phase" => "Pending",
            _ => "",
        };
        assert!(s.matches(get));
        let s = FieldSelector::parse("metadata.name==b").unwrap();
        assert!(!s.matches(get));
        assert_eq!(
            FieldSelector::parse("a\\,b=c").unwrap().terms[0].field,
            "a\\,b"
        );
        assert!(
            FieldSelector::parse("nonsense")
                .unwrap_err()
                .contains("can't understand")
        );
    }

    #[test]
    fn unsupported_field_messages_match_reference() {
        let all = builtin_resources();
        let cm = all.iter().find(|r| r.resource == "configmaps").unwrap();
        let pods = all.iter().find(|r| r.resource == "pods").unwrap();
        let s = FieldSelector::parse("data.k=v").unwrap();
        assert_eq!(
            s.check_supported(cm).unwrap_err(),
            r#""data.k" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        let s = FieldSelector::parse("spec.foo=x").unwrap();
        assert_eq!(
            s.check_supported(pods).unwrap_err(),
            "field label not supported: spec.foo"
        );
        assert!(
            FieldSelector::parse("spec.nodeName=n1")
                .unwrap()
                .check_supported(pods)
                .is_ok()
        );
    }
}
