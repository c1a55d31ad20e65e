//! The little PromQL the [alerts](crate::alerts) and [dashboards](crate::dashboards) need:
//! a [`Selector`] that scopes every series to one operator (its scrape job, its namespace),
//! and [`metric_names`], which lists the metrics an expression reads so that a test can
//! check each against a real manager's `/metrics`.

use std::collections::BTreeSet;

/// Label matchers added to every series an expression reads, so that the rules and panels
/// of one operator see only its own targets: usually the scrape job
/// ([`job`](Self::job)) and the namespace it runs in ([`namespace`](Self::namespace)).
///
/// ```
/// use rudder_manifests::promql::Selector;
///
/// let selector = Selector::new().job("my-operator").namespace("ops");
/// assert_eq!(
///     selector.series("workqueue_depth", &[]),
///     r#"workqueue_depth{job="my-operator",namespace="ops"}"#
/// );
/// assert_eq!(Selector::new().series("workqueue_depth", &[]), "workqueue_depth");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    matchers: Vec<(String, String)>,
}

impl Selector {
    /// No matchers: every series of every target.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only the series whose `label` equals `value`.
    pub fn matcher(mut self, label: impl Into<String>, value: impl Into<String>) -> Self {
        self.matchers.push((label.into(), value.into()));
        self
    }

    /// Only the series of the scrape job `job` (the `job` label Prometheus adds; with the
    /// Prometheus Operator, the metrics Service's name unless the ServiceMonitor says
    /// otherwise).
    pub fn job(self, job: impl Into<String>) -> Self {
        self.matcher("job", job)
    }

    /// Only the series of targets in `namespace` (the `namespace` label the Prometheus
    /// Operator's Kubernetes service discovery adds).
    pub fn namespace(self, namespace: impl Into<String>) -> Self {
        self.matcher("namespace", namespace)
    }

    /// The matchers, in the order given.
    pub fn matchers(&self) -> &[(String, String)] {
        &self.matchers
    }

    /// A series selector: `metric` with this selector's matchers, then `extra` matchers
    /// written as PromQL (`result="error"`, `code=~"5.."`).
    pub fn series(&self, metric: &str, extra: &[&str]) -> String {
        let matchers: Vec<String> = self
            .matchers
            .iter()
            .map(|(label, value)| format!("{label}=\"{}\"", escape(value)))
            .chain(extra.iter().map(|m| (*m).to_owned()))
            .collect();
        if matchers.is_empty() {
            metric.to_owned()
        } else {
            format!("{metric}{{{}}}", matchers.join(","))
        }
    }
}

/// The metric names `expr` reads: each identifier that is not a function (followed by
/// `(`), a keyword, a label inside `{...}` or a grouping list (`by (...)`, `on (...)`),
/// a string or a number. Histogram series keep their suffix (`_bucket`); strip it to
/// compare with a metric's name.
///
/// ```
/// use rudder_manifests::promql::metric_names;
///
/// let names = metric_names(
///     r#"sum by (controller) (rate(controller_runtime_reconcile_total{result="error"}[5m]))
///        / on (controller) group_left sum by (controller) (rate(controller_runtime_reconcile_total[5m]))"#,
/// );
/// assert_eq!(names.into_iter().collect::<Vec<_>>(), ["controller_runtime_reconcile_total"]);
/// ```
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Set after a keyword whose parenthesised list holds labels, not series.
    let mut labels_follow = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '{' || c == '[' {
            let close = if c == '{' { '}' } else { ']' };
            while i < chars.len() && chars[i] != close {
                if chars[i] == '"' || chars[i] == '\'' || chars[i] == '`' {
                    i = skip_string(&chars, i);
                } else {
                    i += 1;
                }
            }
            i += 1;
        } else if c == '(' && labels_follow {
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            labels_follow = false;
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            // A number or a duration (`5m`, `1e-3`): its letters are not a name.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if LABEL_LISTS.contains(&word.as_str()) {
                labels_follow = true;
            } else if KEYWORDS.contains(&word.as_str()) || next == Some(&'(') {
                // A keyword, or a function or aggregation called here.
            } else {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Keywords after which a parenthesised list of labels comes.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Keywords that are not series: operators, modifiers, literals, and the aggregations,
/// which `by (...)` may separate from their `(`.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
    "Inf",
    "NaN",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

fn skip_string(chars: &[char], open: usize) -> usize {
    let quote = chars[open];
    let mut i = open + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' && quote != '`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// A label value as a PromQL double-quoted string holds it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The metric a series name belongs to: a histogram's `_bucket`, `_sum` and `_count`
/// series are its metric's.
pub fn metric_of(series: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| series.strip_suffix(suffix))
        .unwrap_or(series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_skip_functions_labels_strings_and_durations() {
        let names = metric_names(
            r#"histogram_quantile(0.99, sum without (pod) (rate(a_bucket{le!="x{y}"}[5m] offset 1h)))
               > on (job) group_left (name) b and bool c unless max by (le)(d:rate5m)
               or sum by (job) (e)"#,
        );
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["a_bucket", "b", "c", "d:rate5m", "e"]
        );
    }

    #[test]
    fn selector_escapes_values_and_keeps_extra_matchers_last() {
        let selector = Selector::new().matcher("job", r#"a"b"#);
        assert_eq!(
            selector.series("m", &[r#"code=~"5..""#]),
            r#"m{job="a\"b",code=~"5.."}"#
        );
    }

    #[test]
    fn histogram_series_belong_to_their_metric() {
        assert_eq!(metric_of("x_seconds_bucket"), "x_seconds");
        assert_eq!(metric_of("x_total"), "x_total");
    }
}
