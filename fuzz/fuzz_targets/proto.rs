//! The protobuf list decoder (`syncgc::api::proto::ListDecoder`) on arbitrary answers, cut in
//! arbitrary chunks: it never panics, and the chunks change nothing. What it decodes whole, it
//! decodes the same in chunks; what it refuses whole, it refuses in chunks.
//!
//! The input: one byte (the chunks' length, 1 to 256), then the answer.

#![no_main]

use libfuzzer_sys::fuzz_target;
use syncgc::api::meta::Meta;
use syncgc::api::proto::{ListDecoder, ListMeta};

/// Every object and the list's metadata, or `None` when the answer is malformed.
fn decode<'a>(parts: impl Iterator<Item = &'a [u8]>) -> Option<(Vec<Meta>, ListMeta)> {
    let mut decoder = ListDecoder::default();
    let mut objects = Vec::new();
    for part in parts {
        objects.extend(decoder.feed(part).ok()?);
    }
    Some((objects, decoder.finish().ok()?))
}

fuzz_target!(|data: &[u8]| {
    let Some((chunk, answer)) = data.split_first() else {
        return;
    };
    let whole = decode(std::iter::once(answer));
    let chunked = decode(answer.chunks(usize::from(*chunk) + 1));
    assert_eq!(whole, chunked, "in chunks of {}", usize::from(*chunk) + 1);
});
