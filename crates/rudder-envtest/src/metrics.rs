//! Reading a Prometheus text page (what a `/metrics` endpoint or a recorder's `render()`
//! gives) in tests: the samples of one metric, and one series' value.
//!
//! This reads what exporters write, one sample a line (`name{labels} value`), and skips
//! comments; it is no full parser of the exposition format (no escapes in label values
//! containing `} `, no timestamps).

/// The samples of `name` in `page`: each one's label text (what stands between the braces,
/// empty for a sample without labels) and its value. Lines of other metrics, including
/// those whose name only starts with `name` (`name_total` for `name`), are not samples of it.
///
/// ```
/// let page = "# TYPE requests_total counter\n\
///             requests_total{code=\"200\"} 3\n\
///             requests_total{code=\"500\"} 1\n\
///             requests_total_created 17\n";
/// let samples = rudder_envtest::metrics::samples(page, "requests_total");
/// assert_eq!(samples, [("code=\"200\"", 3.0), ("code=\"500\"", 1.0)]);
/// ```
pub fn samples<'p>(page: &'p str, name: &str) -> Vec<(&'p str, f64)> {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(rest) => rest.rsplit_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels, value.trim().parse().ok()?))
        })
        .collect()
}

/// The value of the series `name{labels}`, `labels` written exactly as the page has them
/// (empty for none); `None` when the page has no such series.
///
/// ```
/// let page = "rest_client_requests_total{code=\"200\",method=\"GET\"} 12\n";
/// let get = rudder_envtest::metrics::value(page, "rest_client_requests_total", r#"code="200",method="GET""#);
/// assert_eq!(get, Some(12.0));
/// ```
pub fn value(page: &str, name: &str, labels: &str) -> Option<f64> {
    samples(page, name)
        .into_iter()
        .find_map(|(have, value)| (have == labels).then_some(value))
}

/// Whether a sample's label text has `label="value"`.
///
/// ```
/// assert!(rudder_envtest::metrics::has_label(r#"code="403",verb="get""#, "code", "403"));
/// ```
pub fn has_label(labels: &str, label: &str, value: &str) -> bool {
    labels
        .split(',')
        .any(|pair| pair.trim() == format!("{label}=\"{value}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "\
# HELP up Whether it is up.
# TYPE up gauge
up 1
workqueue_depth{name=\"a\",controller=\"a\"} 4
workqueue_depth{name=\"b\",controller=\"b\"} 0
workqueue_depth_max 9
";

    #[test]
    fn finds_samples_with_and_without_labels_and_no_longer_names() {
        assert_eq!(samples(PAGE, "up"), [("", 1.0)]);
        assert_eq!(samples(PAGE, "workqueue_depth").len(), 2);
        assert_eq!(
            value(PAGE, "workqueue_depth", r#"name="a",controller="a""#),
            Some(4.0)
        );
        assert_eq!(
            value(PAGE, "workqueue_depth", r#"name="c",controller="c""#),
            None
        );
        assert_eq!(value(PAGE, "workqueue_depth_max", ""), Some(9.0));
        assert_eq!(value(PAGE, "absent", ""), None);
    }

    #[test]
    fn has_label_matches_whole_pairs_only() {
        let labels = r#"name="a",controller="ab""#;
        assert!(has_label(labels, "controller", "ab"));
        assert!(!has_label(labels, "controller", "a"));
        assert!(!has_label(labels, "name", "ab"));
    }
}
