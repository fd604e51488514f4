//! Docs and code cannot drift: every fenced block in the driver guides that is marked
//! `<!-- from core/examples/FILE -->` is a contiguous, unchanged part of that file (the
//! examples are compiled with the crate and run against the conformance suite by
//! driver-mio/tests/core_examples.rs). A block that is the whole file says so by being it.

const EXAMPLES: &[(&str, &str)] = &[
    (
        "core/examples/blocking_server.rs",
        include_str!("../examples/blocking_server.rs"),
    ),
    (
        "core/examples/blocking_client.rs",
        include_str!("../examples/blocking_client.rs"),
    ),
];

const PAGES: &[(&str, &str)] = &[
    (
        "docs/integrating.md",
        include_str!("../../docs/integrating.md"),
    ),
    (
        "docs/architecture.md",
        include_str!("../../docs/architecture.md"),
    ),
];

/// The marked blocks of `page`: (the file named, the block's text).
fn marked(page: &str) -> Vec<(&str, String)> {
    let mut found = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let Some(file) = line
            .strip_prefix("<!-- from ")
            .and_then(|l| l.strip_suffix(" -->"))
        else {
            continue;
        };
        assert_eq!(
            lines.next(),
            Some("```rust"),
            "{file}: a ```rust block must follow"
        );
        let mut text = String::new();
        for l in lines.by_ref().take_while(|l| *l != "```") {
            text.push_str(l);
            text.push('\n');
        }
        found.push((file, text));
    }
    found
}

#[test]
fn every_marked_block_of_the_driver_guides_is_its_example_unchanged() {
    let mut checked = 0;
    for (page, text) in PAGES {
        for (file, block) in marked(text) {
            let (_, code) = EXAMPLES
                .iter()
                .find(|(name, _)| *name == file)
                .unwrap_or_else(|| panic!("{page}: unknown example {file}"));
            assert!(
                code.contains(&block),
                "{page}: the block marked `from {file}` is not part of it unchanged"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "only {checked} marked blocks found");
}

#[test]
fn integrating_md_shows_both_core_examples_whole() {
    let blocks = marked(PAGES[0].1);
    for (file, code) in EXAMPLES {
        assert!(
            blocks.iter().any(|(f, b)| f == file && b == code),
            "docs/integrating.md must show {file} whole"
        );
    }
}

#[test]
fn each_core_example_is_at_most_200_lines() {
    for (file, code) in EXAMPLES {
        let lines = code.lines().count();
        assert!(
            lines <= 200,
            "{file}: {lines} lines (the promise is at most 200)"
        );
    }
}
