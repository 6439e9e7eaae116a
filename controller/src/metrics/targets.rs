//! The `target` label of a hook call: the plugin or pipeline name only once
//! the gateway has resolved it, else one bounded value. The name comes from
//! a ManifestWorkReplicaSet, which anyone who may write one in any namespace
//! chooses; labelled as given, each new name (10,000 characters long, or
//! one per object) would be a series of its own for the life of the
//! process.

use std::collections::HashSet;
use std::sync::Mutex;

use tonic::Code;

use crate::hooks::HookError;

/// The `target` of calls to names the gateway did not resolve (not
/// registered, not allowed, malformed), or made when no answer came.
pub(crate) const UNREGISTERED_TARGET: &str = "unregistered";

/// At most this many names are labelled as themselves; calls to names
/// resolved after them count under [`UNREGISTERED_TARGET`]. A registry
/// rarely has more than a few dozen plugins and pipelines.
pub(crate) const MAX_NAMED_TARGETS: usize = 128;

/// The names the gateway has resolved, as far as the controller has seen.
#[derive(Debug, Default)]
pub(crate) struct Targets {
    resolved: Mutex<HashSet<String>>,
}

impl Targets {
    /// The label of a call to `target` that ended with `error` (`None`:
    /// OK). A call's answer that the gateway could only give having found
    /// the target (OK, a plugin's own error, an open circuit, a deadline
    /// the gateway enforced) resolves it; `NOT_FOUND`, `INVALID_ARGUMENT`,
    /// `PERMISSION_DENIED` and `UNAUTHENTICATED` may be the gateway refusing
    /// the name, and a call without an answer says nothing of it. (A plugin
    /// of its own answering one of those four is labelled by name once any
    /// other call to it has resolved it.)
    pub(crate) fn label(&self, target: &str, error: Option<&HookError>) -> String {
        let mut resolved = self
            .resolved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if resolved.contains(target) {
            return target.to_owned();
        }
        if resolves(error) && resolved.len() < MAX_NAMED_TARGETS {
            resolved.insert(target.to_owned());
            return target.to_owned();
        }
        UNREGISTERED_TARGET.to_owned()
    }
}

/// Whether a call ending with `error` shows that the gateway resolved its
/// target.
fn resolves(error: Option<&HookError>) -> bool {
    match error {
        None => true,
        Some(e) if !e.origin.answered() => false,
        Some(e) => !matches!(
            e.code,
            Code::NotFound | Code::InvalidArgument | Code::PermissionDenied | Code::Unauthenticated
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::Origin;
    use rollout_proto::HookKind;

    fn error(code: Code, origin: Origin) -> HookError {
        HookError {
            hook: HookKind::Initialize,
            code,
            message: String::new(),
            origin,
        }
    }

    #[test]
    fn only_answers_of_a_found_target_name_it() {
        let targets = Targets::default();
        for (code, origin, named) in [
            (Code::NotFound, Origin::Answer, false),
            (Code::InvalidArgument, Origin::Answer, false),
            (Code::PermissionDenied, Origin::Answer, false),
            (Code::Unauthenticated, Origin::Answer, false),
            (Code::Unavailable, Origin::Transport, false),
            (Code::DeadlineExceeded, Origin::Transport, false),
            (
                Code::Unavailable,
                Origin::Tls(crate::hooks::TlsFailure::NotTls),
                false,
            ),
            (Code::Unavailable, Origin::Answer, true),
            (Code::Internal, Origin::Answer, true),
        ] {
            let name = format!("{code:?}-{origin:?}");
            let want = if named {
                name.as_str()
            } else {
                UNREGISTERED_TARGET
            };
            assert_eq!(targets.label(&name, Some(&error(code, origin))), want);
        }
        assert_eq!(targets.label("ok", None), "ok");
        // Once resolved, its refusals keep its name.
        assert_eq!(
            targets.label("ok", Some(&error(Code::NotFound, Origin::Answer))),
            "ok"
        );
    }

    #[test]
    fn named_targets_are_bounded() {
        let targets = Targets::default();
        for i in 0..MAX_NAMED_TARGETS {
            assert_eq!(targets.label(&format!("p{i}"), None), format!("p{i}"));
        }
        assert_eq!(targets.label("one-more", None), UNREGISTERED_TARGET);
        assert_eq!(targets.label("p0", None), "p0");
    }
}
