//! What the gateway has learned of one plugin from its `Initialize` answers,
//! kept per hub: in central mode each hub's Initialize tells the plugin
//! which hub calls (`hub_name`), and the plugin may declare other hooks to
//! each. What one hub's answer says never decides another hub's calls.
//!
//! The rule that turns a declaration into a decision per hook is
//! [`rollout_proto::declaration`]'s, shared with `rollout-plugin-check`.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rollout_proto::HookKind;
use rollout_proto::declaration::{self, Decision, Declaration, DeclarationError};
use rollout_proto::v1alpha1::{InitializeResponse, RolloutStateDetail};

use crate::hub::{self, Hub};

/// What is known of a plugin for one hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Load {
    /// No Initialize has succeeded for this hub yet. `why`: the last
    /// failure, if one failed; `refused`: the plugin answered, and the answer
    /// says it is not a plugin (UNIMPLEMENTED, or an invalid declaration),
    /// rather than being out of reach for a while.
    NotLoaded {
        why: Option<Arc<str>>,
        refused: bool,
    },
    /// Its Initialize answered OK with a valid declaration.
    Loaded {
        declaration: Declaration,
        counts_only: bool,
    },
}

impl Load {
    const UNKNOWN: Load = Load::NotLoaded {
        why: None,
        refused: false,
    };
}

/// Hubs remembered per plugin; past this, a new hub's answers are not kept
/// (its calls load the plugin each time). Hubs are named by certificates the
/// client CA signed, so this bounds a misconfiguration, not an attack.
const MAX_HUBS: usize = 1024;

/// Each hub's [`Load`] (the key: the hub the caller's certificate names; ""
/// for callers without one and for the gateway's own Initialize of a shared
/// plugin). Read on every call without a lock; written on Initialize answers.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    by_hub: ArcSwap<HashMap<Box<str>, Load>>,
}

fn key(hub: Option<&Hub>) -> &str {
    hub::label(hub)
}

impl Learned {
    /// What is known for `hub`.
    pub(crate) fn load(&self, hub: Option<&Hub>) -> Load {
        self.by_hub
            .load()
            .get(key(hub))
            .cloned()
            .unwrap_or(Load::UNKNOWN)
    }

    /// Every hub's state, for `/debug/plugins` ("" = no hub).
    pub(crate) fn all(&self) -> Vec<(String, Load)> {
        let mut all: Vec<(String, Load)> = self
            .by_hub
            .load()
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The decision for a call of `kind` from `hub`.
    pub(crate) fn decide(&self, hub: Option<&Hub>, kind: HookKind) -> Decision {
        let map = self.by_hub.load();
        let declaration = match map.get(key(hub)) {
            Some(Load::Loaded { declaration, .. }) => Some(declaration),
            _ => None,
        };
        declaration::decide(declaration, kind)
    }

    /// Whether the plugin declared, for `hub`, that it wants the counts only.
    pub(crate) fn counts_only(&self, hub: Option<&Hub>) -> bool {
        matches!(
            self.by_hub.load().get(key(hub)),
            Some(Load::Loaded {
                counts_only: true,
                ..
            })
        )
    }

    /// Records an OK `InitializeResponse` from `hub`'s Initialize: loaded
    /// with its declaration, or not loaded (refused) when the declaration is
    /// invalid.
    pub(crate) fn learn(
        &self,
        hub: Option<&Hub>,
        answer: &InitializeResponse,
    ) -> Result<Declaration, DeclarationError> {
        let parsed = Declaration::of(answer);
        let load = match &parsed {
            Ok(declaration) => Load::Loaded {
                declaration: *declaration,
                counts_only: answer.state_detail() == RolloutStateDetail::Counts,
            },
            Err(e) => Load::NotLoaded {
                why: Some(Arc::from(e.to_string())),
                refused: true,
            },
        };
        self.store(hub, |_| Some(load.clone()));
        parsed
    }

    /// Records a failed Initialize from `hub`. A plugin refused (`refused`)
    /// is not loaded any more; a transient failure (unreachable, timed out)
    /// keeps a plugin loaded that was, and is recorded otherwise.
    pub(crate) fn failed(&self, hub: Option<&Hub>, why: &str, refused: bool) {
        let why: Arc<str> = Arc::from(why);
        self.store(hub, |current| match current {
            Some(Load::Loaded { .. }) if !refused => None,
            _ => Some(Load::NotLoaded {
                why: Some(why.clone()),
                refused,
            }),
        });
    }

    /// Replaces `hub`'s entry with `change(current)`, when it gives one.
    fn store(&self, hub: Option<&Hub>, change: impl Fn(Option<&Load>) -> Option<Load>) {
        let key = key(hub);
        self.by_hub.rcu(|map| {
            let mut map = HashMap::clone(map);
            if let Some(new) = change(map.get(key))
                && (map.len() < MAX_HUBS || map.contains_key(key))
            {
                map.insert(key.into(), new);
            }
            map
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_proto::v1alpha1::Hook;

    fn declaring(hooks: &[Hook]) -> InitializeResponse {
        InitializeResponse {
            name: "p".into(),
            hooks: hooks.iter().map(|h| *h as i32).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn each_hub_keeps_its_own_declaration() {
        let learned = Learned::default();
        let v = HookKind::ValidateRolloutCompletion;
        assert_eq!(
            learned.decide(Some(&Hub::new("hub-b")), v),
            Decision::InitializeFirst
        );
        learned
            .learn(
                Some(&Hub::new("hub-b")),
                &declaring(&[Hook::ValidateRolloutCompletion]),
            )
            .expect("valid");
        learned
            .learn(
                Some(&Hub::new("hub-a")),
                &declaring(&[Hook::MutateManifestWork]),
            )
            .expect("valid");
        assert_eq!(
            learned.decide(Some(&Hub::new("hub-b")), v),
            Decision::Call {
                unimplemented_skips: false
            }
        );
        assert_eq!(learned.decide(Some(&Hub::new("hub-a")), v), Decision::Skip);
        assert_eq!(learned.decide(None, v), Decision::InitializeFirst);
    }

    #[test]
    fn an_invalid_declaration_or_a_refusal_unloads_a_transient_failure_does_not() {
        let learned = Learned::default();
        let v = HookKind::ValidateRolloutCompletion;
        learned.learn(None, &declaring(&[])).expect("valid");
        learned.failed(None, "connection refused", false);
        assert!(matches!(learned.load(None), Load::Loaded { .. }));
        assert!(
            learned
                .learn(None, &declaring(&[Hook::Unspecified]))
                .is_err()
        );
        assert_eq!(learned.decide(None, v), Decision::InitializeFirst);
        assert!(matches!(
            learned.load(None),
            Load::NotLoaded { refused: true, .. }
        ));
        learned.learn(None, &declaring(&[])).expect("valid");
        learned.failed(None, "UNIMPLEMENTED", true);
        assert_eq!(learned.decide(None, v), Decision::InitializeFirst);
    }
}
