//! The controller builder's call order, checked by the compiler with messages that name the
//! fix: every call but `for_` needs the primary type, and `for_` is called once.
//!
//! A builder without a primary type is a `ControllerBuilder<'_, ()>`. Its methods are
//! declared for every `K` and ask `K` for one of the marker traits below, which every
//! [`Typed`] type implements and `()` does not; so a call out of order fails on the marker's
//! `on_unimplemented` message ("call `.for_::<K>()` first: `owns` needs the controller's
//! primary type") instead of on the bounds of `Typed` that `()` lacks. There is one marker
//! per method because a message cannot name the method that asked for it.
//!
//! `#[diagnostic::do_not_recommend]` on the blanket impls keeps the compiler from reporting
//! the first bound of `Typed` that `()` misses (`(): Resource`) in place of the marker.

use rudder_cache::Typed;

/// Declares, for each method, a marker trait that the primary type's type parameter
/// must implement, with the message a call before `for_` gets.
macro_rules! after_for {
    ($($(#[$doc:meta])* $name:ident => $message:literal;)*) => {$(
        $(#[$doc])*
        #[diagnostic::on_unimplemented(
            message = $message,
            label = "this builder has no primary type yet",
            note = "a controller is declared with its primary type first: `.for_::<MyKind>()` right after `new_controller`"
        )]
        pub trait $name: Typed {}

        #[diagnostic::do_not_recommend]
        impl<K: Typed> $name for K {}
    )*};
}

after_for! {
    /// The primary type, for `owns`.
    OwnsAfterFor =>
        "call `.for_::<K>()` first: `owns` needs the controller's primary type";
    /// The primary type, for `owns_with`.
    OwnsWithAfterFor =>
        "call `.for_::<K>()` first: `owns_with` needs the controller's primary type";
    /// The primary type, for `owns_writes`.
    OwnsWritesAfterFor =>
        "call `.for_::<K>()` first: `owns_writes` needs the controller's primary type";
    /// The primary type, for `reads`.
    ReadsAfterFor =>
        "call `.for_::<K>()` first: `reads` comes after the controller's primary type";
    /// The primary type, for `permissions`.
    PermissionsAfterFor =>
        "call `.for_::<K>()` first: `permissions` comes after the controller's primary type";
    /// The primary type, for `watches_kind`.
    WatchesKindAfterFor =>
        "call `.for_::<K>()` first: `watches_kind` comes after the controller's primary type";
    /// The primary type, for
    /// `watches_kind_with`.
    WatchesKindWithAfterFor =>
        "call `.for_::<K>()` first: `watches_kind_with` comes after the controller's primary type";
    /// The primary type, for `watches`.
    WatchesAfterFor =>
        "call `.for_::<K>()` first: `watches` comes after the controller's primary type";
    /// The primary type, for `watches_with`.
    WatchesWithAfterFor =>
        "call `.for_::<K>()` first: `watches_with` comes after the controller's primary type";
    /// The primary type, for `watches_raw`.
    WatchesRawAfterFor =>
        "call `.for_::<K>()` first: `watches_raw` comes after the controller's primary type";
    /// The primary type, for `event_filter`.
    EventFilterAfterFor =>
        "call `.for_::<K>()` first: `event_filter` comes after the controller's primary type";
    /// The primary type, for `named`.
    NamedAfterFor =>
        "call `.for_::<K>()` first: `named` comes after the controller's primary type";
    /// The primary type, for `with_options`.
    WithOptionsAfterFor =>
        "call `.for_::<K>()` first: `with_options` comes after the controller's primary type";
    /// The primary type, for `sharded`, which shards
    /// its objects.
    ShardedAfterFor =>
        "call `.for_::<K>()` first: `sharded` needs the controller's primary type";
    /// The primary type, for `complete`.
    CompleteAfterFor =>
        "call `.for_::<K>()` before `complete`: a controller needs a primary type to reconcile";
    /// The primary type, for `complete_with`.
    CompleteWithAfterFor =>
        "call `.for_::<K>()` before `complete_with`: a controller needs a primary type to reconcile";
}

/// A builder that has no primary type yet, for `for_` and
/// `for_with`: a controller reconciles one type.
#[diagnostic::on_unimplemented(
    message = "the controller's primary type is already `{Self}`: call `for_` or `for_with` once",
    label = "this builder has a primary type",
    note = "a controller reconciles one type; watch others with `owns` or `watches_kind`"
)]
pub trait ForOnce {}

impl ForOnce for () {}
