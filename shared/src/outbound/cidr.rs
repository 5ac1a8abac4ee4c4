//! An address block, `10.0.0.0/8` or `fc00::/7`: what the refused ranges and the
//! allow-list's CIDR entries are made of.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A block of addresses of one family: a network address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a block did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("{0:?} is not an IP address")]
    Address(String),
    /// The prefix length is not a number within the family's width.
    #[error("prefix {prefix:?} is not a number from 0 to {max}")]
    Prefix {
        /// The prefix as written.
        prefix: String,
        /// 32 or 128.
        max: u8,
    },
}

impl Cidr {
    /// The block of `prefix` leading bits of `addr`; bits past the prefix are cleared,
    /// so `10.1.2.3/8` is `10.0.0.0/8`. `None` when `prefix` exceeds the family's width.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let network = match addr {
            IpAddr::V4(v4) if prefix <= 32 => IpAddr::V4((u32::from(v4) & mask32(prefix)).into()),
            IpAddr::V6(v6) if prefix <= 128 => {
                IpAddr::V6((u128::from(v6) & mask128(prefix)).into())
            }
            _ => return None,
        };
        Some(Self { network, prefix })
    }

    /// The IPv4 block `a.b.c.d/prefix`, written with its host bits clear (for tables).
    pub(crate) const fn v4(octets: [u8; 4], prefix: u8) -> Self {
        let [a, b, c, d] = octets;
        Self {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    /// The IPv6 block of `segments/prefix`, written with its host bits clear (for tables).
    pub(crate) const fn v6(segments: [u16; 8], prefix: u8) -> Self {
        let [a, b, c, d, e, f, g, h] = segments;
        Self {
            network: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
            prefix,
        }
    }

    /// The block holding only `addr` (`/32` or `/128`).
    pub fn single(addr: IpAddr) -> Self {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Self {
            network: addr,
            prefix,
        }
    }

    /// The block's first address.
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// How many leading bits the block fixes.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in the block; an address of the other family never is.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & mask32(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & mask128(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// `addr/prefix`, or a bare address for a single one.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::Address(addr.to_owned()))?;
        let Some(prefix) = prefix else {
            return Ok(Self::single(addr));
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bad = || CidrError::Prefix {
            prefix: prefix.to_owned(),
            max,
        };
        let bits: u8 = prefix.parse().map_err(|_| bad())?;
        Self::new(addr, bits).ok_or_else(bad)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn mask32(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p.min(32))),
    }
}

fn mask128(prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p => u128::MAX << (128 - u32::from(p.min(128))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_parse_normalise_and_contain() {
        let b: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(b.to_string(), "10.0.0.0/8");
        assert!(b.contains(ip("10.255.0.1")));
        assert!(!b.contains(ip("11.0.0.1")));
        assert!(!b.contains(ip("::ffff:10.0.0.1")), "families never mix");

        let v6: Cidr = "fc00::/7".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")));
        assert!(!v6.contains(ip("fe80::1")));

        let one: Cidr = "192.0.2.7".parse().unwrap();
        assert_eq!(one.to_string(), "192.0.2.7/32");
        assert!(one.contains(ip("192.0.2.7")) && !one.contains(ip("192.0.2.8")));

        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        let all6: Cidr = "::/0".parse().unwrap();
        assert!(all6.contains(ip("2001:db8::1")));
    }

    #[test]
    fn bad_blocks_say_what_is_wrong() {
        assert_eq!(
            "10.0.0.0/33".parse::<Cidr>().unwrap_err(),
            CidrError::Prefix {
                prefix: "33".into(),
                max: 32
            }
        );
        assert!(matches!(
            "::/129".parse::<Cidr>(),
            Err(CidrError::Prefix { max: 128, .. })
        ));
        assert!(matches!(
            "10.0.0/8".parse::<Cidr>(),
            Err(CidrError::Address(_))
        ));
        assert!(matches!(
            "10.0.0.0/x".parse::<Cidr>(),
            Err(CidrError::Prefix { .. })
        ));
    }
}
