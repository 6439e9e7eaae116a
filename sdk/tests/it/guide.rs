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
