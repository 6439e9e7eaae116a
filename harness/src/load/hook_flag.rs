//! A hook as the load generator spells it: on the command line (`--hook
//! mutate`) and in a run's JSON (`"hook": "mutate"`), the plugin API's
//! calls ([`HookKind`]) by short names.

use rollout_proto::HookKind;
use serde::{Deserialize, Deserializer, Serializer};

/// Each call's short name.
const NAMES: [(HookKind, &str); 5] = [
    (HookKind::MutateManifestWork, "mutate"),
    (HookKind::ValidateRolloutCompletion, "validate"),
    (HookKind::BeginRollout, "begin"),
    (HookKind::ProgressRollout, "progress"),
    (HookKind::Initialize, "initialize"),
];

/// `hook`'s short name (`mutate`, `validate`, ...).
pub fn name(hook: HookKind) -> &'static str {
    NAMES
        .iter()
        .find(|(kind, _)| *kind == hook)
        .map_or("", |(_, name)| name)
}

/// The call a short name names: clap's value parser for `--hook`.
pub fn parse(text: &str) -> Result<HookKind, String> {
    NAMES
        .iter()
        .find(|(_, name)| *name == text)
        .map(|(kind, _)| *kind)
        .ok_or_else(|| {
            let names: Vec<&str> = NAMES.iter().map(|(_, name)| *name).collect();
            format!("\"{text}\" is not a hook: one of {}", names.join(", "))
        })
}

/// Serde's `with` for a [`HookKind`] written by its short name.
pub fn serialize<S: Serializer>(hook: &HookKind, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(name(*hook))
}

/// Serde's `with` for a [`HookKind`] read by its short name.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<HookKind, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_has_one_short_name_that_parses_back() {
        for kind in HookKind::ALL {
            assert_eq!(parse(name(kind)), Ok(kind), "{kind}");
        }
        assert!(parse("Mutate").is_err());
    }
}
