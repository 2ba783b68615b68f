//! A generic netlink subscriber: resolves a family and one of its multicast groups through
//! the kernel's `nlctrl` family, joins the group and decodes the events that arrive (their
//! command and top-level attributes). Enough for event-only families such as binder's
//! transaction reports; requests and dumps to a family are not supported.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};
use syskit::cvt;

const NLMSG_HDRLEN: usize = 16;
const GENL_HDRLEN: usize = 4;
const NLA_HDRLEN: usize = 4;
/// The attribute type without the nested and byte-order bits.
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The attributes of one message or nest, by type (a repeated type keeps its last value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attrs(pub BTreeMap<u16, Vec<u8>>);

impl Attrs {
    /// Decodes a run of `struct nlattr`s. A truncated or malformed attribute is an error.
    pub fn parse(mut buf: &[u8]) -> Result<Attrs, String> {
        let mut out = BTreeMap::new();
        while buf.len() >= NLA_HDRLEN {
            let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
            let ty = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
            if len < NLA_HDRLEN || len > buf.len() {
                return Err(format!("attribute type {ty}: length {len} with {} bytes left", buf.len()));
            }
            out.insert(ty, buf[NLA_HDRLEN..len].to_vec());
            buf = &buf[align4(len).min(buf.len())..];
        }
        if !buf.is_empty() {
            return Err(format!("{} stray bytes after the last attribute", buf.len()));
        }
        Ok(Attrs(out))
    }

    pub fn has(&self, ty: u16) -> bool {
        self.0.contains_key(&ty)
    }

    pub fn u32(&self, ty: u16) -> Option<u32> {
        Some(u32::from_ne_bytes(self.0.get(&ty)?.as_slice().try_into().ok()?))
    }

    fn u16(&self, ty: u16) -> Option<u16> {
        Some(u16::from_ne_bytes(self.0.get(&ty)?.as_slice().try_into().ok()?))
    }

    /// A nul-terminated string attribute, without its nul.
    pub fn string(&self, ty: u16) -> Option<String> {
        let b = self.0.get(&ty)?;
        let b = b.strip_suffix(&[0]).unwrap_or(b);
        Some(String::from_utf8_lossy(b).into_owned())
    }

    /// The attribute as a nest of attributes.
    pub fn nested(&self, ty: u16) -> Option<Result<Attrs, String>> {
        self.0.get(&ty).map(|b| Attrs::parse(b))
    }
}

/// One generic netlink message: its command and attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub cmd: u8,
    pub attrs: Attrs,
}

/// A decoded netlink message: (type, payload after the netlink header).
fn messages(mut buf: &[u8]) -> Result<Vec<(u16, &[u8])>, String> {
    let mut out = vec![];
    while buf.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes(buf[0..4].try_into().unwrap()) as usize;
        let ty = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < NLMSG_HDRLEN || len > buf.len() {
            return Err(format!("netlink message type {ty}: length {len} with {} bytes left", buf.len()));
        }
        out.push((ty, &buf[NLMSG_HDRLEN..len]));
        buf = &buf[align4(len).min(buf.len())..];
    }
    Ok(out)
}

/// A generic netlink message's payload (after the netlink header) as an [`Event`].
fn event(payload: &[u8]) -> Result<Event, String> {
    if payload.len() < GENL_HDRLEN {
        return Err(format!("generic netlink message of {} bytes", payload.len()));
    }
    Ok(Event { cmd: payload[0], attrs: Attrs::parse(&payload[GENL_HDRLEN..])? })
}

/// The id of the multicast group named `group` in a CTRL_CMD_NEWFAMILY reply's attributes,
/// with the family's id.
fn family_and_group(attrs: &Attrs, family: &str, group: &str) -> Result<(u16, u32), String> {
    let id = attrs.u16(CTRL_ATTR_FAMILY_ID).ok_or("no CTRL_ATTR_FAMILY_ID in nlctrl's reply")?;
    let groups = attrs
        .nested(CTRL_ATTR_MCAST_GROUPS)
        .ok_or_else(|| format!("generic netlink family {family} has no multicast groups"))??;
    let mut names = vec![];
    for g in groups.0.values() {
        let g = Attrs::parse(g)?;
        let name = g.string(CTRL_ATTR_MCAST_GRP_NAME).unwrap_or_default();
        if name == group {
            let gid = g.u32(CTRL_ATTR_MCAST_GRP_ID).ok_or("multicast group without CTRL_ATTR_MCAST_GRP_ID")?;
            return Ok((id, gid));
        }
        names.push(name);
    }
    Err(format!("generic netlink family {family} has no multicast group {group} (it has {names:?})"))
}

/// A socket subscribed to one multicast group of one generic netlink family.
pub struct Subscriber {
    fd: OwnedFd,
    family: u16,
    queued: VecDeque<Event>,
}

fn invalid(e: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Subscriber {
    /// Resolves `family` and its multicast group `group` and joins it. ENOENT from the
    /// kernel means no such family is registered.
    pub fn open(family: &str, group: &str) -> io::Result<Subscriber> {
        // SAFETY: plain socket creation; the fd is owned right away.
        let fd =
            cvt(unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_GENERIC) })?;
        // SAFETY: `fd` is a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut s = Subscriber { fd, family: 0, queued: VecDeque::new() };
        s.send_getfamily(family)?;
        let reply = s.recv(Duration::from_secs(5))?.ok_or_else(|| invalid("no reply from nlctrl within 5 s".into()))?;
        let mut found = None;
        for (ty, payload) in messages(&reply).map_err(invalid)? {
            match ty {
                NLMSG_ERROR => {
                    let err = i32::from_ne_bytes(payload.get(..4).unwrap_or(&[0; 4]).try_into().unwrap());
                    if err != 0 {
                        let e = io::Error::from_raw_os_error(-err);
                        return Err(io::Error::new(
                            e.kind(),
                            format!("resolving generic netlink family {family}: {e}"),
                        ));
                    }
                }
                GENL_ID_CTRL => found = Some(family_and_group(&event(payload).map_err(invalid)?.attrs, family, group)),
                _ => {}
            }
        }
        let (id, gid) = found.ok_or_else(|| invalid("nlctrl sent no CTRL_CMD_NEWFAMILY".into()))?.map_err(invalid)?;
        // SAFETY: `gid` is a live u32 and its size is passed.
        cvt(unsafe {
            libc::setsockopt(
                s.fd.as_raw_fd(),
                libc::SOL_NETLINK,
                libc::NETLINK_ADD_MEMBERSHIP,
                (&raw const gid).cast(),
                std::mem::size_of::<u32>() as libc::socklen_t,
            )
        })?;
        s.family = id;
        Ok(s)
    }

    fn send_getfamily(&self, family: &str) -> io::Result<()> {
        let name_len = NLA_HDRLEN + family.len() + 1;
        let total = NLMSG_HDRLEN + GENL_HDRLEN + align4(name_len);
        let mut m = Vec::with_capacity(total);
        m.extend_from_slice(&(total as u32).to_ne_bytes());
        m.extend_from_slice(&GENL_ID_CTRL.to_ne_bytes());
        m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
        m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        m.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel
        m.extend_from_slice(&[CTRL_CMD_GETFAMILY, 1, 0, 0]); // cmd, version, reserved
        m.extend_from_slice(&(name_len as u16).to_ne_bytes());
        m.extend_from_slice(&CTRL_ATTR_FAMILY_NAME.to_ne_bytes());
        m.extend_from_slice(family.as_bytes());
        m.resize(total, 0);
        // SAFETY: `m` is readable for its length; the kernel is the default destination.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// One datagram, or None after `timeout`. ENOBUFS (the socket overflowed and events
    /// were lost) is an error: the caller must know.
    fn recv(&self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        if !syskit::wait_readable(self.fd.as_raw_fd(), timeout)? {
            return Ok(None);
        }
        let mut buf = vec![0u8; 64 * 1024];
        let n = syskit::read_some(self.fd.as_raw_fd(), &mut buf)?;
        buf.truncate(n);
        Ok(Some(buf))
    }

    /// The next event of the family, or None when none arrives within `timeout`.
    pub fn next(&mut self, timeout: Duration) -> io::Result<Option<Event>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.queued.pop_front() {
                return Ok(Some(e));
            }
            let Some(d) = self.recv(deadline.saturating_duration_since(Instant::now()))? else {
                return Ok(None);
            };
            for (ty, payload) in messages(&d).map_err(invalid)? {
                if ty == self.family {
                    self.queued.push_back(event(payload).map_err(invalid)?);
                } else if ty != NLMSG_DONE && ty != NLMSG_ERROR {
                    return Err(invalid(format!("unexpected netlink message type {ty}")));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = ((NLA_HDRLEN + payload.len()) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        v.resize(align4(v.len()), 0);
        v
    }

    #[test]
    fn attributes_and_nests() {
        let mut b = attr(1, &7u32.to_ne_bytes());
        b.extend(attr(2, b"binder\0"));
        b.extend(attr(7, &[])); // a flag
        let a = Attrs::parse(&b).unwrap();
        assert_eq!(a.u32(1), Some(7));
        assert_eq!(a.string(2).as_deref(), Some("binder"));
        assert!(a.has(7) && !a.has(3));
        // A nest of nests, as nlctrl lists multicast groups (type with NLA_F_NESTED set).
        let g =
            [attr(CTRL_ATTR_MCAST_GRP_ID, &42u32.to_ne_bytes()), attr(CTRL_ATTR_MCAST_GRP_NAME, b"report\0")].concat();
        let groups = attr(1 | 0x8000, &g);
        let reply =
            [attr(CTRL_ATTR_FAMILY_ID, &[0x1a, 0, 0, 0][..2]), attr(CTRL_ATTR_MCAST_GROUPS | 0x8000, &groups)].concat();
        let a = Attrs::parse(&reply).unwrap();
        assert_eq!(family_and_group(&a, "binder", "report"), Ok((u16::from_ne_bytes([0x1a, 0]), 42)));
        let e = family_and_group(&a, "binder", "other").unwrap_err();
        assert!(e.contains("no multicast group other") && e.contains("report"), "{e}");
    }

    #[test]
    fn malformed_input_is_an_error() {
        let mut b = attr(1, &7u32.to_ne_bytes());
        b[0] = 40; // longer than the buffer
        assert!(Attrs::parse(&b).unwrap_err().contains("length 40"));
        assert!(Attrs::parse(&[1, 2]).unwrap_err().contains("stray"));
        assert!(messages(&[8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}
