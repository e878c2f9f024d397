//! The HTTP/1.1 server: our own accept loop over hyper's connection builder, where
//! `axum::serve` would read headers for ever and accept every connection the process has a
//! file for. One loop per listening socket ([`serve`]); what it holds:
//!
//! - **A header-read timeout** (`--header-read-timeout-secs`): a request's head (request line
//!   and headers) must arrive whole within it, counted from when the server starts waiting for
//!   it, or the connection is closed without an answer (hyper's timer; trickling bytes does not
//!   extend it). The wait of an idle keep-alive connection for its next request is the same
//!   wait, so an idle connection is closed after the same time.
//! - **Connection caps** ([`Connections`]): at most `--max-connections` open, and at most
//!   `--max-connections-per-peer` from one source (an IPv4 address or an IPv6 /64, the TCP
//!   peer's: a proxy in front counts as one source). A connection over a cap is answered 503
//!   (5030) in the error envelope and closed at once; the loop never waits for a slot, so it
//!   keeps taking connections off the kernel's queue and a client within the caps is served
//!   while others are refused. The caps hold the connections below the open-files limit
//!   ([`connection_budget`]), so the process keeps files for its data and its own work.
//! - **Accept errors**: one that concerns a single connection (reset or aborted before it was
//!   taken) is skipped; any other (`EMFILE`: out of files, `ENOBUFS`, ...) is logged and the
//!   loop sleeps, 5 ms doubling to 1 s while the errors last, instead of spinning on them.
//! - **Graceful shutdown**: when the shutdown signal turns true the loop stops accepting, each
//!   connection finishes the request it is serving (idle ones close at once) and [`serve`]
//!   returns once every connection is closed, or once `drain_timeout` has passed: a client
//!   that stops reading a long answer (an export's download, an audit tail's backfill) keeps
//!   its socket full and its response unfinished, and must not hold the stop for ever.
//!
//! - **Connections aside** ([`Aside`]): a connection whose first request line starts with a
//!   given prefix (the audit tail's) is served on another runtime, decided by peeking at the
//!   request line before hyper reads it. Long-lived answers that wake on every write (50
//!   tails, each woken per head move) then queue on that runtime's thread, never on the
//!   workers that answer the writers whose entries they carry. Such a connection serves that
//!   one request and closes (`Connection: close`), so that a proxy's pooled connection that
//!   carried a tail never serves other requests there.
//!
//! Every request carries `ConnectInfo<SocketAddr>` of its peer, as `axum::serve` sets it.
//!
//! Hand-written rather than a crate's: the caps need the peer address before hyper sees the
//! connection, and none of the maintained server crates over hyper 1 (axum, hyper-util's
//! `server::graceful`) has per-peer caps; the loop is short, and the HTTP is hyper's.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::{Layer, ServiceExt};

use super::client_ip;
use super::error::error_body;
use crate::registry::ErrorCode;

/// hyper's read buffer per connection, the most a request head may take before hyper itself
/// answers 431 without our envelope (its default is ~400 KiB). It bounds what a connection
/// trickling a huge head holds; the limits of `api::head_limits` stay below it, so a head they
/// refuse reaches them and is answered in the envelope.
pub const MAX_BUF_BYTES: usize = 64 * 1024;

const _: () = assert!(super::MAX_TARGET_BYTES + super::MAX_HEADER_BYTES < MAX_BUF_BYTES);

/// Files kept out of the connection budget for the process's own use: the database, the model,
/// logs, the unlinked spill files, exports being written and downloaded, provider clients
/// (an idle server holds ~15).
pub const RESERVED_FILES: u64 = 128;

/// What each listener allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub header_read_timeout: Duration,
    /// How long a stop waits for the answers being written before it closes their
    /// connections.
    pub drain_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections from one source at most; 0 for no per-source cap.
    pub max_per_peer: usize,
}

/// Raises the soft open-files limit to the hard one (the soft default, 1,024 on many
/// systems, dates from `select()`, which nothing here uses) and returns the soft limit then in
/// force; `None` when it is unlimited.
pub fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return limit.maximum;
        }
    }
    limit.current
}

/// The connections each of `listeners` may hold under an open-files limit of `files`: what
/// was asked, or less when the limit leaves less after [`RESERVED_FILES`].
pub fn connection_budget(asked: usize, files: Option<u64>, listeners: usize) -> usize {
    let Some(files) = files else {
        return asked;
    };
    let each = files.saturating_sub(RESERVED_FILES) / listeners.max(1) as u64;
    asked.min(usize::try_from(each).unwrap_or(usize::MAX))
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `--max-connections` are open.
    Full,
    /// `--max-connections-per-peer` are open from its source.
    Peer,
}

impl Refused {
    fn label(self) -> &'static str {
        match self {
            Refused::Full => "max_connections",
            Refused::Peer => "max_connections_per_peer",
        }
    }

    /// The whole answer: a 503 in the error envelope, then the connection is closed.
    fn response(self) -> Vec<u8> {
        let message = match self {
            Refused::Full => "the server holds as many connections as it allows; retry shortly",
            Refused::Peer => "too many open connections from this address",
        };
        let body =
            serde_json::to_vec(&error_body(ErrorCode::Unavailable, message)).unwrap_or_default();
        let mut out = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }
}

/// The open connections of one listener, overall and per source.
pub struct Connections {
    limits: Limits,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    open: usize,
    /// Only sources with an open connection: bounded by `open`.
    per_source: HashMap<IpAddr, usize>,
}

/// A connection's place under the caps, given back when dropped.
pub struct Slot {
    conns: Arc<Connections>,
    source: IpAddr,
}

impl Connections {
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counts: Mutex::new(Counts::default()),
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// A slot for a connection from `peer`, or why there is none.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refused> {
        let source = client_ip::source(peer);
        // A poisoned lock only means a panic mid-update of two counters; they stay usable.
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if counts.open >= self.limits.max_connections {
            return Err(Refused::Full);
        }
        let from_source = counts.per_source.entry(source).or_insert(0);
        if self.limits.max_per_peer > 0 && *from_source >= self.limits.max_per_peer {
            return Err(Refused::Peer);
        }
        *from_source += 1;
        counts.open += 1;
        metrics::gauge!("auditmem_connections_open").increment(1.0);
        Ok(Slot {
            conns: self.clone(),
            source,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).open
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.conns.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.open = counts.open.saturating_sub(1);
        if let Some(n) = counts.per_source.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.per_source.remove(&self.source);
            }
        }
        metrics::gauge!("auditmem_connections_open").decrement(1.0);
    }
}

/// What to do after a failed `accept`: `None` to accept again at once (the error concerned one
/// connection, which is gone), or how long to sleep, given the sleep after the previous error
/// of an unbroken run of them.
fn accept_backoff(err: &io::Error, previous: Option<Duration>) -> Option<Duration> {
    const FIRST: Duration = Duration::from_millis(5);
    const MOST: Duration = Duration::from_secs(1);
    match err.kind() {
        io::ErrorKind::ConnectionAborted
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionRefused
        | io::ErrorKind::Interrupted => None,
        _ => Some(previous.map_or(FIRST, |d| (d * 2).min(MOST))),
    }
}

/// Where the connections that open with a request line starting with `prefix` are served.
#[derive(Clone, Debug)]
pub struct Aside {
    pub runtime: tokio::runtime::Handle,
    /// The request line's start, method and path (`GET /v1/audit/logs/stream`); the next
    /// byte must end the path (a space, or `?` for a query).
    pub prefix: &'static [u8],
}

/// Longest prefix an [`Aside`] may have: what is peeked at is on the stack.
const MAX_PREFIX: usize = 63;

/// Whether the first request line waiting in `stream` starts with `prefix` and its path ends
/// there, peeked at and left for hyper. None when the peer closes, errs, or sends no request
/// line that decides it within `within` (hyper would close it for its header-read timeout).
async fn opens_with(stream: &TcpStream, prefix: &[u8], within: Duration) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + within;
    let need = prefix.len() + 1;
    let mut buf = [0u8; MAX_PREFIX + 1];
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf[..need]))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        let seen = n.min(prefix.len());
        if buf[..seen] != prefix[..seen] {
            return Some(false);
        }
        if n >= need {
            return Some(matches!(buf[prefix.len()], b' ' | b'?'));
        }
        // A request line split across segments: its start is readable, so peeking again
        // would return at once; the rest comes within a round trip.
        tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(2)))
            .await
            .ok()?;
    }
}

/// Waits for the shutdown signal (a closed channel counts as one).
async fn signalled(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Serves `app` on `listener` under `conns`' limits until `shutdown` turns true, then lets
/// every open connection finish its request and returns when all are closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    conns: Arc<Connections>,
    mut shutdown: watch::Receiver<bool>,
    aside: Option<Aside>,
) {
    if let Some(a) = &aside {
        assert!(
            a.prefix.len() <= MAX_PREFIX,
            "an aside prefix too long to peek"
        );
    }
    // Every connection task holds a receiver; `closed()` resolves once all are dropped.
    let (open_tx, open_rx) = watch::channel(());
    let refusals = [Refused::Full.response(), Refused::Peer.response()];
    let mut backoff: Option<Duration> = None;
    let mut refused_since_log: u64 = 0;
    let mut last_refusal_log: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = signalled(&mut shutdown) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff = None;
                accepted
            }
            Err(e) => {
                backoff = accept_backoff(&e, backoff);
                if let Some(wait) = backoff {
                    tracing::error!(error = %e, retry_in_ms = wait.as_millis() as u64, "accepting a connection failed");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = signalled(&mut shutdown) => break,
                    }
                }
                continue;
            }
        };
        let slot = match conns.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                // A fresh socket's send buffer is empty, so this small write never blocks
                // the loop; if it cannot be written the client only sees the close.
                let answer = match why {
                    Refused::Full => &refusals[0],
                    Refused::Peer => &refusals[1],
                };
                let _ = stream.try_write(answer);
                drop(stream);
                metrics::counter!("auditmem_connections_refused_total", "reason" => why.label())
                    .increment(1);
                refused_since_log += 1;
                if last_refusal_log.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                    tracing::warn!(
                        refused = refused_since_log,
                        last_peer = %peer,
                        limit = why.label(),
                        open = conns.open(),
                        "connections refused over the cap"
                    );
                    refused_since_log = 0;
                    last_refusal_log = Some(Instant::now());
                }
                continue;
            }
        };
        tokio::spawn(connection(
            stream,
            peer,
            app.clone(),
            conns.limits(),
            Held {
                _slot: slot,
                _open: open_rx.clone(),
            },
            shutdown.clone(),
            aside.clone(),
        ));
    }
    drop(listener);
    drop(open_rx);
    open_tx.closed().await;
}

/// What a connection holds until it closes: its slot under the caps, and the receiver whose
/// drop tells [`serve`] it has closed.
struct Held {
    _slot: Slot,
    _open: watch::Receiver<()>,
}

/// Serves one connection until it closes, holding `held` until then, on the aside runtime
/// when its first request is the aside's.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    held: Held,
    mut shutdown: watch::Receiver<bool>,
    aside: Option<Aside>,
) {
    if let Some(aside) = aside {
        let first = tokio::select! {
            first = opens_with(&stream, aside.prefix, limits.header_read_timeout) => first,
            // A connection that has sent nothing closes at a stop, as an idle one does.
            _ = signalled(&mut shutdown) => None,
        };
        match first {
            None => return,
            Some(false) => {}
            Some(true) => {
                // A socket is registered with one runtime's driver: it leaves this one as a
                // std socket (still non-blocking) and joins the other's there.
                match stream.into_std() {
                    Ok(std) => {
                        aside.runtime.spawn(async move {
                            match TcpStream::from_std(std) {
                                Ok(stream) => {
                                    http(stream, peer, app, limits, shutdown, false).await
                                }
                                Err(e) => {
                                    tracing::debug!(error = %e, "moving a connection aside failed")
                                }
                            }
                            drop(held);
                        });
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "moving a connection aside failed")
                    }
                }
                return;
            }
        }
    }
    http(stream, peer, app, limits, shutdown, true).await;
    drop(held);
}

/// Serves one connection's HTTP until it closes, or the drain after a stop ends; one request
/// only without `keep_alive`.
async fn http(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    keep_alive: bool,
) {
    let service = axum::Extension(ConnectInfo(peer))
        .layer(app)
        .map_request(|req: hyper::Request<Incoming>| req.map(axum::body::Body::new));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_BUF_BYTES)
        .keep_alive(keep_alive);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::pin!(conn);
    // Set once the stop is signalled: the answer being written has until then to finish.
    let mut drain_until: Option<tokio::time::Instant> = None;
    loop {
        let deadline = async {
            match drain_until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    // A header-read timeout, a client gone mid-request, a malformed request.
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                break;
            }
            _ = signalled(&mut shutdown), if drain_until.is_none() => {
                conn.as_mut().graceful_shutdown();
                drain_until = Some(tokio::time::Instant::now() + limits.drain_timeout);
            }
            () = deadline => {
                tracing::warn!(%peer, "closing a connection whose answer did not finish within the drain timeout");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_peer: usize) -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(1),
            max_connections: max,
            max_per_peer: per_peer,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn connections_are_capped_overall_and_per_source_and_slots_come_back() {
        let conns = Connections::new(limits(4, 2));
        let a1 = conns.admit(ip("192.0.2.1")).unwrap();
        let _a2 = conns.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(conns.admit(ip("192.0.2.1")).err(), Some(Refused::Peer));
        // One IPv6 /64 is one source.
        let _b1 = conns.admit(ip("2001:db8::1")).unwrap();
        let _b2 = conns.admit(ip("2001:db8::2")).unwrap();
        assert_eq!(conns.admit(ip("2001:db8::3")).err(), Some(Refused::Full));
        drop(a1);
        assert_eq!(conns.open(), 3);
        assert_eq!(conns.admit(ip("2001:db8::4")).err(), Some(Refused::Peer));
        let _a3 = conns.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(conns.admit(ip("192.0.2.9")).err(), Some(Refused::Full));
        // Sources with nothing open are forgotten.
        drop((_a2, _a3));
        let counts = conns.counts.lock().unwrap();
        assert_eq!(counts.per_source.len(), 1);
        assert_eq!(counts.open, 2);
    }

    /// A client socket and the server's end of it, on loopback.
    async fn pair() -> (tokio::net::TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        (client, l.accept().await.unwrap().0)
    }

    #[tokio::test]
    async fn the_request_line_is_peeked_whole_and_left_for_hyper() {
        use tokio::io::AsyncWriteExt;
        const P: &[u8] = b"GET /v1/audit/logs/stream";
        let wait = Duration::from_secs(2);
        for (sent, want) in [
            (&b"GET /v1/audit/logs/stream HTTP/1.1\r\n"[..], Some(true)),
            (
                b"GET /v1/audit/logs/stream?after=3 HTTP/1.1\r\n",
                Some(true),
            ),
            (b"GET /v1/audit/logs/streams HTTP/1.1\r\n", Some(false)),
            (b"GET /v1/audit/logs HTTP/1.1\r\n", Some(false)),
            (b"POST /v1/audit/logs/stream HTTP/1.1\r\n", Some(false)),
            (b"G", None),
        ] {
            let (mut client, server) = pair().await;
            client.write_all(sent).await.unwrap();
            if want.is_none() {
                // A start that matches, then the peer goes: nothing to serve.
                drop(client);
                let quick = Duration::from_millis(100);
                assert_eq!(opens_with(&server, P, quick).await, None);
                continue;
            }
            assert_eq!(opens_with(&server, P, wait).await, want, "{sent:?}");
            // Peeked, not read: hyper gets every byte.
            let mut buf = vec![0u8; sent.len()];
            server.try_read(&mut buf).unwrap();
            assert_eq!(buf, sent);
        }
        // Split across writes: decided once the byte after the path arrives.
        let (mut client, server) = pair().await;
        client.write_all(b"GET /v1/audit/lo").await.unwrap();
        let peek = tokio::spawn(async move { opens_with(&server, P, wait).await });
        tokio::time::sleep(Duration::from_millis(30)).await;
        client
            .write_all(b"gs/stream?after=1 HTTP/1.1\r\n")
            .await
            .unwrap();
        assert_eq!(peek.await.unwrap(), Some(true));
        // Nothing that decides within the wait.
        let (mut client, server) = pair().await;
        client.write_all(b"GET /v1/").await.unwrap();
        let quick = Duration::from_millis(100);
        assert_eq!(opens_with(&server, P, quick).await, None);
        let (_client, server) = pair().await;
        assert_eq!(opens_with(&server, P, quick).await, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn connections_that_open_with_the_prefix_are_served_on_the_aside_runtime() {
        let aside = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("aside-worker")
            .enable_all()
            .build()
            .unwrap();
        let thread = || async { std::thread::current().name().unwrap_or("").to_string() };
        let app = Router::new()
            .route("/tail", axum::routing::get(thread))
            .route("/list", axum::routing::get(thread));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(serve(
            l,
            app,
            Connections::new(limits(16, 0)),
            stopped,
            Some(Aside {
                runtime: aside.handle().clone(),
                prefix: b"GET /tail",
            }),
        ));
        let get = |path: &'static str| {
            let url = format!("{url}{path}");
            tokio::task::spawn_blocking(move || {
                let client = reqwest::blocking::Client::new();
                let a = client.get(&url).send().unwrap();
                let close = a.headers().get("connection").cloned();
                let a = a.text().unwrap();
                // The second comes on the pool's connection if it was kept open.
                let b = client.get(&url).send().unwrap().text().unwrap();
                (a, b, close)
            })
        };
        let (tail, tail_again, close) = get("/tail").await.unwrap();
        assert_eq!(tail, "aside-worker");
        assert_eq!(tail_again, "aside-worker");
        // Served once there: a pooled connection never carries other requests there.
        assert_eq!(close.as_ref().and_then(|v| v.to_str().ok()), Some("close"));
        let (list, _, close) = get("/list").await.unwrap();
        assert_eq!(close, None);
        // The test's own runtime's worker.
        assert!(list.starts_with("tokio-"), "{list}");
        stop.send(true).unwrap();
        server.await.unwrap();
        aside.shutdown_background();
    }

    #[tokio::test]
    async fn a_stop_closes_a_connection_that_sent_nothing_at_once() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        let (stop, stopped) = watch::channel(false);
        let mut patient = limits(4, 0);
        patient.header_read_timeout = Duration::from_secs(60);
        let server = tokio::spawn(serve(
            l,
            Router::new(),
            Connections::new(patient),
            stopped,
            Some(Aside {
                runtime: tokio::runtime::Handle::current(),
                prefix: b"GET /tail",
            }),
        ));
        let _silent = tokio::net::TcpStream::connect(at).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the stop waited for a connection that sent nothing")
            .unwrap();
    }

    #[test]
    fn no_per_source_cap_when_zero() {
        let conns = Connections::new(limits(3, 0));
        let _held: Vec<Slot> = (0..3)
            .map(|_| conns.admit(ip("192.0.2.1")).unwrap())
            .collect();
        assert_eq!(conns.admit(ip("192.0.2.1")).err(), Some(Refused::Full));
    }

    #[test]
    fn accept_errors_back_off_unless_they_concern_one_connection() {
        let emfile = io::Error::from_raw_os_error(24);
        let reset = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert_eq!(accept_backoff(&reset, None), None);
        let mut wait = None;
        let mut seen = Vec::new();
        for _ in 0..10 {
            wait = accept_backoff(&emfile, wait);
            seen.push(wait.unwrap().as_millis());
        }
        assert_eq!(seen, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }

    #[test]
    fn the_budget_leaves_files_for_the_process() {
        assert_eq!(connection_budget(10_000, Some(1024), 1), 896);
        assert_eq!(connection_budget(10_000, Some(1024), 2), 448);
        assert_eq!(connection_budget(100, Some(1024), 1), 100);
        assert_eq!(connection_budget(100, Some(64), 1), 0);
        assert_eq!(connection_budget(100, None, 2), 100);
    }

    #[test]
    fn a_refusal_is_a_whole_http_answer_in_the_envelope() {
        let text = String::from_utf8(Refused::Peer.response()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["code"], 5030);
        assert_eq!(v["success"], false);
        assert_eq!(v["data"], serde_json::Value::Null);
    }
}
