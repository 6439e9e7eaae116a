//! The Resolve layer: what the caller's target name stands for, for the
//! caller's hub, in one registry snapshot.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::HeaderMap;
use rollout_proto::PLUGIN_METADATA_KEY;
use tower::Service;

use super::{HookCall, Routed, Traced};
use crate::error::GatewayError;
use crate::registry::Registry;

/// See [`Resolve`].
#[derive(Debug, Clone)]
pub(crate) struct ResolveLayer {
    registry: Arc<Registry>,
}

impl ResolveLayer {
    pub(crate) fn new(registry: Arc<Registry>) -> ResolveLayer {
        ResolveLayer { registry }
    }
}

impl<S> tower::Layer<S> for ResolveLayer {
    type Service = Resolve<S>;

    fn layer(&self, inner: S) -> Resolve<S> {
        Resolve {
            inner,
            registry: self.registry.clone(),
        }
    }
}

/// Reads the target name (`ocm-rollout-plugin`) and resolves it for the
/// caller's hub (named by its certificate) in the current snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Resolve<S> {
    inner: S,
    registry: Arc<Registry>,
}

impl<S> Service<HookCall> for Resolve<S>
where
    S: Service<Routed, Response = Traced, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Traced;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Result<Traced, std::convert::Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), std::convert::Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut call: HookCall) -> Self::Future {
        let resolved = (|| {
            let name = target_name(&call.call.head.headers)?;
            call.span.set_target(&name);
            let hub = call.call.peer.identity.as_ref();
            if let Some(hub) = hub {
                call.span.set_hub(hub);
            }
            let snapshot = self.registry.load().ok_or(GatewayError::NotReady)?;
            let target = snapshot.resolve(hub, &name).map_err(GatewayError::from)?;
            Ok::<_, GatewayError>(target.clone())
        })();
        match resolved {
            Ok(target) => Box::pin(self.inner.call(Routed { call, target })),
            Err(error) => Box::pin(std::future::ready(Ok(Traced {
                outcome: Err(error.into()),
                span: call.span,
                target: None,
            }))),
        }
    }
}

/// The caller's target: exactly one `ocm-rollout-plugin`, a non-empty name
/// of printable ASCII, at most 253 characters.
fn target_name(headers: &HeaderMap) -> Result<String, GatewayError> {
    let mut values = headers.get_all(PLUGIN_METADATA_KEY).iter();
    let value = values.next().ok_or(GatewayError::MissingTarget)?;
    if values.next().is_some() {
        return Err(GatewayError::Header {
            name: PLUGIN_METADATA_KEY,
            why: "is sent more than once: name one plugin or pipeline",
        });
    }
    let name = value
        .to_str()
        .map_err(|_| GatewayError::InvalidTarget("not printable ASCII".into()))?
        .trim();
    if name.is_empty() {
        return Err(GatewayError::MissingTarget);
    }
    if name.len() > 253 {
        return Err(GatewayError::InvalidTarget(
            "longer than 253 characters".into(),
        ));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_one_non_empty_printable_name() {
        let mut h = HeaderMap::new();
        assert!(matches!(target_name(&h), Err(GatewayError::MissingTarget)));
        h.insert(PLUGIN_METADATA_KEY, " p ".parse().expect("value"));
        assert_eq!(target_name(&h).ok().as_deref(), Some("p"));
        h.append(PLUGIN_METADATA_KEY, "q".parse().expect("value"));
        let e = target_name(&h).expect_err("repeated");
        assert!(
            e.to_string()
                .contains("\"ocm-rollout-plugin\" is sent more than once"),
            "{e}"
        );
    }
}
