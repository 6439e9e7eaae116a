//! One stream to a plugin: the request's head, the answer read whole (and
//! refused where gRPC clients could read it differently), and what happens
//! to a stream the plugin never processed (sent again).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tokio::time::Instant;
use tonic::Code;

use rollout_policies::lock;

use super::{Failed, USER_AGENT, Upstream, undecodable};
use crate::error::{CallError, Unreachable};
use crate::hooks::HookKind;
use crate::transport::client::PluginConnection;
use crate::transport::grpc::{self, Payload};
use crate::transport::pending::CallBytes;

impl Upstream {
    /// One unary call; the answer's message, uncompressed, not decoded.
    ///
    /// A stream the plugin never processed (RFC 9113 §8.7) is sent again:
    ///
    /// - refused before it opened because the connection is going away, or
    ///   above the last stream id of the plugin's GOAWAY: on a new
    ///   connection, whatever the retry policy; the connection that refused
    ///   it takes no new calls, its calls in flight finish on it. Not when
    ///   the plugin answered nothing on it nor on the connection before it:
    ///   it is refusing all work (how soon such a connection is replaced is
    ///   the channel's).
    /// - reset with REFUSED_STREAM (a plugin shedding load): on the same
    ///   connection, each resend withdrawn from the plugin's retry budget;
    ///   the connection stays in use.
    pub(super) async fn unary_raw(
        &self,
        method: HookKind,
        payload: &(dyn Fn() -> Payload + Sync),
        deadline: Instant,
        forward: &HeaderMap,
        held: Option<&CallBytes>,
    ) -> Result<Bytes, Failed> {
        let mut resent = 0;
        loop {
            let conn = self.connection(deadline).await?;
            let error = match self
                .exchange(&conn, method, payload(), deadline, forward, held)
                .await
            {
                Ok(message) => return Ok(message),
                Err(Exchange::Failed(failed)) => return Err(failed),
                Err(Exchange::Refused(error)) => {
                    if resent < MAX_RESENDS && lock(&self.budget).try_withdraw(super::now()) {
                        tracing::debug!(endpoint = %self.key.endpoint, %error, "stream refused by the plugin; sending it again on the same connection");
                        resent += 1;
                        continue;
                    }
                    return Err(Failed::Call(CallError::Unreachable(
                        Unreachable::StreamRefused {
                            endpoint: self.key.endpoint.clone(),
                            times: resent + 1,
                            max_resends: MAX_RESENDS,
                            source: error,
                        },
                    )));
                }
                Err(Exchange::Unprocessed(error)) => error,
            };
            self.channel.retire(&conn, &error);
            // Sent again only while the plugin takes work: not when this
            // connection and the one before it both went away before
            // answering anything (a GOAWAY with last stream id 0 each time).
            let refusing = !conn.has_answered() && !self.channel.was_answering();
            if resent == MAX_RESENDS || refusing {
                return Err(Failed::Call(CallError::Unreachable(
                    Unreachable::Unprocessed {
                        endpoint: self.key.endpoint.clone(),
                        times: resent + 1,
                        source: error,
                    },
                )));
            }
            tracing::debug!(endpoint = %self.key.endpoint, %error, "stream not processed by the plugin; sending it on a new connection");
            resent += 1;
        }
    }

    /// The request's head: the method's URI, gRPC's headers, the time left
    /// as `grpc-timeout`, and the caller's headers passed on.
    fn request_head(
        &self,
        method: HookKind,
        deadline: Instant,
        forward: &HeaderMap,
    ) -> http::Request<()> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let mut request = http::Request::new(());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.uris.get(method);
        let headers = request.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(grpc::CONTENT_TYPE),
        );
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        headers.insert(grpc::GRPC_TIMEOUT, grpc::encode_timeout(remaining));
        headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static(USER_AGENT),
        );
        // What the gateway can read: gzip is what gRPC libraries send when
        // compression is switched on.
        headers.insert(
            grpc::GRPC_ACCEPT_ENCODING,
            HeaderValue::from_static(grpc::ACCEPT_ENCODING),
        );
        for (k, v) in forward {
            headers.insert(k.clone(), v.clone());
        }
        request
    }

    /// One stream on `conn`; the answer held in `held`.
    async fn exchange(
        &self,
        conn: &PluginConnection,
        method: HookKind,
        payload: Payload,
        deadline: Instant,
        forward: &HeaderMap,
        held: Option<&CallBytes>,
    ) -> Result<Bytes, Exchange> {
        let sender = conn.sender();
        let unavailable = |e: h2::Error| {
            if refused(&e) {
                Exchange::Refused(e)
            } else if going_away(&e) {
                Exchange::Unprocessed(e)
            } else {
                Exchange::Failed(Failed::Call(CallError::Unreachable(Unreachable::Request {
                    endpoint: self.key.endpoint.clone(),
                    source: e,
                })))
            }
        };
        // Waits while the plugin's stream limit is reached. An error here
        // or from `send_request` means no stream was opened.
        let mut sender = sender.ready().await.map_err(Exchange::Unprocessed)?;
        let request = self.request_head(method, deadline, forward);
        // Headers and the whole message queued together: one write.
        let (response, mut body) = sender
            .send_request(request, false)
            .map_err(Exchange::Unprocessed)?;
        body.send_data(payload, true).map_err(unavailable)?;
        let response = response.await.map_err(unavailable)?;
        conn.answered();
        let (parts, body) = response.into_parts();
        self.read_answer(parts, body, held)
            .await
            .map_err(Exchange::Failed)
    }

    /// The message of a plugin's answer, read as every mainstream gRPC
    /// client (grpc-go, grpcio's C core, grpc-java) would read it, or
    /// refused as the plugin's failure where one of them could read another
    /// message or status (docs/security.md, "Reading a plugin's answer").
    /// Its bytes join those `held` holds for as long as they live (its
    /// buffer, and the one it is inflated to); with no room for them, the
    /// answer is refused, the caller's failure.
    async fn read_answer(
        &self,
        parts: http::response::Parts,
        mut body: h2::RecvStream,
        held: Option<&CallBytes>,
    ) -> Result<Bytes, Failed> {
        if parts.status != http::StatusCode::OK {
            return Err(not_ok(parts.status, &parts.headers));
        }
        grpc::check_answer_headers(&parts.headers).map_err(|e| undecodable(e.to_string()))?;
        let in_headers =
            grpc::status_from_headers(&parts.headers).map_err(|e| undecodable(e.to_string()))?;
        if let Some(status) = in_headers {
            // A trailers-only answer ends with its headers. A status in
            // headers followed by more (a message, trailers with another
            // status) is read by some clients from the headers and by
            // others from what follows.
            return Err(if !body.is_end_stream() {
                undecodable("grpc-status in the headers of an answer that goes on".into())
            } else if status.code() == Code::Ok {
                undecodable("answered OK without a message".into())
            } else {
                Failed::Plugin(status)
            });
        }
        let limit = self.settings.max_message_bytes;
        let collected = grpc::collect_counted(&mut body, limit, held).await;
        let (data, trailers) = collected.map_err(|e| match e {
            grpc::ReceiveError::Stream { part, source } => {
                Failed::Call(CallError::Unreachable(Unreachable::Reading {
                    endpoint: self.key.endpoint.clone(),
                    part,
                    source,
                }))
            }
            grpc::ReceiveError::Held(exceeded) => Failed::Call(CallError::PendingBytes(exceeded)),
            grpc::ReceiveError::Frame(e) => match grpc::OverLimit::of_frame(&e) {
                Some(over) => Failed::Call(CallError::TooLarge(over)),
                None => undecodable(e.to_string()),
            },
        })?;
        let status = match trailers.as_ref().map(grpc::status_from_headers) {
            Some(Ok(status)) => status,
            Some(Err(e)) => return Err(undecodable(e.to_string())),
            None => None,
        };
        match status {
            Some(status) if status.code() == Code::Ok => {
                // At most one, checked with the headers.
                let encoding = parts
                    .headers
                    .get(grpc::GRPC_ENCODING)
                    .map(|v| v.to_str().unwrap_or("(not text)").to_string());
                inflate(data, encoding, limit, held).await
            }
            Some(status) => Err(Failed::Plugin(status)),
            None => Err(undecodable("answer ended without a grpc-status".into())),
        }
    }
}

/// [`grpc::uncompressed`]; a compressed answer is inflated on the blocking
/// pool: a few KiB of gzip can take tens of milliseconds of CPU to inflate
/// to the message limit, which on the runtime's thread would stall every
/// other call it drives. An uncompressed answer (the common case) stays;
/// an inflated one is held in `held` as the answer it came in was.
async fn inflate(
    data: Bytes,
    encoding: Option<String>,
    limit: usize,
    held: Option<&CallBytes>,
) -> Result<Bytes, Failed> {
    // The first byte of the 5-byte prefix is the compression flag.
    let compressed = data.first() == Some(&1);
    let read = move || grpc::uncompressed(data, encoding.as_deref(), limit);
    let result = if compressed {
        tokio::task::spawn_blocking(read)
            .await
            .unwrap_or_else(|e| Err(grpc::Unreadable::Invalid(format!("inflating failed: {e}"))))
    } else {
        read()
    };
    let message = result.map_err(|e| match e {
        grpc::Unreadable::TooLarge(over) => Failed::Call(CallError::TooLarge(over)),
        grpc::Unreadable::Invalid(why) => undecodable(why),
    })?;
    match held {
        Some(held) if compressed => held
            .counted(message)
            .map_err(|exceeded| Failed::Call(CallError::PendingBytes(exceeded))),
        _ => Ok(message),
    }
}

/// An answer with an HTTP status other than 200: grpc-go and grpc-java
/// read the code gRPC's HTTP mapping gives, grpcio the `grpc-status` when
/// there is one (`503` with `grpc-status: 0` is OK to it). The status
/// passes when both readings agree, and is refused otherwise.
fn not_ok(status: http::StatusCode, headers: &HeaderMap) -> Failed {
    let by_http = grpc::status_from_http(status);
    match grpc::status_from_headers(headers) {
        Ok(None) => Failed::Plugin(by_http),
        Ok(Some(sent)) if sent.code() == by_http.code() => Failed::Plugin(sent),
        Ok(Some(sent)) => undecodable(format!(
            "answered HTTP {status} with grpc-status {}, which gRPC clients read as either",
            rollout_wire::code_name(sent.code())
        )),
        Err(e) => undecodable(e.to_string()),
    }
}

/// How one stream failed: never processed by the plugin because its
/// connection is going away (sent again on a new connection), reset with
/// REFUSED_STREAM (sent again on the same one, within the retry budget), or
/// as [`Failed`].
enum Exchange {
    Unprocessed(h2::Error),
    Refused(h2::Error),
    Failed(Failed),
}

/// Streams one call may send again after the plugin did not process them.
const MAX_RESENDS: u32 = 3;

/// Whether the stream this error ended was dropped by the plugin's GOAWAY
/// (above its last stream id; RFC 9113 §6.8): never processed.
fn going_away(e: &h2::Error) -> bool {
    e.is_go_away() && e.is_remote()
}

/// Whether the plugin reset the stream with REFUSED_STREAM: never processed
/// (§8.7), the connection still good.
fn refused(e: &h2::Error) -> bool {
    e.is_reset() && e.is_remote() && e.reason() == Some(h2::Reason::REFUSED_STREAM)
}
