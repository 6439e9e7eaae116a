//! docs/plugin-guide.md shows `sdk/examples/minimal.rs` verbatim: the code a
//! reader copies is the code that compiles.

use std::path::Path;

/// The ```rust block that follows the `<!-- guide:minimal` marker.
fn guide_block(guide: &str) -> &str {
    let after_marker = &guide[guide.find("<!-- guide:minimal").expect("the marker")..];
    let start = after_marker.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let body = &after_marker[start..];
    &body[..body.find("\n```").expect("the block's end") + 1]
}

#[test]
fn the_guide_shows_the_compiled_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(root.join("../docs/plugin-guide.md")).unwrap();
    let example = std::fs::read_to_string(root.join("examples/minimal.rs")).unwrap();
    assert_eq!(
        guide_block(&guide),
        example,
        "docs/plugin-guide.md's code block differs from sdk/examples/minimal.rs; copy the file into the guide"
    );
}

/// The version a `name = "1"` or `name = { version = "1", ... }` line of a
/// Cargo.toml asks for, by crate name; lines without one are left out.
fn versions(toml: &str) -> Vec<(String, String)> {
    toml.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| {
            let (name, value) = line.split_once(" = ")?;
            let value = value.strip_prefix("{ version = ").unwrap_or(value);
            let version = value.strip_prefix('"')?.split('"').next()?;
            Some((name.trim().to_owned(), version.to_owned()))
        })
        .collect()
}

/// The crates the guide's dependency list names ask for the versions this
/// workspace's Cargo.toml does, the versions its tests run with.
#[test]
fn the_guides_dependencies_are_the_workspaces_versions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(root.join("../docs/plugin-guide.md")).unwrap();
    let workspace = std::fs::read_to_string(root.join("../Cargo.toml")).unwrap();
    let block = &guide[guide
        .find("```toml\n[dependencies]")
        .expect("the dependency list")..];
    let block = &block[..block[3..].find("```").expect("its end") + 3];
    let listed = versions(block);
    let names: Vec<&str> = listed.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["tokio", "clap", "serde", "serde_json"]);
    let workspace = versions(&workspace);
    for (name, version) in &listed {
        let want = workspace
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str());
        assert_eq!(
            want,
            Some(version.as_str()),
            "docs/plugin-guide.md asks for {name} {version}; the workspace's Cargo.toml for {want:?}"
        );
    }
}
