//! Partial views of the request messages, for code that passes a request on
//! rather than reading all of it: the gateway, and the spans of a client.
//!
//! `RolloutPluginRequest.rollout_status` lists every cluster of the placement
//! (about 55 bytes each, so half a megabyte late in a rollout of 10,000
//! clusters). These views decode the same wire bytes as the full messages but
//! skip that field (protobuf skips fields a message does not declare, without
//! allocating), so reading who a request is about costs the same for 10 or
//! 10,000 clusters. The bytes themselves can then be forwarded untouched.
//!
//! For a plugin that declared it wants only the counts
//! (`InitializeResponse.state_detail = ROLLOUT_STATE_DETAIL_COUNTS`),
//! [`without_rollout_status`] and [`validate_without_rollout_status`] take the
//! state out of the encoded bytes by walking their top-level fields: nothing
//! else is decoded, and every other field's bytes (unknown ones included) stay
//! as they were, in their order.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::v1alpha1::RolloutPluginRequest;

/// `RolloutPluginRequest` without `rollout_status` (field 6): who and what a
/// request is about. Decoding a full request's bytes as this skips the state.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RolloutFields {
    /// `mwrs_name`.
    #[prost(string, tag = "1")]
    pub mwrs_name: String,
    /// `mwrs_namespace`.
    #[prost(string, tag = "2")]
    pub mwrs_namespace: String,
    /// `placement_name`.
    #[prost(string, tag = "3")]
    pub placement_name: String,
    /// `cluster_name`; empty for placement-wide hooks.
    #[prost(string, tag = "4")]
    pub cluster_name: String,
    /// `total_cluster_count`.
    #[prost(int32, tag = "5")]
    pub total_cluster_count: i32,
    /// `desired_revision`.
    #[prost(string, tag = "7")]
    pub desired_revision: String,
    /// `aborting`.
    #[prost(bool, tag = "8")]
    pub aborting: bool,
    /// `cluster_index`.
    #[prost(int32, tag = "9")]
    pub cluster_index: i32,
}

impl From<&RolloutPluginRequest> for RolloutFields {
    fn from(r: &RolloutPluginRequest) -> RolloutFields {
        RolloutFields {
            mwrs_name: r.mwrs_name.clone(),
            mwrs_namespace: r.mwrs_namespace.clone(),
            placement_name: r.placement_name.clone(),
            cluster_name: r.cluster_name.clone(),
            total_cluster_count: r.total_cluster_count,
            desired_revision: r.desired_revision.clone(),
            aborting: r.aborting,
            cluster_index: r.cluster_index,
        }
    }
}

/// `ValidateCompletionRequest`, its `rollout` read as [`RolloutFields`].
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ValidateView {
    /// `rollout`, without its state.
    #[prost(message, optional, tag = "1")]
    pub rollout: Option<RolloutFields>,
}

/// `MutateManifestWorkRequest` with its `rollout` kept as encoded bytes (a
/// message and a `bytes` field are the same on the wire), so that it can be
/// sent on with each new ManifestWork without being decoded or copied.
/// Encoding this gives the bytes of the equivalent full request.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct MutateParts {
    /// `rollout`, the encoded `RolloutPluginRequest`; `None` when absent.
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub rollout: Option<Bytes>,
    /// `manifest_work`, the ManifestWork as JSON.
    #[prost(bytes = "bytes", tag = "2")]
    pub manifest_work: Bytes,
}

/// `RolloutPluginRequest.rollout_status`, every cluster's status.
pub const ROLLOUT_STATUS_FIELD: u32 = 6;
/// `ValidateCompletionRequest.rollout` and `MutateManifestWorkRequest.rollout`,
/// the `RolloutPluginRequest`.
pub const ROLLOUT_FIELD: u32 = 1;

/// Bytes that are not a well-formed protobuf message; `at` is the offset of
/// the field where the walk stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message truncated in the field at byte {at}")]
    Truncated { at: usize },
    #[error("invalid field key at byte {at}")]
    InvalidKey { at: usize },
    #[error("invalid wire type {wire_type} at byte {at}")]
    InvalidWireType { wire_type: u8, at: usize },
    #[error("end of a group that was not started, at byte {at}")]
    UnbalancedGroup { at: usize },
}

/// An encoded `RolloutPluginRequest` without `rollout_status` (field 6): the
/// counts-only form of a request. Every other field keeps its bytes and its
/// place. When the field is absent, the same bytes are returned (not copied).
pub fn without_rollout_status(request: &Bytes) -> Result<Bytes, WireError> {
    drop_field(request, ROLLOUT_STATUS_FIELD)
}

/// An encoded `ValidateCompletionRequest` whose `rollout` has no
/// `rollout_status` (see [`without_rollout_status`]); every other byte kept.
pub fn validate_without_rollout_status(request: &Bytes) -> Result<Bytes, WireError> {
    map_field(request, ROLLOUT_FIELD, without_rollout_status)
}

/// `message` without any occurrence of its top-level field `number`, the
/// other fields' bytes unchanged and in order; only the keys and lengths of
/// the top-level fields are read. The same bytes (not copied) when the field
/// is absent.
pub fn drop_field(message: &Bytes, number: u32) -> Result<Bytes, WireError> {
    let mut kept: Vec<Range<usize>> = Vec::new();
    let mut dropped = false;
    for field in Fields::new(message) {
        let field = field?;
        if field.number == number {
            dropped = true;
        } else {
            match kept.last_mut() {
                Some(last) if last.end == field.span.start => last.end = field.span.end,
                _ => kept.push(field.span),
            }
        }
    }
    if !dropped {
        return Ok(message.clone());
    }
    let mut out = BytesMut::with_capacity(kept.iter().map(|r| r.len()).sum());
    for range in kept {
        out.put_slice(&message[range]);
    }
    Ok(out.freeze())
}

/// `message` with the body of each occurrence of its length-delimited
/// top-level field `number` replaced by `change(body)`, other bytes
/// unchanged. The same bytes (not copied) when `change` changed nothing.
fn map_field(
    message: &Bytes,
    number: u32,
    change: impl Fn(&Bytes) -> Result<Bytes, WireError>,
) -> Result<Bytes, WireError> {
    // (the field's span, its new body) for each changed occurrence.
    let mut changed: Vec<(Range<usize>, Bytes)> = Vec::new();
    for field in Fields::new(message) {
        let field = field?;
        if field.number == number && field.wire_type == LENGTH_DELIMITED {
            let body = message.slice(field.body.clone());
            let new = change(&body)?;
            if new.len() != body.len() || new != body {
                changed.push((field.span, new));
            }
        }
    }
    if changed.is_empty() {
        return Ok(message.clone());
    }
    let mut out = BytesMut::new();
    let mut copied = 0;
    for (span, body) in changed {
        out.put_slice(&message[copied..span.start]);
        put_varint(
            &mut out,
            u64::from(number) << 3 | u64::from(LENGTH_DELIMITED),
        );
        put_varint(&mut out, body.len() as u64);
        out.put_slice(&body);
        copied = span.end;
    }
    out.put_slice(&message[copied..]);
    Ok(out.freeze())
}

/// Every value of the top-level varint field `number` of `message`, in
/// order (a field sent several times shows each time); occurrences with
/// another wire type are returned as `None`.
pub(crate) fn varint_occurrences(
    message: &[u8],
    number: u32,
) -> Result<Vec<Option<u64>>, WireError> {
    let mut out = Vec::new();
    for field in Fields::new(message) {
        let field = field?;
        if field.number == number {
            out.push(if field.wire_type == VARINT {
                varint(message, field.body.start).map(|(v, _)| v)
            } else {
                None
            });
        }
    }
    Ok(out)
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

/// One top-level field of an encoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Field {
    number: u32,
    wire_type: u8,
    /// The whole field, key included.
    span: Range<usize>,
    /// The field's value; for a length-delimited field, its body.
    body: Range<usize>,
}

/// The top-level fields of an encoded message, in order. Stops after the
/// first error.
struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
    failed: bool,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Fields {
            buf,
            at: 0,
            failed: false,
        }
    }

    /// The field starting at `self.at`, and where it ends.
    fn field(&self) -> Result<Field, WireError> {
        let start = self.at;
        let (number, wire_type, mut at) = key(self.buf, start)?;
        if wire_type == END_GROUP {
            return Err(WireError::UnbalancedGroup { at: start });
        }
        let body_start;
        if wire_type == LENGTH_DELIMITED {
            let (len, after) = varint(self.buf, at).ok_or(WireError::Truncated { at: start })?;
            body_start = after;
            at = usize::try_from(len)
                .ok()
                .and_then(|len| after.checked_add(len))
                .filter(|end| *end <= self.buf.len())
                .ok_or(WireError::Truncated { at: start })?;
        } else if wire_type == START_GROUP {
            // Groups (proto2) nest: skip to the end of this one.
            body_start = at;
            let mut depth = 1usize;
            while depth > 0 {
                let (_, inner, after) = key(self.buf, at)?;
                at = match inner {
                    START_GROUP => {
                        depth += 1;
                        after
                    }
                    END_GROUP => {
                        depth -= 1;
                        after
                    }
                    _ => skip_value(self.buf, inner, after, start)?,
                };
            }
        } else {
            body_start = at;
            at = skip_value(self.buf, wire_type, at, start)?;
        }
        Ok(Field {
            number,
            wire_type,
            span: start..at,
            body: body_start..at,
        })
    }
}

impl Iterator for Fields<'_> {
    type Item = Result<Field, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.buf.len() {
            return None;
        }
        let field = self.field();
        match &field {
            Ok(f) => self.at = f.span.end,
            Err(_) => self.failed = true,
        }
        Some(field)
    }
}

/// The field key at `at`: number, wire type, and where the value starts.
fn key(buf: &[u8], at: usize) -> Result<(u32, u8, usize), WireError> {
    let (key, after) = varint(buf, at).ok_or(WireError::Truncated { at })?;
    let number = u32::try_from(key >> 3)
        .ok()
        .filter(|n| *n >= 1 && *n <= MAX_FIELD_NUMBER)
        .ok_or(WireError::InvalidKey { at })?;
    Ok((number, (key & 7) as u8, after))
}

const MAX_FIELD_NUMBER: u32 = (1 << 29) - 1;

/// Where a value of `wire_type` (not a group, not length-delimited unless
/// asked) starting at `at` ends; `field` is where its field starts, for errors.
fn skip_value(buf: &[u8], wire_type: u8, at: usize, field: usize) -> Result<usize, WireError> {
    let end = match wire_type {
        VARINT => varint(buf, at).map(|(_, end)| end),
        FIXED64 => at.checked_add(8),
        FIXED32 => at.checked_add(4),
        LENGTH_DELIMITED => varint(buf, at).and_then(|(len, after)| {
            usize::try_from(len)
                .ok()
                .and_then(|len| after.checked_add(len))
        }),
        other => {
            return Err(WireError::InvalidWireType {
                wire_type: other,
                at: field,
            });
        }
    };
    end.filter(|end| *end <= buf.len())
        .ok_or(WireError::Truncated { at: field })
}

/// The varint at `at` and where it ends; `None` when truncated or longer
/// than ten bytes.
fn varint(buf: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in buf.get(at..)?.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, at + i + 1));
        }
    }
    None
}

fn put_varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Why a request's bytes are not what the plugin API's messages allow,
/// past what decoding the partial views above checks (they skip
/// `rollout_status` and `counts`): `field` is the path of the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("field {field}: {source}")]
    Wire {
        field: String,
        #[source]
        source: WireError,
    },
    #[error("field {field} has wire type {found}, not the {expected} its type needs")]
    WireType {
        field: String,
        found: u8,
        expected: u8,
    },
    #[error("field {field} is not UTF-8")]
    NotUtf8 { field: String },
}

/// What a field of a message is, for [`check_rollout_request`].
enum Kind {
    /// An integer, bool or enum.
    Varint,
    /// A string: UTF-8.
    Text,
    /// `bytes`: anything.
    Bytes,
    /// A nested message with these fields.
    Message(&'static [(u32, &'static str, Kind)]),
}

const TIMESTAMP: &[(u32, &str, Kind)] = &[(1, "seconds", Kind::Varint), (2, "nanos", Kind::Varint)];
const CLUSTER_STATUS: &[(u32, &str, Kind)] = &[
    (1, "cluster_name", Kind::Text),
    (2, "rollout_status", Kind::Varint),
    (3, "manifest_revision_name", Kind::Text),
    (4, "last_transition_time", Kind::Message(TIMESTAMP)),
    (5, "group_index", Kind::Varint),
    (6, "group_name", Kind::Text),
];
const ROLLOUT_STATE: &[(u32, &str, Kind)] = &[
    (1, "completed", Kind::Message(CLUSTER_STATUS)),
    (2, "progressing", Kind::Message(CLUSTER_STATUS)),
    (3, "timed_out", Kind::Message(CLUSTER_STATUS)),
    (4, "removed", Kind::Message(CLUSTER_STATUS)),
];
const COUNTS: &[(u32, &str, Kind)] = &[
    (1, "to_apply", Kind::Varint),
    (2, "progressing", Kind::Varint),
    (3, "validating", Kind::Varint),
    (4, "succeeded", Kind::Varint),
    (5, "failed", Kind::Varint),
    (6, "timed_out", Kind::Varint),
    (7, "skip", Kind::Varint),
    (8, "removed", Kind::Varint),
];
/// `RolloutPluginRequest.plugin_config_json`.
pub const PLUGIN_CONFIG_FIELD: u32 = 11;

/// The most levels of nested arrays and objects a `plugin_config_json` may
/// have, the object itself counted: serde_json's recursion limit, so the
/// deepest JSON the controller can read (it reads the strategy's
/// `pluginConfig` with serde_json), and one every plugin's JSON library
/// reads (Python's default recursion limit is 1,000 frames).
pub const MAX_PLUGIN_CONFIG_DEPTH: usize = 127;

/// Whether JSON `bytes` nest arrays and objects more than `max` levels
/// deep (`{}` is one level). One pass that stops at the first level over
/// `max`; brackets inside strings do not count.
pub fn nests_deeper_than(bytes: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}
const ROLLOUT_REQUEST: &[(u32, &str, Kind)] = &[
    (1, "mwrs_name", Kind::Text),
    (2, "mwrs_namespace", Kind::Text),
    (3, "placement_name", Kind::Text),
    (4, "cluster_name", Kind::Text),
    (5, "total_cluster_count", Kind::Varint),
    (
        ROLLOUT_STATUS_FIELD,
        "rollout_status",
        Kind::Message(ROLLOUT_STATE),
    ),
    (7, "desired_revision", Kind::Text),
    (8, "aborting", Kind::Varint),
    (9, "cluster_index", Kind::Varint),
    (10, "counts", Kind::Message(COUNTS)),
    (PLUGIN_CONFIG_FIELD, "plugin_config_json", Kind::Text),
];
const VALIDATE_REQUEST: &[(u32, &str, Kind)] =
    &[(ROLLOUT_FIELD, "rollout", Kind::Message(ROLLOUT_REQUEST))];
const MUTATE_REQUEST: &[(u32, &str, Kind)] = &[
    (ROLLOUT_FIELD, "rollout", Kind::Message(ROLLOUT_REQUEST)),
    (2, "manifest_work", Kind::Bytes),
];

/// Checks an encoded `RolloutPluginRequest` as a plugin decoding it whole
/// would: every field the API declares, nested ones included
/// (`rollout_status` with every cluster), has its type's wire type, strings
/// are UTF-8 and messages well framed; unknown fields are let through. One
/// pass over the bytes, nothing allocated unless it fails. With `state`
/// false, `rollout_status` is only checked as one well-framed field, not
/// walked (for a request that goes only to plugins that get the counts: the
/// walk costs about half a full decode). Returns the bytes of
/// `plugin_config_json` (the last occurrence, as protobuf reads it).
pub fn check_rollout_request(message: &[u8], state: bool) -> Result<&[u8], RequestError> {
    check_message(message, ROLLOUT_REQUEST, None, state)
}

/// [`check_rollout_request`] for a `ValidateCompletionRequest`.
pub fn check_validate_request(message: &[u8], state: bool) -> Result<&[u8], RequestError> {
    check_message(message, VALIDATE_REQUEST, None, state)
}

/// [`check_rollout_request`] for a `MutateManifestWorkRequest` (the
/// ManifestWork itself is bytes here; it is JSON the gateway checks).
pub fn check_mutate_request(message: &[u8], state: bool) -> Result<&[u8], RequestError> {
    check_message(message, MUTATE_REQUEST, None, state)
}

/// Where a nested message sits: its field's name and its parent's place,
/// spelled out only for an error.
struct Place<'a> {
    name: &'static str,
    parent: Option<&'a Place<'a>>,
}

/// `field` under `place`, dotted (`rollout.rollout_status.completed`).
fn spell(place: Option<&Place<'_>>, field: &str) -> String {
    let mut names = vec![field];
    let mut at = place;
    while let Some(p) = at {
        names.push(p.name);
        at = p.parent;
    }
    names.reverse();
    names.join(".")
}

/// Walks `message` by `schema`; returns the last `plugin_config_json` found
/// in it or its nested messages (empty when none).
fn check_message<'a>(
    message: &'a [u8],
    schema: &'static [(u32, &'static str, Kind)],
    place: Option<&Place<'_>>,
    state: bool,
) -> Result<&'a [u8], RequestError> {
    let mut config: &[u8] = &[];
    for field in Fields::new(message) {
        let field = field.map_err(|source| RequestError::Wire {
            field: match place {
                Some(p) => spell(p.parent, p.name),
                None => "(top level)".into(),
            },
            source,
        })?;
        let Some((_, name, kind)) = schema.iter().find(|(n, _, _)| *n == field.number) else {
            continue;
        };
        let expected = match kind {
            Kind::Varint => VARINT,
            Kind::Text | Kind::Bytes | Kind::Message(_) => LENGTH_DELIMITED,
        };
        if field.wire_type != expected {
            return Err(RequestError::WireType {
                field: spell(place, name),
                found: field.wire_type,
                expected,
            });
        }
        let body = &message[field.body.clone()];
        match kind {
            Kind::Text => {
                if std::str::from_utf8(body).is_err() {
                    return Err(RequestError::NotUtf8 {
                        field: spell(place, name),
                    });
                }
                if std::ptr::eq(schema, ROLLOUT_REQUEST) && field.number == PLUGIN_CONFIG_FIELD {
                    config = body;
                }
            }
            // Framed (the walk above checked its length), not walked.
            Kind::Message(_)
                if !state
                    && field.number == ROLLOUT_STATUS_FIELD
                    && std::ptr::eq(schema, ROLLOUT_REQUEST) => {}
            Kind::Message(inner) => {
                let here = Place {
                    name,
                    parent: place,
                };
                let found = check_message(body, inner, Some(&here), state)?;
                if !found.is_empty() {
                    config = found;
                }
            }
            Kind::Varint | Kind::Bytes => {}
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::v1alpha1::{
        ClusterRolloutStatus, MutateManifestWorkRequest, RolloutState, ValidateCompletionRequest,
    };

    fn request() -> RolloutPluginRequest {
        let status = |name: &str| ClusterRolloutStatus {
            cluster_name: name.into(),
            manifest_revision_name: "rev".into(),
            ..ClusterRolloutStatus::default()
        };
        RolloutPluginRequest {
            mwrs_name: "web".into(),
            mwrs_namespace: "default".into(),
            placement_name: "fleet".into(),
            cluster_name: "c2".into(),
            total_cluster_count: 3,
            rollout_status: Some(RolloutState {
                completed: vec![status("c1")],
                progressing: vec![status("c2")],
                timed_out: vec![],
                removed: vec![status("c9")],
            }),
            desired_revision: "abc".into(),
            aborting: true,
            cluster_index: 2,
            ..Default::default()
        }
    }

    #[test]
    fn fields_are_the_request_without_its_state() {
        let full = request();
        let fields = RolloutFields::decode(full.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(fields, RolloutFields::from(&full));
        // Every field but the state survives the round trip.
        let back = RolloutPluginRequest::decode(fields.encode_to_vec().as_slice()).expect("back");
        assert_eq!(
            back,
            RolloutPluginRequest {
                rollout_status: None,
                ..full
            }
        );
    }

    #[test]
    fn views_read_the_full_messages_bytes() {
        let validate = ValidateCompletionRequest {
            rollout: Some(request()),
        };
        let view = ValidateView::decode(validate.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(view.rollout, Some(RolloutFields::from(&request())));

        let mutate = MutateManifestWorkRequest {
            rollout: Some(request()),
            manifest_work: Bytes::from_static(b"{\"kind\":\"ManifestWork\"}"),
        };
        let wire = mutate.encode_to_vec();
        let parts = MutateParts::decode(wire.as_slice()).expect("decodes");
        assert_eq!(
            parts.rollout.as_deref(),
            Some(request().encode_to_vec().as_slice())
        );
        // Re-encoded, the parts are the full message's bytes.
        assert_eq!(parts.encode_to_vec(), wire);
        // An absent rollout stays absent, an empty one stays present.
        for rollout in [None, Some(RolloutPluginRequest::default())] {
            let m = MutateManifestWorkRequest {
                rollout,
                manifest_work: Bytes::new(),
            };
            let parts = MutateParts::decode(m.encode_to_vec().as_slice()).expect("decodes");
            assert_eq!(parts.encode_to_vec(), m.encode_to_vec());
        }
    }

    fn counted() -> RolloutPluginRequest {
        RolloutPluginRequest {
            counts: Some(crate::v1alpha1::RolloutCounts {
                succeeded: 1,
                progressing: 1,
                removed: 1,
                ..Default::default()
            }),
            ..request()
        }
    }

    /// Appends a field key.
    fn key(out: &mut Vec<u8>, number: u32, wire_type: u8) {
        let mut b = BytesMut::new();
        put_varint(&mut b, u64::from(number) << 3 | u64::from(wire_type));
        out.extend_from_slice(&b);
    }

    /// Unknown fields of every wire type, a group with a nested group included.
    fn unknown_fields() -> Vec<u8> {
        let mut out = Vec::new();
        key(&mut out, 100, VARINT);
        out.extend_from_slice(&[0xac, 0x02]);
        key(&mut out, 101, FIXED64);
        out.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        key(&mut out, 102, LENGTH_DELIMITED);
        out.extend_from_slice(&[3, b'n', b'e', b'w']);
        key(&mut out, 103, START_GROUP);
        key(&mut out, 1, VARINT);
        out.push(7);
        key(&mut out, 104, START_GROUP);
        key(&mut out, 104, END_GROUP);
        key(&mut out, 103, END_GROUP);
        key(&mut out, 105, FIXED32);
        out.extend_from_slice(&[9, 9, 9, 9]);
        out
    }

    #[test]
    fn dropping_the_state_is_prosts_encoding_without_it() {
        let full = Bytes::from(counted().encode_to_vec());
        let counts_only = without_rollout_status(&full).expect("walks");
        let expected = RolloutPluginRequest {
            rollout_status: None,
            ..counted()
        };
        assert_eq!(counts_only, expected.encode_to_vec());
        // The counts are untouched.
        let back = RolloutPluginRequest::decode(counts_only).expect("decodes");
        assert_eq!(back.counts, counted().counts);
    }

    #[test]
    fn a_request_without_state_is_passed_on_not_copied() {
        let request = Bytes::from(
            RolloutPluginRequest {
                rollout_status: None,
                ..counted()
            }
            .encode_to_vec(),
        );
        let same = without_rollout_status(&request).expect("walks");
        assert_eq!(same.as_ptr(), request.as_ptr());
        assert_eq!(same.len(), request.len());
        let validate = Bytes::from(
            ValidateCompletionRequest {
                rollout: Some(RolloutPluginRequest::decode(request).expect("decodes")),
            }
            .encode_to_vec(),
        );
        let same = validate_without_rollout_status(&validate).expect("walks");
        assert_eq!(same.as_ptr(), validate.as_ptr());
    }

    #[test]
    fn every_other_byte_is_kept_in_place_unknown_fields_included() {
        // unknown fields, then the state split in two occurrences (a parser
        // merges them), with known and unknown fields around and between.
        let state = |name: &str| {
            RolloutState {
                completed: vec![ClusterRolloutStatus {
                    cluster_name: name.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }
            .encode_to_vec()
        };
        let head = RolloutPluginRequest {
            mwrs_name: "web".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let tail = RolloutPluginRequest {
            cluster_index: 4,
            counts: counted().counts,
            ..Default::default()
        }
        .encode_to_vec();
        let mut message = Vec::new();
        let mut expected = Vec::new();
        for part in [&head, &unknown_fields()] {
            message.extend_from_slice(part);
            expected.extend_from_slice(part);
        }
        for name in ["c1", "c2"] {
            let body = state(name);
            key(&mut message, ROLLOUT_STATUS_FIELD, LENGTH_DELIMITED);
            message.push(body.len() as u8);
            message.extend_from_slice(&body);
            message.extend_from_slice(&tail);
            expected.extend_from_slice(&tail);
        }
        let message = Bytes::from(message);
        assert_eq!(without_rollout_status(&message).expect("walks"), expected);

        // The same request inside a ValidateCompletionRequest, with unknown
        // fields of its own around it.
        let mut outer = unknown_fields();
        key(&mut outer, ROLLOUT_FIELD, LENGTH_DELIMITED);
        let mut len = BytesMut::new();
        put_varint(&mut len, message.len() as u64);
        let mut expected_outer = outer.clone();
        outer.extend_from_slice(&len);
        outer.extend_from_slice(&message);
        let mut len = BytesMut::new();
        put_varint(&mut len, expected.len() as u64);
        expected_outer.extend_from_slice(&len);
        expected_outer.extend_from_slice(&expected);
        outer.extend_from_slice(&unknown_fields());
        expected_outer.extend_from_slice(&unknown_fields());
        let outer = Bytes::from(outer);
        assert_eq!(
            validate_without_rollout_status(&outer).expect("walks"),
            expected_outer
        );
        // And prost agrees on the meaning.
        let decoded = ValidateCompletionRequest::decode(expected_outer.as_slice()).expect("ok");
        let rollout = decoded.rollout.expect("rollout");
        assert_eq!(rollout.rollout_status, None);
        assert_eq!(rollout.counts, counted().counts);
        assert_eq!(rollout.cluster_index, 4);
    }

    #[test]
    fn malformed_bytes_are_refused_naming_where() {
        let full = counted().encode_to_vec();
        // Every truncation inside a field is refused, never read past.
        let mut boundaries = vec![0];
        for field in Fields::new(&full) {
            boundaries.push(field.expect("valid").span.end);
        }
        for cut in 1..full.len() {
            let got = drop_field(&Bytes::copy_from_slice(&full[..cut]), ROLLOUT_STATUS_FIELD);
            assert_eq!(got.is_ok(), boundaries.contains(&cut), "cut at {cut}");
        }
        let bad =
            |bytes: &[u8]| drop_field(&Bytes::copy_from_slice(bytes), 6).expect_err("malformed");
        assert_eq!(
            bad(&[0x0f, 0]),
            WireError::InvalidWireType {
                wire_type: 7,
                at: 0
            }
        );
        assert_eq!(bad(&[0x08, 1, 0x0c]), WireError::UnbalancedGroup { at: 2 });
        assert_eq!(bad(&[0x00, 1]), WireError::InvalidKey { at: 0 });
        assert_eq!(bad(&[0x32, 5, 1]), WireError::Truncated { at: 0 });
        assert_eq!(bad(&[0x08; 11]), WireError::Truncated { at: 10 });
        // A group that never ends.
        assert!(matches!(bad(&[0x0b, 0x08, 1]), WireError::Truncated { .. }));
    }

    proptest::proptest! {
        /// Any bytes: no panic; when prost reads them as a request, the walk
        /// agrees, and its output is that request without its state.
        #[test]
        fn the_walk_agrees_with_prost(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let bytes = Bytes::from(bytes);
            let walked = without_rollout_status(&bytes);
            if let Ok(request) = RolloutPluginRequest::decode(bytes.clone()) {
                let walked = walked.expect("prost accepted it");
                let back = RolloutPluginRequest::decode(walked).expect("still a request");
                proptest::prop_assert_eq!(back, RolloutPluginRequest { rollout_status: None, ..request });
            }
        }
    }

    #[test]
    fn nesting_is_counted_outside_strings_as_serde_json_bounds_it() {
        let max = MAX_PLUGIN_CONFIG_DEPTH;
        let nested = |d: usize| format!("{}1{}", r#"{"a":["#.repeat(d / 2), "]}".repeat(d / 2));
        for depth in [max - 1, max, max + 1] {
            let json = if depth % 2 == 0 {
                nested(depth)
            } else {
                format!("{{\"x\":{}}}", nested(depth - 1))
            };
            let serde = serde_json::from_str::<serde_json::Value>(&json).is_ok();
            assert_eq!(
                !nests_deeper_than(json.as_bytes(), max),
                serde,
                "depth {depth}: serde_json reads it: {serde}"
            );
            assert_eq!(serde, depth <= max, "depth {depth}");
        }
        assert!(!nests_deeper_than(br#"{"a":"[[[[{{{{\"[["}"#, 1));
        assert!(nests_deeper_than(br#"{"a":"\\",["#, 1));
    }
}
