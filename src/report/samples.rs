//! The console samples of the README and the docs, as the commands' tests read them to compare
//! them with what the code prints. A sample is a fenced block (or, for one line, a line) of a
//! page of this repository, found by the line it starts with.

use std::path::Path;

/// The text of `page` (`README.md`, `docs/commands.md`).
pub fn page(page: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fenced block of `page` whose first line is `first`, without its fences, ending in a
/// newline.
pub fn block(page_name: &str, first: &str) -> String {
    let text = page(page_name);
    let mut blocks = text.split("\n```").skip(1).step_by(2);
    blocks
        .find_map(|block| {
            let (_, body) = block.split_once('\n')?;
            body.starts_with(first)
                .then(|| format!("{}\n", body.trim_end_matches('\n')))
        })
        .unwrap_or_else(|| panic!("{page_name} has no sample starting with {first:?}"))
}

/// Every line of `page` that starts with `start` (a sample of one line, such as a warning
/// kubectl prints, can be in running text, in a block or in a longer sample).
pub fn lines(page_name: &str, start: &str) -> Vec<String> {
    let found: Vec<String> = page(page_name)
        .lines()
        .filter(|l| l.starts_with(start))
        .map(str::to_owned)
        .collect();
    assert!(
        !found.is_empty(),
        "{page_name} has no line starting with {start:?}"
    );
    found
}

/// Fails, showing what the code prints, where `sample` (from `page_name`) is not `printed`.
pub fn assert_printed(page_name: &str, sample: &str, printed: &str) {
    assert_eq!(
        sample, printed,
        "{page_name}'s sample is not what the code prints; it prints:\n{printed}"
    );
}
