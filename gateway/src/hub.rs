//! [`Hub`]: the name of an OCM hub, the one type for it everywhere in the
//! gateway.
//!
//! In central mode a caller is a hub: its client certificate names it
//! ([`crate::tls::hub_of`]), a registry file's `hub:` scopes names to it, a
//! plugin's `hubs:` lists the hubs that may call it, and what a plugin
//! declares in Initialize is kept per hub. "No hub" is `Option::None`
//! throughout (a sidecar's caller, a shared file, a certificate naming no
//! hub); [`label`] is the one place that spells it as text, the empty string
//! of the metrics' `hub` label and of Initialize's `hub_name`.
//!
//! A `Hub` is cheap to clone (a shared `str`), so that a connection, a
//! snapshot and a call share one allocation; it borrows as `str`, so that
//! maps keyed by hub are read with a caller's `&str` without building one.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

/// A hub's name, normalised as DNS compares names ([`Hub::normalised`]).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hub(Arc<str>);

impl Hub {
    /// A hub named `name`, as it is spelled. A registry file's `hub:` is
    /// checked by the validator to be a DNS label already in this form.
    pub fn new(name: &str) -> Hub {
        Hub(Arc::from(name))
    }

    /// `name` as DNS compares it: case-insensitive, a trailing dot the same
    /// name (`HUB-A` and `hub-a.` are `hub-a`, the spelling a registry
    /// file's `hub:` must have). `None` when nothing is left.
    pub fn normalised(name: &str) -> Option<Hub> {
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        (!name.is_empty()).then(|| Hub(Arc::from(name)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `hub`'s name as a label or field: the empty string for no hub.
pub fn label(hub: Option<&Hub>) -> &str {
    hub.map_or("", Hub::as_str)
}

impl Borrow<str> for Hub {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Hub {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Hub {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Hub {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl fmt::Display for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// As its name: `/debug/plugins` shows a plugin's hub as a string.
impl serde::Serialize for Hub {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl From<&str> for Hub {
    fn from(name: &str) -> Hub {
        Hub::new(name)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn a_name_is_normalised_as_dns_compares_it() {
        assert_eq!(
            Hub::normalised("HUB-A").as_ref().map(Hub::as_str),
            Some("hub-a")
        );
        assert_eq!(
            Hub::normalised("hub-a.").as_ref().map(Hub::as_str),
            Some("hub-a")
        );
        assert_eq!(Hub::normalised("."), None);
        assert_eq!(Hub::normalised(""), None);
    }

    #[test]
    fn a_map_keyed_by_hub_is_read_with_a_str() {
        let map = HashMap::from([(Hub::new("hub-a"), 1)]);
        assert_eq!(map.get("hub-a"), Some(&1));
        assert_eq!(map.get("hub-b"), None);
    }

    #[test]
    fn no_hub_is_the_empty_label() {
        assert_eq!(label(None), "");
        assert_eq!(label(Some(&Hub::new("hub-a"))), "hub-a");
    }

    #[test]
    fn debug_shows_the_name_as_a_string() {
        assert_eq!(format!("{:?}", Some(Hub::new("hub-a"))), "Some(\"hub-a\")");
    }
}
