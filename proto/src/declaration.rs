//! What a plugin's `InitializeResponse.hooks` declares, and what that means
//! for each hook: the one rule the gateway and `rollout-plugin-check` share,
//! so they read every declaration alike.
//!
//! A plugin is *loaded* once its `Initialize` answered OK with a valid
//! declaration: every value among the four hooks (`HOOK_UNSPECIFIED` and
//! numbers outside the enum make it invalid). Then, for each hook:
//!
//! | declaration | hook | decision |
//! |---|---|---|
//! | not loaded (no valid answer yet) | any | [`Decision::InitializeFirst`]: load it, or fail; never skip |
//! | empty list (every hook) | any | call; UNIMPLEMENTED means "not implemented" (neutral) |
//! | non-empty list naming it | it | call; UNIMPLEMENTED is the plugin's failure |
//! | non-empty list leaving it out | it | [`Decision::Skip`]: not called, neutral |
//!
//! Anything else that is not the plugin's own answer (Initialize failing,
//! UNIMPLEMENTED included) is the plugin's failure under its failure policy.

use crate::HookKind;
use crate::v1alpha1::{Hook, InitializeResponse};

/// A valid declaration: the hooks a loaded plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Declaration {
    /// One bit per hook (bit = the `Hook` value, 1 to 4).
    listed: u8,
    /// The list was empty: every hook, UNIMPLEMENTED read as "not implemented".
    every: bool,
}

/// Why a declaration is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclarationError {
    /// A value that is not one of the four hooks (`HOOK_UNSPECIFIED` = 0, or
    /// a number the enum does not have).
    #[error(
        "InitializeResponse.hooks holds {value}, which is not a hook (1 to 4: BeginRollout, ProgressRollout, ValidateRolloutCompletion, MutateManifestWork)"
    )]
    NotAHook { value: i32 },
}

/// What to do with one hook call to one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The plugin is not loaded: its Initialize must succeed first; until it
    /// does, the hook is that plugin's failure.
    InitializeFirst,
    /// The plugin declared it does not implement the hook: not called,
    /// neutral result.
    Skip,
    /// Call it. `unimplemented_skips`: an UNIMPLEMENTED answer means the
    /// plugin does not implement the hook (neutral); otherwise it is the
    /// plugin's failure.
    Call { unimplemented_skips: bool },
}

impl Declaration {
    /// Reads a declaration, refusing any value that is not one of the four hooks.
    pub fn parse(hooks: &[i32]) -> Result<Declaration, DeclarationError> {
        let mut listed = 0u8;
        for &value in hooks {
            match Hook::try_from(value) {
                Ok(hook) if hook != Hook::Unspecified => listed |= 1 << value,
                _ => return Err(DeclarationError::NotAHook { value }),
            }
        }
        Ok(Declaration {
            listed,
            every: hooks.is_empty(),
        })
    }

    /// The declaration of an `InitializeResponse`.
    pub fn of(answer: &InitializeResponse) -> Result<Declaration, DeclarationError> {
        Declaration::parse(&answer.hooks)
    }

    /// The decision for `kind` under this declaration (Initialize is always called).
    pub fn decide(&self, kind: HookKind) -> Decision {
        let Some(hook) = kind.proto_hook() else {
            return Decision::Call {
                unimplemented_skips: false,
            };
        };
        if self.every {
            Decision::Call {
                unimplemented_skips: true,
            }
        } else if self.listed & (1 << hook as u8) != 0 {
            Decision::Call {
                unimplemented_skips: false,
            }
        } else {
            Decision::Skip
        }
    }

    /// Whether every hook was declared (an empty list).
    pub fn is_every(&self) -> bool {
        self.every
    }

    /// The hooks that may be called, in the proto's order (all four for an
    /// empty list).
    pub fn hooks(&self) -> Vec<Hook> {
        Hook::ALL
            .into_iter()
            .filter(|h| self.every || self.listed & (1 << *h as u8) != 0)
            .collect()
    }
}

/// The decision for `kind` given what is known: `None` = not loaded.
pub fn decide(loaded: Option<&Declaration>, kind: HookKind) -> Decision {
    match loaded {
        None => Decision::InitializeFirst,
        Some(d) => d.decide(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL_SKIPS: Decision = Decision::Call {
        unimplemented_skips: true,
    };
    const CALL_STRICT: Decision = Decision::Call {
        unimplemented_skips: false,
    };

    #[test]
    fn every_declaration_decides_each_hook() {
        use HookKind::{
            BeginRollout as B, MutateManifestWork as M, ValidateRolloutCompletion as V,
        };
        let v = Hook::ValidateRolloutCompletion as i32;
        let m = Hook::MutateManifestWork as i32;
        // (declared hooks, hook, decision)
        let table: &[(&[i32], HookKind, Decision)] = &[
            (&[], V, CALL_SKIPS),
            (&[], M, CALL_SKIPS),
            (&[v], V, CALL_STRICT),
            (&[v], B, Decision::Skip),
            (&[v], M, Decision::Skip),
            (&[m, m], M, CALL_STRICT),
            (&[m, v], V, CALL_STRICT),
            (&[v], HookKind::Initialize, CALL_STRICT),
        ];
        for (hooks, kind, want) in table {
            let declaration = Declaration::parse(hooks).expect("valid");
            assert_eq!(declaration.decide(*kind), *want, "{hooks:?} {kind}");
            assert_eq!(decide(Some(&declaration), *kind), *want);
        }
    }

    #[test]
    fn values_that_are_not_hooks_make_the_declaration_invalid() {
        for hooks in [&[0][..], &[0, 3], &[3, 9], &[-1], &[5]] {
            let bad = hooks.iter().find(|v| !(1..=4).contains(*v)).copied();
            assert_eq!(
                Declaration::parse(hooks),
                Err(DeclarationError::NotAHook {
                    value: bad.unwrap_or_default()
                }),
                "{hooks:?}"
            );
        }
    }

    #[test]
    fn a_plugin_not_loaded_is_never_skipped() {
        for kind in HookKind::ALL {
            assert_eq!(decide(None, kind), Decision::InitializeFirst);
        }
    }

    #[test]
    fn hooks_lists_what_may_be_called() {
        let every = Declaration::parse(&[]).expect("valid");
        assert_eq!(every.hooks(), Hook::ALL.to_vec());
        assert!(every.is_every());
        let one = Declaration::parse(&[Hook::MutateManifestWork as i32]).expect("valid");
        assert_eq!(one.hooks(), vec![Hook::MutateManifestWork]);
        assert!(!one.is_every());
    }
}
