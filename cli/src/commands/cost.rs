//! `dedup cost`: the article's dollar arithmetic, reproduced, beside a corrected store model.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::CliError;
use crate::cost::{
    Inputs, SWEEP_DUPLICATE_RATES, SWEEP_TURNS, article_store_cost, store_cost, sweep, total_waste,
    waste_per_duplicate,
};

/// A representative `charge_card` round trip in Anthropic's content-block format.
pub(crate) const TOOL_USE_BLOCK: &str = r#"{"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"charge_card","input":{"customer_id":"cus_4f9a2c","amount":4200,"currency":"USD","description":"Annual Pro plan renewal","receipt_email":"dana.whitfield@example.com","capture":true}}"#;
pub(crate) const TOOL_RESULT_BLOCK: &str = r#"{"type":"tool_result","tool_use_id":"toolu_01A09q90qw90lq917835lq9","content":"{\"charge_id\":\"ch_3PqR8sL2eZvKYlo2C1a2b3c4\",\"status\":\"succeeded\",\"amount\":4200,\"currency\":\"usd\",\"customer_id\":\"cus_4f9a2c\",\"receipt_url\":\"https://pay.example.com/receipts/ch_3PqR8sL2eZvKYlo2C1a2b3c4\",\"created\":\"2026-08-11T09:00:00Z\",\"captured\":true}"}"#;

#[derive(Debug, clap::Args)]
pub(crate) struct CostArgs {
    /// Model input price, USD per million tokens.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) input_price: f64,
    /// Model output price, USD per million tokens.
    #[arg(long, default_value_t = 15.0)]
    pub(crate) output_price: f64,
    /// DynamoDB on-demand write price, USD per million write request units.
    #[arg(long, default_value_t = 1.25)]
    pub(crate) write_price: f64,
    /// DynamoDB on-demand read price, USD per million read request units.
    #[arg(long, default_value_t = 0.25)]
    pub(crate) read_price: f64,
    /// DynamoDB storage price, USD per GB-month.
    #[arg(long, default_value_t = 0.25)]
    pub(crate) storage_price: f64,
    /// Tokens of the tool_use block (default: the article's 74; `--measured` uses our block's count).
    #[arg(long, default_value_t = 74)]
    pub(crate) tool_use_tokens: u64,
    /// Tokens of the tool_result block (default: the article's 124).
    #[arg(long, default_value_t = 124)]
    pub(crate) tool_result_tokens: u64,
    /// Use the o200k_base counts of our representative blocks instead of the token flags.
    #[arg(long)]
    pub(crate) measured: bool,
    /// Share of calls that are duplicates (0.03 = 3%).
    #[arg(long, default_value_t = 0.03)]
    pub(crate) duplicate_rate: f64,
    /// Later turns that re-send both blocks as input.
    #[arg(long, default_value_t = 10)]
    pub(crate) turns: u64,
    /// Tool calls in the period.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) calls: u64,
    /// Bytes of the stored tool result.
    #[arg(long, default_value_t = 1024)]
    pub(crate) result_bytes: u64,
    /// Hours a record lives (the table's TTL).
    #[arg(long, default_value_t = 24.0)]
    pub(crate) ttl_hours: f64,
    /// Days over which the calls arrive.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) period_days: f64,
    /// Model a server without ReturnValuesOnConditionCheckFailure (a repeat also reads).
    #[arg(long)]
    pub(crate) no_all_old: bool,
    /// Print the waste-to-store grid over 1–5% duplicates × 5–20 turns.
    #[arg(long)]
    pub(crate) sweep: bool,
    /// Draw the waste-to-store ratio over the grid as an SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
}

/// Token counts of the representative blocks under `o200k_base` (OpenAI's encoding: a stand-in).
pub(crate) fn measured_tokens() -> (u64, u64) {
    let bpe = tiktoken_rs::o200k_base().expect("o200k_base ships inside tiktoken-rs");
    (
        bpe.encode_with_special_tokens(TOOL_USE_BLOCK).len() as u64,
        bpe.encode_with_special_tokens(TOOL_RESULT_BLOCK).len() as u64,
    )
}

pub(crate) fn run(args: CostArgs) -> Result<ExitCode, CliError> {
    let (use_tokens, result_tokens) = measured_tokens();
    let inputs = Inputs {
        input_price_per_m: args.input_price,
        output_price_per_m: args.output_price,
        write_price_per_m: args.write_price,
        read_price_per_m: args.read_price,
        storage_price_per_gb_month: args.storage_price,
        tool_use_tokens: if args.measured {
            use_tokens
        } else {
            args.tool_use_tokens
        },
        tool_result_tokens: if args.measured {
            result_tokens
        } else {
            args.tool_result_tokens
        },
        duplicate_rate: args.duplicate_rate,
        further_turns: args.turns,
        calls: args.calls,
        result_bytes: args.result_bytes,
        ttl_hours: args.ttl_hours,
        all_old_on_conflict: !args.no_all_old,
        period_days: args.period_days,
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "Token counts with tiktoken o200k_base — OpenAI's encoding, a stand-in: Anthropic publishes no"
    )?;
    writeln!(
        out,
        "offline tokenizer, so true Claude counts differ and every figure is an order-of-magnitude estimate."
    )?;
    writeln!(
        out,
        "  our charge_card tool_use block: {use_tokens} tokens; tool_result block: {result_tokens} tokens"
    )?;
    writeln!(
        out,
        "  used below: {} output + {} input tokens{}",
        inputs.tool_use_tokens,
        inputs.tool_result_tokens,
        if args.measured {
            " (measured)"
        } else {
            " (the article's counts; --measured for ours)"
        }
    )?;
    writeln!(out)?;
    let i = &inputs;
    let rate_pct = i.duplicate_rate * 100.0;
    let corrected = store_cost(i, i.duplicate_rate);
    let waste = total_waste(i, i.duplicate_rate, i.further_turns);
    let article_store = article_store_cost(i);
    writeln!(
        out,
        "{:<46} {:>14} {:>16}",
        "", "article model", "corrected store"
    )?;
    writeln!(
        out,
        "{:<46} {:>14}",
        "waste per duplicate, first billing",
        format!("${:.6}", waste_per_duplicate(i, 0))
    )?;
    writeln!(
        out,
        "{:<46} {:>14}",
        format!("waste per duplicate, {} further turns", i.further_turns),
        format!("${:.6}", waste_per_duplicate(i, i.further_turns))
    )?;
    writeln!(
        out,
        "{:<46} {:>14}",
        format!("wasted tokens, {} calls at {rate_pct}% duplicates", i.calls),
        format!("${waste:.2}")
    )?;
    writeln!(
        out,
        "{:<46} {:>14} {:>16}",
        "store cost",
        format!("${article_store:.2}"),
        format!("${:.2}", corrected.dollars)
    )?;
    writeln!(
        out,
        "{:<46} {:>14} {:>16}",
        "waste-to-store ratio",
        format!("{:.0}:1", (waste / article_store).floor()),
        format!("{:.0}:1", (waste / corrected.dollars).floor())
    )?;
    let points = sweep(i);
    let range = |f: fn(&crate::cost::SweepPoint) -> f64| {
        let min = points.iter().map(f).fold(f64::INFINITY, f64::min);
        let max = points.iter().map(f).fold(0.0, f64::max);
        format!("{:.0}:1 to {:.0}:1", min.floor(), max.floor())
    };
    writeln!(
        out,
        "{:<46} {:>14} {:>16}",
        "sweep: 1–5% duplicates × 5–20 turns",
        range(|p| p.article_ratio),
        range(|p| p.corrected_ratio)
    )?;
    writeln!(out)?;
    writeln!(out, "Corrected store model, per {} calls:", i.calls)?;
    writeln!(
        out,
        "  claim writes (1 WRU each, first sights):        {:>12.0} WRU",
        corrected.claim_write_units
    )?;
    writeln!(
        out,
        "  completion writes ({} B result + {} B record): {:>12.0} WRU",
        i.result_bytes,
        crate::cost::RECORD_OVERHEAD_BYTES,
        corrected.completion_write_units
    )?;
    writeln!(
        out,
        "  repeats' failed conditional writes:              {:>12.0} WRU",
        corrected.conflict_write_units
    )?;
    writeln!(
        out,
        "  repeats' reads ({}):  {:>12.0} RRU",
        if i.all_old_on_conflict {
            "none: ALL_OLD returns the item"
        } else {
            "no ALL_OLD: one GetItem"
        },
        corrected.conflict_read_units
    )?;
    writeln!(
        out,
        "  storage for a {} h TTL over {} days:            {:>12.6} GB-months",
        i.ttl_hours, i.period_days, corrected.storage_gb_months
    )?;
    if args.sweep {
        writeln!(out)?;
        writeln!(
            out,
            "{:>10} {:>6} {:>12} {:>12} {:>12}",
            "duplicates", "turns", "waste", "article", "corrected"
        )?;
        for p in &points {
            writeln!(
                out,
                "{:>9.0}% {:>6} {:>12} {:>12} {:>12}",
                p.duplicate_rate * 100.0,
                p.further_turns,
                format!("${:.2}", p.waste),
                format!("{:.0}:1", p.article_ratio.floor()),
                format!("{:.0}:1", p.corrected_ratio.floor())
            )?;
        }
    }
    if let Some(path) = &args.plot {
        plot(&points, path)
            .map_err(|e| CliError::Usage(format!("cannot draw {}: {e}", path.display())))?;
        writeln!(out, "plot written to {}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn plot(
    points: &[crate::cost::SweepPoint],
    path: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = points
        .iter()
        .map(|p| p.article_ratio.max(p.corrected_ratio))
        .fold(0.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Waste-to-store ratio (tokens wasted by duplicates ÷ store cost)",
            ("sans-serif", 20),
        )
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            SWEEP_TURNS[0] as f64..SWEEP_TURNS[SWEEP_TURNS.len() - 1] as f64,
            0.0..max,
        )?;
    chart
        .configure_mesh()
        .x_desc("further turns")
        .y_desc("ratio (x:1)")
        .draw()?;
    for (n, &rate) in SWEEP_DUPLICATE_RATES.iter().enumerate() {
        let color = Palette99::pick(n).to_rgba();
        let series = |f: fn(&crate::cost::SweepPoint) -> f64| {
            points
                .iter()
                .filter(|p| p.duplicate_rate == rate)
                .map(move |p| (p.further_turns as f64, f(p)))
                .collect::<Vec<_>>()
        };
        chart
            .draw_series(LineSeries::new(
                series(|p| p.article_ratio),
                color.stroke_width(2),
            ))?
            .label(format!("{:.0}% duplicates, article store", rate * 100.0))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                series(|p| p.corrected_ratio)
                    .into_iter()
                    .map(|(x, y)| Circle::new((x, y), 4, color.filled())),
            )?
            .label(format!("{:.0}% duplicates, corrected store", rate * 100.0))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}
