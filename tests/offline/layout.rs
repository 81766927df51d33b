//! The crate's layout: imports point down. Each top-level module may use only the modules of
//! the layers below its own (the order of [`LAYERS`], as `src/lib.rs` describes them), and the
//! parts of the garbage collector (`src/gc/`) use each other without a circle. Doc comments and
//! unit tests are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// From the bottom up; a module uses only modules of lower layers.
const LAYERS: &[&[&str]] = &[
    &["names", "duration", "metrics"],
    &["report"],
    &["api"],
    &["graph", "certs", "leader"],
    &["annotations"],
    &["gc"],
    &["webhook", "explain", "disarm", "plan"],
    &["check", "aggregated"],
    &["app"],
    &["cli"],
];

/// Every `.rs` file under `dir`, with its module path below `src/` (`gc/barrier.rs` is
/// `["gc", "barrier"]`, `api/mod.rs` is `["api"]`).
fn sources(dir: &Path, out: &mut Vec<(Vec<String>, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix("src").unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // The code, without unit tests and comments.
            let code = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            out.push((parts, code));
        }
    }
}

/// The name an item starts with (`watch` of `watch::{self, GraphEvent}`).
fn leading_name(item: &str) -> &str {
    let item = item.trim_start();
    let end = item
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(item.len());
    &item[..end]
}

/// The names that follow `prefix` (`crate::gc::watch` after `crate::` is `gc`; each top-level
/// name of a group, `super::{a, b::c}` gives `a` and `b`).
fn used_after<'a>(code: &'a str, prefix: &str) -> BTreeSet<&'a str> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        // `crate::x` and `super::x`, not `foo_crate::x`.
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        let Some(group) = rest.strip_prefix('{') else {
            names.insert(leading_name(rest));
            continue;
        };
        // The group's items: split at its own commas, up to its closing brace.
        let (mut depth, mut item) = (0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                ',' if depth == 0 => {
                    names.insert(leading_name(&group[item..i]));
                    item = i + 1;
                }
                '}' if depth == 0 => {
                    names.insert(leading_name(&group[item..i]));
                    break;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
    }
    names.remove("");
    names.remove("self");
    names
}

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .unwrap_or_else(|| panic!("src/{module} is in no layer of tests/offline/layout.rs"))
}

#[test]
fn imports_point_down() {
    let mut files = Vec::new();
    sources(Path::new("src"), &mut files);
    let mut wrong = Vec::new();
    for (parts, code) in &files {
        let top = parts[0].as_str();
        if top == "lib" || top == "main" {
            continue;
        }
        for used in used_after(code, "crate::") {
            if used != top && layer(used) >= layer(top) {
                wrong.push(format!("src/{} uses crate::{used}", parts.join("/")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that do not point down:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_parts_of_the_collector_use_each_other_without_a_circle() {
    let mut files = Vec::new();
    sources(Path::new("src/gc"), &mut files);
    let parts: BTreeSet<String> = files
        .iter()
        .filter_map(|(p, _)| p.get(1).cloned())
        .collect();
    // What `src/gc/mod.rs` re-exports (`pub use self::collector::Collector`) is its part's.
    let reexports: BTreeMap<String, String> = files
        .iter()
        .filter(|(path, _)| path.len() == 1)
        .flat_map(|(_, code)| code.lines())
        .filter_map(|line| {
            let path = line
                .trim()
                .strip_prefix("pub use self::")?
                .strip_suffix(';')?;
            let (part, name) = path.split_once("::")?;
            Some((name.to_owned(), part.to_owned()))
        })
        .collect();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, code) in &files {
        let Some(part) = path.get(1) else { continue };
        let used = used_after(code, "super::")
            .into_iter()
            .chain(used_after(code, "crate::gc::"))
            .map(|u| reexports.get(u).map_or(u, String::as_str))
            .filter(|u| u != part && parts.contains(*u))
            .map(str::to_owned)
            .collect::<Vec<_>>();
        uses.entry(part.clone()).or_default().extend(used);
    }
    assert!(
        uses.get("debug").is_some_and(|u| u.contains("collector")),
        "the debug page's use of the Collector (re-exported by gc) is seen: {uses:?}"
    );
    // The graph builder hands its work to a sink; the collector is one.
    assert!(
        uses.get("builder")
            .is_some_and(|u| !u.contains("collector")),
        "the graph builder does not know the collector: {uses:?}"
    );
    // Depth-first search for a way back.
    fn reaches(
        uses: &BTreeMap<String, BTreeSet<String>>,
        from: &str,
        to: &str,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        uses.get(from)
            .into_iter()
            .flatten()
            .any(|next| next == to || (seen.insert(next.clone()) && reaches(uses, next, to, seen)))
    }
    let circles: Vec<String> = uses
        .iter()
        .flat_map(|(part, used)| used.iter().map(move |u| (part, u)))
        .filter(|(part, used)| reaches(&uses, used, part, &mut BTreeSet::new()))
        .map(|(part, used)| format!("gc::{part} uses gc::{used}, which leads back to it"))
        .collect();
    assert!(circles.is_empty(), "{}", circles.join("\n"));
}

/// Every module is on its parent's map: `src/lib.rs` and each `mod.rs` name, in their module
/// docs, every module they declare (as `` [`name`] `` or `` `name` ``), so that the pictures a
/// reader starts from cannot drift from the code.
#[test]
fn every_module_is_on_its_parent_s_map() {
    let mut maps = vec![std::path::PathBuf::from("src/lib.rs")];
    let mut dirs = vec![std::path::PathBuf::from("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "mod.rs") {
                maps.push(path);
            }
        }
    }
    let mut missing = Vec::new();
    for map in &maps {
        let text = std::fs::read_to_string(map).unwrap();
        let docs: String = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        for line in text.lines() {
            let declared = line
                .trim()
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let Some(module) = declared
                && !docs.contains(&format!("`{module}`"))
            {
                missing.push(format!("{} does not name {module}", map.display()));
            }
        }
    }
    assert!(maps.len() > 5, "{maps:?}");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
