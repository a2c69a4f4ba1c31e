//! The combinations of settings that cannot work, refused at start-up with the variable to fix.

use std::path::Path;
use std::time::Duration;

use super::env::{Vars, invalid};
use super::{Config, ConfigError};
use crate::executor::lease::{LEASE_MARGIN, LONGEST_LEASE, MAX_TOOL_TIMEOUT, TOOL_START_ALLOWANCE};

/// Refuses what `config` (read from `vars`) cannot do.
pub(super) fn check<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
    config: &Config,
) -> Result<(), ConfigError> {
    ttl_covers_the_longest_lease(config)?;
    catalogs_outlive_the_records_they_key(config)?;
    failures_are_always_stored(vars)?;
    policy_ttls_cover_the_longest_lease(config)?;
    no_route_back_to_this_function(vars, config)?;
    an_interceptor_alias_serves_the_interceptor(config)?;
    the_bucket_keeps_results_as_long_as_records(vars, config)
}

/// A route to the dedup function itself (`dedup config from-agent` run after `dedup attach` reads
/// the action groups pointing at it) would claim each call and invoke itself, which claims the
/// same key and waits on its own claim: the tool is never reached. The function's own name comes
/// from Lambda (`AWS_LAMBDA_FUNCTION_NAME`; `dedup config check --function` for a local check).
fn no_route_back_to_this_function<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
    config: &Config,
) -> Result<(), ConfigError> {
    let Some(own) = vars.get("AWS_LAMBDA_FUNCTION_NAME") else {
        return Ok(());
    };
    match config.routes.route_to(&own) {
        Some((pattern, target)) => Err(invalid(
            "DEDUP_ROUTES",
            &format!("{pattern} → {target}"),
            format!(
                "routes {pattern:?} to this function ({own}) itself: route it to the tool's own \
                 function (the executor the action group had before `dedup attach`)"
            ),
        )),
        None => Ok(()),
    }
}

/// An interceptor alias on a deployment that does not serve the interceptor door would refuse
/// every event through the alias and every interceptor event elsewhere: nothing is intercepted.
fn an_interceptor_alias_serves_the_interceptor(config: &Config) -> Result<(), ConfigError> {
    match &config.interceptor_alias {
        Some(alias) if !config.doors.serves(crate::doors::DoorName::Interceptor) => Err(invalid(
            "DEDUP_INTERCEPTOR_ALIAS",
            alias,
            format!(
                "names the interceptor's alias, but DEDUP_DOORS ({}) leaves the interceptor door \
                 out: add interceptor to DEDUP_DOORS, or unset the alias",
                config.doors.names().join(",")
            ),
        )),
        _ => Ok(()),
    }
}

fn ttl_covers_the_longest_lease(config: &Config) -> Result<(), ConfigError> {
    let ttl_s = config.ttl.as_secs();
    if ttl_s >= LONGEST_LEASE.as_secs() {
        return Ok(());
    }
    Err(invalid(
        "DEDUP_TTL_SECONDS",
        &ttl_s.to_string(),
        format!(
            "must be at least {} seconds, the longest lease (Lambda's {} s maximum run time, \
             {} s for a tool's init and throttled invokes, and a {} s margin): a shorter life \
             would let a record expire while its call may still be running",
            LONGEST_LEASE.as_secs(),
            MAX_TOOL_TIMEOUT.as_secs(),
            TOOL_START_ALLOWANCE.as_secs(),
            LEASE_MARGIN.as_secs()
        ),
    ))
}

/// A learned catalog types its gateway's calls: one that expires before the records it keyed lets
/// a retry of a completed call key without its schema, under another key, and run again.
fn catalogs_outlive_the_records_they_key(config: &Config) -> Result<(), ConfigError> {
    let (catalog_s, ttl_s) = (config.catalog_ttl.as_secs(), config.ttl.as_secs());
    if catalog_s >= ttl_s {
        return Ok(());
    }
    Err(invalid(
        "DEDUP_CATALOG_TTL_SECONDS",
        &catalog_s.to_string(),
        format!(
            "must be at least DEDUP_TTL_SECONDS ({ttl_s}): a learned catalog that expires before \
             the records it keyed lets a retry of a completed call key without the tool's schema, \
             under another key, and run again"
        ),
    ))
}

/// Retired: a failure reply says the tool acted, so it is always stored (see
/// `decide::after_run`); a deployment that asked for re-runs must hear that it no longer gets
/// them.
fn failures_are_always_stored<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
) -> Result<(), ConfigError> {
    // Either value is refused: `true` asked for failures stored for the whole retention, which
    // is no longer the default (issue 51), so a deployment that set it must say so per tool.
    let Some(value) = vars.flag("DEDUP_CACHE_FAILURES")? else {
        return Ok(());
    };
    Err(invalid(
        "DEDUP_CACHE_FAILURES",
        if value { "true" } else { "false" },
        "is retired: what a failure reply (Bedrock FAILURE, HTTP 5xx, MCP isError) does is each \
         tool's policy: replayed for 60 s by default (an at_most_once tool's for the whole \
         retention), failures = \"replay\" for the whole retention, failure_ttl_seconds for \
         another, failures = \"retry\" to let the retry run. Remove the variable",
    ))
}

fn policy_ttls_cover_the_longest_lease(config: &Config) -> Result<(), ConfigError> {
    let Some((tool, ttl)) = config
        .policies
        .iter()
        .filter_map(|(tool, p)| p.ttl.map(|ttl| (tool, ttl)))
        .find(|(_, ttl)| *ttl < LONGEST_LEASE)
    else {
        return Ok(());
    };
    let shown = config
        .policy_file
        .as_deref()
        .unwrap_or(Path::new(""))
        .display()
        .to_string();
    Err(invalid(
        "DEDUP_POLICY_FILE",
        &shown,
        format!(
            "tool {tool:?} has ttl_seconds {}, under {} seconds, the longest lease: its \
             record could expire while its call may still be running",
            ttl.as_secs(),
            LONGEST_LEASE.as_secs()
        ),
    ))
}

/// A record that outlives its result object would answer "stored result unavailable". Only a
/// deployment that offloads keeps objects (a stack without a bucket still sets the retention).
fn the_bucket_keeps_results_as_long_as_records<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
    config: &Config,
) -> Result<(), ConfigError> {
    let retention_days: Option<u64> = vars.parsed("DEDUP_RESULTS_RETENTION_DAYS")?;
    let Some(days) = retention_days.filter(|_| config.results_bucket.is_some()) else {
        return Ok(());
    };
    let longest = config
        .policies
        .iter()
        .filter_map(|(tool, p)| {
            p.ttl
                .map(|ttl| (format!("tool {tool:?}'s ttl_seconds"), ttl))
        })
        .chain([("DEDUP_TTL_SECONDS".to_string(), config.ttl)])
        .max_by_key(|(_, ttl): &(String, Duration)| *ttl);
    match longest.filter(|(_, ttl)| ttl.as_secs() > days * 86_400) {
        Some((what, ttl)) => Err(invalid(
            "DEDUP_RESULTS_RETENTION_DAYS",
            &days.to_string(),
            format!(
                "{what} is {} seconds, longer than the results bucket keeps an object \
                 ({days} days): raise the bucket's retention",
                ttl.as_secs()
            ),
        )),
        None => Ok(()),
    }
}
