//! Label and finalizer keys, and label values that always fit.
//!
//! A ManifestWorkReplicaSet marks each ManifestWork it owns with
//! [`MWRS_OWNER_LABEL`]` = <namespace>.<name>`, as OCM does. A label value
//! holds at most 63 characters. A set whose `<namespace>.<name>` is longer
//! gets no works at all: the reconcile stops with ManifestworkApplied False,
//! reason `InvalidManifestWorkName`, as OCM's controller does. The hashed
//! value [`owner_label_value`] makes for it is only to name the value that
//! could not be written (and to find works an earlier version wrote under
//! it, which the finalizer still deletes); no work is labelled with it.

use std::fmt;

/// On a ManifestWork: the owning ManifestWorkReplicaSet, as
/// `<namespace>.<name>` (never longer than a label value: a set whose value
/// would be gets no works, see [`owner_label_value`]).
pub const MWRS_OWNER_LABEL: &str = "work.open-cluster-management.io/manifestworkreplicaset";

/// On a ManifestWork: the placement that selected its cluster.
pub const PLACEMENT_NAME_LABEL: &str = "work.open-cluster-management.io/placementname";

/// On a ManifestWork and a ControllerRevision: the hash of the template
/// revision (rollback design).
pub const CONTROLLER_HASH_LABEL: &str = "work.open-cluster-management.io/controller-hash";

/// On a ManifestWorkReplicaSet: kept until its ManifestWorks are cleaned up.
pub(crate) const MANIFEST_WORK_CLEANUP_FINALIZER: &str =
    "work.open-cluster-management.io/manifest-work-cleanup";

/// On a PlacementDecision: its placement's name.
pub const PLACEMENT_LABEL: &str = "cluster.open-cluster-management.io/placement";

/// On a PlacementDecision: the index of its decision group (an int32).
pub(crate) const DECISION_GROUP_INDEX_LABEL: &str =
    "cluster.open-cluster-management.io/decision-group-index";

/// On a PlacementDecision: the name of its decision group (may be empty).
pub(crate) const DECISION_GROUP_NAME_LABEL: &str =
    "cluster.open-cluster-management.io/decision-group-name";

/// The longest label value Kubernetes accepts.
pub(crate) const MAX_LABEL_VALUE_LEN: usize = 63;

/// Length of the hash suffix of a hashed label value: 16 hex digits.
const HASH_LEN: usize = 16;

/// A label value that had to be replaced by a hashed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashedLabelValue {
    /// The value as it would have been.
    pub(crate) original: String,
    /// The value used instead.
    pub(crate) value: String,
}

impl HashedLabelValue {}

impl fmt::Display for HashedLabelValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.original.chars().count();
        if len > MAX_LABEL_VALUE_LEN {
            write!(
                f,
                "label value {:?} has {len} characters, more than {MAX_LABEL_VALUE_LEN}; {:?} is used instead",
                self.original, self.value
            )
        } else {
            write!(
                f,
                "{:?} is not a valid label value; {:?} is used instead",
                self.original, self.value
            )
        }
    }
}

/// The [`MWRS_OWNER_LABEL`] value for the ManifestWorkReplicaSet
/// `namespace/name`: `<namespace>.<name>`, as upstream, when that is a valid
/// label value; otherwise the hashed value of [`label_value`], with the
/// reason.
pub(crate) fn owner_label_value(namespace: &str, name: &str) -> (String, Option<HashedLabelValue>) {
    label_value(&format!("{namespace}.{name}"))
}

/// `raw` itself when it is a valid label value, else a valid value derived
/// from it, with the reason.
///
/// The derived value is a readable prefix of `raw` (its invalid characters
/// turned into `-`, trimmed to start and end with a letter or digit), a `-`,
/// and 16 hex digits of the FNV-1a 64-bit hash of `raw`: at most 63
/// characters, the same for the same `raw`, and different for two `raw`
/// values unless their hashes collide.
pub(crate) fn label_value(raw: &str) -> (String, Option<HashedLabelValue>) {
    if is_valid_label_value(raw) {
        return (raw.to_owned(), None);
    }
    let hash = format!("{:016x}", fnv1a64(raw.as_bytes()));
    let sanitized: String = raw
        .chars()
        .map(|c| if is_label_char(c) { c } else { '-' })
        .collect();
    // All ASCII now, so byte and character positions agree.
    let prefix_len = MAX_LABEL_VALUE_LEN - HASH_LEN - 1;
    let prefix = sanitized[..sanitized.len().min(prefix_len)]
        .trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let value = if prefix.is_empty() {
        hash
    } else {
        format!("{prefix}-{hash}")
    };
    (
        value.clone(),
        Some(HashedLabelValue {
            original: raw.to_owned(),
            value,
        }),
    )
}

/// Whether Kubernetes accepts `value` as a label value: empty, or at most 63
/// of `[A-Za-z0-9_.-]`, beginning and ending with a letter or digit.
pub(crate) fn is_valid_label_value(value: &str) -> bool {
    if value.is_empty() {
        return true;
    }
    let bytes = value.as_bytes();
    value.len() <= MAX_LABEL_VALUE_LEN
        && value.chars().all(is_label_char)
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_known_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn short_owner_values_are_upstream_values() {
        assert_eq!(
            owner_label_value("default", "hello"),
            ("default.hello".into(), None)
        );
        // Exactly 63 characters still fits.
        let name = "n".repeat(63 - "default.".len());
        let (value, hashed) = owner_label_value("default", &name);
        assert_eq!(value, format!("default.{name}"));
        assert_eq!(value.len(), 63);
        assert_eq!(hashed, None);
    }

    #[test]
    fn long_owner_values_are_hashed_with_a_reason() {
        let name = "n".repeat(64 - "default.".len());
        let (value, hashed) = owner_label_value("default", &name);
        let hashed = hashed.expect("64 characters is too long");
        assert_eq!(hashed.original, format!("default.{name}"));
        assert_eq!(hashed.value, value);
        assert!(is_valid_label_value(&value), "{value}");
        assert_eq!(value.len(), 63);
        assert!(value.starts_with("default.nnn"), "{value}");
        assert_eq!(
            value,
            format!(
                "{}-{:016x}",
                &hashed.original[..46],
                fnv1a64(hashed.original.as_bytes())
            )
        );
        assert_eq!(
            hashed.to_string(),
            format!(
                "label value \"default.{name}\" has 64 characters, more than 63; \"{value}\" is used instead"
            )
        );
        // Stable, and distinct for names sharing the readable prefix.
        assert_eq!(owner_label_value("default", &name).0, value);
        let other = owner_label_value("default", &format!("{name}x")).0;
        assert_ne!(other, value);
        assert_eq!(other[..46], value[..46]);
    }

    #[test]
    fn derived_values_are_always_valid() {
        // (raw, want prefix of the derived value, or None when kept)
        let cases: &[(&str, Option<&str>)] = &[
            ("", None),
            ("a", None),
            ("a.b-c_d", None),
            ("-a", Some("a-")),
            ("a.", Some("a-")),
            ("a/b", Some("a-b-")),
            ("ä", Some("")),
            ("---", Some("")),
        ];
        for (raw, want) in cases {
            let (value, hashed) = label_value(raw);
            assert!(is_valid_label_value(&value), "{raw:?} gave {value:?}");
            match want {
                None => {
                    assert_eq!(&value, raw);
                    assert_eq!(hashed, None);
                }
                Some(prefix) => {
                    assert!(value.starts_with(prefix), "{raw:?} gave {value:?}");
                    assert_eq!(value.len(), prefix.len() + HASH_LEN);
                    let message = hashed.expect("derived").to_string();
                    assert!(message.contains("is not a valid label value"), "{message}");
                }
            }
        }
        // A long prefix whose cut lands on separators is trimmed back to an
        // alphanumeric.
        let raw = format!("{}..{}", "a".repeat(44), "b".repeat(40));
        let (value, _) = label_value(&raw);
        assert!(
            value.starts_with(&format!("{}-", "a".repeat(44))),
            "{value}"
        );
        assert!(is_valid_label_value(&value));
    }

    #[test]
    fn validity() {
        let long = "a".repeat(64);
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("A9", true),
            ("a_b.c-d", true),
            ("_a", false),
            ("a_", false),
            ("a b", false),
            ("a/b", false),
            (&long, false),
            (&long[..63], true),
        ];
        for (value, want) in cases {
            assert_eq!(is_valid_label_value(value), *want, "{value:?}");
        }
    }
}
