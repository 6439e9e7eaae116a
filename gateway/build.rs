//! Link flags of the `rollout-gateway` binary alone.

fn main() {
    // Relative relocations packed (DT_RELR) instead of one 24-byte RELA entry
    // each: the loader reads ~10 KiB at start instead of ~800 KiB, which
    // otherwise stays resident for the process's life
    // (docs/decisions/0005-resident-memory.md). Needs glibc 2.36 at run time
    // and binutils 2.38 or lld 15 to link; the images build on bookworm and
    // run on distroless debian12, both glibc 2.36.
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if target_os == "linux" && target_env == "gnu" {
        println!("cargo:rustc-link-arg-bin=rollout-gateway=-Wl,-z,pack-relative-relocs");
    }
}
