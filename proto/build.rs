//! Compiles the plugin API with protox (pure Rust), so no `protoc` is needed.

fn main() -> anyhow::Result<()> {
    let proto = "ocm/rolloutplugin/v1alpha1/rollout_plugin.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    // The encoded descriptors (the API's file and the well-known types it
    // imports) for gRPC reflection: `FILE_DESCRIPTOR_SET`.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("rollout_plugin_fds.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        // ManifestWork bodies travel as `Bytes`, so decoding slices the
        // receive buffer instead of copying it (large works stay cheap).
        .bytes(".ocm.rolloutplugin.v1alpha1")
        .compile_fds(fds)?;
    Ok(())
}
