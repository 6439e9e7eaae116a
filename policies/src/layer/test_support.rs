//! Shared pieces of the layer tests: a request type, a mock upstream whose
//! error is `Status`, and an observer that counts.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tonic::{Code, Status};
use tower::ServiceExt;
use tower::util::MapErr;
use tower_test::mock;

use super::{PolicyRequest, RetryObserver};

#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub deadline: tokio::time::Instant,
    pub attempt: u32,
}

impl Req {
    /// A request with `budget` left before its deadline.
    pub(crate) fn within(budget: Duration) -> Self {
        Req {
            deadline: tokio::time::Instant::now() + budget,
            attempt: 0,
        }
    }
}

impl PolicyRequest for Req {
    fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }

    fn set_attempt(&mut self, attempt: u32) {
        self.attempt = attempt;
    }
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type Upstream = MapErr<mock::Mock<Req, &'static str>, fn(BoxError) -> Status>;
pub(crate) type Handle = mock::Handle<Req, &'static str>;

/// A mock upstream that answers `&'static str`, and fails with the `Status`
/// the test sends.
pub(crate) fn upstream() -> (Upstream, Handle) {
    let (service, handle) = mock::pair();
    (service.map_err(to_status as fn(BoxError) -> Status), handle)
}

fn to_status(error: BoxError) -> Status {
    match error.downcast::<Status>() {
        Ok(status) => *status,
        Err(error) => Status::internal(error.to_string()),
    }
}

/// Takes the next request sent upstream; panics if none comes.
pub(crate) async fn next(handle: &mut Handle) -> (Req, mock::SendResponse<&'static str>) {
    tokio::time::timeout(Duration::from_secs(3_600), handle.next_request())
        .await
        .expect("a request upstream in time")
        .expect("a request upstream")
}

/// Asserts that nothing has been sent upstream that the test has not taken.
pub(crate) fn assert_no_request(handle: &mut Handle) {
    assert!(
        handle.poll_request().is_pending(),
        "unexpected request upstream"
    );
}

#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub attempts: Mutex<Vec<u32>>,
    pub retries: Mutex<Vec<(u32, Code, Duration)>>,
    pub exhausted: AtomicU32,
}

impl Counts {
    pub(crate) fn attempts(&self) -> Vec<u32> {
        self.attempts.lock().expect("lock").clone()
    }

    pub(crate) fn retries(&self) -> Vec<(u32, Code, Duration)> {
        self.retries.lock().expect("lock").clone()
    }

    pub(crate) fn exhausted(&self) -> u32 {
        self.exhausted.load(Ordering::SeqCst)
    }
}

impl RetryObserver for Counts {
    fn on_attempt(&self, attempt: u32) {
        self.attempts.lock().expect("lock").push(attempt);
    }

    fn on_retry(&self, attempt: u32, code: Code, delay: Duration) {
        self.retries
            .lock()
            .expect("lock")
            .push((attempt, code, delay));
    }

    fn on_budget_exhausted(&self) {
        self.exhausted.fetch_add(1, Ordering::SeqCst);
    }
}

/// The output of a spawned call; panics if it has not ended within an hour of
/// the test's clock (at once under a paused clock, when nothing else can run).
pub(crate) async fn finish<T>(call: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(Duration::from_secs(3_600), call)
        .await
        .expect("the call ends")
        .expect("join")
}
