//! gRPC framing: `grpc::decode` of a `MutateManifestWorkRequest` (the
//! largest message, holding the ManifestWork) from any body, under a limit
//! taken from the input; what decodes must encode back to the same message.
//! The header parsers run on the same bytes.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rollout_gateway::transport::grpc;
use rollout_proto::v1alpha1::{MutateManifestWorkRequest, MutateManifestWorkResponse};

fuzz_target!(|data: &[u8]| {
    // The first two bytes choose the limit, so that both sides of it are hit.
    let (limit, body) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), rest),
        _ => (usize::MAX, data),
    };
    let body = Bytes::copy_from_slice(body);
    if let Ok(len) = grpc::message_len(&body, limit) {
        assert!(len <= limit);
    }
    if let Ok(m) = grpc::decode::<MutateManifestWorkRequest>(body.clone(), limit) {
        let again = grpc::flatten(grpc::encode(&m));
        let back = grpc::decode::<MutateManifestWorkRequest>(again, usize::MAX)
            .expect("what decoded encodes and decodes again");
        assert_eq!(back, m);
        let head = MutateManifestWorkRequest {
            rollout: m.rollout.clone(),
            manifest_work: Bytes::new(),
        };
        assert_eq!(
            grpc::flatten(grpc::encode_with_tail(&head, 2, m.manifest_work.clone())),
            grpc::flatten(grpc::encode(&m))
        );
    }
    let _ = grpc::decode::<MutateManifestWorkResponse>(body.clone(), limit);

    if let Ok(text) = std::str::from_utf8(&body) {
        if let Some(d) = grpc::parse_timeout(text) {
            assert!(
                text.is_ascii() && (2..=9).contains(&text.len()),
                "{text:?} -> {d:?}"
            );
        }
        let _ = grpc::percent_decode(text);
        assert_eq!(grpc::percent_decode(&grpc::percent_encode(text)), text);
    }
});
