//! The money: what a duplicate tool call wastes in tokens, against what the store costs.
//!
//! [`article`] reproduces the design article's arithmetic exactly (one write request unit per call).
//! [`store`] is the corrected model: the claim write, the completion write sized by the stored result,
//! the repeat's failed conditional write (plus a read on servers that cannot return the old item), and
//! storage for the TTL window. Every input is a field of [`Inputs`]; nothing is hidden in a constant.

/// Everything the estimate depends on. Prices are USD per million units (storage: per GB-month).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Inputs {
    pub(crate) input_price_per_m: f64,
    pub(crate) output_price_per_m: f64,
    pub(crate) write_price_per_m: f64,
    pub(crate) read_price_per_m: f64,
    pub(crate) storage_price_per_gb_month: f64,
    /// Tokens of the `tool_use` block (billed as output on first billing).
    pub(crate) tool_use_tokens: u64,
    /// Tokens of the `tool_result` block (billed as input).
    pub(crate) tool_result_tokens: u64,
    pub(crate) duplicate_rate: f64,
    /// Later turns that re-send both blocks as input.
    pub(crate) further_turns: u64,
    pub(crate) calls: u64,
    /// Bytes of the stored tool result.
    pub(crate) result_bytes: u64,
    pub(crate) ttl_hours: f64,
    /// Whether a repeat's failed claim returns the stored item (`ALL_OLD`); otherwise it costs a read.
    pub(crate) all_old_on_conflict: bool,
    /// Days over which `calls` arrive (storage is prorated over this window).
    pub(crate) period_days: f64,
}

impl Inputs {
    /// The article's inputs: August 2026 list prices, 74 + 124 tokens, 3% duplicates, 10 turns, 1M calls.
    #[cfg(test)]
    pub(crate) fn article() -> Self {
        Self {
            input_price_per_m: 3.0,
            output_price_per_m: 15.0,
            write_price_per_m: 1.25,
            read_price_per_m: 0.25,
            storage_price_per_gb_month: 0.25,
            tool_use_tokens: 74,
            tool_result_tokens: 124,
            duplicate_rate: 0.03,
            further_turns: 10,
            calls: 1_000_000,
            result_bytes: 1024,
            ttl_hours: 24.0,
            all_old_on_conflict: true,
            period_days: 30.0,
        }
    }
}

/// Dollars a single duplicate wastes: both blocks billed once, then re-sent as input every later turn.
pub(crate) fn waste_per_duplicate(i: &Inputs, further_turns: u64) -> f64 {
    let first = i.tool_use_tokens as f64 * i.output_price_per_m / 1e6
        + i.tool_result_tokens as f64 * i.input_price_per_m / 1e6;
    let resent = (i.tool_use_tokens + i.tool_result_tokens) as f64 * i.input_price_per_m / 1e6
        * further_turns as f64;
    first + resent
}

pub(crate) fn total_waste(i: &Inputs, duplicate_rate: f64, further_turns: u64) -> f64 {
    i.calls as f64 * duplicate_rate * waste_per_duplicate(i, further_turns)
}

/// The article's store: one write request unit per call.
pub(crate) fn article_store_cost(i: &Inputs) -> f64 {
    i.calls as f64 * i.write_price_per_m / 1e6
}

/// Bytes of a record besides its result: key, status, expiry, lease, token, fingerprint, tool, created,
/// attribute names, and DynamoDB's per-item overhead (100 bytes, as its storage pricing counts it).
pub(crate) const RECORD_OVERHEAD_BYTES: u64 = 300;

/// The corrected store model, itemised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StoreCost {
    pub(crate) claim_write_units: f64,
    pub(crate) completion_write_units: f64,
    pub(crate) conflict_write_units: f64,
    pub(crate) conflict_read_units: f64,
    pub(crate) storage_gb_months: f64,
    pub(crate) dollars: f64,
}

pub(crate) fn store_cost(i: &Inputs, duplicate_rate: f64) -> StoreCost {
    let calls = i.calls as f64;
    let first_sights = calls * (1.0 - duplicate_rate);
    let repeats = calls * duplicate_rate;
    let item_bytes = (RECORD_OVERHEAD_BYTES + i.result_bytes) as f64;
    // On-demand writes cost one unit per started KB of the larger of the old and new item.
    let item_write_units = (item_bytes / 1024.0).ceil();
    let claim_write_units = first_sights;
    let completion_write_units = first_sights * item_write_units;
    // A failed conditional write is still billed, by the size of the item it compared against.
    let conflict_write_units = repeats * item_write_units;
    // Without ALL_OLD a repeat reads the record (strongly consistent: one unit per 4 KB).
    let conflict_read_units = if i.all_old_on_conflict {
        0.0
    } else {
        repeats * (item_bytes / 4096.0).ceil()
    };
    // Steady state: each record lives for the TTL window, over the period the calls arrive in.
    let live_records = first_sights * (i.ttl_hours / 24.0 / i.period_days).min(1.0);
    let storage_gb_months = live_records * item_bytes / 1e9 * (i.period_days / 30.0);
    let dollars = (claim_write_units + completion_write_units + conflict_write_units)
        * i.write_price_per_m
        / 1e6
        + conflict_read_units * i.read_price_per_m / 1e6
        + storage_gb_months * i.storage_price_per_gb_month;
    StoreCost {
        claim_write_units,
        completion_write_units,
        conflict_write_units,
        conflict_read_units,
        storage_gb_months,
        dollars,
    }
}

/// The article's sweep axes: 1–5% duplicates × 5–20 further turns.
pub(crate) const SWEEP_DUPLICATE_RATES: [f64; 5] = [0.01, 0.02, 0.03, 0.04, 0.05];
pub(crate) const SWEEP_TURNS: [u64; 4] = [5, 10, 15, 20];

/// One point of the sweep: waste-to-store ratios under both store models.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SweepPoint {
    pub(crate) duplicate_rate: f64,
    pub(crate) further_turns: u64,
    pub(crate) waste: f64,
    pub(crate) article_ratio: f64,
    pub(crate) corrected_ratio: f64,
}

pub(crate) fn sweep(i: &Inputs) -> Vec<SweepPoint> {
    let mut points = Vec::new();
    for &rate in &SWEEP_DUPLICATE_RATES {
        for &turns in &SWEEP_TURNS {
            let waste = total_waste(i, rate, turns);
            points.push(SweepPoint {
                duplicate_rate: rate,
                further_turns: turns,
                waste,
                article_ratio: waste / article_store_cost(i),
                corrected_ratio: waste / store_cost(i, rate).dollars,
            });
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_articles_five_figures() {
        let i = Inputs::article();
        assert_eq!(format!("{:.6}", waste_per_duplicate(&i, 0)), "0.001482");
        assert_eq!(format!("{:.6}", waste_per_duplicate(&i, 10)), "0.007422");
        assert_eq!(format!("{:.2}", total_waste(&i, 0.03, 10)), "222.66");
        assert_eq!(format!("{:.2}", article_store_cost(&i)), "1.25");
        let ratios: Vec<f64> = sweep(&i).iter().map(|p| p.article_ratio).collect();
        let min = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = ratios.iter().cloned().fold(0.0, f64::max);
        assert_eq!((min.floor(), max.floor()), (35.0, 534.0));
    }

    #[test]
    fn corrected_store_costs_more_than_one_write_per_call() {
        let i = Inputs::article();
        let corrected = store_cost(&i, 0.03);
        assert!(corrected.dollars > article_store_cost(&i));
        // 1 KiB results plus the record overhead take two write units on completion.
        assert_eq!(corrected.completion_write_units, 970_000.0 * 2.0);
        let no_all_old = store_cost(
            &Inputs {
                all_old_on_conflict: false,
                ..i
            },
            0.03,
        );
        assert_eq!(no_all_old.conflict_read_units, 30_000.0);
        assert!(no_all_old.dollars > corrected.dollars);
    }
}
