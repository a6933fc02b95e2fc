//! Label selectors: the grammar, error messages and matching of
//! `k8s.io/apimachinery/pkg/labels`.

/// A selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `key` — the label exists.
    Exists,
    /// `!key` — the label does not exist.
    DoesNotExist,
    /// `key=v` or `key==v`.
    Equals,
    /// `key!=v` (also matches objects without the label).
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)` (also matches objects without the label).
    NotIn,
    /// `key>n` (integer comparison).
    GreaterThan,
    /// `key<n` (integer comparison).
    LessThan,
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: Op,
    /// Values, sorted and deduplicated as Go's string set does.
    pub values: Vec<String>,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Requirements, all of which must hold.
    pub requirements: Vec<Requirement>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Error,
    Eos,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn symbol(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn lex(input: &str) -> Vec<(Tok, String)> {
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    loop {
        while i < chars.len() && is_space(chars[i]) {
            i += 1;
        }
        if i >= chars.len() {
            out.push((Tok::Eos, String::new()));
            return out;
        }
        let c = chars[i];
        if is_special(c) {
            let mut buf = String::new();
            let mut last: Option<(Tok, String)> = None;
            while i < chars.len() && is_special(chars[i]) {
                buf.push(chars[i]);
                if let Some(t) = symbol(&buf) {
                    last = Some((t, buf.clone()));
                    i += 1;
                } else if last.is_some() {
                    break;
                } else {
                    i += 1;
                }
            }
            match last {
                Some(t) => out.push(t),
                None => {
                    out.push((Tok::Error, format!("error expected: keyword found '{buf}'")));
                }
            }
        } else {
            let start = i;
            while i < chars.len() && !is_space(chars[i]) && !is_special(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let tok = match word.as_str() {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Identifier,
            };
            out.push((tok, word));
        }
    }
}

struct Parser {
    items: Vec<(Tok, String)>,
    pos: usize,
}

#[derive(PartialEq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

impl Parser {
    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        let (t, l) = self.items[self.pos.min(self.items.len() - 1)].clone();
        let t = match (ctx, t) {
            (Ctx::Values, Tok::In | Tok::NotIn) => Tok::Identifier,
            (_, t) => t,
        };
        (t, l)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let r = self.lookahead(ctx);
        if self.pos < self.items.len() - 1 {
            self.pos += 1;
        }
        r
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::Eos => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::Eos => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        let mut op = None;
        if tok == Tok::DoesNotExist {
            op = Some(Op::DoesNotExist);
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        validate_key(&lit)?;
        let key = lit;
        if matches!(self.lookahead(Ctx::Values).0, Tok::Eos | Tok::Comma) {
            let op = op.unwrap_or(Op::Exists);
            return Ok(Requirement {
                key,
                op,
                values: vec![],
            });
        }
        if op == Some(Op::DoesNotExist) {
            // `!key` followed by an operator: Go reports the operator as unexpected.
            let (_, l) = self.lookahead(Ctx::Values);
            return Err(format!("found '{l}', expected: ',' or 'end of string'"));
        }
        let (t, l) = self.consume(Ctx::KeyAndOperator);
        let op = match t {
            Tok::In => Op::In,
            Tok::NotIn => Op::NotIn,
            Tok::Equals | Tok::DoubleEquals => Op::Equals,
            Tok::NotEquals => Op::NotEquals,
            Tok::GreaterThan => Op::GreaterThan,
            Tok::LessThan => Op::LessThan,
            _ => {
                return Err(format!(
                    "found '{l}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        };
        let mut values = match op {
            Op::In | Op::NotIn => self.set_values()?,
            _ => self.exact_value()?,
        };
        values.sort();
        values.dedup();
        new_requirement(key, op, values)
    }

    fn set_values(&mut self) -> Result<Vec<String>, String> {
        let (t, l) = self.consume(Ctx::Values);
        if t != Tok::OpenPar {
            return Err(format!("found '{l}' expected: '('"));
        }
        let (t, l) = self.lookahead(Ctx::Values);
        match t {
            Tok::Identifier | Tok::Comma => {
                let s = self.identifiers()?;
                if self.consume(Ctx::Values).0 != Tok::ClosedPar {
                    return Err(format!("found '{l}', expected: ')'"));
                }
                Ok(s)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{l}', expected: ',', ')' or identifier")),
        }
    }

    fn identifiers(&mut self) -> Result<Vec<String>, String> {
        let mut s: Vec<String> = Vec::new();
        loop {
            let (t, l) = self.consume(Ctx::Values);
            match t {
                Tok::Identifier => {
                    s.push(l);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(s),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if s.is_empty() {
                        s.push(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        s.push(String::new());
                        return Ok(s);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        s.push(String::new());
                    }
                }
                _ => return Err(format!("found '{l}', expected: ',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        let (t, _) = self.lookahead(Ctx::Values);
        if t == Tok::Eos || t == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (t, l) = self.consume(Ctx::Values);
        if t == Tok::Identifier {
            return Ok(vec![l]);
        }
        Err(format!("found '{l}', expected: identifier"))
    }
}

fn new_requirement(key: String, op: Op, values: Vec<String>) -> Result<Requirement, String> {
    if matches!(op, Op::GreaterThan | Op::LessThan) {
        for v in &values {
            if v.parse::<i64>().is_err() {
                return Err(format!(
                    "values[0]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                    crate::json::go_string(v)
                ));
            }
        }
    } else {
        for (i, v) in values.iter().enumerate() {
            if let Some(e) = label_value_error(v) {
                return Err(format!(
                    "values[{i}][{key}]: Invalid value: {}: {e}",
                    crate::json::go_string(v)
                ));
            }
        }
    }
    Ok(Requirement { key, op, values })
}

const NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn validate_key(key: &str) -> Result<(), String> {
    let parts: Vec<&str> = key.split('/').collect();
    let mut errs = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if !is_dns1123_subdomain(prefix) {
                errs.push("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string());
            }
            name
        }
        _ => {
            errs.push(format!("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{NAME_FMT}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"));
            ""
        }
    };
    if errs.is_empty() || parts.len() == 2 {
        if name.is_empty() {
            if parts.len() <= 2 {
                errs.push("name part must be non-empty".into());
            }
        } else if name.len() > 63 {
            errs.push("name part must be no more than 63 characters".into());
        } else if !is_name_part(name) {
            errs.push(format!("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{NAME_FMT}')"));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "key: Invalid value: {}: {}",
            crate::json::go_string(key),
            errs.join("; ")
        ))
    }
}

fn label_value_error(v: &str) -> Option<String> {
    if v.is_empty() {
        return None;
    }
    if v.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    if !is_name_part(v) {
        return Some(format!(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '({NAME_FMT})?')"
        ));
    }
    None
}

impl LabelSelector {
    /// Parses a selector string; errors carry kube-apiserver's messages.
    pub fn parse(input: &str) -> Result<Self, String> {
        let mut p = Parser {
            items: lex(input),
            pos: 0,
        };
        if let Some((_, msg)) = p.items.iter().find(|(t, _)| *t == Tok::Error) {
            // An unlexable symbol surfaces where the parser meets it; Go reports the literal.
            let msg = msg.clone();
            return match p.parse() {
                Err(e) => Err(e),
                Ok(_) => Err(msg),
            };
        }
        let mut requirements = p.parse()?;
        // Go sorts requirements by key for a canonical form; matching is order-independent.
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether a label set (as key/value pairs) satisfies every requirement.
    pub fn matches<'a, F>(&self, get: F) -> bool
    where
        F: Fn(&str) -> Option<&'a str>,
    {
        self.requirements.iter().all(|r| r.matches(get(&r.key)))
    }
}

impl Requirement {
    /// Whether a label value (None: the label is absent) satisfies this requirement.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self.op {
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Equals | Op::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::NotEquals | Op::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Op::GreaterThan | Op::LessThan => {
                let (Some(v), Some(want)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first(),
                ) else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.op == Op::GreaterThan {
                    v > want
                } else {
                    v < want
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |k| pairs.iter().find(|(kk, _)| *kk == k).map(|(_, v)| *v)
    }

    #[test]
    fn golden_errors_from_reference() {
        assert_eq!(
            LabelSelector::parse("a b c").unwrap_err(),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(
            LabelSelector::parse("app=!!!").unwrap_err(),
            "unable to parse requirement: found '!', expected: identifier"
        );
    }

    #[test]
    fn operators_match() {
        let l = [("app", "web"), ("tier", "fe"), ("n", "5")];
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(labels(&l));
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("missing!=x"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web)"));
        assert!(m("missing notin (web)"));
        assert!(m("app,tier"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("n>4"));
        assert!(!m("n<5"));
        assert!(m("app=web,tier in (fe)"));
        assert!(!m("app=web,tier in (be)"));
    }

    #[test]
    fn more_errors() {
        assert!(
            LabelSelector::parse("app in web")
                .unwrap_err()
                .contains("expected: '('")
        );
        assert!(
            LabelSelector::parse("a=b,")
                .unwrap_err()
                .contains("identifier after ','")
        );
        assert!(
            LabelSelector::parse("n>x")
                .unwrap_err()
                .contains("must be an integer")
        );
        assert!(LabelSelector::parse("Bad Key!=x").is_err());
        assert!(
            LabelSelector::parse("-a=b")
                .unwrap_err()
                .contains("name part must consist")
        );
    }
}
