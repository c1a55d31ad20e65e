//! CA injection: keeps `caBundle` equal to the Secret's CA bundle in the named webhook
//! configurations (every webhook entry) and CRDs (webhook conversion), and puts it back when
//! someone overwrites it.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use rudder_cache::watch::{self as engine, Event};
use rudder_core::ErrorChain;
use rudder_core::backoff::Backoff;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{FIELD_MANAGER, InjectTargets};

/// The first wait after a failed or conflicting write; doubles (jittered) up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Webhooks,
    Crd,
}

struct Target {
    kind: Kind,
    label: &'static str,
    name: String,
    api: Api<DynamicObject>,
}

/// Runs until `cancel`: one field-selected watch per target; whenever a target or the
/// bundle changes and they differ, the target is read and replaced with the bundle
/// (carrying its resourceVersion, so a concurrent edit is never overwritten blindly);
/// conflicts and failures are retried with backoff.
pub(crate) async fn run(
    client: Client,
    targets: InjectTargets,
    mut bundle: watch::Receiver<Option<String>>,
    cancel: CancellationToken,
) {
    let targets = targets_of(&client, &targets);
    let mut events = watch_all(&targets);
    let mut due = Due::all(targets.len());
    loop {
        let want = bundle.borrow().as_deref().map(encode);
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = bundle.changed() => {
                if changed.is_err() {
                    return;
                }
                due = Due::all(targets.len());
            }
            Some((i, event)) = events.next() => due.observe(i, &targets[i], event, want.as_deref()),
            () = tokio::time::sleep_until(due.at), if !due.pending.is_empty() && want.is_some() => {
                let Some(want) = want else { continue };
                due.inject(&targets, &want).await;
            }
        }
    }
}

/// One [`Target`] per configured name, in the order mutating, validating, CRDs.
fn targets_of(client: &Client, targets: &InjectTargets) -> Vec<Target> {
    let mut all = Vec::new();
    for (kind, label, ar, names) in [
        (
            Kind::Webhooks,
            "MutatingWebhookConfiguration",
            ApiResource::erase::<MutatingWebhookConfiguration>(&()),
            &targets.mutating,
        ),
        (
            Kind::Webhooks,
            "ValidatingWebhookConfiguration",
            ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
            &targets.validating,
        ),
        (
            Kind::Crd,
            "CustomResourceDefinition",
            ApiResource::erase::<CustomResourceDefinition>(&()),
            &targets.crds,
        ),
    ] {
        for name in names {
            all.push(Target {
                kind,
                label,
                api: Api::all_with(client.clone(), &ar),
                name: name.clone(),
            });
        }
    }
    all
}

/// One target's watch item.
type Seen = Result<Event<DynamicObject>, engine::Error>;

/// The events of every target's field-selected watch, each with the target's index.
fn watch_all(targets: &[Target]) -> futures::stream::SelectAll<BoxStream<'static, (usize, Seen)>> {
    let streams: Vec<BoxStream<'static, _>> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let fields = format!("metadata.name={}", t.name);
            engine::watch(t.api.clone(), engine::Config::default().fields(&fields))
                .map(move |event| (i, event))
                .boxed()
        })
        .collect();
    futures::stream::select_all(streams)
}

/// Which targets are due an injection, when, and the backoff after failures.
struct Due {
    pending: BTreeSet<usize>,
    at: Instant,
    backoff: Backoff,
}

impl Due {
    /// Every one of `count` targets, due now.
    fn all(count: usize) -> Self {
        Self {
            pending: (0..count).collect(),
            at: Instant::now(),
            backoff: Backoff::new(BACKOFF_MIN, BACKOFF_MAX),
        }
    }

    /// Target `i` was seen: due now if its bundle differs from `want`.
    fn observe(&mut self, i: usize, target: &Target, event: Seen, want: Option<&str>) {
        match event {
            Ok(Event::Apply(object) | Event::InitApply(object)) => {
                let mut data = object.data;
                let differs = want.is_some_and(|want| set_bundle(target.kind, &mut data, want));
                if differs && self.pending.insert(i) {
                    tracing::info!(kind = target.label, name = %target.name, "caBundle differs from the Secret's; injecting");
                    self.at = self.at.min(Instant::now());
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(kind = target.label, name = %target.name, error = %ErrorChain(&error), "watch failed; retrying");
            }
        }
    }

    /// Injects `want` into every pending target; those that conflict or fail stay pending,
    /// due after the backoff, which doubles.
    async fn inject(&mut self, targets: &[Target], want: &str) {
        let mut failed = false;
        let mut failures = Vec::new();
        for i in std::mem::take(&mut self.pending) {
            let target = &targets[i];
            match inject(target, want).await {
                Ok(true) => {
                    tracing::info!(kind = target.label, name = %target.name, "injected the CA bundle");
                }
                Ok(false) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    tracing::debug!(kind = target.label, name = %target.name, "conflict injecting the CA bundle; retrying");
                    self.pending.insert(i);
                    failed = true;
                }
                Err(error) => {
                    failures.push((target, error));
                    self.pending.insert(i);
                    failed = true;
                }
            }
        }
        if failed {
            let wait = self.backoff.next_delay();
            for (target, error) in failures {
                tracing::warn!(kind = target.label, name = %target.name, error = %ErrorChain(&error), retry_in = ?wait, "cannot inject the CA bundle; retrying");
            }
            self.at = Instant::now() + wait;
        } else {
            self.backoff.reset();
        }
    }
}

/// Reads the target and writes `want` into it if it differs: `Ok(true)` if it wrote,
/// `Ok(false)` if it was right already or does not exist (its watch reports a creation).
async fn inject(target: &Target, want: &str) -> kube::Result<bool> {
    let Some(mut object) = target.api.get_opt(&target.name).await? else {
        return Ok(false);
    };
    if !set_bundle(target.kind, &mut object.data, want) {
        return Ok(false);
    }
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    // The object as read, with its resourceVersion: a concurrent change is a conflict,
    // retried, never silently undone.
    target.api.replace(&target.name, &params, &object).await?;
    Ok(true)
}

/// The JSON form of a `caBundle`: the PEM, base64-encoded.
fn encode(pem: &str) -> String {
    match serde_json::to_value(ByteString(pem.as_bytes().to_vec())) {
        Ok(Value::String(encoded)) => encoded,
        // ByteString always serializes as a string.
        _ => String::new(),
    }
}

/// Sets `caBundle` to `want` wherever `kind` keeps it in `data` (the object without its
/// metadata); whether anything changed.
fn set_bundle(kind: Kind, data: &mut Value, want: &str) -> bool {
    let mut changed = false;
    let mut set = |client_config: &mut Value| {
        if let Some(config) = client_config.as_object_mut()
            && config.get("caBundle").and_then(Value::as_str) != Some(want)
        {
            config.insert("caBundle".to_owned(), Value::String(want.to_owned()));
            changed = true;
        }
    };
    match kind {
        Kind::Webhooks => {
            if let Some(webhooks) = data.get_mut("webhooks").and_then(Value::as_array_mut) {
                for webhook in webhooks {
                    if let Some(client_config) = webhook.get_mut("clientConfig") {
                        set(client_config);
                    }
                }
            }
        }
        Kind::Crd => {
            let conversion = data.pointer_mut("/spec/conversion");
            let webhook = conversion
                .filter(|c| c.get("strategy").and_then(Value::as_str) == Some("Webhook"))
                .and_then(|c| c.pointer_mut("/webhook/clientConfig"));
            if let Some(client_config) = webhook {
                set(client_config);
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn every_webhook_entry_gets_the_bundle() {
        let mut data = json!({"webhooks": [
            {"name": "a", "clientConfig": {"url": "https://x/a"}},
            {"name": "b", "clientConfig": {"service": {"name": "s", "namespace": "n"}, "caBundle": "b2xk"}},
        ]});
        assert!(set_bundle(Kind::Webhooks, &mut data, "bmV3"));
        assert_eq!(data["webhooks"][0]["clientConfig"]["caBundle"], "bmV3");
        assert_eq!(data["webhooks"][1]["clientConfig"]["caBundle"], "bmV3");
        assert_eq!(data["webhooks"][1]["clientConfig"]["service"]["name"], "s");
        assert!(!set_bundle(Kind::Webhooks, &mut data, "bmV3"));
    }

    #[test]
    fn only_webhook_conversion_gets_the_bundle() {
        let mut none = json!({"spec": {"conversion": {"strategy": "None"}}});
        assert!(!set_bundle(Kind::Crd, &mut none, "bmV3"));
        let mut webhook = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "https://x/convert"}, "conversionReviewVersions": ["v1"]}}}});
        assert!(set_bundle(Kind::Crd, &mut webhook, "bmV3"));
        assert_eq!(
            webhook.pointer("/spec/conversion/webhook/clientConfig/caBundle"),
            Some(&json!("bmV3"))
        );
        assert!(!set_bundle(Kind::Crd, &mut webhook, "bmV3"));
    }

    #[test]
    fn bundles_are_base64_of_the_pem() {
        assert_eq!(encode("CA"), "Q0E=");
    }
}
