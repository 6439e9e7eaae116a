//! The toolkit for writing an Open Cluster Management rollout plugin: a
//! gRPC server of `ocm.rolloutplugin.v1alpha1.RolloutPluginService` that the
//! ManifestWorkReplicaSet controller (through the rollout gateway) calls at
//! each phase of a multi-cluster rollout.
//!
//! Implement [`RolloutPlugin`] (one `async fn` per hook, each with a neutral
//! default, so a plugin writes only the hooks it cares about and declares
//! them in [`PluginInfo`]), then [`serve`] it: a tonic server with
//! `grpc.health.v1.Health`, optional TLS and mutual TLS, and a graceful
//! drain on SIGTERM or Ctrl-C. [`ManifestWork`] reads and patches the
//! ManifestWork JSON that `MutateManifestWork` carries, and
//! [`RolloutRequestExt`] reads a request's cluster position and its
//! per-rollout configuration, typed by the plugin
//! ([`RolloutRequestExt::plugin_config`]). With the `cli`
//! feature, `cli::TlsArgs` gives the usual `--tls-cert/--tls-key/--client-ca`
//! flags; [`testing`] starts a plugin on `127.0.0.1:0` and connects a
//! client, for tests, and with the `test-certs` feature `test_certs` makes a
//! CA and certificates for TLS tests.
//!
//! ```no_run
//! use rollout_plugin_sdk::prelude::*;
//!
//! struct Hello;
//!
//! impl RolloutPlugin for Hello {
//!     fn info(&self) -> PluginInfo {
//!         PluginInfo::new("hello", "0.1.0").hooks([Hook::MutateManifestWork])
//!     }
//!
//!     async fn mutate_manifest_work(
//!         &self,
//!         request: RolloutPluginRequest,
//!         mut work: ManifestWork,
//!     ) -> Result<Mutation, PluginError> {
//!         for mut manifest in work.manifests_mut() {
//!             manifest.set_annotation("example.com/cluster", request.cluster_name.as_str())?;
//!         }
//!         Ok(Mutation::Changed(work))
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let addr = "127.0.0.1:7000".parse()?;
//!     rollout_plugin_sdk::serve(Hello, addr, ServeOptions::default()).await?;
//!     Ok(())
//! }
//! ```
//!
//! docs/plugin-guide.md walks through a whole plugin (`sdk/examples/minimal.rs`).

#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]
// A `pub` item must be reachable from the crate root; anything else is
// `pub(crate)`.
#![warn(unreachable_pub)]

#[cfg(feature = "cli")]
pub mod cli;
mod error;
mod plugin;
mod request;
mod server;
mod service;
#[cfg(feature = "test-certs")]
pub mod test_certs;
pub mod testing;
mod tls;
pub mod work;

pub use error::{PluginError, ServeError};
pub use plugin::{Mutation, PluginInfo, RolloutPlugin, Validation};
pub use request::{ClusterPosition, PluginConfigError, RolloutRequestExt};
pub use server::{
    Bound, DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES, Running, ServeOptions, TlsOptions,
    bind, serve, shutdown_signal,
};
pub use service::PluginService;
pub use tls::TlsConfigError;
pub use work::{Manifest, ManifestMut, ManifestWork, WorkError};

/// `ocm.rolloutplugin.v1alpha1.RolloutPluginService`, the name health
/// reports the plugin under.
pub use rollout_proto::SERVICE_NAME;
/// The generated plugin API (messages, client, server trait), re-exported.
pub use rollout_proto::v1alpha1 as proto;
/// The tonic version the SDK builds on (for `Status`, `Code`, clients).
pub use tonic;
/// The health service's status and reporter, re-exported for
/// [`Bound::health`].
pub use tonic_health::{ServingStatus, server::HealthReporter};

/// What a plugin usually needs, in one `use`.
pub mod prelude {
    pub use crate::proto::{
        Hook, InitializeRequest, RolloutPluginRequest, RolloutStateDetail, ValidationResult,
    };
    pub use crate::{
        ClusterPosition, ManifestWork, Mutation, PluginConfigError, PluginError, PluginInfo,
        RolloutPlugin, RolloutRequestExt, ServeError, ServeOptions, TlsOptions, Validation,
    };
}
