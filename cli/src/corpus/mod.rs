//! The replay corpus and its scorer.
//!
//! [`generate`] builds the article's corpus from its spec ([`spec`]: twelve base calls across six
//! tools, [`mutate`]: eight mutations) plus our adversarial section ([`adversarial`]), byte for byte the
//! same on every run. [`Corpus::load`] reads the files back and [`score`] replays them through the
//! keyers. File format: `tests/corpus/README.md`. [`events`] turns the retry pairs and deliberate
//! repeats into Bedrock Agents events (`events/corpus/`).

pub(crate) mod adversarial;
pub mod events;
pub(crate) mod mutate;
pub(crate) mod pyjson;
pub mod score;
pub(crate) mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use pyjson::{PyJson, Style};
use toolcall_dedup::key::{Schema, SchemaError};

/// The three pair files, in the order they are scored.
pub(crate) const SECTIONS: [&str; 3] = ["retries", "distinct", "adversarial"];

/// One side of a pair: where the call sits in its agent run and its raw argument text.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Side {
    pub run_id: String,
    pub step: u32,
    pub args: String,
}

/// One line of a pair file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    pub id: String,
    pub section: String,
    pub class: String,
    pub expect: Expect,
    pub tool: String,
    pub base: String,
    /// Retries: the retry side's serializer setting (`default`, `indent`, `compact`).
    pub serializer: Option<String>,
    /// Retries: the mutation found nothing to change (the retry differs from the original in
    /// serialization at most).
    pub noop: Option<bool>,
    /// Value-changed pairs: what changed.
    pub change: Option<String>,
    /// Adversarial pairs: the general rule the pair instantiates.
    pub rule: Option<String>,
    pub a: Side,
    pub b: Side,
}

/// Whether a pair's two calls must derive one key or two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    Same,
    Distinct,
}

impl Expect {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Expect::Same => "same",
            Expect::Distinct => "distinct",
        }
    }
}

/// The loaded corpus: every pair of the three files, in file order.
#[derive(Debug, Clone)]
pub struct Corpus {
    pub pairs: Vec<Pair>,
}

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: String,
        line: usize,
        message: String,
    },
    #[error("schema {path}: {source}")]
    Schema { path: String, source: SchemaError },
}

fn read(path: &Path) -> Result<String, CorpusError> {
    std::fs::read_to_string(path).map_err(|source| CorpusError::Read {
        path: path.display().to_string(),
        source,
    })
}

impl Corpus {
    /// Reads `retries.jsonl`, `distinct.jsonl` and `adversarial.jsonl` from `dir`.
    pub fn load(dir: &Path) -> Result<Corpus, CorpusError> {
        let mut pairs = Vec::new();
        for section in SECTIONS {
            let path = dir.join(format!("{section}.jsonl"));
            let text = read(&path)?;
            for (i, line) in text.lines().enumerate() {
                let parse_error = |message: String| CorpusError::Parse {
                    path: path.display().to_string(),
                    line: i + 1,
                    message,
                };
                let pair: Pair =
                    serde_json::from_str(line).map_err(|e| parse_error(e.to_string()))?;
                if pair.section != section {
                    return Err(parse_error(format!(
                        "pair {} says section {:?}",
                        pair.id, pair.section
                    )));
                }
                pairs.push(pair);
            }
        }
        Ok(Corpus { pairs })
    }

    pub fn section<'a>(&'a self, section: &'a str) -> impl Iterator<Item = &'a Pair> + 'a {
        self.pairs.iter().filter(move |p| p.section == section)
    }
}

/// Compiles every `<tool>.json` in `dir` (a JSON Schema or a provider tool definition), keyed by the
/// file's stem.
pub fn load_schemas(dir: &Path) -> Result<BTreeMap<String, Schema>, CorpusError> {
    let entries = std::fs::read_dir(dir).map_err(|source| CorpusError::Read {
        path: dir.display().to_string(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut schemas = BTreeMap::new();
    for path in paths {
        let text = read(&path)?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| CorpusError::Parse {
                path: path.display().to_string(),
                line: e.line(),
                message: e.to_string(),
            })?;
        let (_, schema) =
            Schema::from_tool_definition(&value).map_err(|source| CorpusError::Schema {
                path: path.display().to_string(),
                source,
            })?;
        let tool = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        schemas.insert(tool, schema);
    }
    Ok(schemas)
}

/// Top-level properties of a tool's schema that `required` does not list, in schema order.
fn optional_fields(schema: &PyJson) -> Vec<String> {
    let required: Vec<&PyJson> = match schema.get("required") {
        Some(PyJson::Arr(items)) => items.iter().collect(),
        _ => Vec::new(),
    };
    match schema.get("properties") {
        Some(PyJson::Obj(props)) => props
            .iter()
            .map(|(name, _)| name)
            .filter(|name| !required.contains(&&PyJson::Str((*name).clone())))
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

fn side(run_id: &str, step: u32, args: String) -> PyJson {
    PyJson::Obj(vec![
        ("run_id".into(), PyJson::str(run_id)),
        ("step".into(), PyJson::Num(step.to_string())),
        ("args".into(), PyJson::Str(args)),
    ])
}

struct Line<'a> {
    id: String,
    section: &'a str,
    class: &'a str,
    expect: Expect,
    base: &'a spec::Base,
    extra: Vec<(&'a str, PyJson)>,
    a: PyJson,
    b: PyJson,
}

impl Line<'_> {
    fn to_json(&self) -> String {
        let mut members = vec![
            ("id".to_string(), PyJson::Str(self.id.clone())),
            ("section".into(), PyJson::str(self.section)),
            ("class".into(), PyJson::str(self.class)),
            ("expect".into(), PyJson::str(self.expect.name())),
            ("tool".into(), PyJson::str(self.base.tool)),
            ("base".into(), PyJson::str(self.base.id)),
        ];
        members.extend(self.extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        members.push(("a".into(), self.a.clone()));
        members.push(("b".into(), self.b.clone()));
        let mut text = PyJson::Obj(members).dumps(Style::Compact, false);
        text.push('\n');
        text
    }
}

/// Every corpus file as `(path relative to the corpus directory, contents)`. Deterministic.
pub(crate) fn generate() -> Vec<(String, String)> {
    let mut files = Vec::new();
    let schemas: BTreeMap<&str, PyJson> = spec::TOOLS
        .iter()
        .map(|&tool| (tool, PyJson::parse(spec::schema_text(tool))))
        .collect();

    // Retries: every base under every mutation; the retry side rotates serializers pair by pair.
    let mut retries = String::new();
    for (b, base) in spec::BASES.iter().enumerate() {
        let original = base.value();
        let optional = optional_fields(&schemas[base.tool]);
        for (m, class) in mutate::CLASSES.iter().enumerate() {
            let mutated = mutate::apply(class, &original, &optional, b);
            let style = Style::ROTATION[(b * mutate::CLASSES.len() + m) % 3];
            let line = Line {
                id: format!("retry/{}/{class}", base.id),
                section: "retries",
                class,
                expect: Expect::Same,
                base,
                extra: vec![
                    ("serializer", PyJson::str(style.name())),
                    ("noop", PyJson::Bool(mutated == original)),
                ],
                a: side(base.run_id, base.step, original.dumps(Style::Default, true)),
                b: side(base.run_id, base.step, mutated.dumps(style, true)),
            };
            retries.push_str(&line.to_json());
        }
    }
    files.push(("retries.jsonl".to_string(), retries));

    // Distinct: one genuinely changed value at the same step, and the byte-identical call repeated
    // deliberately at a later step of the same run.
    let mut distinct = String::new();
    for (base_id, path, value, change) in spec::VALUE_CHANGES {
        let base = spec::base(base_id);
        let original = base.value();
        let mut changed = original.clone();
        *changed.at_mut(path) = PyJson::parse(value);
        assert_ne!(changed, original, "{base_id}: the change must change");
        let line = Line {
            id: format!("distinct/value_changed/{base_id}"),
            section: "distinct",
            class: "value_changed",
            expect: Expect::Distinct,
            base,
            extra: vec![("change", PyJson::str(change))],
            a: side(base.run_id, base.step, original.dumps(Style::Default, true)),
            b: side(base.run_id, base.step, changed.dumps(Style::Default, true)),
        };
        distinct.push_str(&line.to_json());
    }
    for base in &spec::BASES {
        let text = base.value().dumps(Style::Default, true);
        let line = Line {
            id: format!("distinct/deliberate_repeat/{}", base.id),
            section: "distinct",
            class: "deliberate_repeat",
            expect: Expect::Distinct,
            base,
            extra: vec![],
            a: side(base.run_id, base.step, text.clone()),
            b: side(base.run_id, base.step + spec::REPEAT_STEP_GAP, text),
        };
        distinct.push_str(&line.to_json());
    }
    files.push(("distinct.jsonl".to_string(), distinct));

    // Adversarial: both sides at the same step of the same run, so only the arguments decide.
    let mut adversarial = String::new();
    for class in adversarial::CLASSES {
        for (i, edit) in class.pairs.iter().enumerate() {
            let base = spec::base(edit.base);
            let mut a = base.value();
            let mut b = a.clone();
            for (path, va, vb) in edit.fields {
                *a.at_mut(path) = PyJson::parse(va);
                *b.at_mut(path) = PyJson::parse(vb);
            }
            assert_ne!(a, b, "{}: the two sides must differ", class.name);
            let line = Line {
                id: format!("adversarial/{}/{}", class.name, i + 1),
                section: "adversarial",
                class: class.name,
                expect: if class.same {
                    Expect::Same
                } else {
                    Expect::Distinct
                },
                base,
                extra: vec![("rule", PyJson::str(class.rule))],
                a: side(base.run_id, base.step, a.dumps(Style::Default, true)),
                b: side(base.run_id, base.step, b.dumps(Style::Default, true)),
            };
            adversarial.push_str(&line.to_json());
        }
    }
    files.push(("adversarial.jsonl".to_string(), adversarial));

    for (tool, schema) in &schemas {
        let mut text = schema.dumps(Style::Indent, false);
        text.push('\n');
        files.push((format!("schemas/{tool}.json"), text));
    }
    files
}

/// Writes every generated file under `dir`, creating directories as needed.
pub fn write(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (relative, contents) in generate() {
        let path = dir.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents)?;
        written.push(path);
    }
    Ok(written)
}

/// The generated files whose copy under `dir` is missing or differs.
pub fn stale(dir: &Path) -> Vec<String> {
    generate()
        .into_iter()
        .filter(|(relative, contents)| {
            std::fs::read(dir.join(relative)).ok().as_deref() != Some(contents.as_bytes())
        })
        .map(|(relative, _)| relative)
        .collect()
}
