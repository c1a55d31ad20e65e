//! The two requests the engine makes, with every parameter its own: a watch (a streaming list
//! or a resumed watch) and a page of a list.

use http::header::ACCEPT;
use kube::api::ListParams;

use super::config::Config;

/// What a metadata-only watch asks for: each object as a `PartialObjectMetadata`.
const METADATA_WATCH: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// A watch of `url`: from `resource_version`, or, without one, a consistent streaming list
/// (`sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan` and no `resourceVersion`:
/// the initial events are the most recent state, read after the server's cache has caught up
/// with the latest write). Bookmarks are always asked for: the end of the initial events is
/// one, and each moves the point a dropped watch resumes from.
pub(crate) fn watch(
    url: &str,
    config: &Config,
    resource_version: Option<&str>,
    metadata: bool,
) -> Result<http::Request<Vec<u8>>, http::Error> {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("watch", "true");
    query.append_pair("timeoutSeconds", &config.timeout.to_string());
    query.append_pair("allowWatchBookmarks", "true");
    if let Some(labels) = &config.labels {
        query.append_pair("labelSelector", labels);
    }
    if let Some(fields) = &config.fields {
        query.append_pair("fieldSelector", fields);
    }
    match resource_version {
        Some(version) => {
            query.append_pair("resourceVersion", version);
        }
        None => {
            query.append_pair("sendInitialEvents", "true");
            query.append_pair("resourceVersionMatch", "NotOlderThan");
        }
    }
    let mut request = http::Request::get(format!("{url}?{}", query.finish()));
    if metadata {
        request = request.header(ACCEPT, METADATA_WATCH);
    }
    request.body(Vec::new())
}

/// A page of a consistent paginated list: no `resourceVersion` (the most recent state, read
/// from etcd), `limit` objects a page, from `continue_token` after the first page.
pub(crate) fn list_page(config: &Config, continue_token: Option<String>) -> ListParams {
    let mut params = ListParams::default().limit(config.page_size);
    params.label_selector.clone_from(&config.labels);
    params.field_selector.clone_from(&config.fields);
    params.continue_token = continue_token;
    params
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_streaming_list_asks_for_the_most_recent_state_and_a_resume_for_its_version() {
        let config = Config::default().labels("app=web");
        let streaming = watch("/api/v1/namespaces/ns/configmaps", &config, None, false).unwrap();
        assert_eq!(
            streaming.uri().to_string(),
            "/api/v1/namespaces/ns/configmaps?watch=true&timeoutSeconds=290&allowWatchBookmarks=true\
             &labelSelector=app%3Dweb&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        );
        assert!(streaming.headers().get(ACCEPT).is_none());
        let resumed = watch("/api/v1/configmaps", &config, Some("42"), true).unwrap();
        assert_eq!(
            resumed.uri().to_string(),
            "/api/v1/configmaps?watch=true&timeoutSeconds=290&allowWatchBookmarks=true\
             &labelSelector=app%3Dweb&resourceVersion=42"
        );
        assert_eq!(resumed.headers()[ACCEPT], METADATA_WATCH);
    }

    #[test]
    fn a_list_page_reads_the_latest_state() {
        let params = list_page(
            &Config::default().fields("metadata.name=a"),
            Some("t".into()),
        );
        assert_eq!(params.limit, Some(500));
        assert_eq!(params.resource_version, None);
        assert_eq!(params.version_match, None);
        assert_eq!(params.continue_token.as_deref(), Some("t"));
        assert_eq!(params.field_selector.as_deref(), Some("metadata.name=a"));
    }
}
