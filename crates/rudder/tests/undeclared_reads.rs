//! Reads through a controller's client of types its RBAC may not cover, on a real API
//! server: a type no declaration covers is refused at once, with the declaration to add,
//! before any informer starts (even as an admin, who could read it); a declared type whose
//! RBAC the cluster lacks fails the waiting reconcile at once with the API server's refusal,
//! logged once however often the reconcile retries, and reads once the RBAC is granted; a
//! controller whose own watch is refused at start syncs and reconciles once it is granted.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use rudder::cache::writes::Cached;
use rudder::cache::{Error as CacheError, SyncError};
use rudder::client::ClientError;
use rudder::manager::rbac::Permissions;
use rudder::manifests::DeployOptions;
use rudder::prelude::*;
use rudder_envtest::TestNamespace;
use rudder_envtest::least_privilege::LogCapture;
use tokio::sync::mpsc;
use tokio::time::Instant;

mod support;

/// Everything logged (INFO and up), from before the first manager starts.
static LOG: LazyLock<&LogCapture> = LazyLock::new(LogCapture::global);

/// How long a reconcile may take to hear that its read is refused.
const AT_ONCE: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(30);

/// What one reconcile's read of the Secret named like its ConfigMap gave, and how long it
/// took.
type Seen = (Result<bool, ClientError>, Duration);

/// Reads the Secret of its ConfigMap's name through its client, and reports what it got;
/// a failed read fails the reconcile (retried with backoff) when `fail` is set.
struct ReadsSecrets {
    tools: Tools,
    seen: mpsc::UnboundedSender<Seen>,
    fail: bool,
}

impl Reconciler for ReadsSecrets {
    type Error = ClientError;

    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, ClientError> {
        let started = Instant::now();
        let read = self.tools.get::<Secret>(&request).await;
        let failed = read.as_ref().err().map(ToString::to_string);
        let _ = self
            .seen
            .send((read.map(|secret| secret.is_some()), started.elapsed()));
        match failed {
            Some(error) if self.fail => Err(ClientError::mutate(error)),
            _ => Ok(Action::done()),
        }
    }
}

/// A manager on `ns` acting as `client`, its controller reading Secrets; `declare` adds to
/// its builder (`reads`, `permissions`).
async fn operator(
    client: kube::Client,
    ns: &TestNamespace,
    name: &str,
    configure: impl FnOnce(rudder::manager::ManagerBuilder) -> rudder::manager::ManagerBuilder,
    declare: impl FnOnce(
        rudder::ControllerBuilder<'_, ConfigMap>,
    ) -> rudder::ControllerBuilder<'_, ConfigMap>,
    fail: bool,
) -> (Arc<Manager>, mpsc::UnboundedReceiver<Seen>) {
    let namespace = ns.name().to_owned();
    let builder = Manager::builder(client)
        .health_probe_address(None)
        .metrics_address(None)
        .cache(move |c| c.default_namespace(namespace));
    let manager = Arc::new(configure(builder).build().unwrap());
    let (seen, rx) = mpsc::unbounded_channel();
    declare(
        rudder::new_controller(&manager)
            .for_::<ConfigMap>()
            .named(name),
    )
    .complete_with(|tools| ReadsSecrets { tools, seen, fail })
    .await
    .unwrap();
    (manager, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a reconcile within the wait")
        .expect("the reconciler lives")
}

/// Secrets declared as a read without a watch of their own: the reconcile is the first to
/// wait for their informer.
fn declare(
    c: rudder::ControllerBuilder<'_, ConfigMap>,
) -> rudder::ControllerBuilder<'_, ConfigMap> {
    c.permissions(Permissions::new().informer::<Secret>())
}

async fn config_map(ns: &TestNamespace, name: &str) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_read_of_an_undeclared_type_fails_at_once_naming_the_declaration_to_add() {
    LazyLock::force(&LOG);
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("undeclared").await.unwrap();
    config_map(&ns, "a").await;

    // As the admin, who could read Secrets: refused all the same, before any informer.
    let (manager, mut seen) = operator(ns.client(), &ns, "undeclared", |m| m, |c| c, false).await;
    let running = support::start(&manager);
    let (read, took) = next(&mut seen).await;
    let Err(ClientError::Undeclared(undeclared)) = read else {
        panic!("an undeclared read: {read:?}");
    };
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(undeclared.kind, "Secret");
    let message = undeclared.to_string();
    assert!(message.contains(".reads::<Secret>()"), "{message}");
    assert!(
        matches!(
            manager.cache().cached::<Secret>(Some(ns.name()), "a"),
            Cached::NotCached
        ),
        "no informer of Secrets was started"
    );
    running.0.cancel();
    running.1.await.unwrap().unwrap();

    // Declared: read.
    let (manager, mut seen) = operator(
        ns.client(),
        &ns,
        "declared",
        |m| m,
        |c| c.reads::<Secret>(),
        false,
    )
    .await;
    let running = support::start(&manager);
    assert!(matches!(next(&mut seen).await.0, Ok(false)));
    running.0.cancel();
    running.1.await.unwrap().unwrap();

    // RBAC by hand: the check is off, and the read goes to the cache as it is.
    let (manager, mut seen) = operator(
        ns.client(),
        &ns,
        "by-hand",
        |m| m.require_declared_reads(false),
        |c| c,
        false,
    )
    .await;
    let running = support::start(&manager);
    assert!(matches!(next(&mut seen).await.0, Ok(false)));
    running.0.cancel();
    running.1.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_refused_read_fails_the_reconcile_at_once_logged_once_and_reads_once_granted() {
    LazyLock::force(&LOG);
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("refused-read").await.unwrap();
    let user = ns.service_account("operator").await.unwrap();

    // The Role rendered from the code, applied without its rule on Secrets (a cluster whose
    // RBAC fell behind the code).
    let rendered = {
        let offline = rudder::manifests::offline_client().unwrap();
        let manager = Manager::builder(offline)
            .health_probe_address(None)
            .metrics_address(None)
            .render_only(true)
            .cache({
                let namespace = ns.name().to_owned();
                move |c| c.default_namespace(namespace)
            })
            .build()
            .unwrap();
        let (seen, _) = mpsc::unbounded_channel();
        declare(
            rudder::new_controller(&manager)
                .for_::<ConfigMap>()
                .named("render"),
        )
        .complete_with(|tools| ReadsSecrets {
            tools,
            seen,
            fail: true,
        })
        .await
        .unwrap();
        rudder::manifests::manifests(
            &manager,
            &DeployOptions::new("refused", ns.name(), "unused")
                .service_account(user.name())
                .create_namespace(false),
        )
        .unwrap()
    };
    let [mut role]: [Role; 1] = rendered.rbac.roles.clone().try_into().unwrap();
    let [binding]: [RoleBinding; 1] = rendered.rbac.role_bindings.clone().try_into().unwrap();
    let rules = role.rules.clone().unwrap();
    let secrets = |rule: &PolicyRule| rule.resources.iter().flatten().any(|r| r == "secrets");
    assert!(
        rules.iter().any(secrets),
        "declared, so rendered: {rules:#?}"
    );
    // Secrets taken out of the rules that name them (with ConfigMaps, read the same way).
    let without: Vec<PolicyRule> = rules
        .iter()
        .filter_map(|rule| {
            let resources: Vec<String> = rule
                .resources
                .iter()
                .flatten()
                .filter(|r| *r != "secrets")
                .cloned()
                .collect();
            (!resources.is_empty()).then(|| PolicyRule {
                resources: Some(resources),
                ..rule.clone()
            })
        })
        .collect();
    role.rules = Some(without);
    let roles: Api<Role> = ns.api();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<RoleBinding> = ns.api();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    ns.wait_for_access(&user, "watch", "", "configmaps", true)
        .await
        .unwrap();
    config_map(&ns, "a").await;

    let registry = rudder::manager::metrics::prometheus().unwrap();
    let (manager, mut seen) = operator(user.client(), &ns, "refused", |m| m, declare, true).await;
    let running = support::start(&manager);
    // Every try fails at once with the API server's refusal, and is retried.
    for _ in 0..3 {
        let (read, took) = next(&mut seen).await;
        assert!(took < AT_ONCE, "{took:?}");
        let Err(ClientError::Cache(CacheError::Sync(SyncError::Refused { refusal, .. }))) = read
        else {
            panic!("a refused read: {read:?}");
        };
        assert_eq!(refusal.code, 403);
        assert!(refusal.message.contains("secrets"), "{refusal}");
    }
    // Logged once for all of them, by the cache alone (kube-runtime's watcher dumps nothing),
    // and counted.
    let refused: Vec<String> = LOG
        .lines_containing("refuses to list or watch")
        .into_iter()
        .filter(|line| line.contains(ns.name()))
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert!(refused[0].contains("forbidden"), "{refused:#?}");
    assert!(LOG.lines_containing("kube_runtime").is_empty());
    let page = registry.render();
    let refusals: f64 =
        rudder_envtest::metrics::samples(&page, "rudder_cache_watch_refusals_total")
            .into_iter()
            .filter(|(labels, _)| labels.contains(ns.name()) && labels.contains("secrets"))
            .map(|(_, value)| value)
            .sum();
    assert!(refusals >= 1.0, "{page}");

    // Granted: the informer the first read started syncs on its next try, and a reconcile
    // reads.
    role.rules = Some(rules);
    roles
        .patch(
            "refused",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "rules": role.rules })),
        )
        .await
        .unwrap();
    ns.wait_for_access(&user, "watch", "", "secrets", true)
        .await
        .unwrap();
    let [informer]: [_; 1] = manager
        .cache()
        .scopes::<Secret>()
        .iter()
        .map(|scope| manager.cache().informer::<Secret>(scope).unwrap())
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    informer.wait_until_allowed().await;
    informer
        .wait_for_sync(Duration::from_secs(60))
        .await
        .unwrap();
    let touch = serde_json::json!({ "data": { "touched": "yes" } });
    ns.api::<ConfigMap>()
        .patch("a", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        if matches!(next(&mut seen).await.0, Ok(false)) {
            break;
        }
        assert!(Instant::now() < deadline, "a read once granted");
    }
    running.0.cancel();
    running.1.await.unwrap().unwrap();
}

/// Counts its reconciles.
struct Counts(mpsc::UnboundedSender<Request>);

impl Reconciler for Counts {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let _ = self.0.send(request);
        Ok(Action::done())
    }
}

#[tokio::test]
async fn a_controller_whose_watch_is_refused_at_start_syncs_once_granted() {
    LazyLock::force(&LOG);
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("refused-watch").await.unwrap();
    let user = ns.service_account("operator").await.unwrap();
    config_map(&ns, "a").await;
    let namespace = ns.name().to_owned();
    let manager = Arc::new(
        Manager::builder(user.client())
            .health_probe_address(None)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    );
    let (reconciled, mut reconciles) = mpsc::unbounded_channel();
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .complete(Counts(reconciled))
        .await
        .unwrap();
    let running = support::start(&manager);
    // Its source's informer, refused (logged once): nothing is reconciled. (The test asks
    // the cache for it only then: an informer asked for before the manager's start would be
    // one its start waits for, and a refused one fails the start.)
    rudder_envtest::poll::until("the refusal logged", WAIT, || {
        LOG.lines_containing("refuses to list or watch")
            .iter()
            .any(|line| line.contains(ns.name()))
    })
    .await;
    let [informer]: [_; 1] = manager
        .cache()
        .scopes::<ConfigMap>()
        .iter()
        .map(|scope| manager.cache().informer::<ConfigMap>(scope).unwrap())
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    assert!(informer.refusal().is_some());
    assert!(reconciles.try_recv().is_err());

    // Granted (list and watch on ConfigMaps, as the rendered Role has them): the controller
    // syncs on the informer's next try, well within its sync timeout, and reconciles.
    let role = Role {
        metadata: ObjectMeta {
            name: Some("config-maps".to_owned()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".to_owned()]),
            verbs: vec!["list".to_owned(), "watch".to_owned()],
            ..PolicyRule::default()
        }]),
    };
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "config-maps" },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "config-maps",
        },
        "subjects": [{
            "kind": "ServiceAccount", "name": user.name(), "namespace": ns.name(),
        }],
    }))
    .unwrap();
    ns.api::<Role>()
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    ns.api::<RoleBinding>()
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    informer.wait_until_allowed().await;
    let request = tokio::time::timeout(Duration::from_secs(60), reconciles.recv())
        .await
        .expect("a reconcile once granted")
        .unwrap();
    assert_eq!(request.name(), "a");
    running.0.cancel();
    running.1.await.unwrap().unwrap();
}
