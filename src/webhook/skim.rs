//! Skimming a review before it is parsed: most of a review's bytes are the objects' `spec`,
//! `status` and `managedFields`, which syncgc never reads. [`prune`] finds them with a scan of
//! 64 bytes at a time (SIMD compares through `wide`: quotes, backslashes and brackets as bit
//! masks, strings found by a prefix XOR of the unescaped quotes) and replaces each with `null`,
//! so that serde reads a body of a few hundred bytes instead of skipping the objects byte by
//! byte.
//!
//! Pruning only drops what the parser would ignore: members of `request.object` and
//! `request.oldObject` other than `metadata`, and `metadata.managedFields`; keys are compared
//! as raw bytes, so a key written with escapes is kept. The skipped values are checked for
//! structure (strings and brackets), not for the spelling of their numbers and literals.

use std::ops::Range;

use wide::u8x16;

const BLOCK: usize = 64;

/// `body` with the values syncgc does not read replaced by `null`, or `None` when the body does
/// not have a review's shape (then it is parsed as it is, and its errors reported from it).
pub fn prune(body: &[u8]) -> Option<Vec<u8>> {
    let mut cuts: Vec<Range<usize>> = Vec::new();
    let start = whitespace(body, 0);
    let end = object(body, start, |key, at| match key {
        Some(b"request") => object(body, at, |key, at| match key {
            Some(b"object" | b"oldObject") if body.get(at) == Some(&b'{') => {
                object(body, at, |key, at| match key {
                    Some(b"metadata") if body.get(at) == Some(&b'{') => {
                        object(body, at, |key, at| match key {
                            Some(b"managedFields") => cut(body, at, &mut cuts),
                            _ => skip(body, at),
                        })
                    }
                    Some(b"metadata") | None => skip(body, at),
                    Some(_) => cut(body, at, &mut cuts),
                })
            }
            _ => skip(body, at),
        }),
        _ => skip(body, at),
    })?;
    if whitespace(body, end) != body.len() {
        return None;
    }
    let removed: usize = cuts.iter().map(|c| c.len()).sum();
    let mut pruned = Vec::with_capacity(body.len() - removed + 4 * cuts.len());
    let mut from = 0;
    for cut in cuts {
        pruned.extend_from_slice(&body[from..cut.start]);
        pruned.extend_from_slice(b"null");
        from = cut.end;
    }
    pruned.extend_from_slice(&body[from..]);
    Some(pruned)
}

/// Skips the value at `at` and marks it to be replaced by `null`.
fn cut(body: &[u8], at: usize, cuts: &mut Vec<Range<usize>>) -> Option<usize> {
    let end = skip(body, at)?;
    cuts.push(at..end);
    Some(end)
}

/// Walks the JSON object at `at`, calling `member` with each key (its raw bytes, or `None` for
/// a key holding an escape) and the position of its value; `member` returns where the value
/// ends. Returns where the object ends.
fn object(
    body: &[u8],
    at: usize,
    mut member: impl FnMut(Option<&[u8]>, usize) -> Option<usize>,
) -> Option<usize> {
    if body.get(at) != Some(&b'{') {
        return None;
    }
    let mut at = whitespace(body, at + 1);
    if body.get(at) == Some(&b'}') {
        return Some(at + 1);
    }
    loop {
        if body.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string(body, at)?;
        let key = &body[at + 1..key_end - 1];
        let key = (!key.contains(&b'\\')).then_some(key);
        at = whitespace(body, key_end);
        if body.get(at) != Some(&b':') {
            return None;
        }
        at = whitespace(body, member(key, whitespace(body, at + 1))?);
        match body.get(at)? {
            b',' => at = whitespace(body, at + 1),
            b'}' => return Some(at + 1),
            _ => return None,
        }
    }
}

/// Where the JSON value at `at` ends.
fn skip(body: &[u8], at: usize) -> Option<usize> {
    match body.get(at)? {
        b'{' | b'[' => container(body, at),
        b'"' => string(body, at),
        _ => {
            let len = body[at..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(body.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

/// Where the string opening at `at` ends (after its closing quote).
fn string(body: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        match body.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

fn whitespace(body: &[u8], mut at: usize) -> usize {
    while matches!(body.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Where the object or array opening at `at` ends, found 64 bytes at a time.
fn container(body: &[u8], at: usize) -> Option<usize> {
    let mut scanner = Scanner::default();
    let mut depth: u32 = 0;
    let mut block_at = at;
    while block_at < body.len() {
        let (open, close) = scanner.brackets(block(body, block_at));
        if close.count_ones() < depth {
            depth = depth + open.count_ones() - close.count_ones();
        } else {
            let mut events = open | close;
            while events != 0 {
                let bit = events.trailing_zeros();
                if open >> bit & 1 == 1 {
                    depth += 1;
                } else {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return Some(block_at + bit as usize + 1);
                    }
                }
                events &= events - 1;
            }
        }
        block_at += BLOCK;
    }
    None
}

/// The 64 bytes of `body` from `at`, padded with spaces past its end.
fn block(body: &[u8], at: usize) -> [u8; BLOCK] {
    let mut block = [b' '; BLOCK];
    let rest = &body[at..];
    let n = rest.len().min(BLOCK);
    block[..n].copy_from_slice(&rest[..n]);
    block
}

/// What carries over from one block to the next: whether the block ended inside a string, and
/// whether its last byte was an unfinished escape.
#[derive(Default)]
struct Scanner {
    in_string: u64,
    escape_pending: u64,
}

impl Scanner {
    /// The opening and closing brackets of a block that are not inside strings, bit `i` for
    /// byte `i`.
    fn brackets(&mut self, block: [u8; BLOCK]) -> (u64, u64) {
        let [quote, backslash, open, close] = masks(&block);
        let quotes = quote & !self.escaped(backslash);
        let strings = prefix_xor(quotes) ^ self.in_string;
        self.in_string = 0u64.wrapping_sub(strings >> 63);
        (open & !strings, close & !strings)
    }

    /// The bytes escaped by a backslash: those after an odd run of backslashes.
    fn escaped(&mut self, backslash: u64) -> u64 {
        const EVEN: u64 = 0x5555_5555_5555_5555;
        let backslash = backslash & !self.escape_pending;
        let follows_escape = backslash << 1 | self.escape_pending;
        let odd_starts = backslash & !EVEN & !follows_escape;
        let (even_runs, overflow) = odd_starts.overflowing_add(backslash);
        self.escape_pending = overflow as u64;
        (EVEN ^ (even_runs << 1)) & follows_escape
    }
}

/// Bit masks of a block's quotes, backslashes, `{`/`[` and `}`/`]`.
fn masks(block: &[u8; BLOCK]) -> [u64; 4] {
    // `[` and `{`, `]` and `}` differ in bit 5 only.
    let (quote, backslash, open, close) = (
        u8x16::splat(b'"'),
        u8x16::splat(b'\\'),
        u8x16::splat(b'{'),
        u8x16::splat(b'}'),
    );
    let lower = u8x16::splat(0x20);
    let mut masks = [0u64; 4];
    for (i, chunk) in block.chunks_exact(16).enumerate() {
        let bytes = u8x16::new(chunk.try_into().unwrap_or([0; 16]));
        let folded = bytes | lower;
        for (mask, found) in masks.iter_mut().zip([
            bytes.simd_eq(quote),
            bytes.simd_eq(backslash),
            folded.simd_eq(open),
            folded.simd_eq(close),
        ]) {
            *mask |= u64::from(found.to_bitmask()) << (16 * i);
        }
    }
    masks
}

/// Bit `i` of the result is the XOR of bits `0..=i`: set inside strings, from the opening
/// quote to the byte before the closing one.
fn prefix_xor(mut x: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        x ^= x << shift;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A deterministic generator of awkward JSON: strings with quotes, backslashes, brackets
    /// and non-ASCII, nesting, and long runs that straddle the 64-byte blocks.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn string(&mut self) -> String {
            let long = "x".repeat(70);
            let pieces = [
                "a", "\"", "\\", "\\\\", "{", "}", "[", "]", "é", "\n", " ", &long, "\\\"", ":",
                ",",
            ];
            let n = self.next() % 12;
            (0..n)
                .map(|_| pieces[(self.next() % pieces.len() as u64) as usize])
                .collect()
        }

        fn value(&mut self, depth: u32) -> Value {
            match self.next() % if depth > 4 { 4 } else { 7 } {
                0 => Value::Null,
                1 => json!(self.next() % 1000),
                2 => json!(self.next().is_multiple_of(2)),
                3 => json!(self.string()),
                4 | 5 => Value::Object(
                    (0..self.next() % 5)
                        .map(|_| (self.string(), self.value(depth + 1)))
                        .collect(),
                ),
                _ => Value::Array(
                    (0..self.next() % 5)
                        .map(|_| self.value(depth + 1))
                        .collect(),
                ),
            }
        }
    }

    #[test]
    fn skip_finds_the_end_of_any_value() {
        let mut generator = Gen(0x9e37_79b9_7f4a_7c15);
        for _ in 0..3000 {
            let value = generator.value(0);
            for text in [
                serde_json::to_string(&value).unwrap(),
                serde_json::to_string_pretty(&value).unwrap(),
            ] {
                let padded = format!("{text} ,");
                assert_eq!(skip(padded.as_bytes(), 0), Some(text.len()), "{text}");
            }
        }
    }

    #[test]
    fn escapes_are_found_across_blocks() {
        // A run of backslashes of every length ending at every position around a block edge.
        for run in 1..6 {
            for end in 55..75 {
                let inner = format!("{}{}", "a".repeat(end - run), "\\".repeat(run));
                let text = if run % 2 == 0 {
                    format!("[\"{inner}\"]")
                } else {
                    format!("[\"{inner}\"\"]")
                };
                let value: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(skip(text.as_bytes(), 0), Some(text.len()), "{value}");
            }
        }
    }

    #[test]
    fn unfinished_values_have_no_end() {
        for text in ["{", "[[]", "{\"a\": \"}", "[\"\\\"]", "\"abc", "{\"a\":[}"] {
            let end = skip(text.as_bytes(), 0);
            assert!(end.is_none() || end < Some(text.len()), "{text}: {end:?}");
        }
    }

    fn review(object: Value) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "operation": "CREATE",
                "userInfo": {"username": "admin"},
                "object": object, "oldObject": null, "dryRun": false,
                "options": {"kind": "CreateOptions"}
            }
        })
    }

    #[test]
    fn prunes_what_is_not_read_and_keeps_the_rest() {
        let original = review(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "annotations": {"a": "}\"{"},
                         "managedFields": [{"manager": "m", "fieldsV1": {"f:data": {}}}]},
            "data": {"big": "]]]\\\"[[["}
        }));
        let pruned = prune(&serde_json::to_vec_pretty(&original).unwrap()).unwrap();
        let pruned: Value = serde_json::from_slice(&pruned).unwrap();
        let mut expected = original.clone();
        let object = &mut expected["request"]["object"];
        for key in ["apiVersion", "kind", "data"] {
            object[key] = Value::Null;
        }
        object["metadata"]["managedFields"] = Value::Null;
        assert_eq!(pruned, expected);
    }

    #[test]
    fn keys_written_with_escapes_are_kept() {
        let body = br#"{"request": {"object": {"meta\u0064ata": {"name": "x"}, "spec": 1}}}"#;
        let pruned: Value = serde_json::from_slice(&prune(body).unwrap()).unwrap();
        assert_eq!(
            pruned,
            json!({"request": {"object": {"metadata": {"name": "x"}, "spec": null}}})
        );
    }

    #[test]
    fn anything_but_a_review_is_left_alone() {
        for body in [
            &b""[..],
            b"[1]",
            b"{not json",
            b"{\"request\": {\"object\": {\"spec\": [}}}",
            b"{} trailing",
        ] {
            assert_eq!(prune(body), None, "{}", String::from_utf8_lossy(body));
        }
    }
}
