//! A setting's list of names, as every comma-separated variable writes it.

/// A comma-separated list (a setting's names), each item trimmed, empty items dropped.
pub(crate) fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}
