//! [`Tools`]: what a reconciler works with, handed over by the builder.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Client, Resource};
use kube_runtime::events::{Event, Recorder, Reporter};
use rudder_cache::{Cache, Typed};
use rudder_handler::Request;
use rudder_manager::Manager;

/// A reconciler's tools: the manager's client and shared cache, and an event recorder that
/// reports as the controller. [`ControllerBuilder::complete_with`](crate::ControllerBuilder::complete_with)
/// hands them to the function that makes the reconciler, so nothing has to be threaded
/// through by hand. Cloning is cheap: every part is shared.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube_runtime::events::{Event, EventType};
/// use rudder::prelude::*;
///
/// struct Audit(rudder::Tools);
///
/// impl Reconciler for Audit {
///     type Error = rudder::cache::Error;
///
///     async fn reconcile(&self, request: Request, _ctx: Context) -> Result<Action, Self::Error> {
///         // A read from the shared cache: no request to the API server.
///         let Some(cm) = self.0.get::<ConfigMap>(&request).await? else {
///             return Ok(Action::done());
///         };
///         let event = Event {
///             type_: EventType::Normal,
///             reason: "Seen".into(),
///             note: Some(format!("{} keys", cm.data.as_ref().map_or(0, |d| d.len()))),
///             action: "Audit".into(),
///             secondary: None,
///         };
///         // Failing to record an event is not worth a retry.
///         let _ = self.0.publish(&*cm, &event).await;
///         Ok(Action::done())
///     }
/// }
///
/// # async fn demo(manager: &Manager) -> Result<(), rudder::Error> {
/// rudder::controller(manager)
///     .for_::<ConfigMap>()
///     .complete_with(Audit)
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Tools {
    client: Client,
    cache: Cache,
    recorder: Recorder,
    controller: Arc<str>,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl Tools {
    /// Tools from `manager` for the controller named `controller`, which is the event
    /// reporter's name (controller-runtime's `GetEventRecorderFor`), with `$HOSTNAME` as its
    /// instance.
    pub fn new(manager: &Manager, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Self {
            client: manager.client().clone(),
            cache: manager.cache().clone(),
            recorder: Recorder::new(manager.client().clone(), reporter),
            controller: controller.into(),
        }
    }

    /// The client, for writes and for reads that must not come from the cache.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The manager's shared cache: reads from it cost no request to the API server.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The event recorder, reporting as the controller.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The controller's name.
    pub fn controller(&self) -> &str {
        &self.controller
    }

    /// The object `request` names, from the cache (`None` if it does not exist, as far as
    /// the cache has seen).
    ///
    /// # Errors
    ///
    /// The cache's: the type's informer could not be made, or the namespace is not cached.
    pub async fn get<K: Typed>(
        &self,
        request: &Request,
    ) -> Result<Option<Arc<K>>, rudder_cache::Error> {
        self.cache
            .get::<K>(request.namespace(), request.name())
            .await
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
