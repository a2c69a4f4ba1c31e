//! An ordered JSON value and a serializer that writes it byte for byte as Python's `json.dumps` does.
//!
//! The corpus needs object members in a chosen order (key reordering is one of the mutations) and
//! numbers kept as the exact text Python would print. `serde_json::Value` sorts keys here (the crate's
//! `preserve_order` feature is off on purpose), so the corpus uses this small type instead.

use toolcall_dedup::key::write_python_json_string;
use toolcall_dedup::key::{Node, parse_json};

/// A JSON value with ordered object members. Numbers hold the text Python prints for them: digits for
/// an `int`, `repr()` for a `float` (`4200.0`, `64.5`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PyJson {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<PyJson>),
    Obj(Vec<(String, PyJson)>),
}

/// The three `json.dumps` settings the corpus uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `json.dumps(v)`: `", "` and `": "` separators.
    Default,
    /// `json.dumps(v, indent=2)`: newline and two spaces per level, `","` and `": "` separators.
    Indent,
    /// `json.dumps(v, separators=(",", ":"))`.
    Compact,
}

impl Style {
    pub(crate) const ROTATION: [Style; 3] = [Style::Default, Style::Indent, Style::Compact];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Style::Default => "default",
            Style::Indent => "indent",
            Style::Compact => "compact",
        }
    }

    /// The style [`Style::name`] names.
    pub(crate) fn from_name(name: &str) -> Option<Style> {
        Self::ROTATION.into_iter().find(|s| s.name() == name)
    }
}

impl PyJson {
    /// Parses JSON text, keeping member order and number text.
    ///
    /// # Panics
    /// On invalid JSON: this only reads the generator's own literals.
    pub(crate) fn parse(text: &str) -> PyJson {
        let node = parse_json(text, 64).unwrap_or_else(|e| panic!("corpus literal: {e}: {text}"));
        PyJson::from_node(node)
    }

    /// Parses JSON text, or `None` when it is not JSON the key core reads (64 levels at most).
    pub(crate) fn try_parse(text: &str) -> Option<PyJson> {
        parse_json(text, 64).ok().map(PyJson::from_node)
    }

    fn from_node(node: Node<'_>) -> PyJson {
        match node {
            Node::Null => PyJson::Null,
            Node::Bool(b) => PyJson::Bool(b),
            Node::Number(text) => PyJson::Num(text.to_string()),
            Node::String(s) => PyJson::Str(s.into_owned()),
            Node::Array(items) => PyJson::Arr(items.into_iter().map(PyJson::from_node).collect()),
            Node::Object(members) => PyJson::Obj(
                members
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), PyJson::from_node(v)))
                    .collect(),
            ),
        }
    }

    pub(crate) fn str(s: &str) -> PyJson {
        PyJson::Str(s.to_string())
    }

    /// The member `name` of an object.
    pub(crate) fn get(&self, name: &str) -> Option<&PyJson> {
        match self {
            PyJson::Obj(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value at a dotted path (`line_items.0.amount`), created as a new last member when the
    /// final object member is missing.
    ///
    /// # Panics
    /// When the path walks through a missing member, an array index out of range or a scalar.
    pub(crate) fn at_mut(&mut self, path: &str) -> &mut PyJson {
        let mut node = self;
        for part in path.split('.') {
            node = match node {
                PyJson::Obj(members) => {
                    let i = match members.iter().position(|(k, _)| k == part) {
                        Some(i) => i,
                        None => {
                            members.push((part.to_string(), PyJson::Null));
                            members.len() - 1
                        }
                    };
                    &mut members[i].1
                }
                PyJson::Arr(items) => {
                    let i: usize = part
                        .parse()
                        .unwrap_or_else(|_| panic!("path {path}: {part} is no index"));
                    &mut items[i]
                }
                _ => panic!("path {path}: {part} walks into a scalar"),
            };
        }
        node
    }

    /// Serializes like Python's `json.dumps` with the given style; `ensure_ascii` as Python's flag.
    pub(crate) fn dumps(&self, style: Style, ensure_ascii: bool) -> String {
        let mut out = String::new();
        self.write(&mut out, style, ensure_ascii, 0);
        out
    }

    fn write(&self, out: &mut String, style: Style, ascii: bool, level: usize) {
        match self {
            PyJson::Null => out.push_str("null"),
            PyJson::Bool(true) => out.push_str("true"),
            PyJson::Bool(false) => out.push_str("false"),
            PyJson::Num(text) => out.push_str(text),
            PyJson::Str(s) => write_python_json_string(out, s, ascii),
            PyJson::Arr(items) => {
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    separator(out, style, i == 0, level + 1);
                    item.write(out, style, ascii, level + 1);
                }
                close(out, style, level);
                out.push(']');
            }
            PyJson::Obj(members) => {
                if members.is_empty() {
                    out.push_str("{}");
                    return;
                }
                out.push('{');
                for (i, (name, value)) in members.iter().enumerate() {
                    separator(out, style, i == 0, level + 1);
                    write_python_json_string(out, name, ascii);
                    out.push_str(if style == Style::Compact { ":" } else { ": " });
                    value.write(out, style, ascii, level + 1);
                }
                close(out, style, level);
                out.push('}');
            }
        }
    }
}

/// What goes before an item: the item separator (not before the first) and, indented, a new line.
fn separator(out: &mut String, style: Style, first: bool, level: usize) {
    match style {
        Style::Default if !first => out.push_str(", "),
        Style::Compact if !first => out.push(','),
        Style::Indent => {
            if !first {
                out.push(',');
            }
            out.push('\n');
            out.push_str(&"  ".repeat(level));
        }
        _ => {}
    }
}

fn close(out: &mut String, style: Style, level: usize) {
    if style == Style::Indent {
        out.push('\n');
        out.push_str(&"  ".repeat(level));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_json_dumps() {
        let v = PyJson::parse(
            r#"{"b": [1, 2.5, {"x": null}], "a": "caf\u00e9 \ud83d\ude00\n\u0001", "e": [], "o": {}, "t": true}"#,
        );
        // Expected texts produced by CPython 3.11's json.dumps on the same dict.
        assert_eq!(
            v.dumps(Style::Default, true),
            r#"{"b": [1, 2.5, {"x": null}], "a": "caf\u00e9 \ud83d\ude00\n\u0001", "e": [], "o": {}, "t": true}"#
        );
        assert_eq!(
            v.dumps(Style::Compact, true),
            r#"{"b":[1,2.5,{"x":null}],"a":"caf\u00e9 \ud83d\ude00\n\u0001","e":[],"o":{},"t":true}"#
        );
        assert_eq!(
            v.dumps(Style::Indent, true),
            "{\n  \"b\": [\n    1,\n    2.5,\n    {\n      \"x\": null\n    }\n  ],\n  \"a\": \"caf\\u00e9 \\ud83d\\ude00\\n\\u0001\",\n  \"e\": [],\n  \"o\": {},\n  \"t\": true\n}"
        );
        assert_eq!(
            PyJson::str("é\u{7f}").dumps(Style::Default, false),
            "\"é\u{7f}\""
        );
        assert_eq!(
            PyJson::str("\u{7f}").dumps(Style::Default, true),
            r#""\u007f""#
        );
    }

    #[test]
    fn paths_walk_and_create() {
        let mut v = PyJson::parse(r#"{"items": [{"n": 1}]}"#);
        *v.at_mut("items.0.n") = PyJson::Num("2".into());
        *v.at_mut("items.0.m") = PyJson::Bool(true);
        assert_eq!(
            v.dumps(Style::Compact, true),
            r#"{"items":[{"n":2,"m":true}]}"#
        );
    }
}
