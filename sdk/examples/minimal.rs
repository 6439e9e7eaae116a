//! The plugin of docs/plugin-guide.md: stamps every manifest with the
//! cluster's place in the rollout, and fails the validation of the clusters
//! named in `STAMP_FAIL` (comma-separated).
//!
//! Run it with `cargo run -p rollout-plugin-sdk --example minimal -- 127.0.0.1:7000`.

use rollout_plugin_sdk::prelude::*;

struct Stamp {
    /// Clusters whose validation fails.
    fail: Vec<String>,
}

impl RolloutPlugin for Stamp {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("stamp", env!("CARGO_PKG_VERSION"))
            .hooks([Hook::MutateManifestWork, Hook::ValidateRolloutCompletion])
            .state_detail(RolloutStateDetail::Counts)
    }

    async fn mutate_manifest_work(
        &self,
        request: RolloutPluginRequest,
        mut work: ManifestWork,
    ) -> Result<Mutation, PluginError> {
        // Rolling back: apply the last good revision as it is.
        if request.aborting {
            return Ok(Mutation::Unchanged);
        }
        let position = request
            .position()
            .ok_or_else(|| PluginError::invalid_argument("cluster_index is not set"))?;
        for mut manifest in work.manifests_mut() {
            manifest.set_annotation("example.com/rollout-position", position.to_string())?;
        }
        Ok(Mutation::Changed(work))
    }

    async fn validate_rollout_completion(
        &self,
        request: RolloutPluginRequest,
    ) -> Result<Validation, PluginError> {
        // A real plugin would run a smoke test against the cluster here.
        if self.fail.contains(&request.cluster_name) {
            return Ok(Validation::failed(format!(
                "{} is on the fail list",
                request.cluster_name
            )));
        }
        Ok(Validation::succeeded())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".into());
    let fail = std::env::var("STAMP_FAIL").unwrap_or_default();
    let plugin = Stamp {
        fail: fail
            .split(',')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
    };
    // Prints `stamp listening grpc=ADDR`, serves, drains on SIGTERM or Ctrl-C.
    rollout_plugin_sdk::serve(plugin, listen.parse()?, ServeOptions::default()).await?;
    Ok(())
}
