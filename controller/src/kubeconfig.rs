//! A person's command on the hub (`get`, `dashboard`, the control verbs):
//! [`connect`] makes its client as the command line names a kubeconfig, and
//! [`NotFound`] says the ManifestWorkReplicaSet it names is not there.

use std::path::{Path, PathBuf};

use kube::Client;
use thiserror::Error;

/// Why no client could be made.
#[derive(Debug, Error)]
pub enum ConnectError {
    /// No client configuration (kubeconfig, in-cluster) could be read.
    #[error("no Kubernetes client configuration: {source}")]
    Config {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The kubeconfig file could not be read.
    #[error("no Kubernetes client configuration: reading {}: {source}", path.display())]
    KubeconfigRead {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig file does not make a client configuration.
    #[error("no Kubernetes client configuration: {}: {source}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
}

/// The ManifestWorkReplicaSet a command names does not exist.
#[derive(Debug, Error)]
#[error(
    "ManifestWorkReplicaSet {name:?} not found in namespace {namespace:?} \
     (kubectl get manifestworkreplicasets -n {namespace} lists them; -n picks another namespace)"
)]
pub struct NotFound {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// A client from `kubeconfig` (default: in-cluster, else $KUBECONFIG or
/// ~/.kube/config), the API server's address, and the context's namespace.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<(Client, String, String), ConnectError> {
    let boxed = |e: Box<dyn std::error::Error + Send + Sync>| ConnectError::Config { source: e };
    let config = match kubeconfig {
        None => kube::Config::infer()
            .await
            .map_err(|e| boxed(Box::new(e)))?,
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                ConnectError::KubeconfigRead {
                    path: path.to_owned(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| ConnectError::Kubeconfig {
                    path: path.to_owned(),
                    source,
                })?
        }
    };
    let server = config.cluster_url.to_string();
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config).map_err(|e| boxed(Box::new(e)))?;
    Ok((client, server, namespace))
}
