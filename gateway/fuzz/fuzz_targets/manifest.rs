//! The mutate chain's JSON handling: a plugin's answer and the caller's
//! ManifestWork, both from the input, through the checks the chain makes
//! (`manifest::parse_object` on both sides, then `identity_change`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rollout_gateway::manifest;

fuzz_target!(|data: &[u8]| {
    // Input and answer, split at the first NUL (JSON text holds none).
    let (input, output) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let out = manifest::parse_object(output);
    let inp = manifest::parse_object(input);
    if let Ok(v) = &out {
        assert!(matches!(v, manifest::Json::Object(_)));
        assert_eq!(manifest::identity_change(v, v), None);
        // Written out again, the same value, and the same identity.
        // `Json` borrows from its text: keep the text alive.
        let text = serde_json::to_vec(v).expect("serializes");
        let again = manifest::parse_object(&text).expect("what parsed once parses again");
        assert_eq!(manifest::identity_change(v, &again), None);
    }
    if let (Ok(i), Ok(o)) = (&inp, &out)
        && let Some((field, before, after)) = manifest::identity_change(i, o)
    {
        assert!(manifest::IDENTITY_FIELDS.iter().any(|(f, _)| *f == field));
        assert_ne!(before, after);
    }
});
