//! [`Tools`]: what a reconciler works with, handed over by the builder.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube_runtime::events::{Event, EventType, Recorder, Reporter};
use rudder_cache::{Cache, Typed};
use rudder_core::Request;
use rudder_manager::Manager;

use rudder_client::{Client, ClientError};

use crate::declaration::Member;

/// A reconciler's tools: the typed [`Client`] (reads from the manager's shared cache,
/// writes to the API server), and an event recorder that reports as the controller.
/// The controller builders' `complete_with` (`rudder::ControllerBuilder::complete_with`, and
/// the fleet's) hands them
/// to the function that makes the reconciler, so nothing has to be threaded through by
/// hand. Cloning is cheap: every part is shared.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use rudder::events::EventType;
/// use rudder::prelude::*;
///
/// struct Audit(rudder::Tools);
///
/// impl Reconciler for Audit {
///     type Error = rudder::client::ClientError;
///
///     async fn reconcile(&self, request: Request, _ctx: Context) -> Result<Action, Self::Error> {
///         // A read from the shared cache: no request to the API server.
///         let Some(cm) = self.0.client().get::<ConfigMap>(&request).await? else {
///             return Ok(Action::done());
///         };
///         let keys = cm.data.as_ref().map_or(0, |d| d.len());
///         // An Event is a courtesy: a failure to record it is logged, not returned.
///         self.0.record(&*cm, EventType::Normal, "Seen", format!("{keys} keys")).await;
///         Ok(Action::done())
///     }
/// }
///
/// # async fn demo(manager: &Manager) -> Result<(), rudder::Error> {
/// rudder::new_controller(manager)
///     .for_::<ConfigMap>()
///     .complete_with(Audit)
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Tools {
    client: Client,
    recorder: Recorder,
    controller: Arc<str>,
    cluster: Option<Arc<str>>,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools")
            .field("controller", &self.controller)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Tools {
    /// Tools from `manager` for the controller named `controller`, which is the event
    /// reporter's name (controller-runtime's `GetEventRecorderFor`), with `$HOSTNAME` as its
    /// instance, and the client's field manager for server-side applies. The client refuses
    /// reads of types the manager's RBAC does not cover ([`Manager::declared_reads`]).
    pub fn new(manager: &Manager, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        let mut client = Client::new(
            manager.client().clone(),
            manager.cache().clone(),
            controller,
        );
        if let Some(declared) = manager.declared_reads() {
            client = client.with_declared_reads(declared);
        }
        Self {
            client,
            recorder: Recorder::new(manager.client().clone(), reporter),
            controller: controller.into(),
            cluster: None,
        }
    }

    /// Tools for the controller named `controller` serving the member cluster `cluster` of a
    /// fleet (rudder-fleet's `Cluster`): the typed client reads that cluster's cache and writes
    /// to its API server; the event recorder writes with `events` (the home cluster's client
    /// by default, the member's with `FleetBuilder::events_in_members`). A member's reads are
    /// not checked against the declarations
    /// ([`Manager::declared_reads`] answers for the manager's cache, not a member's).
    pub fn for_cluster(cluster: &impl Member, events: &kube::Client, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Self {
            client: Client::new(
                Member::kube(cluster).clone(),
                Member::cache(cluster).clone(),
                controller,
            ),
            recorder: Recorder::new(events.clone(), reporter),
            controller: controller.into(),
            cluster: Some(Member::name(cluster).into()),
        }
    }

    /// The member cluster these tools serve, for a fleet's controller; `None` otherwise.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// The typed client: reads from the shared cache, writes to the API server.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The underlying kube client, for requests the typed client does not cover.
    pub fn kube(&self) -> &kube::Client {
        self.client.kube()
    }

    /// The manager's shared cache: reads from it cost no request to the API server.
    pub fn cache(&self) -> &Cache {
        self.client.cache()
    }

    /// The event recorder, reporting as the controller.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The controller's name.
    pub fn controller(&self) -> &str {
        &self.controller
    }

    /// The object `request` names, from the cache; the same as
    /// [`Client::get`].
    ///
    /// # Errors
    ///
    /// As [`Client::get`]: the cache's (the type's informer
    /// could not be made or was refused, or the namespace is not cached), or
    /// [`ClientError::Undeclared`] for a type no declaration covers.
    pub async fn get<K: Typed>(&self, request: &Request) -> Result<Option<Arc<K>>, ClientError> {
        self.client.get::<K>(request).await
    }

    /// Records an Event of `type_` about `object` with `reason` (also its action) and
    /// `note`. A failure is logged at `warn`, not returned: an Event is a courtesy, not
    /// worth a retry. Use [`publish`](Self::publish) to handle the failure yourself.
    pub async fn record<K>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        note: impl Into<String>,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.into()),
            action: reason.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.publish(object, &event).await {
            tracing::warn!(%error, reason, "cannot record an event");
        }
    }

    /// Records `event` about `object` (a Kubernetes Event, seen in `kubectl describe`).
    ///
    /// Repeats are folded as kube-runtime's recorder folds them: an event with the same
    /// object, type, reason, action and reporter as one recorded within the last 6 minutes
    /// becomes a count on that one (an events.k8s.io series), which keeps the *first*
    /// `note`. Give each kind of change its own `reason` when the notes matter.
    ///
    /// # Errors
    ///
    /// The API server's, if it refused the Event.
    pub async fn publish<K>(&self, object: &K, event: &Event) -> Result<(), kube::Error>
    where
        K: Resource<DynamicType = ()>,
    {
        let reference: ObjectReference = object.object_ref(&());
        self.recorder.publish(event, &reference).await
    }
}
