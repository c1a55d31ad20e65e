//! The predicates: which events reach the event handlers. The contract ([`Predicate`],
//! [`MetaPredicate`], [`Compose`] and its [`And`], [`Or`], [`Not`]) is rudder-core's
//! (their one public path).
//!
//! A predicate sees every event of a watch before its handler does and drops the ones it
//! returns `false` for. The built-ins follow controller-runtime's: each filters updates only
//! (creates, deletes and generic events pass), except [`LabelSelectorPredicate`], which
//! filters every event by the object's labels.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use kube::Resource;
use kube::core::{ObjectMeta, Selector, SelectorExt};
pub(crate) use rudder_core::{MetaEvent, MetaPredicate, Predicate};

use crate::Event;
use rudder_cache::writes::WriteTracker;
use rudder_core::writes::{ObjectRef, WriteObserver};

/// Lets an update through only if `changed(old, new)`; every other event passes.
fn update_only(event: MetaEvent<'_>, changed: impl Fn(&ObjectMeta, &ObjectMeta) -> bool) -> bool {
    match event {
        MetaEvent::Update { old, new } => changed(old, new),
        _ => true,
    }
}

macro_rules! update_predicate {
    ($(#[$doc:meta])* $name:ident, |$old:ident, $new:ident| $changed:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl MetaPredicate for $name {
            fn filter_meta(&self, event: MetaEvent<'_>) -> bool {
                update_only(event, |$old, $new| $changed)
            }
        }

        impl<K: Resource> Predicate<K> for $name {
            fn filter(&self, event: &Event<K>) -> bool {
                self.filter_meta(MetaEvent::of(event))
            }
        }
    };
}

update_predicate!(
    /// Lets an update through when `metadata.generation` changed: the spec changed, not only
    /// the status or metadata. Objects without a generation (ConfigMaps, for one) never pass
    /// an update, as in controller-runtime.
    GenerationChanged,
    |old, new| old.generation != new.generation
);

update_predicate!(
    /// Lets an update through when `metadata.resourceVersion` changed: drops resyncs.
    ResourceVersionChanged,
    |old, new| old.resource_version != new.resource_version
);

update_predicate!(
    /// Lets an update through when the labels changed.
    LabelChanged,
    |old, new| old.labels != new.labels
);

update_predicate!(
    /// Lets an update through when the annotations changed.
    AnnotationChanged,
    |old, new| old.annotations != new.annotations
);

/// Lets an event through when the object's labels match a selector (for an update, the new
/// object's).
#[derive(Clone, Debug)]
pub struct LabelSelectorPredicate {
    selector: Selector,
}

impl LabelSelectorPredicate {
    /// Filters by `selector`; build it from a `LabelSelector` with `try_into`, or from
    /// `(key, value)` pairs with `collect`.
    pub fn new(selector: Selector) -> Self {
        Self { selector }
    }
}

impl MetaPredicate for LabelSelectorPredicate {
    fn filter_meta(&self, event: MetaEvent<'_>) -> bool {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        self.selector
            .matches(event.meta().labels.as_ref().unwrap_or(&NONE))
    }
}

impl<K: Resource> Predicate<K> for LabelSelectorPredicate {
    fn filter(&self, event: &Event<K>) -> bool {
        self.filter_meta(MetaEvent::of(event))
    }
}

type WithFlag<K> = Option<Box<dyn Fn(&K, bool) -> bool + Send + Sync>>;
type OldNew<K> = Option<Box<dyn Fn(&K, &K) -> bool + Send + Sync>>;
type Plain<K> = Option<Box<dyn Fn(&K) -> bool + Send + Sync>>;

/// Per-event-kind closures; a kind without one passes.
pub struct Funcs<K> {
    create: WithFlag<K>,
    update: OldNew<K>,
    delete: WithFlag<K>,
    generic: Plain<K>,
    _kind: PhantomData<fn(&K)>,
}

impl<K> Default for Funcs<K> {
    fn default() -> Self {
        Self {
            create: None,
            update: None,
            delete: None,
            generic: None,
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Funcs<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Funcs").finish_non_exhaustive()
    }
}

impl<K> Funcs<K> {
    /// Every event passes until a closure says otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    /// Filters creates: `(object, initial_list)`.
    pub fn create(mut self, f: impl Fn(&K, bool) -> bool + Send + Sync + 'static) -> Self {
        self.create = Some(Box::new(f));
        self
    }

    /// Filters updates: `(old, new)`.
    pub fn update(mut self, f: impl Fn(&K, &K) -> bool + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Filters deletes: `(object, final_state_unknown)`.
    pub fn delete(mut self, f: impl Fn(&K, bool) -> bool + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }

    /// Filters generic events.
    pub fn generic(mut self, f: impl Fn(&K) -> bool + Send + Sync + 'static) -> Self {
        self.generic = Some(Box::new(f));
        self
    }
}

impl<K> Predicate<K> for Funcs<K> {
    fn filter(&self, event: &Event<K>) -> bool {
        match event {
            Event::Create {
                object,
                initial_list,
            } => self
                .create
                .as_ref()
                .is_none_or(|f| f(object, *initial_list)),
            Event::Update { old, new } => self.update.as_ref().is_none_or(|f| f(old, new)),
            Event::Delete {
                object,
                final_state_unknown,
            } => self
                .delete
                .as_ref()
                .is_none_or(|f| f(object, *final_state_unknown)),
            Event::Generic { object } => self.generic.as_ref().is_none_or(|f| f(object)),
        }
    }
}

/// Drops the events that are exactly the echo of a write `observer`'s reconciles made and the
/// cache's write tracker recorded: the create, update or delete event carrying the version
/// that write returned (or the deletion it made), once. Every other event passes: other
/// writers' changes, newer versions, the first list. (A resync of an object carrying the
/// very version this controller wrote, within the tracker's retention of that echo, is taken
/// for the echo if the echo itself was not.) What a controller with
/// `Options::filter_own_echoes` puts before its watches' other predicates, so that its own
/// status update does not queue a reconcile of its own.
pub struct DropOwnEchoes<K> {
    tracker: Arc<WriteTracker>,
    observer: Arc<dyn WriteObserver>,
    group: String,
    resource: String,
    _type: PhantomData<fn(&K)>,
}

impl<K: Resource<DynamicType = ()>> DropOwnEchoes<K> {
    /// Drops the echoes of `observer`'s writes that `tracker` (a cache's
    /// [`Cache::writes`](rudder_cache::Cache::writes)) recorded.
    pub fn new(tracker: Arc<WriteTracker>, observer: Arc<dyn WriteObserver>) -> Self {
        Self {
            tracker,
            observer,
            group: K::group(&()).into_owned(),
            resource: K::plural(&()).into_owned(),
            _type: PhantomData,
        }
    }

    fn is_echo(&self, object: &K, deleted: bool) -> bool {
        let meta = object.meta();
        let target = ObjectRef::new(
            self.group.as_str(),
            self.resource.as_str(),
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
        self.tracker.take_echo(
            &target,
            meta.resource_version.as_deref(),
            meta.uid.as_deref(),
            deleted,
            &self.observer,
        )
    }
}

impl<K> std::fmt::Debug for DropOwnEchoes<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropOwnEchoes")
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl<K: Resource<DynamicType = ()> + Send + Sync> Predicate<K> for DropOwnEchoes<K> {
    fn filter(&self, event: &Event<K>) -> bool {
        let echo = match event {
            Event::Create {
                object,
                initial_list: false,
            } => self.is_echo(object, false),
            Event::Update { new, .. } => self.is_echo(new, false),
            Event::Delete { object, .. } => self.is_echo(object, true),
            Event::Create { .. } | Event::Generic { .. } => false,
        };
        if echo {
            tracing::trace!(resource = %self.resource, "dropped the echo of this controller's own write");
        }
        !echo
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::ObjectMeta;
    use rudder_core::{And, MetaPredicates, Not, Or};

    use super::*;

    fn cm(generation: Option<i64>, rv: &str, labels: &[(&str, &str)]) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("cm".into()),
                namespace: Some("ns".into()),
                generation,
                resource_version: Some(rv.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }

    fn update(old: Arc<ConfigMap>, new: Arc<ConfigMap>) -> Event<ConfigMap> {
        Event::Update { old, new }
    }

    #[test]
    fn update_predicates_compare_the_right_field_and_pass_other_events() {
        let base = cm(Some(1), "10", &[("a", "1")]);
        let status_only = cm(Some(1), "11", &[("a", "1")]);
        let spec = cm(Some(2), "12", &[("a", "1")]);
        let relabelled = cm(Some(1), "13", &[("a", "2")]);
        let create = Event::Create {
            object: Arc::clone(&base),
            initial_list: false,
        };

        assert!(!GenerationChanged.filter(&update(base.clone(), status_only.clone())));
        assert!(GenerationChanged.filter(&update(base.clone(), spec)));
        assert!(GenerationChanged.filter(&create));
        assert!(!ResourceVersionChanged.filter(&update(base.clone(), base.clone())));
        assert!(ResourceVersionChanged.filter(&update(base.clone(), status_only.clone())));
        assert!(!LabelChanged.filter(&update(base.clone(), status_only)));
        assert!(LabelChanged.filter(&update(base.clone(), relabelled)));
        assert!(!AnnotationChanged.filter(&update(base.clone(), base)));
    }

    #[test]
    fn label_selector_and_combinators() {
        let selector: Selector = [("app", "web")].into_iter().collect();
        let web = Event::Create {
            object: cm(None, "1", &[("app", "web")]),
            initial_list: false,
        };
        let db = Event::Create {
            object: cm(None, "1", &[("app", "db")]),
            initial_list: false,
        };
        let p = LabelSelectorPredicate::new(selector);
        assert!(p.filter(&web));
        assert!(!p.filter(&db));
        assert!(!Not(p.clone()).filter(&web));
        assert!(Or(p.clone(), |_: &Event<ConfigMap>| true).filter(&db));
        assert!(!And(p, |_: &Event<ConfigMap>| true).filter(&db));
        let no_initial = Funcs::<ConfigMap>::new().create(|_, initial| !initial);
        assert!(no_initial.filter(&web));
        assert!(!no_initial.filter(&Event::Create {
            object: cm(None, "1", &[]),
            initial_list: true
        }));
    }

    #[test]
    fn meta_predicates_apply_to_any_type_and_all_must_pass() {
        let selector: Selector = [("app", "web")].into_iter().collect();
        let all = MetaPredicates::new(vec![
            Arc::new(LabelSelectorPredicate::new(selector)),
            Arc::new(ResourceVersionChanged),
        ]);
        let web = cm(Some(1), "1", &[("app", "web")]);
        let web_spec = cm(Some(2), "2", &[("app", "web")]);
        let db = cm(Some(1), "1", &[("app", "db")]);
        let secret = k8s_openapi::api::core::v1::Secret {
            metadata: web.metadata.clone(),
            ..Default::default()
        };
        assert!(!Predicate::<ConfigMap>::filter(
            &all,
            &update(web.clone(), web.clone())
        ));
        assert!(all.filter(&update(web.clone(), web_spec)));
        assert!(!all.filter(&Event::Generic { object: db }));
        assert!(all.filter(&Event::Delete {
            object: Arc::new(secret),
            final_state_unknown: true
        }));
        let no_initial = |e: MetaEvent<'_>| {
            !matches!(
                e,
                MetaEvent::Create {
                    initial_list: true,
                    ..
                }
            )
        };
        assert!(!no_initial.filter_meta(MetaEvent::of(&Event::Create {
            object: web,
            initial_list: true
        })));
        assert!(MetaPredicates::default().is_empty());
    }
}
