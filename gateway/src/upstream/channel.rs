//! The connection of an endpoint, shared by every upstream of the same
//! [`super::UpstreamKey`]: dialled on first use, and again whenever it has
//! closed or is going away.
//!
//! A plugin's graceful GOAWAY (grpc servers send one at
//! `max_connection_age` and on every graceful stop, so on every rolling
//! update) must never fail a call: the connection that said it takes no
//! new calls, they go to a fresh one, and its calls in flight finish on it.
//! A plugin that stopped gracefully and is coming back on the same address
//! is waited for, within each call's deadline, for [`RESTART_GRACE`] after
//! its GOAWAY; past that, a refused dial fails the call at once.
//!
//! A connection on which the plugin answered nothing before it went away
//! (a GOAWAY with last stream id 0, on every connection) is replaced only
//! after a wait that doubles with each such connection in a row: a plugin
//! refusing all work is not dialled once per call.

use rollout_policies::lock;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use rustls_pki_types::ServerName;
use tokio::time::Instant;

use crate::config::Endpoint;
use crate::error::Unreachable;
use crate::transport::client::{self, PluginConnection};

/// How long after a graceful GOAWAY a refused dial is taken for a plugin
/// restarting (a rolling update), and retried within the call's deadline.
pub(crate) const RESTART_GRACE: Duration = Duration::from_secs(10);

/// First and longest wait between dials to a restarting plugin.
const REDIAL_FIRST: Duration = Duration::from_millis(20);
const REDIAL_MAX: Duration = Duration::from_millis(500);

/// How long a connection on which the plugin answered no stream is kept
/// from being replaced, counted from when it was made: the first, doubling
/// with each such connection in a row, at most the last. A plugin that
/// sends GOAWAY (last stream id 0) on every connection before taking any
/// work gets a few dials a second, not one per call.
const UNANSWERED_FIRST: Duration = Duration::from_millis(50);
const UNANSWERED_MAX: Duration = Duration::from_secs(2);

/// One HTTP/2 connection to an endpoint. Every [`super::Upstream`] with the
/// same key shares one: registry entries naming the same plugin server under
/// several names (or in several hubs' registries) multiplex their calls over
/// one connection instead of holding one each (about 25 KiB resident apiece,
/// docs/decisions/0005-resident-memory.md).
#[derive(Default)]
pub(crate) struct Channel {
    /// The current connection; read on every call, so lock-free.
    conn: ArcSwapOption<PluginConnection>,
    /// Held while dialling, so concurrent calls share one new connection.
    dialling: tokio::sync::Mutex<()>,
    /// When the plugin last said GOAWAY with NO_ERROR (a graceful stop).
    graceful_goaway: Mutex<Option<Instant>>,
    /// Connections replaced in a row on which the plugin answered no stream.
    unanswered: Mutex<u32>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel").finish_non_exhaustive()
    }
}

/// Why no connection could be had.
#[derive(Debug)]
pub(crate) enum NoConnection {
    /// The call's deadline passed first.
    Deadline,
    /// The dial failed, or the plugin is not answering.
    Unreachable(Unreachable),
}

impl Channel {
    /// The current connection, or a new one (one dial for every call that
    /// waits) when there is none, it has closed, or it is going away.
    pub(crate) async fn connection(
        &self,
        endpoint: &Endpoint,
        tls: Option<&(Arc<rustls::ClientConfig>, ServerName<'static>)>,
        deadline: Instant,
        connect_timeout: Duration,
    ) -> Result<Arc<PluginConnection>, NoConnection> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let Ok(_dialling) = tokio::time::timeout_at(deadline, self.dialling.lock()).await else {
            return Err(NoConnection::Deadline);
        };
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let previous = self.conn.load_full();
        // A connection that ended after a graceful GOAWAY (no call saw it):
        // the plugin is stopping or restarting.
        if previous
            .as_ref()
            .is_some_and(|old| old.notice_graceful_end())
        {
            *lock(&self.graceful_goaway) = Some(Instant::now());
        }
        self.hold_off(endpoint, previous.as_deref(), deadline)
            .await?;
        let mut wait = REDIAL_FIRST;
        loop {
            let limit = deadline.min(Instant::now() + connect_timeout);
            let dialled =
                tokio::time::timeout_at(limit, client::dial(&endpoint.host, endpoint.port, tls))
                    .await;
            let why = match dialled {
                Ok(Ok(conn)) => {
                    let mut unanswered = lock(&self.unanswered);
                    *unanswered = match &previous {
                        Some(old) if !old.has_answered() => unanswered.saturating_add(1),
                        _ => 0,
                    };
                    self.conn.store(Some(conn.clone()));
                    return Ok(conn);
                }
                Ok(Err(e)) => Unreachable::Dial(e),
                Err(_) if Instant::now() >= deadline => return Err(NoConnection::Deadline),
                Err(_) => Unreachable::DialTimeout {
                    endpoint: endpoint.clone(),
                },
            };
            // A plugin that stopped gracefully a moment ago is most likely
            // restarting: wait for it, within the call's deadline.
            if !self.restarting() || Instant::now() + wait >= deadline {
                return Err(NoConnection::Unreachable(why));
            }
            tracing::debug!(%endpoint, error = %why, "plugin restarting after its GOAWAY; dialling again");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(REDIAL_MAX);
        }
    }

    /// `conn` refused a stream with `error` (it is going away): it takes no
    /// new calls (those in flight finish on it). A GOAWAY with NO_ERROR is a
    /// graceful stop: dials are retried for [`RESTART_GRACE`].
    pub(crate) fn retire(&self, conn: &PluginConnection, error: &h2::Error) {
        conn.retire();
        if error.is_go_away() && error.reason() == Some(h2::Reason::NO_ERROR) {
            *lock(&self.graceful_goaway) = Some(Instant::now());
        }
    }

    /// Waits before replacing `previous` when the plugin answered no stream
    /// on it: until [`UNANSWERED_FIRST`] (doubling for each such connection
    /// in a row, at most [`UNANSWERED_MAX`]) after it was made. A call whose
    /// deadline comes first fails at once, without a dial.
    async fn hold_off(
        &self,
        endpoint: &Endpoint,
        previous: Option<&PluginConnection>,
        deadline: Instant,
    ) -> Result<(), NoConnection> {
        let Some(old) = previous.filter(|old| !old.has_answered()) else {
            return Ok(());
        };
        let in_a_row = *lock(&self.unanswered);
        let wait = UNANSWERED_FIRST
            .saturating_mul(1 << in_a_row.min(16))
            .min(UNANSWERED_MAX);
        let until = old.dialled_at() + wait;
        if until <= Instant::now() {
            return Ok(());
        }
        if until >= deadline {
            return Err(NoConnection::Unreachable(Unreachable::NotAnswering {
                endpoint: endpoint.clone(),
                in_a_row: in_a_row + 1,
                wait,
            }));
        }
        tokio::time::sleep_until(until).await;
        Ok(())
    }

    /// Whether the connection before the current one had answered a stream
    /// (or there was none): the plugin was taking work lately.
    pub(crate) fn was_answering(&self) -> bool {
        *lock(&self.unanswered) == 0
    }

    fn restarting(&self) -> bool {
        lock(&self.graceful_goaway).is_some_and(|at| at.elapsed() < RESTART_GRACE)
    }

    fn current(&self) -> Option<Arc<PluginConnection>> {
        self.conn.load().as_ref().filter(|c| c.is_usable()).cloned()
    }
}
