//! Metadata lists in Kubernetes' protobuf encoding, decoded as they arrive. A list of 100,000
//! objects is tens of megabytes and the apiserver encodes it in protobuf in a fraction of the
//! time it takes in JSON (as kube-controller-manager's metadata informers ask for it); decoded a
//! chunk at a time, it is never held whole: what stays is one object at a time, read into
//! [`Meta`] (the same fields the JSON path keeps).
//!
//! The answer is the envelope `k8s\0` followed by a `runtime.Unknown` whose field 2 (`raw`)
//! holds a `PartialObjectMetadataList`: `ListMeta` (field 1), then each item (field 2), a
//! `PartialObjectMetadata` whose field 1 is the `ObjectMeta` (field numbers as in
//! `k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::meta::{Meta, Reference};

/// The content type that asks for a metadata list in protobuf, with JSON as the fallback for
/// servers (aggregated APIs) that cannot encode it so.
pub const ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// The content type of a protobuf answer.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// A malformed answer.
#[derive(Debug, thiserror::Error)]
#[error("decoding a protobuf metadata list: {0}")]
pub struct Malformed(pub &'static str);

/// A field's value.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// Reads the fields of one message.
struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    fn next(&mut self) -> Option<Result<(u64, Value<'a>), Malformed>> {
        if self.buf.is_empty() {
            return None;
        }
        Some(self.field())
    }

    fn field(&mut self) -> Result<(u64, Value<'a>), Malformed> {
        let (key, used) = varint(self.buf).ok_or(Malformed("truncated field key"))?;
        self.buf = &self.buf[used..];
        let value = match key & 7 {
            0 => {
                let (v, used) = varint(self.buf).ok_or(Malformed("truncated varint"))?;
                self.buf = &self.buf[used..];
                Value::Varint(v)
            }
            2 => {
                let (len, used) = varint(self.buf).ok_or(Malformed("truncated length"))?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|len| used.checked_add(len))
                    .filter(|end| *end <= self.buf.len())
                    .ok_or(Malformed("field longer than its message"))?;
                let bytes = &self.buf[used..end];
                self.buf = &self.buf[end..];
                Value::Bytes(bytes)
            }
            1 => Value::Bytes(self.take(8)?),
            5 => Value::Bytes(self.take(4)?),
            _ => return Err(Malformed("unsupported wire type")),
        };
        Ok((key >> 3, value))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.buf.len() < n {
            return Err(Malformed("truncated fixed-size field"));
        }
        let (taken, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(taken)
    }
}

/// A varint at the start of `buf`, and how many bytes it took; `None` when incomplete.
fn varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in buf.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

fn text(bytes: &[u8]) -> Result<String, Malformed> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Malformed("a string is not UTF-8"))
}

fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf }
}

/// An `ObjectMeta`.
fn object_meta(buf: &[u8]) -> Result<Meta, Malformed> {
    let mut meta = Meta::default();
    let mut fields = fields(buf);
    while let Some(field) = fields.next() {
        match field? {
            (1, Value::Bytes(b)) => meta.name = text(b)?,
            (3, Value::Bytes(b)) => meta.namespace = Some(text(b)?).filter(|n| !n.is_empty()),
            (5, Value::Bytes(b)) => meta.uid = Some(text(b)?).filter(|u| !u.is_empty()),
            (6, Value::Bytes(b)) => meta.resource_version = Some(text(b)?),
            (9, Value::Bytes(b)) => meta.deletion_timestamp = Some(time(b)?),
            (11, Value::Bytes(b)) => {
                let (key, value) = entry(b)?;
                meta.labels.keep(key, value);
            }
            (12, Value::Bytes(b)) => {
                let (key, value) = entry(b)?;
                meta.annotations.keep(key, value);
            }
            (13, Value::Bytes(b)) => meta.owner_references.push(owner_reference(b)?),
            (14, Value::Bytes(b)) => meta.finalizers.push(text(b)?),
            _ => {}
        }
    }
    Ok(meta)
}

/// A map entry (`key` field 1, `value` field 2), borrowed.
fn entry(buf: &[u8]) -> Result<(&str, &str), Malformed> {
    let (mut key, mut value) = ("", "");
    let mut fields = fields(buf);
    while let Some(field) = fields.next() {
        let as_str = |b| std::str::from_utf8(b).map_err(|_| Malformed("a map entry is not UTF-8"));
        match field? {
            (1, Value::Bytes(b)) => key = as_str(b)?,
            (2, Value::Bytes(b)) => value = as_str(b)?,
            _ => {}
        }
    }
    Ok((key, value))
}

fn owner_reference(buf: &[u8]) -> Result<Reference, Malformed> {
    let mut reference = Reference::default();
    let mut fields = fields(buf);
    while let Some(field) = fields.next() {
        match field? {
            (1, Value::Bytes(b)) => reference.kind = text(b)?,
            (3, Value::Bytes(b)) => reference.name = text(b)?,
            (4, Value::Bytes(b)) => reference.uid = text(b)?,
            (5, Value::Bytes(b)) => reference.api_version = text(b)?,
            (7, Value::Varint(v)) => reference.block_owner_deletion = Some(v != 0),
            _ => {}
        }
    }
    Ok(reference)
}

/// A `Time` (seconds, field 1; nanoseconds, field 2).
fn time(buf: &[u8]) -> Result<Time, Malformed> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    let mut fields = fields(buf);
    while let Some(field) = fields.next() {
        match field? {
            (1, Value::Varint(v)) => seconds = v as i64,
            (2, Value::Varint(v)) => nanos = v as i32,
            _ => {}
        }
    }
    jiff::Timestamp::new(seconds, nanos)
        .map(Time)
        .map_err(|_| Malformed("a time out of range"))
}

/// Where the decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Before the envelope's magic bytes.
    Start,
    /// Between the fields of the envelope.
    Envelope,
    /// Inside the list (`raw`), with this many bytes of it still to come.
    List(usize),
}

/// The header of a length-delimited field at the start of `buf`: its number, the header's
/// length and the whole field's (header and value); `None` while incomplete; `unexpected`
/// when it is not length-delimited, an error too when the length the field claims does not
/// fit in memory (it could never be read, and adding it up would overflow).
fn header(buf: &[u8], unexpected: &'static str) -> Result<Option<(u64, usize, usize)>, Malformed> {
    let Some((key, key_len)) = varint(buf) else {
        return Ok(None);
    };
    if key & 7 != 2 {
        return Err(Malformed(unexpected));
    }
    let Some((len, len_len)) = varint(&buf[key_len..]) else {
        return Ok(None);
    };
    let head = key_len + len_len;
    let whole = usize::try_from(len)
        .ok()
        .and_then(|len| head.checked_add(len))
        .ok_or(Malformed("a field longer than memory"))?;
    Ok(Some((key >> 3, head, whole)))
}

/// The list's own metadata.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ListMeta {
    pub resource_version: Option<String>,
    pub continue_: Option<String>,
}

/// Decodes a protobuf metadata list from its chunks, as they arrive.
#[derive(Debug)]
pub struct ListDecoder {
    pending: Vec<u8>,
    state: Position,
    list: ListMeta,
}

impl Default for ListDecoder {
    fn default() -> Self {
        Self {
            pending: Vec::new(),
            state: Position::Start,
            list: ListMeta::default(),
        }
    }
}

impl ListDecoder {
    /// Takes in the next chunk; returns the objects it completes, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Meta>, Malformed> {
        self.pending.extend_from_slice(chunk);
        let mut objects = Vec::new();
        let mut at = 0;
        loop {
            let rest = &self.pending[at..];
            match self.state {
                Position::Start => {
                    if rest.len() < MAGIC.len() {
                        break;
                    }
                    if &rest[..MAGIC.len()] != MAGIC {
                        return Err(Malformed("no k8s protobuf envelope"));
                    }
                    at += MAGIC.len();
                    self.state = Position::Envelope;
                }
                Position::Envelope => {
                    let Some((field, head, whole)) = header(rest, "unexpected envelope field")?
                    else {
                        break;
                    };
                    if field == 2 {
                        at += head;
                        self.state = Position::List(whole - head);
                    } else if rest.len() >= whole {
                        at += whole;
                    } else {
                        break;
                    }
                }
                Position::List(0) => self.state = Position::Envelope,
                Position::List(left) => {
                    // One whole field of the list at a time.
                    let Some((field, head, whole)) = header(rest, "unexpected list field")? else {
                        break;
                    };
                    if whole > left {
                        return Err(Malformed("an item longer than the list"));
                    }
                    if rest.len() < whole {
                        break;
                    }
                    let body = &rest[head..whole];
                    match field {
                        1 => self.list = list_meta(body)?,
                        2 => {
                            let mut item = fields(body);
                            while let Some(field) = item.next() {
                                if let (1, Value::Bytes(b)) = field? {
                                    objects.push(object_meta(b)?);
                                }
                            }
                        }
                        _ => {}
                    }
                    at += whole;
                    self.state = Position::List(left - whole);
                }
            }
        }
        self.pending.drain(..at);
        Ok(objects)
    }

    /// The list's metadata, once every chunk is in.
    pub fn finish(self) -> Result<ListMeta, Malformed> {
        match self.state {
            Position::Envelope if self.pending.is_empty() => Ok(self.list),
            _ => Err(Malformed("the answer ended inside the list")),
        }
    }
}

fn list_meta(buf: &[u8]) -> Result<ListMeta, Malformed> {
    let mut list = ListMeta::default();
    let mut fields = fields(buf);
    while let Some(field) = fields.next() {
        match field? {
            (2, Value::Bytes(b)) => list.resource_version = Some(text(b)?),
            (3, Value::Bytes(b)) => list.continue_ = Some(text(b)?).filter(|c| !c.is_empty()),
            _ => {}
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{ARMED_LABEL, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER};

    /// Protobuf encoding, enough for the tests.
    fn key(field: u64, wire: u64) -> Vec<u8> {
        encode_varint((field << 3) | wire)
    }

    fn encode_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn bytes(field: u64, value: &[u8]) -> Vec<u8> {
        let mut out = key(field, 2);
        out.extend(encode_varint(value.len() as u64));
        out.extend_from_slice(value);
        out
    }

    fn number(field: u64, value: u64) -> Vec<u8> {
        let mut out = key(field, 0);
        out.extend(encode_varint(value));
        out
    }

    fn entry(k: &str, v: &str) -> Vec<u8> {
        [bytes(1, k.as_bytes()), bytes(2, v.as_bytes())].concat()
    }

    fn object(name: &str, uid: &str) -> Vec<u8> {
        let reference = [
            bytes(1, b"ConfigMap"),
            bytes(3, b"owner"),
            bytes(4, b"6c0b3a56-0b1b-4e0e-9a43-5b1bb4a7e3a1"),
            bytes(5, b"v1"),
            number(6, 1),
            number(7, 1),
        ]
        .concat();
        let meta = [
            bytes(1, name.as_bytes()),
            bytes(3, b"ns"),
            bytes(5, uid.as_bytes()),
            bytes(6, b"42"),
            number(7, 3),
            bytes(9, &[number(1, 1_795_000_000), number(2, 5)].concat()),
            bytes(11, &entry("app", "x")),
            bytes(11, &entry(ARMED_LABEL, "true")),
            bytes(12, &entry(SYNCHRONOUS_ANNOTATION, "true")),
            bytes(13, &reference),
            bytes(14, SYNCHRONOUS_FINALIZER.as_bytes()),
            bytes(17, &bytes(1, b"kubectl")),
        ]
        .concat();
        bytes(2, &bytes(1, &meta))
    }

    fn answer(items: &[Vec<u8>]) -> Vec<u8> {
        let list_meta = bytes(1, &[bytes(2, b"777"), bytes(3, b"")].concat());
        let list = [vec![list_meta], items.to_vec()].concat().concat();
        [
            MAGIC.to_vec(),
            bytes(
                1,
                &[
                    bytes(1, b"meta.k8s.io/v1"),
                    bytes(2, b"PartialObjectMetadataList"),
                ]
                .concat(),
            ),
            bytes(2, &list),
            bytes(3, b""),
            bytes(4, b""),
        ]
        .concat()
    }

    #[test]
    fn a_list_decodes_the_same_whatever_its_chunks() {
        let items: Vec<Vec<u8>> = (0..50)
            .map(|i| object(&format!("cm-{i}"), &format!("uid-{i}")))
            .collect();
        let whole = answer(&items);
        for chunk in [1, 2, 3, 7, 64, 1000, whole.len()] {
            let mut decoder = ListDecoder::default();
            let mut objects = Vec::new();
            for part in whole.chunks(chunk) {
                objects.extend(decoder.feed(part).unwrap());
            }
            let list = decoder.finish().unwrap();
            assert_eq!(list.resource_version.as_deref(), Some("777"));
            assert_eq!(list.continue_, None);
            assert_eq!(objects.len(), 50, "chunks of {chunk}");
            let meta = &objects[7];
            assert_eq!(meta.name, "cm-7");
            assert_eq!(meta.namespace.as_deref(), Some("ns"));
            assert_eq!(meta.uid.as_deref(), Some("uid-7"));
            assert_eq!(meta.resource_version.as_deref(), Some("42"));
            assert_eq!(
                meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
                Some(1_795_000_000)
            );
            assert_eq!(meta.finalizers, [SYNCHRONOUS_FINALIZER]);
            assert_eq!(meta.labels.get(ARMED_LABEL), Some("true"));
            assert_eq!(meta.annotations.get(SYNCHRONOUS_ANNOTATION), Some("true"));
            assert_eq!(
                meta.labels.get("app"),
                None,
                "only syncgc's labels are kept"
            );
            let reference = &meta.owner_references[0];
            assert_eq!(
                (
                    reference.api_version.as_str(),
                    reference.kind.as_str(),
                    reference.name.as_str()
                ),
                ("v1", "ConfigMap", "owner")
            );
            assert_eq!(reference.block_owner_deletion, Some(true));
        }
    }

    #[test]
    fn a_truncated_or_foreign_answer_is_an_error() {
        let whole = answer(&[object("a", "u")]);
        let mut decoder = ListDecoder::default();
        decoder.feed(&whole[..whole.len() - 10]).unwrap();
        assert!(decoder.finish().is_err());
        assert!(ListDecoder::default().feed(b"{\"kind\":").is_err());
        // Cut inside the last item: nothing completes it.
        let mut decoder = ListDecoder::default();
        assert!(decoder.feed(&whole[..whole.len() - 5]).unwrap().is_empty());
        assert!(decoder.finish().is_err());
    }

    /// A length near 2⁶⁴ would wrap when added to its header's length (11 bytes here): an
    /// error, in the envelope and in the list, whatever the chunks.
    #[test]
    fn a_length_past_memory_is_an_error() {
        for len in [u64::MAX, u64::MAX - 1, u64::MAX - 10] {
            let field = |number| [key(number, 2), encode_varint(len), b"abc".to_vec()].concat();
            let in_envelope = [MAGIC.to_vec(), field(3)].concat();
            let in_list = [MAGIC.to_vec(), bytes(2, &field(2))].concat();
            for answer in [in_envelope, in_list] {
                for chunk in [1, 5, answer.len()] {
                    let mut decoder = ListDecoder::default();
                    let fed: Result<Vec<_>, Malformed> =
                        answer.chunks(chunk).try_fold(Vec::new(), |mut all, part| {
                            all.extend(decoder.feed(part)?);
                            Ok(all)
                        });
                    let err = fed.expect_err("a length past memory");
                    assert!(err.0.contains("longer"), "{err}");
                }
            }
        }
    }
}
