//! Replays the corpus through keyers A–D and the typed keyer: recall on retries, false merges on pairs
//! that must stay distinct, and µs per key (the median of several timed runs, as the article measured).
//!
//! The last row is the typed keyer as the executor runs it with no policy file: each side sent as a
//! function-details event with the parameter types a developer declares for its values
//! ([`super::events::pair_events`]), read by the action-group adapter, and keyed with the declared
//! types alone.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use super::events::{DeclaredTypes, Flavour, pair_events};
use super::pyjson::PyJson;
use super::{Corpus, Expect, Pair};
use toolcall_dedup::internals::bedrock::ActionGroupEvent;
use toolcall_dedup::key::{Call, Key, Keyer, KeyerVersion, Schema, Strategy};

/// What to score and how long to time.
#[derive(Debug, Clone)]
pub struct Options {
    /// Tool schemas for the typed keyer (`None`: schema-free). Keyers A–D never read schemas.
    pub schemas: Option<BTreeMap<String, Schema>>,
    /// Timed runs per keyer; µs/key is their median.
    pub runs: usize,
    /// Key derivations per timed run, cycling through the article-spec calls.
    pub iterations: usize,
    /// The typed keyer's version scored.
    pub keyer: KeyerVersion,
}

impl Default for Options {
    /// The article's measurement: median of 7 runs of 20,000 derivations.
    fn default() -> Self {
        Self {
            schemas: None,
            runs: 7,
            iterations: 20_000,
            keyer: KeyerVersion::NEWEST,
        }
    }
}

/// One class of pairs under one keyer.
#[derive(Debug, Clone)]
pub struct ClassScore {
    pub(crate) section: String,
    pub class: String,
    pub(crate) expect: Expect,
    pub(crate) total: usize,
    /// Pairs whose two calls derived the same key (for `same`: caught; for `distinct`: merged).
    pub merged: usize,
    /// Retries whose mutation changed nothing.
    pub(crate) noops: usize,
    /// Ids of the pairs this keyer got wrong.
    pub(crate) wrong: Vec<String>,
}

/// One keyer's row of the table.
#[derive(Debug, Clone)]
pub struct KeyerScore {
    pub strategy: Strategy,
    /// Keyed from Bedrock events with declared types only (the executor with no policy file).
    pub bedrock: bool,
    pub label: String,
    pub retries_caught: usize,
    pub retries_total: usize,
    pub fm_value_changed: usize,
    pub value_changed_total: usize,
    pub fm_deliberate_repeat: usize,
    pub deliberate_repeat_total: usize,
    /// Adversarial must-stay-distinct pairs merged.
    pub fm_adversarial: usize,
    pub adversarial_distinct_total: usize,
    /// Adversarial retries (must-merge pairs) caught.
    pub adversarial_caught: usize,
    pub adversarial_same_total: usize,
    /// Calls the keyer refused with an error (a pair with an error never counts as merged).
    pub errors: usize,
    pub us_per_key: f64,
    /// This keyer's µs/key over keyer B's (canonical JSON), run by run: the figure to read on a
    /// loaded machine, since both were timed within the same run.
    pub ratio_to_canonical: Spread,
    pub by_class: Vec<ClassScore>,
}

/// The median of per-run ratios, with their lowest and highest.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

impl Spread {
    /// The median, lowest and highest of `samples` (zeros when there are none).
    pub(crate) fn of(mut samples: Vec<f64>) -> Spread {
        if samples.is_empty() {
            return Spread::default();
        }
        samples.sort_by(f64::total_cmp);
        Spread {
            median: samples[samples.len() / 2],
            low: samples[0],
            high: samples[samples.len() - 1],
        }
    }
}

impl KeyerScore {
    /// Ids of every pair this keyer got wrong, in corpus order.
    pub fn wrong(&self) -> impl Iterator<Item = &str> {
        self.by_class
            .iter()
            .flat_map(|c| c.wrong.iter().map(String::as_str))
    }
}

#[derive(Debug, Clone)]
pub struct Report {
    pub keyers: Vec<KeyerScore>,
    pub schemas: bool,
    pub runs: usize,
    pub iterations: usize,
    /// How many calls the timing loop cycles through (both sides of the article-spec pairs).
    pub timed_calls: usize,
    pub wall_clock: Duration,
}

/// The article's name for each keyer.
pub(crate) fn label(strategy: Strategy, schemas: bool) -> String {
    match strategy {
        Strategy::Raw => "A raw-bytes hash".into(),
        Strategy::Canonical => "B canonical JSON".into(),
        Strategy::Normalized => "C canonical + normalize".into(),
        Strategy::Scoped => "D = C + (run_id, step)".into(),
        Strategy::Typed if schemas => "typed (ours, schemas)".into(),
        Strategy::Typed => "typed (ours, no schemas)".into(),
    }
}

/// The label of the row keyed from Bedrock events.
pub const BEDROCK_LABEL: &str = "typed (ours, Bedrock declared types only)";

/// One side as the executor keys it: the adapter's arguments (every value a string) and the schema
/// its declared types make.
struct BedrockSide {
    tool: String,
    args: String,
    schema: Schema,
}

impl BedrockSide {
    /// The side as the adapter reads its event; `None` when the adapter refuses it.
    fn read(event: &str) -> Option<BedrockSide> {
        let event: serde_json::Value = serde_json::from_str(event).ok()?;
        let envelope = ActionGroupEvent::parse(&event).ok()?;
        let call = envelope.tool_call().ok()?;
        let schema = Schema::from_declared_types(call.declared_types()).ok()?;
        Some(BedrockSide {
            tool: call.tool().to_string(),
            args: call.args,
            schema,
        })
    }

    /// A side no event can carry (its arguments are no JSON object, or the adapter refuses them):
    /// kept as written, so that the keyer refuses it and the pair counts as an error.
    fn unsendable(pair: &Pair, side: &super::Side) -> BedrockSide {
        BedrockSide {
            tool: pair.tool.clone(),
            args: side.args.clone(),
            schema: Schema::default(),
        }
    }
}

impl BedrockSide {
    fn call<'a>(&'a self, at: &'a super::Side, step: &'a str) -> Call<'a> {
        Call {
            tool: &self.tool,
            args: &self.args,
            namespace: None,
            run_id: Some(&at.run_id),
            step: Some(step),
            schema: Some(&self.schema),
            policy: None,
        }
    }
}

/// Both sides of every pair as function-details events, read back by the adapter.
fn bedrock_sides(corpus: &Corpus) -> Vec<[BedrockSide; 2]> {
    let declared = DeclaredTypes::from_values(&corpus.pairs);
    corpus
        .pairs
        .iter()
        .map(|pair| {
            let sendable = [&pair.a, &pair.b]
                .iter()
                .all(|side| matches!(PyJson::try_parse(&side.args), Some(PyJson::Obj(_))));
            let events = sendable.then(|| pair_events(pair, Flavour::FunctionDetails, &declared));
            let read =
                events.and_then(|[a, b]| Some([BedrockSide::read(&a)?, BedrockSide::read(&b)?]));
            read.unwrap_or_else(|| {
                [
                    BedrockSide::unsendable(pair, &pair.a),
                    BedrockSide::unsendable(pair, &pair.b),
                ]
            })
        })
        .collect()
}

fn step_texts(corpus: &Corpus) -> Vec<(String, String)> {
    corpus
        .pairs
        .iter()
        .map(|p| (p.a.step.to_string(), p.b.step.to_string()))
        .collect()
}

fn call<'a>(
    pair: &'a Pair,
    side: &'a super::Side,
    step: &'a str,
    schemas: Option<&'a BTreeMap<String, Schema>>,
) -> Call<'a> {
    Call {
        tool: &pair.tool,
        args: &side.args,
        namespace: None,
        run_id: Some(&side.run_id),
        step: Some(step),
        schema: schemas.and_then(|s| s.get(&pair.tool)),
        policy: None,
    }
}

/// Scores every keyer on `corpus`.
pub fn score(corpus: &Corpus, options: &Options) -> Report {
    let started = Instant::now();
    let steps = step_texts(corpus);
    let calls: Vec<(Call<'_>, Call<'_>)> = corpus
        .pairs
        .iter()
        .zip(&steps)
        .map(|(p, (sa, sb))| {
            (
                call(p, &p.a, sa, options.schemas.as_ref()),
                call(p, &p.b, sb, options.schemas.as_ref()),
            )
        })
        .collect();
    let keyer = Keyer::new().with_version(options.keyer);
    let timed = timed_calls(corpus, &calls);

    let mut keyers: Vec<KeyerScore> = Strategy::ALL
        .into_iter()
        .map(|strategy| {
            let mut row = tally(corpus, &calls, &keyer, strategy);
            row.label = label(strategy, options.schemas.is_some());
            row
        })
        .collect();

    let bedrock = bedrock_sides(corpus);
    let bedrock_calls: Vec<(Call<'_>, Call<'_>)> = corpus
        .pairs
        .iter()
        .zip(&steps)
        .zip(&bedrock)
        .map(|((pair, (sa, sb)), [a, b])| (a.call(&pair.a, sa), b.call(&pair.b, sb)))
        .collect();
    let bedrock_timed = timed_calls(corpus, &bedrock_calls);
    let mut row = tally(corpus, &bedrock_calls, &keyer, Strategy::Typed);
    row.bedrock = true;
    row.label = BEDROCK_LABEL.into();
    keyers.push(row);
    // Every row's timing in one interleaved loop: a load change hits them all alike.
    let entries: Vec<(Strategy, &[Call<'_>])> = Strategy::ALL
        .into_iter()
        .map(|strategy| (strategy, &timed[..]))
        .chain([(Strategy::Typed, &bedrock_timed[..])])
        .collect();
    let samples = time_interleaved(&keyer, &entries, options.runs, options.iterations);
    let canonical = Strategy::ALL
        .iter()
        .position(|s| *s == Strategy::Canonical)
        .expect("keyer B is timed");
    for (row, runs) in keyers.iter_mut().zip(&samples) {
        row.us_per_key = Spread::of(runs.clone()).median;
        row.ratio_to_canonical = Spread::of(
            runs.iter()
                .zip(&samples[canonical])
                .filter(|(_, b)| **b > 0.0)
                .map(|(k, b)| k / b)
                .collect(),
        );
    }
    Report {
        keyers,
        schemas: options.schemas.is_some(),
        runs: options.runs,
        iterations: options.iterations,
        timed_calls: timed.len(),
        wall_clock: started.elapsed(),
    }
}

/// The calls timed for µs/key: both sides of the article-spec pairs (not the adversarial section).
fn timed_calls<'a>(corpus: &Corpus, calls: &[(Call<'a>, Call<'a>)]) -> Vec<Call<'a>> {
    corpus
        .pairs
        .iter()
        .zip(calls)
        .filter(|(p, _)| p.section != "adversarial")
        .flat_map(|(_, (a, b))| [*a, *b])
        .collect()
}

fn tally(
    corpus: &Corpus,
    calls: &[(Call<'_>, Call<'_>)],
    keyer: &Keyer,
    strategy: Strategy,
) -> KeyerScore {
    let mut row = KeyerScore {
        strategy,
        bedrock: false,
        label: String::new(),
        retries_caught: 0,
        retries_total: 0,
        fm_value_changed: 0,
        value_changed_total: 0,
        fm_deliberate_repeat: 0,
        deliberate_repeat_total: 0,
        fm_adversarial: 0,
        adversarial_distinct_total: 0,
        adversarial_caught: 0,
        adversarial_same_total: 0,
        errors: 0,
        us_per_key: 0.0,
        ratio_to_canonical: Spread::default(),
        by_class: Vec::new(),
    };
    for (pair, (a, b)) in corpus.pairs.iter().zip(calls) {
        let ka: Result<Key, _> = keyer.key(strategy, a);
        let kb: Result<Key, _> = keyer.key(strategy, b);
        row.errors += ka.is_err() as usize + kb.is_err() as usize;
        let merged = matches!((&ka, &kb), (Ok(x), Ok(y)) if x == y);
        let (count, total) = match (pair.section.as_str(), pair.class.as_str(), pair.expect) {
            ("retries", _, _) => (&mut row.retries_caught, &mut row.retries_total),
            ("distinct", "value_changed", _) => {
                (&mut row.fm_value_changed, &mut row.value_changed_total)
            }
            ("distinct", _, _) => (
                &mut row.fm_deliberate_repeat,
                &mut row.deliberate_repeat_total,
            ),
            (_, _, Expect::Same) => (&mut row.adversarial_caught, &mut row.adversarial_same_total),
            (_, _, Expect::Distinct) => {
                (&mut row.fm_adversarial, &mut row.adversarial_distinct_total)
            }
        };
        *count += merged as usize;
        *total += 1;

        let i = match row
            .by_class
            .iter()
            .position(|c| c.section == pair.section && c.class == pair.class)
        {
            Some(i) => i,
            None => {
                row.by_class.push(ClassScore {
                    section: pair.section.clone(),
                    class: pair.class.clone(),
                    expect: pair.expect,
                    total: 0,
                    merged: 0,
                    noops: 0,
                    wrong: Vec::new(),
                });
                row.by_class.len() - 1
            }
        };
        let class = &mut row.by_class[i];
        class.total += 1;
        class.merged += merged as usize;
        class.noops += pair.noop.unwrap_or(false) as usize;
        if merged != (pair.expect == Expect::Same) {
            class.wrong.push(pair.id.clone());
        }
    }
    row
}

/// The mean µs per derivation of each entry (a strategy and the calls it cycles through) in each of
/// `runs` rounds, `[entry][run]`. A round times every entry in turn, starting one entry later each
/// round, so the keyers share the machine's load and no keyer always goes first.
fn time_interleaved(
    keyer: &Keyer,
    entries: &[(Strategy, &[Call<'_>])],
    runs: usize,
    iterations: usize,
) -> Vec<Vec<f64>> {
    let mut samples = vec![Vec::with_capacity(runs); entries.len()];
    if iterations == 0 {
        return samples;
    }
    for run in 0..runs {
        for turn in 0..entries.len() {
            let e = (run + turn) % entries.len();
            let (strategy, calls) = entries[e];
            if calls.is_empty() {
                continue;
            }
            let start = Instant::now();
            for i in 0..iterations {
                let _ = black_box(keyer.key(strategy, black_box(&calls[i % calls.len()])));
            }
            samples[e].push(start.elapsed().as_secs_f64() * 1e6 / iterations as f64);
        }
    }
    samples
}
