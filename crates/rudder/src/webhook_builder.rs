//! [`WebhookBuilder`]: declare a type's admission and conversion webhooks on a manager, like
//! controller-runtime's `NewWebhookManagedBy(mgr).For(..).WithDefaulter(..).Complete()`.

use std::marker::PhantomData;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use rudder_cache::Typed;
use rudder_manager::Manager;
use rudder_webhook::admission::{Defaulter, Validator};
use rudder_webhook::manifest::{ClientConfig, Registration, set_crd_conversion};
use rudder_webhook::{
    KindConversion, RegisterError, Webhook, WebhookServer, mutate_path, validate_path,
};
use serde::Serialize;

use crate::{Error, Result};

/// Declares webhooks for a type on `manager`'s webhook server: call
/// [`for_`](WebhookBuilder::for_) with the type, then add a defaulter, a validator or a
/// conversion, then [`complete`](WebhookBuilder::complete).
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::core::DynamicObject;
/// use kube::core::admission::AdmissionRequest;
/// use rudder::webhook::admission::{Defaulter, Denial, Warnings};
/// use rudder::prelude::*;
///
/// struct Labelled;
///
/// impl Defaulter<ConfigMap> for Labelled {
///     async fn default(
///         &self,
///         cm: &mut ConfigMap,
///         _: &AdmissionRequest<DynamicObject>,
///     ) -> Result<Warnings, Denial> {
///         let labels = cm.metadata.labels.get_or_insert_default();
///         labels.entry("managed".into()).or_insert_with(|| "yes".into());
///         Ok(Vec::new())
///     }
/// }
///
/// # fn demo(manager: &Manager) -> Result<(), rudder::Error> {
/// rudder::new_webhook(manager)
///     .for_::<ConfigMap>()
///     .defaulter(Labelled)
///     .complete()?;
/// # Ok(())
/// # }
/// ```
pub fn new_webhook(manager: &Manager) -> WebhookBuilder<'_, ()> {
    WebhookBuilder {
        manager,
        steps: Vec::new(),
        _kind: PhantomData,
    }
}

/// One registration waiting for `complete`.
type Step = Box<dyn FnOnce(&WebhookServer) -> std::result::Result<Registration, RegisterError>>;

/// Webhooks being declared for `K` (set by [`for_`](Self::for_)).
pub struct WebhookBuilder<'m, K> {
    manager: &'m Manager,
    steps: Vec<Step>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for WebhookBuilder<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookBuilder")
            .field("kind", &std::any::type_name::<K>())
            .field("webhooks", &self.steps.len())
            .finish_non_exhaustive()
    }
}

impl<'m> WebhookBuilder<'m, ()> {
    /// The type the webhooks are for.
    pub fn for_<K: Typed + Serialize>(self) -> WebhookBuilder<'m, K> {
        WebhookBuilder {
            manager: self.manager,
            steps: self.steps,
            _kind: PhantomData,
        }
    }
}

impl<K: Typed + Serialize> WebhookBuilder<'_, K> {
    /// A defaulting (mutating) webhook at controller-runtime's path
    /// (`/mutate-<group>-<version>-<kind>`), called on create and update: `defaulter`
    /// changes the object, and the API server gets a JSON patch that never removes fields
    /// `K` does not know.
    pub fn defaulter(mut self, defaulter: impl Defaulter<K>) -> Self {
        self.steps.push(Box::new(move |server| {
            server.register(mutate_path::<K>(), Webhook::defaulter(defaulter))?;
            Ok(Registration::mutating::<K>())
        }));
        self
    }

    /// A validating webhook at controller-runtime's path
    /// (`/validate-<group>-<version>-<kind>`), called on create and update.
    pub fn validator(self, validator: impl Validator<K>) -> Self {
        self.validator_of(validator, false)
    }

    /// [`validator`](Self::validator), also called on delete.
    pub fn validator_with_deletes(self, validator: impl Validator<K>) -> Self {
        self.validator_of(validator, true)
    }

    fn validator_of(mut self, validator: impl Validator<K>, deletes: bool) -> Self {
        self.steps.push(Box::new(move |server| {
            server.register(validate_path::<K>(), Webhook::validator(validator))?;
            Ok(Registration::validating::<K>(deletes))
        }));
        self
    }

    /// The conversion webhook for `K`'s kind, at `/convert`: `conversion` converts every
    /// version to and from its hub; `crd` is the kind's CustomResourceDefinition, whose
    /// served versions must all be covered.
    pub fn conversion<H: 'static>(
        mut self,
        conversion: KindConversion<H>,
        crd: &CustomResourceDefinition,
    ) -> Self {
        let crd = crd.clone();
        self.steps.push(Box::new(move |server| {
            server.register_conversion_for_crd(conversion, &crd)?;
            Ok(Registration::conversion::<K>())
        }));
        self
    }

    /// Registers the webhooks on the manager's webhook server (which then starts with the
    /// manager) and records them for [`webhook_manifests`].
    ///
    /// # Errors
    ///
    /// [`Error::Webhook`]: a path already taken (webhooks declared twice for a type), or a
    /// conversion that does not cover every served version. Webhooks registered before the
    /// failing one stay registered.
    pub fn complete(self) -> Result<()> {
        let server = self.manager.webhook_server();
        for step in self.steps {
            let registration = step(server).map_err(Error::Webhook)?;
            self.manager.record_webhook(registration);
        }
        Ok(())
    }
}

/// The objects the cluster needs for `manager`'s webhooks, as registered with
/// [`new_webhook`]: the `MutatingWebhookConfiguration` and
/// `ValidatingWebhookConfiguration` named `name` (when there are such webhooks), pointing
/// at `client` (the operator's Service, or a URL), and `crds` with their conversion set to
/// the webhook where one is registered for their kind. An operator prints them next to its
/// CRDs (`kubectl apply -f -`).
pub fn webhook_manifests(
    manager: &Manager,
    name: &str,
    client: &ClientConfig,
    crds: &mut [CustomResourceDefinition],
) -> WebhookManifests {
    let registrations = manager.webhook_registrations();
    for crd in crds.iter_mut() {
        set_crd_conversion(crd, &registrations, client);
    }
    WebhookManifests {
        mutating: rudder_webhook::manifest::mutating_configuration(name, &registrations, client),
        validating: rudder_webhook::manifest::validating_configuration(
            name,
            &registrations,
            client,
        ),
    }
}

pub use rudder_manifests::deploy::WebhookManifests;
