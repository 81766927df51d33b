//! The console samples of the README and the docs, as tests read them to compare them with what
//! the code prints: the unit tests of each report, and (through `tests/support`) the tests that
//! compare a real run. A sample is a fenced block, or a line, of a page of this repository,
//! found by the line it starts with; each is found exactly once, so that none goes unchecked.

use std::path::Path;

/// The text of `page` (`README.md`, `docs/commands.md`).
pub fn page(page: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The one fenced block of `page_name` whose first line starts with `first`, without its
/// fences, ending in a newline.
pub fn block(page_name: &str, first: &str) -> String {
    let text = page(page_name);
    let found: Vec<String> = text
        .split("\n```")
        .skip(1)
        .step_by(2)
        .filter_map(|block| {
            let (_, body) = block.split_once('\n')?;
            body.starts_with(first)
                .then(|| format!("{}\n", body.trim_end_matches('\n')))
        })
        .collect();
    one(page_name, first, found)
}

/// Every line of `page_name` that starts with `start` (a sample of one line, such as a warning
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

/// The one line of `page_name` that starts with `start`.
pub fn line(page_name: &str, start: &str) -> String {
    let found = page(page_name)
        .lines()
        .filter(|l| l.starts_with(start))
        .map(str::to_owned)
        .collect();
    one(page_name, start, found)
}

fn one(page_name: &str, start: &str, mut found: Vec<String>) -> String {
    assert_eq!(
        found.len(),
        1,
        "{page_name} has {} samples starting with {start:?}, not one",
        found.len()
    );
    found.remove(0)
}

/// Fails, showing what the code prints, where `sample` (from `page_name`) is not `printed`.
pub fn assert_printed(page_name: &str, sample: &str, printed: &str) {
    assert_eq!(
        sample, printed,
        "{page_name}'s sample is not what the code prints; it prints:\n{printed}"
    );
}
