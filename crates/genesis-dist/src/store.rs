//! A TCP key-value store where the processes of a group meet (PyTorch's `TCPStore`): rank 0
//! runs a [`StoreServer`], every rank talks to it through a [`StoreClient`]. Values are bytes;
//! [`StoreClient::add`] keeps a decimal counter. Every blocking call takes a timeout and ends
//! in [`Error::Timeout`] rather than waiting for ever.
//!
//! Protocol (little-endian): a request is an op byte, then its fields; a byte string is a `u32`
//! length and the bytes. `SET key value` → `0`; `GET key timeout_ms` → `0 value` or `1` (timed
//! out); `ADD key i64` → `0 i64`; `WAIT n key... timeout_ms` → `0` or `1`; `CHECK n key...` →
//! `0 u8`. A malformed request closes the connection.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::io;
use crate::{Error, Result};

const SET: u8 = 1;
const GET: u8 = 2;
const ADD: u8 = 3;
const WAIT: u8 = 4;
const CHECK: u8 = 5;

/// The longest key or value the protocol carries (a larger length is a protocol error).
pub const MAX_LEN: usize = 1 << 30;

/// The store's state, shared by the connection threads.
#[derive(Debug, Default)]
struct Shared {
    map: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Vec<u8>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every key exists or `timeout` passes; whether they all exist.
    fn wait_for(&self, keys: &[Vec<u8>], timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut map = self.lock();
        loop {
            if keys.iter().all(|k| map.contains_key(k)) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            map = self
                .changed
                .wait_timeout(map, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// The server: a thread accepting connections, one thread a connection. Dropping it stops
/// accepting; connections already open are served until their clients close them.
#[derive(Debug)]
pub struct StoreServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl StoreServer {
    /// Listens on `addr` (`"0.0.0.0:29500"`; port 0 picks a free one, see
    /// [`StoreServer::local_addr`]).
    pub fn bind(addr: impl ToSocketAddrs + std::fmt::Debug) -> Result<StoreServer> {
        let what = format!("binding the store to {addr:?}");
        let listener = TcpListener::bind(addr).map_err(io(what))?;
        let local = listener.local_addr().map_err(io("the store's address"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let flag = stop.clone();
        let accept = std::thread::Builder::new()
            .name("genesis-store".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = shared.clone();
                    // A failed spawn drops the connection; its client sees it closed.
                    let _ = std::thread::Builder::new()
                        .name("genesis-store-conn".into())
                        .spawn(move || serve(conn, &shared));
                }
            })
            .map_err(io("starting the store's thread"))?;
        Ok(StoreServer {
            addr: local,
            stop,
            accept: Some(accept),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accepting thread with a connection of our own.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn read_exact(r: &mut impl Read, n: usize) -> std::io::Result<Vec<u8>> {
    let mut b = vec![0u8; n];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_bytes(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let n = read_u32(r)? as usize;
    if n > MAX_LEN {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a field of {n} bytes"),
        ));
    }
    read_exact(r, n)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Serves one connection until it closes or sends something malformed.
fn serve(mut conn: TcpStream, shared: &Shared) {
    let _ = conn.set_nodelay(true);
    while let Ok(reply) = request(&mut conn, shared) {
        if conn.write_all(&reply).is_err() {
            break;
        }
    }
    let _ = conn.shutdown(Shutdown::Both);
}

/// Reads one request and returns its reply.
fn request(conn: &mut TcpStream, shared: &Shared) -> std::io::Result<Vec<u8>> {
    let mut op = [0u8; 1];
    conn.read_exact(&mut op)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut reply = Vec::new();
    match op[0] {
        SET => {
            let key = read_bytes(conn)?;
            let value = read_bytes(conn)?;
            shared.lock().insert(key, value);
            shared.changed.notify_all();
            reply.push(0);
        }
        GET => {
            let key = read_bytes(conn)?;
            let timeout = Duration::from_millis(read_u64(conn)?);
            if shared.wait_for(std::slice::from_ref(&key), timeout) {
                let value = shared.lock().get(&key).cloned().unwrap_or_default();
                reply.push(0);
                put_bytes(&mut reply, &value);
            } else {
                reply.push(1);
            }
        }
        ADD => {
            let key = read_bytes(conn)?;
            let delta = read_u64(conn)? as i64;
            let mut map = shared.lock();
            let now = match map.get(&key) {
                Some(v) => std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .ok_or_else(|| bad("ADD to a value that is not a decimal counter"))?,
                None => 0,
            };
            let next = now.wrapping_add(delta);
            map.insert(key, next.to_string().into_bytes());
            drop(map);
            shared.changed.notify_all();
            reply.push(0);
            reply.extend_from_slice(&next.to_le_bytes());
        }
        WAIT | CHECK => {
            let n = read_u32(conn)? as usize;
            if n > 1 << 20 {
                return Err(bad("too many keys"));
            }
            let keys = (0..n)
                .map(|_| read_bytes(conn))
                .collect::<std::io::Result<Vec<_>>>()?;
            if op[0] == WAIT {
                let timeout = Duration::from_millis(read_u64(conn)?);
                reply.push(if shared.wait_for(&keys, timeout) {
                    0
                } else {
                    1
                });
            } else {
                let map = shared.lock();
                reply.push(0);
                reply.push(u8::from(keys.iter().all(|k| map.contains_key(k))));
            }
        }
        _ => return Err(bad("unknown op")),
    }
    Ok(reply)
}

/// A connection to a [`StoreServer`].
#[derive(Debug)]
pub struct StoreClient {
    conn: TcpStream,
    addr: String,
}

/// The longest a reply may take beyond the wait it carries out (network and scheduling).
const SLACK: Duration = Duration::from_secs(30);

impl StoreClient {
    /// Connects to the store at `addr` (`"host:port"`), trying again until `timeout` (the
    /// server may start after its clients).
    pub fn connect(addr: &str, timeout: Duration) -> Result<StoreClient> {
        let deadline = Instant::now() + timeout;
        let targets: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(io(format!("resolving the store's address {addr}")))?
            .collect();
        if targets.is_empty() {
            return Err(Error::InvalidArgument {
                op: "StoreClient::connect",
                reason: format!("{addr} resolves to no address"),
            });
        }
        loop {
            for t in &targets {
                let left = deadline.saturating_duration_since(Instant::now());
                let attempt = left.clamp(Duration::from_millis(10), Duration::from_secs(1));
                if let Ok(conn) = TcpStream::connect_timeout(t, attempt) {
                    let _ = conn.set_nodelay(true);
                    return Ok(StoreClient {
                        conn,
                        addr: addr.to_string(),
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    op: format!("connect to {addr}"),
                    after: timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `req` and reads the reply's status byte, waiting at most `wait` plus slack.
    fn call(&mut self, req: &[u8], wait: Duration, op: &str) -> Result<u8> {
        let ctx = || format!("store {} at {}", op, self.addr);
        self.conn
            .set_read_timeout(Some(wait.saturating_add(SLACK)))
            .map_err(io(ctx()))?;
        self.conn.write_all(req).map_err(io(ctx()))?;
        let mut status = [0u8; 1];
        match self.conn.read_exact(&mut status) {
            Ok(()) => Ok(status[0]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(Error::Timeout {
                    op: op.to_string(),
                    after: wait,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(Error::Protocol(
                format!("{}: the store closed the connection", ctx()),
            )),
            Err(e) => Err(io(ctx())(e)),
        }
    }

    fn reply_bytes(&mut self) -> Result<Vec<u8>> {
        read_bytes(&mut self.conn).map_err(|e| Error::Protocol(format!("reading a value: {e}")))
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        check_len(key.len())?;
        check_len(value.len())?;
        let mut req = vec![SET];
        put_bytes(&mut req, key.as_bytes());
        put_bytes(&mut req, value);
        self.call(&req, Duration::ZERO, "set")?;
        Ok(())
    }

    /// The value of `key`, waiting up to `timeout` for a rank to set it.
    pub fn get(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        check_len(key.len())?;
        let mut req = vec![GET];
        put_bytes(&mut req, key.as_bytes());
        req.extend_from_slice(&millis(timeout).to_le_bytes());
        match self.call(&req, timeout, &format!("get {key}"))? {
            0 => self.reply_bytes(),
            _ => Err(Error::Timeout {
                op: format!("get {key}"),
                after: timeout,
            }),
        }
    }

    /// Adds `delta` to the decimal counter `key` (0 when absent); returns the new value.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64> {
        check_len(key.len())?;
        let mut req = vec![ADD];
        put_bytes(&mut req, key.as_bytes());
        req.extend_from_slice(&delta.to_le_bytes());
        self.call(&req, Duration::ZERO, "add")?;
        let mut b = [0u8; 8];
        self.conn
            .read_exact(&mut b)
            .map_err(|e| Error::Protocol(format!("reading a counter: {e}")))?;
        Ok(i64::from_le_bytes(b))
    }

    /// Waits up to `timeout` until every key of `keys` is set.
    pub fn wait(&mut self, keys: &[&str], timeout: Duration) -> Result<()> {
        let mut req = vec![WAIT];
        req.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        for k in keys {
            check_len(k.len())?;
            put_bytes(&mut req, k.as_bytes());
        }
        req.extend_from_slice(&millis(timeout).to_le_bytes());
        match self.call(&req, timeout, "wait")? {
            0 => Ok(()),
            _ => Err(Error::Timeout {
                op: format!("wait for {keys:?}"),
                after: timeout,
            }),
        }
    }

    /// Whether every key of `keys` is set (no waiting).
    pub fn check(&mut self, keys: &[&str]) -> Result<bool> {
        let mut req = vec![CHECK];
        req.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        for k in keys {
            check_len(k.len())?;
            put_bytes(&mut req, k.as_bytes());
        }
        self.call(&req, Duration::ZERO, "check")?;
        let mut b = [0u8; 1];
        self.conn
            .read_exact(&mut b)
            .map_err(|e| Error::Protocol(format!("reading a check: {e}")))?;
        Ok(b[0] == 1)
    }

    /// Returns once `world_size` processes have called it with the same `name`, or fails
    /// after `timeout`.
    pub fn barrier(&mut self, name: &str, world_size: usize, timeout: Duration) -> Result<()> {
        let arrived = self.add(&format!("{name}/arrived"), 1)?;
        if arrived == world_size as i64 {
            self.set(&format!("{name}/done"), b"1")?;
        }
        self.wait(&[&format!("{name}/done")], timeout)
    }
}

fn check_len(n: usize) -> Result<()> {
    if n > MAX_LEN {
        return Err(Error::InvalidArgument {
            op: "store",
            reason: format!("{n} bytes is more than the protocol's {MAX_LEN}"),
        });
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
