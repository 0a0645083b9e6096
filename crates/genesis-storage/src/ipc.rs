//! The wire protocol of CUDA storages shared between processes ([`Storage::export_cuda`],
//! [`Storage::import_cuda`]): messages over a connected Unix stream socket, with file
//! descriptors passed beside them (`SCM_RIGHTS`, through `rustix`).
//!
//! Every frame is a header of 8 bytes (the body's length as a `u32` and the number of file
//! descriptors that travel with it as a `u32`, both little-endian) and a body: the magic
//! `GXCI`, the protocol version (`u16`), a tag byte and the message's fields. A frame carries
//! at most [`FDS_PER_FRAME`] descriptors (Linux passes at most 253 in one message); an offer of
//! more handles sends the rest in `More` frames that follow it.
//!
//! The conversation on one connection:
//!
//! 1. the exporter sends `Offer`: the device's UUID, dtype, length, the exporter's process id,
//!    two interprocess events of the exporter (one the exporter records, one the importer
//!    records), and the memory (handle lengths and file descriptors, or an IPC handle of a
//!    segment);
//! 2. the importer maps the memory and opens the events, and answers `Accept`, or `Refuse`
//!    (why it could not);
//! 3. either side may send `Recorded` after recording its event on its stream: the other side
//!    then makes its stream wait on that event (`signal` / `wait`);
//! 4. the importer sends `Release` once its mapping and its openings of the events are gone
//!    (or its process ends, which closes the socket); the exporter then drops its hold on the
//!    storage and the events.
//!
//! Decoding checks everything a peer could get wrong (magic, version, tags, lengths, dtype,
//! that the mapped bytes cover the storage, descriptor counts) and returns
//! [`Error::IpcProtocol`]; a closed connection is [`Error::IpcPeerGone`].
//!
//! [`Storage::export_cuda`]: crate::Storage::export_cuda
//! [`Storage::import_cuda`]: crate::Storage::import_cuda

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::{DType, Error, Result};

/// The first bytes of every body.
const MAGIC: [u8; 4] = *b"GXCI";
/// The protocol version; a peer speaking another is refused.
pub(crate) const VERSION: u16 = 1;
/// The most file descriptors one frame carries.
pub(crate) const FDS_PER_FRAME: usize = 250;
/// The longest body accepted.
const MAX_BODY: usize = 1 << 20;
/// The most physical handles an offer may name (a 128 GiB storage on 2 MiB handles).
pub(crate) const MAX_HANDLES: usize = 65536;

const TAG_OFFER: u8 = 1;
const TAG_MORE: u8 = 2;
const TAG_ACCEPT: u8 = 3;
const TAG_REFUSE: u8 = 4;
const TAG_RECORDED: u8 = 5;
const TAG_RELEASE: u8 = 6;

const MEM_HANDLES: u8 = 1;
const MEM_SEGMENT: u8 = 2;

/// The memory of an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OfferMemory {
    /// Physical handles (virtual memory), exported as file descriptors that travel with the
    /// offer, one per handle in this order: mapped next to each other, the storage starts
    /// `offset` bytes into the first.
    Handles {
        /// Where the storage starts in the first handle.
        offset: u64,
        /// The length of each handle in bytes.
        lens: Vec<u64>,
    },
    /// A `cuMemAlloc` segment, named by its IPC handle; the storage starts `offset` bytes
    /// into it.
    Segment {
        /// `cuIpcGetMemHandle`'s bytes.
        handle: [u8; 64],
        /// The segment's length.
        len: u64,
        /// Where the storage starts in it.
        offset: u64,
    },
}

/// What an exporter sends: a CUDA storage's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Offer {
    /// The device's UUID (ordinals differ between processes).
    pub(crate) uuid: [u8; 16],
    /// The device's ordinal in the exporting process (for messages only).
    pub(crate) ordinal: u32,
    /// The storage's dtype.
    pub(crate) dtype: DType,
    /// Its length in elements.
    pub(crate) len: u64,
    /// The exporting process.
    pub(crate) pid: u32,
    /// The interprocess event (`cuIpcGetEventHandle`) the exporter records after its writes.
    pub(crate) event: [u8; 64],
    /// The interprocess event of the exporter that the importer records after its writes.
    pub(crate) reply_event: [u8; 64],
    /// The memory.
    pub(crate) memory: OfferMemory,
}

impl Offer {
    /// The storage's length in bytes.
    pub(crate) fn nbytes(&self) -> Result<usize> {
        usize::try_from(self.len)
            .ok()
            .and_then(|n| n.checked_mul(self.dtype.size()))
            .ok_or_else(|| protocol(format!("{} elements of {} overflow", self.len, self.dtype)))
    }

    /// How many file descriptors travel with the offer.
    pub(crate) fn fd_count(&self) -> usize {
        match &self.memory {
            OfferMemory::Handles { lens, .. } => lens.len(),
            OfferMemory::Segment { .. } => 0,
        }
    }

    /// Checks that the memory covers the storage's bytes.
    fn validate(&self) -> Result<()> {
        let nbytes = self.nbytes()? as u64;
        if nbytes == 0 {
            return Err(protocol("an offer of an empty storage".into()));
        }
        let (have, offset) = match &self.memory {
            OfferMemory::Handles { offset, lens } => {
                if lens.is_empty() || lens.len() > MAX_HANDLES {
                    return Err(protocol(format!("{} handles", lens.len())));
                }
                if lens.contains(&0) {
                    return Err(protocol("a handle of 0 bytes".into()));
                }
                let total = lens
                    .iter()
                    .try_fold(0u64, |a, &l| a.checked_add(l))
                    .ok_or_else(|| protocol("handle lengths overflow".into()))?;
                (total, *offset)
            }
            OfferMemory::Segment { len, offset, .. } => (*len, *offset),
        };
        if !offset.is_multiple_of(genesis_mem::ALIGNMENT as u64) {
            return Err(protocol(format!(
                "offset {offset} is not a multiple of {}",
                genesis_mem::ALIGNMENT
            )));
        }
        match offset.checked_add(nbytes) {
            Some(end) if end <= have => Ok(()),
            _ => Err(protocol(format!(
                "{nbytes} bytes at offset {offset} do not fit the {have} bytes offered"
            ))),
        }
    }
}

/// A message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// The exporter's description of the storage.
    Offer(Box<Offer>),
    /// More file descriptors of an offer.
    More,
    /// The importer mapped the memory and opened the events.
    Accept,
    /// The importer could not map the memory.
    Refuse {
        /// Why.
        reason: String,
    },
    /// The sender recorded its event after its latest work on the storage.
    Recorded,
    /// The importer's mapping is gone.
    Release,
}

fn protocol(reason: String) -> Error {
    Error::IpcProtocol { reason }
}

fn io_error(e: impl Into<std::io::Error>) -> Error {
    let e: std::io::Error = e.into();
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::ConnectionReset => Error::IpcPeerGone,
        // A read timeout the caller set: it names the operation and the time.
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::IpcTimeout {
            op: "receive",
            millis: 0,
        },
        _ => Error::Io {
            path: "CUDA storage socket".into(),
            message: e.to_string(),
        },
    }
}

/// The body of `msg`.
pub(crate) fn encode(msg: &Message) -> Vec<u8> {
    let mut b = Vec::with_capacity(128);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    match msg {
        Message::Offer(o) => {
            b.push(TAG_OFFER);
            b.extend_from_slice(&o.uuid);
            b.extend_from_slice(&o.ordinal.to_le_bytes());
            let name = o.dtype.name().as_bytes();
            b.push(name.len() as u8);
            b.extend_from_slice(name);
            b.extend_from_slice(&o.len.to_le_bytes());
            b.extend_from_slice(&o.pid.to_le_bytes());
            b.extend_from_slice(&o.event);
            b.extend_from_slice(&o.reply_event);
            match &o.memory {
                OfferMemory::Handles { offset, lens } => {
                    b.push(MEM_HANDLES);
                    b.extend_from_slice(&offset.to_le_bytes());
                    b.extend_from_slice(&(lens.len() as u32).to_le_bytes());
                    for l in lens {
                        b.extend_from_slice(&l.to_le_bytes());
                    }
                }
                OfferMemory::Segment {
                    handle,
                    len,
                    offset,
                } => {
                    b.push(MEM_SEGMENT);
                    b.extend_from_slice(handle);
                    b.extend_from_slice(&len.to_le_bytes());
                    b.extend_from_slice(&offset.to_le_bytes());
                }
            }
        }
        Message::More => b.push(TAG_MORE),
        Message::Accept => b.push(TAG_ACCEPT),
        Message::Refuse { reason } => {
            b.push(TAG_REFUSE);
            let r = &reason.as_bytes()[..reason.len().min(4096)];
            b.extend_from_slice(&(r.len() as u32).to_le_bytes());
            b.extend_from_slice(r);
        }
        Message::Recorded => b.push(TAG_RECORDED),
        Message::Release => b.push(TAG_RELEASE),
    }
    b
}

/// Reads fields off a body, each read an error when the body is too short.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(protocol("the message ends early".into()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().unwrap_or([0; N]))
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// The message of a body.
pub(crate) fn decode(body: &[u8]) -> Result<Message> {
    let mut r = Reader(body);
    if r.array::<4>()? != MAGIC {
        return Err(protocol(
            "not a Genesis CUDA storage message (bad magic)".into(),
        ));
    }
    let version = u16::from_le_bytes(r.array()?);
    if version != VERSION {
        return Err(protocol(format!(
            "protocol version {version}, this process speaks {VERSION}"
        )));
    }
    let msg = match r.u8()? {
        TAG_OFFER => {
            let uuid = r.array()?;
            let ordinal = r.u32()?;
            let n = r.u8()? as usize;
            let name = r.take(n)?;
            let dtype = DType::ALL
                .into_iter()
                .find(|d| d.name().as_bytes() == name)
                .ok_or_else(|| {
                    protocol(format!("unknown dtype {:?}", String::from_utf8_lossy(name)))
                })?;
            let len = r.u64()?;
            let pid = r.u32()?;
            let event = r.array()?;
            let reply_event = r.array()?;
            let memory = match r.u8()? {
                MEM_HANDLES => {
                    let offset = r.u64()?;
                    let count = r.u32()? as usize;
                    if count > MAX_HANDLES {
                        return Err(protocol(format!("{count} handles")));
                    }
                    let lens = (0..count).map(|_| r.u64()).collect::<Result<_>>()?;
                    OfferMemory::Handles { offset, lens }
                }
                MEM_SEGMENT => OfferMemory::Segment {
                    handle: r.array()?,
                    len: r.u64()?,
                    offset: r.u64()?,
                },
                k => return Err(protocol(format!("unknown memory kind {k}"))),
            };
            let offer = Offer {
                uuid,
                ordinal,
                dtype,
                len,
                pid,
                event,
                reply_event,
                memory,
            };
            offer.validate()?;
            Message::Offer(Box::new(offer))
        }
        TAG_MORE => Message::More,
        TAG_ACCEPT => Message::Accept,
        TAG_REFUSE => {
            let n = r.u32()? as usize;
            Message::Refuse {
                reason: String::from_utf8_lossy(r.take(n)?).into_owned(),
            }
        }
        TAG_RECORDED => Message::Recorded,
        TAG_RELEASE => Message::Release,
        t => return Err(protocol(format!("unknown message tag {t}"))),
    };
    if !r.0.is_empty() {
        return Err(protocol(format!("{} bytes after the message", r.0.len())));
    }
    Ok(msg)
}

/// Sends one frame: `body` with `fds` (at most [`FDS_PER_FRAME`]).
fn send_frame(sock: &UnixStream, body: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    debug_assert!(fds.len() <= FDS_PER_FRAME);
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&(body.len() as u32).to_le_bytes());
    header[4..].copy_from_slice(&(fds.len() as u32).to_le_bytes());
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_FRAME))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(protocol(format!("{} descriptors in one frame", fds.len())));
    }
    let iov = [IoSlice::new(&header), IoSlice::new(body)];
    let sent = loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r.map_err(io_error)?,
        }
    };
    // The descriptors went with the first byte; the rest of a partial send follows plainly.
    let whole: Vec<u8> = header.iter().chain(body).copied().collect();
    if sent < whole.len() {
        (&*sock).write_all(&whole[sent..]).map_err(io_error)?;
    }
    Ok(())
}

/// Receives one frame: its body and the descriptors that came with it.
fn recv_frame(sock: &UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut header = [0u8; 8];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_FRAME))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        let mut iov = [IoSliceMut::new(&mut header)];
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r.map_err(io_error)?,
        }
    };
    if got.bytes == 0 {
        return Err(Error::IpcPeerGone);
    }
    let truncated = got.flags.contains(ReturnFlags::CTRUNC);
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if truncated {
        return Err(protocol("more descriptors than a frame may carry".into()));
    }
    (&*sock)
        .read_exact(&mut header[got.bytes..])
        .map_err(io_error)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let want = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_BODY {
        return Err(protocol(format!("a message of {len} bytes")));
    }
    if fds.len() != want {
        return Err(protocol(format!(
            "{} file descriptors arrived, the frame says {want}",
            fds.len()
        )));
    }
    let mut body = vec![0u8; len];
    (&*sock).read_exact(&mut body).map_err(io_error)?;
    Ok((body, fds))
}

/// Sends `msg` with `fds` (an offer's, in order; any number): the first
/// [`FDS_PER_FRAME`] with the message, the rest in `More` frames.
pub(crate) fn send(sock: &UnixStream, msg: &Message, fds: &[BorrowedFd<'_>]) -> Result<()> {
    let mut chunks = fds.chunks(FDS_PER_FRAME);
    send_frame(sock, &encode(msg), chunks.next().unwrap_or(&[]))?;
    let more = encode(&Message::More);
    for chunk in chunks {
        send_frame(sock, &more, chunk)?;
    }
    Ok(())
}

/// Receives one message with its descriptors (for an offer, all of them, gathered from the
/// `More` frames that follow it).
pub(crate) fn recv(sock: &UnixStream) -> Result<(Message, Vec<OwnedFd>)> {
    let (body, mut fds) = recv_frame(sock)?;
    let msg = decode(&body)?;
    let want = match &msg {
        Message::Offer(o) => o.fd_count(),
        Message::More => return Err(protocol("descriptors with no offer".into())),
        _ => 0,
    };
    while fds.len() < want {
        let (body, more) = recv_frame(sock)?;
        if decode(&body)? != Message::More || more.is_empty() {
            return Err(protocol(format!(
                "the offer's descriptors stop at {} of {want}",
                fds.len()
            )));
        }
        fds.extend(more);
    }
    if fds.len() != want {
        return Err(protocol(format!(
            "{} file descriptors for a message that takes {want}",
            fds.len()
        )));
    }
    Ok((msg, fds))
}

/// Borrows each descriptor.
pub(crate) fn borrow_all(fds: &[OwnedFd]) -> Vec<BorrowedFd<'_>> {
    fds.iter().map(AsFd::as_fd).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(memory: OfferMemory) -> Box<Offer> {
        Box::new(Offer {
            uuid: [7; 16],
            ordinal: 1,
            dtype: DType::F32,
            len: 1000,
            pid: 42,
            event: [9; 64],
            reply_event: [8; 64],
            memory,
        })
    }

    fn handles(offset: u64, lens: Vec<u64>) -> OfferMemory {
        OfferMemory::Handles { offset, lens }
    }

    #[test]
    fn every_message_round_trips() {
        let msgs = [
            Message::Offer(offer(handles(512, vec![2 << 20, 4 << 20]))),
            Message::Offer(offer(OfferMemory::Segment {
                handle: [3; 64],
                len: 2 << 20,
                offset: 4096,
            })),
            Message::More,
            Message::Accept,
            Message::Refuse {
                reason: "no such device".into(),
            },
            Message::Recorded,
            Message::Release,
        ];
        for m in msgs {
            assert_eq!(decode(&encode(&m)).unwrap(), m);
        }
        for d in DType::ALL {
            let mut o = offer(handles(0, vec![2 << 20]));
            o.dtype = d;
            assert_eq!(
                decode(&encode(&Message::Offer(o.clone()))).unwrap(),
                Message::Offer(o)
            );
        }
    }

    fn refused(body: &[u8], what: &str) {
        match decode(body) {
            Err(Error::IpcProtocol { reason }) => {
                assert!(reason.contains(what), "{reason:?} lacks {what:?}")
            }
            other => panic!("{other:?}, expected a protocol error about {what:?}"),
        }
    }

    #[test]
    fn malformed_messages_are_typed_errors() {
        let good = encode(&Message::Offer(offer(handles(0, vec![2 << 20]))));
        // Every truncation of a good message is refused, none panics.
        for n in 0..good.len() {
            assert!(
                matches!(decode(&good[..n]), Err(Error::IpcProtocol { .. })),
                "{n}"
            );
        }
        let mut bad = good.clone();
        bad[0] = b'X';
        refused(&bad, "magic");
        let mut bad = good.clone();
        bad[4] = 9;
        refused(&bad, "version 9");
        let mut bad = good.clone();
        bad[6] = 77;
        refused(&bad, "tag 77");
        let mut bad = good.clone();
        bad.push(0);
        refused(&bad, "after the message");
        // The dtype's name, its first letter changed.
        let at = 4 + 2 + 1 + 16 + 4 + 1;
        assert_eq!(
            &good[at..at + good[at - 1] as usize],
            DType::F32.name().as_bytes()
        );
        let mut bad = good.clone();
        bad[at] = b'#';
        refused(&bad, "unknown dtype");
    }

    #[test]
    fn offers_whose_memory_misses_the_storage_are_refused() {
        // 1000 f32 = 4000 bytes.
        let too_far = Message::Offer(offer(handles((2 << 20) - 3584, vec![2 << 20])));
        refused(&encode(&too_far), "do not fit");
        let fits = Message::Offer(offer(handles((2 << 20) - 4096, vec![2 << 20])));
        assert!(decode(&encode(&fits)).is_ok());
        let across = Message::Offer(offer(handles((2 << 20) - 512, vec![2 << 20, 2 << 20])));
        assert!(decode(&encode(&across)).is_ok());
        refused(
            &encode(&Message::Offer(offer(handles(0, vec![])))),
            "0 handles",
        );
        refused(
            &encode(&Message::Offer(offer(handles(0, vec![0, 8192])))),
            "0 bytes",
        );
        let overflow = Message::Offer(offer(handles(0, vec![u64::MAX, 2])));
        refused(&encode(&overflow), "overflow");
        let segment = Message::Offer(offer(OfferMemory::Segment {
            handle: [0; 64],
            len: 4096,
            offset: 512,
        }));
        refused(&encode(&segment), "do not fit");
        let misaligned = Message::Offer(offer(handles(256, vec![2 << 20])));
        refused(&encode(&misaligned), "not a multiple of 512");
        let mut empty = offer(handles(0, vec![2 << 20]));
        empty.len = 0;
        refused(&encode(&Message::Offer(empty)), "empty");
        let mut huge = offer(handles(0, vec![2 << 20]));
        huge.len = u64::MAX;
        refused(&encode(&Message::Offer(huge)), "overflow");
    }

    /// A file descriptor whose identity the other end can check: the ends of a pipe.
    fn pipe() -> (OwnedFd, OwnedFd) {
        let (r, w) = std::io::pipe().unwrap();
        (OwnedFd::from(r), OwnedFd::from(w))
    }

    #[test]
    fn descriptors_travel_with_their_offer() {
        // 600 descriptors: three frames (250, 250, 100).
        let (a, b) = UnixStream::pair().unwrap();
        let pipes: Vec<(OwnedFd, OwnedFd)> = (0..600).map(|_| pipe()).collect();
        let writers: Vec<BorrowedFd<'_>> = pipes.iter().map(|p| p.1.as_fd()).collect();
        let msg = Message::Offer(offer(handles(0, vec![2 << 20; 600])));
        let sender = std::thread::scope(|s| {
            let h = s.spawn(|| send(&a, &msg, &writers));
            let got = recv(&b);
            h.join().unwrap().unwrap();
            got
        });
        let (got, fds) = sender.unwrap();
        assert_eq!(got, msg);
        assert_eq!(fds.len(), 600);
        // Each received descriptor is the write end of the pipe of the same index.
        for (i, fd) in fds.into_iter().enumerate() {
            let byte = [i as u8];
            std::fs::File::from(fd).write_all(&byte).unwrap();
            let mut back = [0u8];
            (&std::fs::File::from(pipes[i].0.try_clone().unwrap()))
                .read_exact(&mut back)
                .unwrap();
            assert_eq!(back, byte, "descriptor {i}");
        }
    }

    #[test]
    fn plain_messages_and_a_closed_peer() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, &Message::Recorded, &[]).unwrap();
        send(&a, &Message::Accept, &[]).unwrap();
        let (m, fds) = recv(&b).unwrap();
        assert_eq!(m, Message::Recorded);
        assert!(fds.is_empty());
        assert_eq!(recv(&b).unwrap().0, Message::Accept);
        drop(a);
        assert_eq!(recv(&b).unwrap_err(), Error::IpcPeerGone);
        // Writing to a closed peer is the same error, not SIGPIPE.
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        assert_eq!(
            send(&a, &Message::Release, &[]).unwrap_err(),
            Error::IpcPeerGone
        );
    }

    #[test]
    fn descriptor_counts_that_disagree_are_refused() {
        // An offer of two handles followed by nothing: the peer closes before the rest.
        let (a, b) = UnixStream::pair().unwrap();
        let (_r, w) = pipe();
        let msg = encode(&Message::Offer(offer(handles(0, vec![2 << 20, 2 << 20]))));
        send_frame(&a, &msg, &[w.as_fd()]).unwrap();
        drop(a);
        assert_eq!(recv(&b).unwrap_err(), Error::IpcPeerGone);
        // An offer followed by a frame that is not `More`.
        let (a, b) = UnixStream::pair().unwrap();
        send_frame(&a, &msg, &[w.as_fd()]).unwrap();
        send(&a, &Message::Recorded, &[]).unwrap();
        assert!(matches!(recv(&b), Err(Error::IpcProtocol { .. })));
        // A frame whose header names more descriptors than came.
        let (a, b) = UnixStream::pair().unwrap();
        let body = encode(&Message::Release);
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&3u32.to_le_bytes());
        frame.extend_from_slice(&body);
        (&a).write_all(&frame).unwrap();
        assert!(
            matches!(recv(&b), Err(Error::IpcProtocol { reason }) if reason.contains("says 3"))
        );
        // Descriptors with a message that takes none.
        let (a, b) = UnixStream::pair().unwrap();
        send_frame(&a, &encode(&Message::Recorded), &[w.as_fd()]).unwrap();
        assert!(matches!(recv(&b), Err(Error::IpcProtocol { .. })));
        // `More` with no offer.
        let (a, b) = UnixStream::pair().unwrap();
        send_frame(&a, &encode(&Message::More), &[w.as_fd()]).unwrap();
        assert!(matches!(recv(&b), Err(Error::IpcProtocol { .. })));
        // An oversized body.
        let (a, b) = UnixStream::pair().unwrap();
        let mut frame = (MAX_BODY as u32 + 1).to_le_bytes().to_vec();
        frame.extend_from_slice(&0u32.to_le_bytes());
        (&a).write_all(&frame).unwrap();
        assert!(matches!(recv(&b), Err(Error::IpcProtocol { .. })));
    }
}
