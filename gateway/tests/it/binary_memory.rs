//! The `rollout-gateway` binary as linked: what it costs in memory before it
//! runs a line of its own (docs/performance.md, "Where the gateway's memory
//! goes").

/// The sizes of an ELF64 little-endian file's sections, by name.
fn section_sizes(elf: &[u8]) -> Vec<(String, u64)> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not ELF64");
    assert_eq!(elf[5], 1, "not little-endian");
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28) as usize,
        u16_at(0x3a),
        u16_at(0x3c),
        u16_at(0x3e),
    );
    let header = |i: usize| shoff + i * shentsize;
    let names = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let h = header(i);
            let start = names + u32_at(h);
            let end = start + elf[start..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&elf[start..end]).into_owned();
            (name, u64_at(h + 0x20))
        })
        .collect()
}

/// The loader reads every dynamic relocation at start and the pages stay
/// resident: as one 24-byte RELA entry per pointer that was ~800 KiB of the
/// release binary; packed (DT_RELR, `gateway/build.rs`) a few KiB.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_binary_packs_its_relative_relocations() {
    let elf = std::fs::read(env!("CARGO_BIN_EXE_rollout-gateway")).expect("the binary");
    let sections = section_sizes(&elf);
    let size = |name: &str| {
        sections
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, s)| *s)
    };
    assert!(size(".relr.dyn") > 0, "no .relr.dyn: {sections:?}");
    assert!(
        size(".rela.dyn") < 64 * 1024,
        ".rela.dyn is {} KiB",
        size(".rela.dyn") / 1024
    );
}
