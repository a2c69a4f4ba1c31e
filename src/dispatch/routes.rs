//! `DEDUP_ROUTES`: which tool Lambda each call is sent to.

use std::collections::HashMap;
use std::time::Duration;

use crate::executor::lease::MAX_TOOL_TIMEOUT;

/// Route table from `DEDUP_ROUTES`: `"actionGroup/function"`, `"actionGroup/METHOD /path"`,
/// `"actionGroup/*"` or `"*"` → tool function name or ARN, or
/// `{"function": "name or ARN", "timeout_seconds": 120, "namespace": "payments"}` to state the
/// tool's own timeout (else the Lambda looks it up at cold start) and the namespace its calls
/// are keyed in (else the one the entry point derives: agent id and action group, gateway and
/// target, so renaming those re-keys the calls). The most specific entry wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    exact: HashMap<String, String>,
    groups: HashMap<String, String>,
    default: Option<String>,
    /// Timeouts stated in the routes, by target.
    timeouts: HashMap<String, Duration>,
    /// Namespaces stated in the routes, by the entry's own key: `group/tool`, `group/*`, or `*`.
    namespaces: HashMap<String, String>,
}

/// A route's value, read from `"target"` or its object form.
struct RouteValue {
    target: String,
    timeout: Option<Duration>,
    namespace: Option<String>,
    /// `"shared": true`: the route's callers share its stated namespace on purpose.
    shared: bool,
}

impl Routes {
    /// Parses the JSON object text of `DEDUP_ROUTES`.
    pub fn parse(text: &str) -> Result<Routes, String> {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| format!("not a JSON object of strings: {e}"))?;
        let mut routes = Routes::default();
        let mut entries = std::collections::HashSet::new();
        for (pattern, value) in map {
            let RouteValue {
                target,
                timeout,
                namespace,
                shared,
            } = route_target(&value)
                .map_err(|reason| format!("route {pattern:?}: {reason}, got {value}"))?;
            // A catch-all or group route catches every caller of its pattern (every agent with an
            // action group of that name, every envelope tenant): one stated namespace would key
            // their identical calls as one, so each answers the others from the store.
            let catches_several = pattern.trim() == "*" || pattern.trim().ends_with("/*");
            if namespace.is_some() && catches_several && !shared {
                return Err(format!(
                    "route {pattern:?}: a \"namespace\" on a route that catches several callers \
                     keys all their calls in one namespace (two agents' identical calls, or two \
                     tenants', answer each other); name the tool in the pattern, or add \
                     \"shared\": true to say the callers share it"
                ));
            }
            if let Some(timeout) = timeout {
                routes.state_timeout(&target, timeout);
            }
            let entry = routes.insert(&pattern, target)?;
            // Two spellings of one entry (`"g/t"` and `" g/t"`) would leave one's target with
            // the other's namespace.
            if !entries.insert(entry.clone()) {
                return Err(format!(
                    "route {pattern:?} is the same route as another one ({entry}); write each \
                     route once"
                ));
            }
            if let Some(namespace) = namespace {
                routes.namespaces.insert(entry, namespace);
            }
        }
        Ok(routes)
    }

    /// The namespace the route written as `pattern` states (patterns as [`Routes::candidates`]
    /// gives them).
    pub fn stated_namespace(&self, pattern: &str) -> Option<&str> {
        self.namespaces.get(pattern).map(String::as_str)
    }

    /// Records that `target` can run for `timeout` (the longest stated one wins).
    pub(crate) fn state_timeout(&mut self, target: &str, timeout: Duration) {
        let known = self.timeouts.entry(target.to_string()).or_default();
        *known = (*known).max(timeout);
    }

    /// The timeout stated for `target` in the routes, if any.
    pub(crate) fn stated_timeout(&self, target: &str) -> Option<Duration> {
        self.timeouts.get(target).copied()
    }

    /// Every distinct target, sorted.
    pub fn targets(&self) -> Vec<&str> {
        let mut targets: Vec<&str> = self
            .exact
            .values()
            .chain(self.groups.values())
            .chain(&self.default)
            .map(String::as_str)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        targets
    }

    /// Adds one route; the pattern syntax is the same as in [`Routes::parse`]. Returns the
    /// entry's key.
    pub(crate) fn insert(&mut self, pattern: &str, target: String) -> Result<String, String> {
        let pattern = pattern.trim();
        if pattern == "*" {
            self.default = Some(target);
            return Ok("*".to_string());
        }
        let (group, tool) = pattern
            .split_once('/')
            .filter(|(g, t)| !g.is_empty() && !t.is_empty())
            .ok_or_else(|| {
                format!("route {pattern:?} must be \"actionGroup/function\", \"actionGroup/METHOD /path\", \"actionGroup/*\" or \"*\"")
            })?;
        let entry = route_key(group, &normalize_tool(tool));
        if tool == "*" {
            self.groups.insert(group.to_string(), target);
        } else {
            self.exact.insert(entry.clone(), target);
        }
        Ok(entry)
    }

    /// A route table that sends everything to `target`.
    pub fn everything_to(target: impl Into<String>) -> Routes {
        Routes {
            default: Some(target.into()),
            ..Routes::default()
        }
    }

    /// The route a call of `tool` (a function name or `"METHOD /path"`) in `action_group` takes,
    /// as `(target, stated namespace)`: the most specific entry, and the namespace that entry
    /// states, if it states one.
    pub fn take(&self, action_group: &str, tool: &str) -> Option<(&str, Option<&str>)> {
        let exact = route_key(action_group, tool);
        let (entry, target) = if let Some(target) = self.exact.get(&exact) {
            (exact, target)
        } else if let Some(target) = self.groups.get(action_group) {
            (route_key(action_group, "*"), target)
        } else {
            ("*".to_string(), self.default.as_ref()?)
        };
        Some((target, self.namespaces.get(&entry).map(String::as_str)))
    }

    /// The target for a call of `tool` in `action_group` ([`Routes::take`] without the namespace).
    #[cfg(test)]
    pub(crate) fn resolve(&self, action_group: &str, tool: &str) -> Option<&str> {
        self.take(action_group, tool).map(|(target, _)| target)
    }

    /// The routes a call of `tool` may take, most specific first, as `(pattern, target)`: its own
    /// routes in any action group, then the group-wide ones, then the default (which of the group
    /// routes applies depends on the call's action group).
    pub fn candidates(&self, tool: &str) -> Vec<(String, &str)> {
        let mut own: Vec<(String, &str)> = self
            .exact
            .iter()
            .filter(|(pattern, _)| pattern.split_once('/').is_some_and(|(_, t)| t == tool))
            .map(|(pattern, target)| (pattern.clone(), target.as_str()))
            .collect();
        own.sort();
        let mut groups: Vec<(String, &str)> = self
            .groups
            .iter()
            .map(|(group, target)| (format!("{group}/*"), target.as_str()))
            .collect();
        groups.sort();
        own.extend(groups);
        own.extend(self.default.iter().map(|t| ("*".to_string(), t.as_str())));
        own
    }

    /// The first route that sends calls to the function named `function` (a name, or an ARN with
    /// or without a qualifier), as `(pattern, target)`: a route back to the dedup function itself
    /// would claim each call twice and never reach the tool.
    pub(crate) fn route_to(&self, function: &str) -> Option<(String, &str)> {
        let own = function_name(function);
        let mut routes: Vec<(String, &str)> = self
            .exact
            .iter()
            .map(|(pattern, target)| (pattern.clone(), target.as_str()))
            .chain(
                self.groups
                    .iter()
                    .map(|(group, target)| (format!("{group}/*"), target.as_str())),
            )
            .chain(self.default.iter().map(|t| ("*".to_string(), t.as_str())))
            .collect();
        routes.sort();
        routes
            .into_iter()
            .find(|(_, target)| function_name(target) == own)
    }

    /// True when no route at all is configured (the Lambda refuses to start then).
    pub(crate) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.groups.is_empty() && self.default.is_none()
    }
}

/// A route's value: `"target"` or `{"function": "target", "timeout_seconds": N, "namespace": "ns"}`.
fn route_target(value: &serde_json::Value) -> Result<RouteValue, String> {
    use serde_json::Value;
    let non_empty = |v: Option<&Value>| match v {
        Some(Value::String(t)) if !t.trim().is_empty() => Some(t.trim().to_string()),
        _ => None,
    };
    if let Some(target) = non_empty(Some(value)) {
        return Ok(RouteValue {
            target,
            timeout: None,
            namespace: None,
            shared: false,
        });
    }
    let Value::Object(fields) = value else {
        return Err("target must be a non-empty string or an object".into());
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !["function", "timeout_seconds", "namespace", "shared"].contains(&k.as_str()))
    {
        return Err(format!(
            "unknown field {unknown:?} (expected \"function\", \"timeout_seconds\", \"namespace\" and \"shared\")"
        ));
    }
    let shared = match fields.get("shared") {
        None => false,
        Some(Value::Bool(shared)) => *shared,
        Some(_) => return Err("\"shared\" must be true or false".into()),
    };
    let target =
        non_empty(fields.get("function")).ok_or("\"function\" must be a non-empty string")?;
    let timeout = match fields.get("timeout_seconds") {
        None => None,
        Some(t) => Some(t.as_u64().and_then(lambda_timeout).ok_or(format!(
            "\"timeout_seconds\" must be a whole number of seconds from 1 to {} (Lambda's maximum)",
            MAX_TOOL_TIMEOUT.as_secs()
        ))?),
    };
    let namespace = match fields.get("namespace") {
        None => None,
        Some(v) => Some(non_empty(Some(v)).ok_or("\"namespace\" must be a non-empty string")?),
    };
    Ok(RouteValue {
        target,
        timeout,
        namespace,
        shared,
    })
}

/// The function name a Lambda name or ARN (`arn:aws:lambda:r:a:function:NAME[:qualifier]`,
/// `NAME:qualifier`) names.
fn function_name(function: &str) -> &str {
    let name = function
        .split_once(":function:")
        .map_or(function, |(_, rest)| rest);
    name.split(':').next().unwrap_or(name)
}

/// `seconds` as a timeout a Lambda function can have (1 s to [`MAX_TOOL_TIMEOUT`]).
pub fn lambda_timeout(seconds: u64) -> Option<Duration> {
    (1..=MAX_TOOL_TIMEOUT.as_secs())
        .contains(&seconds)
        .then(|| Duration::from_secs(seconds))
}

fn route_key(action_group: &str, tool: &str) -> String {
    format!("{action_group}/{tool}")
}

/// `"post /x"` → `"POST /x"`, the spelling [`crate::doors::bedrock`] gives OpenAPI tools.
fn normalize_tool(tool: &str) -> String {
    match tool.split_once(' ') {
        Some((method, path)) if path.starts_with('/') => {
            format!("{} {}", method.to_ascii_uppercase(), path.trim())
        }
        _ => tool.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(json: &str) -> Routes {
        Routes::parse(json).expect("valid routes")
    }

    #[test]
    fn a_tools_candidates_are_its_own_routes_then_the_groups_then_the_default() {
        let table = routes(
            r#"{"support/charge": "b", "payments/charge": "a", "payments/refund": "e",
                "payments/*": "c", "*": "d"}"#,
        );
        let listed = |tool| table.candidates(tool);
        assert_eq!(
            listed("charge"),
            vec![
                ("payments/charge".to_string(), "a"),
                ("support/charge".to_string(), "b"),
                ("payments/*".to_string(), "c"),
                ("*".to_string(), "d"),
            ]
        );
        assert_eq!(
            listed("lookup"),
            vec![("payments/*".to_string(), "c"), ("*".to_string(), "d")]
        );
    }

    #[test]
    fn the_namespace_is_the_one_the_route_taken_states() {
        let table = routes(
            r#"{"payments/charge": {"function": "a", "namespace": "pay-charge"},
                "payments/*": {"function": "c", "namespace": "pay", "shared": true},
                "support/*": "s", "*": "d"}"#,
        );
        let namespace = |group, tool| table.take(group, tool).and_then(|(_, ns)| ns);
        assert_eq!(namespace("payments", "charge"), Some("pay-charge"));
        assert_eq!(namespace("payments", "refund"), Some("pay"));
        assert_eq!(namespace("support", "charge"), None);
        assert_eq!(namespace("other", "charge"), None);
    }

    #[test]
    fn a_table_is_empty_only_without_any_route() {
        assert!(Routes::default().is_empty());
        assert!(!routes(r#"{"g/t": "x"}"#).is_empty());
        assert!(!routes(r#"{"g/*": "x"}"#).is_empty());
        assert!(!routes(r#"{"*": "x"}"#).is_empty());
        let everything = Routes::everything_to("fn-1");
        assert!(!everything.is_empty());
        assert_eq!(everything.resolve("any", "tool"), Some("fn-1"));
    }
}
