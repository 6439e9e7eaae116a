//! Compiles the plugin API with protox (pure Rust), so no `protoc` is needed.

fn main() -> anyhow::Result<()> {
    let proto = "ocm/rolloutplugin/v1alpha1/rollout_plugin.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    tonic_prost_build::configure()
        // ManifestWork bodies travel as `Bytes`, so decoding slices the
        // receive buffer instead of copying it (large works stay cheap).
        .bytes(".ocm.rolloutplugin.v1alpha1")
        .compile_fds(fds)?;
    Ok(())
}
