//! The Rescue layer, the top of the server stack: the one place a failure
//! becomes a gRPC status. The failure any layer below returns (a
//! [`CallFailure`]) is answered trailers-only, with the code its kind has
//! ([`CallFailure::code`]) and its message; what the layers below answered
//! themselves passes through untouched.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue};
use rollout_proto::FAILED_OPEN_METADATA_KEY;

use crate::error::{CallFailure, bounded};
use crate::transport::grpc;
use crate::transport::send::Answer;

/// The status of a failed call as the headers of a trailers-only answer:
/// `grpc-status` its code, `grpc-message` why, bounded ([`bounded`]: the
/// `[N bytes cut]` count is what the caller did not get), and
/// `ocm-rollout-failed-open` naming the members skipped under
/// `failurePolicy: Ignore` before it failed.
fn status_headers(failure: &CallFailure) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(3);
    grpc::put_status(
        &mut headers,
        failure.code(),
        &bounded(&failure.error.to_string()),
    );
    if !failure.failed_open.is_empty()
        && let Ok(names) = HeaderValue::from_str(&failure.failed_open.join(","))
    {
        headers.insert(HeaderName::from_static(FAILED_OPEN_METADATA_KEY), names);
    }
    headers
}

/// The rescue layer: the top of the server's stack, turning the failure of
/// any layer below into a trailers-only gRPC answer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RescueLayer;

impl<S> tower::Layer<S> for RescueLayer {
    type Service = Rescue<S>;

    fn layer(&self, inner: S) -> Rescue<S> {
        Rescue(inner)
    }
}

/// See [`RescueLayer`].
#[derive(Debug, Clone)]
pub(crate) struct Rescue<S>(S);

impl<S, R> tower::Service<R> for Rescue<S>
where
    S: tower::Service<R, Response = Answer, Error = CallFailure>,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Answer, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The layers below are always ready; a failure would be a call's.
        match self.0.poll_ready(cx) {
            Poll::Ready(_) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, request: R) -> Self::Future {
        let answering = self.0.call(request);
        Box::pin(async move {
            Ok(match answering.await {
                Ok(answer) => answer,
                Err(failure) => Answer::TrailersOnly(status_headers(&failure)),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use rollout_policies::merge::Failure;
    use tonic::Code;

    use super::*;
    use crate::error::{GatewayError, ResolveError};
    use crate::transport::grpc::FrameError;

    /// Rescue at its own level: over an inner service that answers
    /// whatever it is asked to (the request is the outcome).
    async fn rescued(outcome: Result<Answer, CallFailure>) -> Answer {
        use tower::{Layer as _, ServiceExt as _};
        let inner =
            tower::service_fn(|outcome: Result<Answer, CallFailure>| async move { outcome });
        match RescueLayer.layer(inner).oneshot(outcome).await {
            Ok(answer) => answer,
            Err(never) => match never {},
        }
    }

    fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
        headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Every failure below becomes a trailers-only answer whose
    /// `grpc-status` is the failure's code, and whose message says why.
    #[tokio::test]
    async fn rescue_answers_each_failure_with_its_status() {
        let rows: Vec<(&str, GatewayError, Code, &str)> = vec![
            (
                "no target",
                GatewayError::MissingTarget,
                Code::InvalidArgument,
                "ocm-rollout-plugin",
            ),
            (
                "an unknown method",
                GatewayError::UnknownMethod("/x.Y/Z".into()),
                Code::Unimplemented,
                "/x.Y/Z",
            ),
            (
                "no registry yet",
                GatewayError::NotReady,
                Code::Unavailable,
                "no plugin registry",
            ),
            (
                "an unknown name",
                ResolveError::NotFound {
                    name: "p".into(),
                    hub: Some("hub-a".into()),
                }
                .into(),
                Code::NotFound,
                "plugin \"p\" is not registered for hub \"hub-a\"",
            ),
            (
                "a plugin the hub may not call",
                ResolveError::PermissionDenied {
                    name: "q".into(),
                    plugin: "p".into(),
                    hub: None,
                }
                .into(),
                Code::PermissionDenied,
                "pipeline \"q\" uses plugin \"p\"",
            ),
            (
                "the caller's deadline passed while receiving",
                GatewayError::ReceiveTimeout {
                    waited: std::time::Duration::from_millis(250),
                    by_caller: true,
                },
                Code::DeadlineExceeded,
                "caller's deadline passed (250 ms)",
            ),
            (
                "a compressed request",
                GatewayError::Request(FrameError::Compressed),
                Code::Unimplemented,
                "",
            ),
            (
                "a plugin's own status passes through as data",
                GatewayError::plugin(
                    "p",
                    Failure {
                        code: Code::FailedPrecondition,
                        message: "not yet".into(),
                    },
                ),
                Code::FailedPrecondition,
                "not yet",
            ),
        ];
        for (name, error, code, says) in rows {
            let Answer::TrailersOnly(headers) = rescued(Err(error.into())).await else {
                panic!("{name}: not a trailers-only answer");
            };
            assert_eq!(
                header(&headers, "grpc-status"),
                Some((code as i32).to_string().as_str()),
                "{name}"
            );
            let message = header(&headers, "grpc-message").unwrap_or_default();
            assert!(
                message.contains(says),
                "{name}: {message:?} does not say {says:?}"
            );
            assert!(
                header(&headers, rollout_proto::FAILED_OPEN_METADATA_KEY).is_none(),
                "{name}"
            );
        }
    }

    /// The members that failed open before the failure are named in its
    /// answer.
    #[tokio::test]
    async fn rescue_names_the_members_that_failed_open() {
        let failure = CallFailure {
            error: GatewayError::plugin(
                "c",
                Failure {
                    code: Code::Unavailable,
                    message: "down".into(),
                },
            ),
            failed_open: vec!["a".into(), "b".into()],
        };
        let Answer::TrailersOnly(headers) = rescued(Err(failure)).await else {
            panic!("not a trailers-only answer");
        };
        assert_eq!(header(&headers, "grpc-status"), Some("14"));
        assert_eq!(
            header(&headers, rollout_proto::FAILED_OPEN_METADATA_KEY),
            Some("a,b")
        );
    }

    /// What the layers below answered themselves passes through untouched:
    /// an HTTP status, a message with its trailers.
    #[tokio::test]
    async fn rescue_passes_answers_on_untouched() {
        assert!(matches!(
            rescued(Ok(Answer::Http(http::StatusCode::UNSUPPORTED_MEDIA_TYPE))).await,
            Answer::Http(http::StatusCode::UNSUPPORTED_MEDIA_TYPE)
        ));
        let mut trailers = HeaderMap::new();
        grpc::put_status(&mut trailers, Code::Ok, "");
        let answer = rescued(Ok(Answer::Message {
            message: grpc::raw(bytes::Bytes::from_static(&[0, 0, 0, 0, 0])),
            trailers,
        }))
        .await;
        let Answer::Message { trailers, .. } = answer else {
            panic!("not a message: {answer:?}");
        };
        assert_eq!(header(&trailers, "grpc-status"), Some("0"));
    }
}
