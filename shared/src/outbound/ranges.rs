//! The address ranges an outbound call is refused by default, and which of them an
//! address falls in.
//!
//! Everything that is not a public unicast address: the host itself (loopback,
//! unspecified, "this network"), the local link (where cloud metadata services live),
//! private and carrier-grade NAT networks, IPv6 unique-local and site-local networks,
//! multicast and the reserved block. IPv6 forms that carry an IPv4 address (IPv4-mapped
//! `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) are judged by
//! the IPv4 address they carry, since that is where a connection to them ends up.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::cidr::Cidr;

/// A range refused by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The block.
    pub cidr: Cidr,
    /// What it is, as a reason says it after "is": `in the loopback range`.
    pub what: &'static str,
}

const fn v4(octets: [u8; 4], prefix: u8, what: &'static str) -> Range {
    Range {
        cidr: Cidr::v4(octets, prefix),
        what,
    }
}

const fn v6(segments: [u16; 8], prefix: u8, what: &'static str) -> Range {
    Range {
        cidr: Cidr::v6(segments, prefix),
        what,
    }
}

/// The refused IPv4 ranges, most specific first (the first match names the reason).
pub static IPV4: [Range; 11] = [
    v4([0, 0, 0, 0], 32, "the unspecified address"),
    v4([0, 0, 0, 0], 8, "in the \"this network\" range"),
    v4([127, 0, 0, 0], 8, "in the loopback range"),
    v4([10, 0, 0, 0], 8, "in a private range"),
    v4([172, 16, 0, 0], 12, "in a private range"),
    v4([192, 168, 0, 0], 16, "in a private range"),
    v4(
        [169, 254, 0, 0],
        16,
        "in the link-local range, where cloud metadata services answer",
    ),
    v4(
        [100, 64, 0, 0],
        10,
        "in the shared address space of carrier-grade NAT",
    ),
    v4([224, 0, 0, 0], 4, "in the multicast range"),
    v4([255, 255, 255, 255], 32, "the broadcast address"),
    v4([240, 0, 0, 0], 4, "in the reserved range"),
];

/// The refused IPv6 ranges that carry no IPv4 address, most specific first.
pub static IPV6: [Range; 6] = [
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "the unspecified address"),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "the loopback address"),
    v6(
        [0xfc00, 0, 0, 0, 0, 0, 0, 0],
        7,
        "in the unique-local range",
    ),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "in the link-local range"),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "in the site-local range"),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "in the multicast range"),
];

/// An IPv6 form that carries an IPv4 address in its last 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// `::ffff:a.b.c.d`.
    Mapped,
    /// `::a.b.c.d` (deprecated, still accepted by some stacks).
    Compatible,
    /// `64:ff9b::a.b.c.d`, translated to IPv4 by a NAT64 gateway.
    Nat64,
}

impl Embedding {
    fn describe(self) -> &'static str {
        match self {
            Embedding::Mapped => "an IPv4-mapped form",
            Embedding::Compatible => "an IPv4-compatible form",
            Embedding::Nat64 => "a NAT64 form",
        }
    }
}

/// Where a refused address falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// The address as connected to.
    pub ip: IpAddr,
    /// The range it (or the IPv4 address it carries) is in.
    pub range: &'static Range,
    /// For an IPv6 form carrying an IPv4 address: which form, and the address.
    pub via: Option<(Embedding, Ipv4Addr)>,
}

impl Blocked {
    /// What is wrong with the address, after it in a sentence: `is in a private range
    /// (10.0.0.0/8)`, `is an IPv4-mapped form of 127.0.0.1, in the loopback range
    /// (127.0.0.0/8)`.
    pub fn verdict(&self) -> String {
        let (what, block) = (self.range.what, self.range.cidr);
        match self.via {
            None => format!("is {what} ({block})"),
            Some((form, v4)) => format!("is {} of {v4}, {what} ({block})", form.describe()),
        }
    }
}

impl fmt::Display for Blocked {
    /// The address and its [verdict](Blocked::verdict): `10.0.0.5 is in a private range
    /// (10.0.0.0/8)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.ip, self.verdict())
    }
}

/// The refused range `ip` falls in, if any.
pub fn blocked(ip: IpAddr) -> Option<Blocked> {
    match ip {
        IpAddr::V4(_) => find(&IPV4, ip).map(|range| Blocked {
            ip,
            range,
            via: None,
        }),
        IpAddr::V6(v6) => {
            // The unspecified and loopback addresses are also IPv4-compatible in form
            // (`::`, `::1`): they are named as what they are, before the embeddings.
            if let Some(range) = find(&IPV6[..2], ip) {
                return Some(Blocked {
                    ip,
                    range,
                    via: None,
                });
            }
            if let Some((form, v4)) = embedded(v6) {
                return find(&IPV4, IpAddr::V4(v4)).map(|range| Blocked {
                    ip,
                    range,
                    via: Some((form, v4)),
                });
            }
            find(&IPV6[2..], ip).map(|range| Blocked {
                ip,
                range,
                via: None,
            })
        }
    }
}

/// The IPv4 address an IPv6 address carries, and in which form.
pub fn embedded(v6: Ipv6Addr) -> Option<(Embedding, Ipv4Addr)> {
    let bits = u128::from(v6);
    // The low 32 bits (the mask makes the cast exact).
    let v4 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    let high = bits >> 32;
    match high {
        0xffff => Some((Embedding::Mapped, v4)),
        0 => Some((Embedding::Compatible, v4)),
        0x0064_ff9b_0000_0000_0000_0000 => Some((Embedding::Nat64, v4)),
        _ => None,
    }
}

fn find(table: &'static [Range], ip: IpAddr) -> Option<&'static Range> {
    table.iter().find(|r| r.cidr.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(s: &str) -> Option<String> {
        blocked(s.parse().unwrap()).map(|b| b.to_string())
    }

    fn block_of(s: &str) -> Option<String> {
        blocked(s.parse().unwrap()).map(|b| b.range.cidr.to_string())
    }

    #[test]
    fn tables_are_written_with_their_host_bits_clear() {
        for r in IPV4.iter().chain(IPV6.iter()) {
            let normal = Cidr::new(r.cidr.network(), r.cidr.prefix()).unwrap();
            assert_eq!(normal, r.cidr, "{}", r.cidr);
        }
    }

    #[test]
    fn every_default_range_is_refused() {
        let cases = [
            ("127.0.0.1", "127.0.0.0/8"),
            ("127.255.255.254", "127.0.0.0/8"),
            ("10.0.0.5", "10.0.0.0/8"),
            ("172.16.0.1", "172.16.0.0/12"),
            ("172.31.255.255", "172.16.0.0/12"),
            ("192.168.1.1", "192.168.0.0/16"),
            ("169.254.169.254", "169.254.0.0/16"),
            ("100.64.0.1", "100.64.0.0/10"),
            ("100.127.255.255", "100.64.0.0/10"),
            ("0.0.0.0", "0.0.0.0/32"),
            ("0.1.2.3", "0.0.0.0/8"),
            ("224.0.0.1", "224.0.0.0/4"),
            ("255.255.255.255", "255.255.255.255/32"),
            ("240.0.0.1", "240.0.0.0/4"),
            ("::", "::/128"),
            ("::1", "::1/128"),
            ("fc00::1", "fc00::/7"),
            ("fd12:3456::1", "fc00::/7"),
            ("fe80::1", "fe80::/10"),
            ("febf::1", "fe80::/10"),
            ("fec0::1", "fec0::/10"),
            ("ff02::1", "ff00::/8"),
        ];
        for (ip, block) in cases {
            assert_eq!(block_of(ip).as_deref(), Some(block), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "172.15.255.255",
            "100.128.0.1",
            "100.63.255.255",
            "169.253.0.1",
            "192.169.0.1",
            "11.0.0.1",
            "2001:4860:4860::8888",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
        ] {
            assert_eq!(reason(ip), None, "{ip}");
        }
    }

    #[test]
    fn ipv6_forms_of_refused_ipv4_addresses_are_refused() {
        let cases = [
            ("::ffff:127.0.0.1", "127.0.0.0/8", Embedding::Mapped),
            ("::ffff:10.1.2.3", "10.0.0.0/8", Embedding::Mapped),
            (
                "::ffff:169.254.169.254",
                "169.254.0.0/16",
                Embedding::Mapped,
            ),
            ("::ffff:0.0.0.0", "0.0.0.0/32", Embedding::Mapped),
            ("::ffff:192.168.0.1", "192.168.0.0/16", Embedding::Mapped),
            ("::ffff:172.16.0.1", "172.16.0.0/12", Embedding::Mapped),
            ("::ffff:100.64.0.1", "100.64.0.0/10", Embedding::Mapped),
            ("::127.0.0.1", "127.0.0.0/8", Embedding::Compatible),
            ("64:ff9b::10.0.0.1", "10.0.0.0/8", Embedding::Nat64),
        ];
        for (ip, block, form) in cases {
            let b = blocked(ip.parse().unwrap()).unwrap_or_else(|| panic!("{ip}"));
            assert_eq!(b.range.cidr.to_string(), block, "{ip}");
            assert_eq!(b.via.map(|(f, _)| f), Some(form), "{ip}");
        }
    }

    #[test]
    fn reasons_name_the_address_and_the_range() {
        assert_eq!(
            reason("10.0.0.5").unwrap(),
            "10.0.0.5 is in a private range (10.0.0.0/8)"
        );
        assert_eq!(
            reason("::ffff:127.0.0.1").unwrap(),
            "::ffff:127.0.0.1 is an IPv4-mapped form of 127.0.0.1, in the loopback range (127.0.0.0/8)"
        );
        assert_eq!(
            reason("0.0.0.0").unwrap(),
            "0.0.0.0 is the unspecified address (0.0.0.0/32)"
        );
        assert!(reason("169.254.169.254").unwrap().contains("metadata"));
    }
}
