//! The client's address: what an audit entry records as `ip_address`, and the source the admin
//! API throttles failed authentication by.
//!
//! Without `--trust-proxy` it is the TCP peer. With it, `X-Forwarded-For` is read only when the
//! peer itself is a trusted proxy (`--trusted-proxies`, loopback by default), and from the
//! right: each proxy appends the address it received the request from, so an entry is as
//! believable as the hop that wrote it. The entry the peer appended (the rightmost) was written
//! by a trusted proxy; if it names another trusted proxy, the entry left of it is believable
//! too, and so on. The first entry that is not a trusted proxy is the client. Everything left of
//! it was sent by the client and proves nothing, which is why the leftmost entry, the one a
//! client controls, is never taken on its own.
//!
//! ```text
//! X-Forwarded-For: 6.6.6.6, 203.0.113.9, 10.0.0.2      peer 127.0.0.1 (trusted: loopback, 10/8)
//!                  ^client-written ^client   ^proxy    ^proxy: the walk starts here
//! ```
//!
//! An entry must parse as an IP address (`198.51.100.7`, `2001:db8::1`; a port, `1.2.3.4:80` or
//! `[2001:db8::1]:80`, is dropped): the walk stops at one that does not (`=1+1`, `unknown`, a
//! 5,000-character string) and the peer address is taken instead, so nothing but an address is
//! ever stored. When every entry is a trusted proxy the leftmost is taken: each was written by
//! the trusted proxy right of it.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;
use ipnet::IpNet;

/// Whom `X-Forwarded-For` is believed from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyTrust {
    /// `--trust-proxy`: read `X-Forwarded-For` at all.
    pub enabled: bool,
    /// `--trusted-proxies`: the proxies whose entries are believed.
    pub proxies: Vec<IpNet>,
}

impl ProxyTrust {
    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.proxies.iter().any(|net| net.contains(&ip))
    }

    /// The client address of a request from `peer` with `headers`, as the module doc says.
    pub fn client(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = peer.map(|p| p.to_canonical());
        match peer {
            Some(p) if self.enabled && self.trusts(p) => {
                Some(self.rightmost_untrusted(headers).unwrap_or(p))
            }
            _ => peer,
        }
    }

    /// The forwarded client, walking the entries of every `X-Forwarded-For` header (in order,
    /// as one list) from the right; `None` when there are none or the walk meets a non-address.
    fn rightmost_untrusted(&self, headers: &HeaderMap) -> Option<IpAddr> {
        let values: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .map(|v| v.to_str().ok())
            .collect::<Option<_>>()?;
        let mut believed = None;
        for entry in values.iter().rev().flat_map(|v| v.rsplit(',')) {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let ip = parse_entry(entry)?;
            if !self.trusts(ip) {
                return Some(ip);
            }
            believed = Some(ip);
        }
        believed
    }
}

/// An `X-Forwarded-For` entry as an address: a bare IPv4 or IPv6 address, or one with a port.
fn parse_entry(entry: &str) -> Option<IpAddr> {
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

/// The client address of `req` under `trust`, from its `ConnectInfo` peer and its headers.
pub fn of_request<B>(trust: &ProxyTrust, req: &axum::http::Request<B>) -> Option<IpAddr> {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    trust.client(peer, req.headers())
}

/// A `--trusted-proxies` entry: a network in CIDR notation (`10.0.0.0/8`, `fd00::/8`) or a single
/// address (`192.0.2.1`, taken as `/32` or `/128`).
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map(|net| net.trunc())
        .map_err(|_| format!("'{s}' is not an IP network (CIDR such as 10.0.0.0/8) or address"))
}

/// Who a source is, for per-source limits: an IPv4 address, or an IPv6 address's /64 (one
/// subscriber's usual allocation, where every address is the same client's to pick).
pub fn source(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn trust(nets: &[&str]) -> ProxyTrust {
        ProxyTrust {
            enabled: true,
            proxies: nets.iter().map(|n| parse_net(n).unwrap()).collect(),
        }
    }

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_rightmost_entry_that_is_not_a_trusted_proxy_is_the_client() {
        let t = trust(&["127.0.0.0/8", "::1", "10.0.0.0/8"]);
        let peer = Some(ip("127.0.0.1"));
        let cases: &[(&[&str], &str)] = &[
            (&["203.0.113.9"], "203.0.113.9"),
            (&["6.6.6.6, 203.0.113.9"], "203.0.113.9"),
            (&["6.6.6.6, 203.0.113.9, 10.0.0.2"], "203.0.113.9"),
            (&["6.6.6.6", "203.0.113.9, 10.0.0.2"], "203.0.113.9"),
            (&["6.6.6.6,203.0.113.9 ,  10.0.0.2,"], "203.0.113.9"),
            (&["203.0.113.9:4711"], "203.0.113.9"),
            (&["[2001:db8::7]:443, 10.1.1.1"], "2001:db8::7"),
            (&["::ffff:198.51.100.4"], "198.51.100.4"),
            // A client-written garbage entry left of the client changes nothing.
            (&["=1+1, 203.0.113.9"], "203.0.113.9"),
            // Not an address where the client should be: the peer.
            (&["203.0.113.9, =1+1"], "127.0.0.1"),
            (&["unknown"], "127.0.0.1"),
            (&[""], "127.0.0.1"),
            (&[], "127.0.0.1"),
            // Only trusted proxies: the farthest, which the proxy right of it wrote.
            (&["10.9.9.9, 10.0.0.2"], "10.9.9.9"),
        ];
        for (xff, want) in cases {
            assert_eq!(
                t.client(peer, &headers(xff)),
                Some(ip(want)),
                "X-Forwarded-For {xff:?}"
            );
        }
        let long = "1".repeat(5000);
        assert_eq!(t.client(peer, &headers(&[&long])), peer);
    }

    #[test]
    fn forwarded_entries_are_ignored_unless_trusted_and_from_a_trusted_peer() {
        let h = headers(&["203.0.113.9"]);
        let off = ProxyTrust {
            enabled: false,
            ..trust(&["127.0.0.0/8"])
        };
        assert_eq!(off.client(Some(ip("127.0.0.1")), &h), Some(ip("127.0.0.1")));
        // A peer that is not a trusted proxy could have written anything.
        let t = trust(&["10.0.0.0/8"]);
        assert_eq!(t.client(Some(ip("127.0.0.1")), &h), Some(ip("127.0.0.1")));
        assert_eq!(t.client(Some(ip("10.2.3.4")), &h), Some(ip("203.0.113.9")));
        // An IPv4 peer seen on an IPv6 socket is the IPv4 address.
        assert_eq!(
            t.client(Some(ip("::ffff:10.2.3.4")), &h),
            Some(ip("203.0.113.9"))
        );
        assert_eq!(
            t.client(Some(ip("::ffff:192.0.2.1")), &h),
            Some(ip("192.0.2.1"))
        );
        assert_eq!(t.client(None, &h), None);
    }

    #[test]
    fn trusted_proxies_parse_as_networks_or_addresses() {
        assert_eq!(parse_net("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(
            parse_net(" 192.0.2.1 ").unwrap().to_string(),
            "192.0.2.1/32"
        );
        assert_eq!(parse_net("::1").unwrap().to_string(), "::1/128");
        for bad in ["", "10.0.0.0/33", "ten", "1.2.3.4/x", "localhost"] {
            assert!(parse_net(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_ipv6_source_is_its_64() {
        assert_eq!(
            source(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(source(ip("203.0.113.9")), ip("203.0.113.9"));
        assert_eq!(source(ip("::ffff:203.0.113.9")), ip("203.0.113.9"));
    }
}
