//! The allow-list (`WEFT_OUTBOUND_ALLOW`): addresses and host names an outbound call may
//! reach although the default rules refuse them.
//!
//! A comma-separated list; each entry is one of:
//!
//! - a CIDR block, `10.1.0.0/16` or `fd00::/8`;
//! - a single address, `10.1.2.3` or `::1` (also `[::1]`);
//! - a host name, `billing.internal`, matched exactly (case-insensitive, a trailing dot
//!   ignored): every address it resolves to is allowed;
//! - `*.example.com`: any name under `example.com` (`a.example.com`,
//!   `a.b.example.com`), not `example.com` itself;
//! - `*`: everything — the guard is off (only the http/https scheme rule remains).
//!
//! Blank entries are ignored, so an empty value allows nothing beyond the defaults.

use std::fmt;
use std::net::IpAddr;

use super::cidr::{Cidr, CidrError};

/// The environment variable holding the allow-list.
pub const ENV: &str = "WEFT_OUTBOUND_ALLOW";

/// What may be reached despite the default rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    everything: bool,
    blocks: Vec<Cidr>,
    /// Exact names, lower-case, without a trailing dot.
    hosts: Vec<String>,
    /// Domains of `*.domain` entries, lower-case, with a leading dot: `.example.com`.
    suffixes: Vec<String>,
}

/// Why an allow-list did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowError {
    /// A CIDR entry (one with `/`) is malformed.
    #[error("entry {entry:?}: {source}")]
    Cidr {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        source: CidrError,
    },
    /// The entry is none of the accepted forms.
    #[error(
        "entry {0:?} is not a CIDR block, an IP address, a host name, `*.domain` or `*` \
         (no schemes, ports or paths)"
    )]
    Entry(String),
}

impl AllowList {
    /// Nothing beyond the default rules: every refused range stays refused.
    pub fn none() -> Self {
        Self::default()
    }

    /// Everything: the guard is off.
    pub fn everything() -> Self {
        Self {
            everything: true,
            ..Self::default()
        }
    }

    /// This machine: `127.0.0.0/8,::1,localhost`, what `weft dev` allows when the
    /// variable is unset (a local tool calls local services).
    pub fn loopback() -> Self {
        match Self::parse("127.0.0.0/8,::1,localhost") {
            Ok(list) => list,
            Err(e) => unreachable!("the loopback allow-list is valid: {e}"),
        }
    }

    /// Parses the variable's value (syntax in the module documentation).
    pub fn parse(list: &str) -> Result<Self, AllowError> {
        let mut out = Self::default();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if entry == "*" {
                out.everything = true;
            } else if entry.contains("://") {
                return Err(bad(entry));
            } else if entry.contains('/') {
                let block = entry.parse().map_err(|source| AllowError::Cidr {
                    entry: entry.to_owned(),
                    source,
                })?;
                out.blocks.push(block);
            } else if let Some(ip) = parse_ip(entry) {
                out.blocks.push(Cidr::single(ip));
            } else if let Some(domain) = entry.strip_prefix("*.") {
                let domain = host_name(domain).ok_or_else(|| bad(entry))?;
                out.suffixes.push(format!(".{domain}"));
            } else {
                out.hosts.push(host_name(entry).ok_or_else(|| bad(entry))?);
            }
        }
        Ok(out)
    }

    /// Whether the guard is off (`*`).
    pub fn allows_everything(&self) -> bool {
        self.everything
    }

    /// Whether `ip` is allowed by an address entry (or `*`). An IPv4-mapped IPv6
    /// address is also matched as the IPv4 address it maps.
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        let canonical = ip.to_canonical();
        self.everything
            || self
                .blocks
                .iter()
                .any(|b| b.contains(ip) || b.contains(canonical))
    }

    /// Whether host name `host` is allowed by a name entry (or `*`): then whatever it
    /// resolves to may be reached.
    pub fn allows_host(&self, host: &str) -> bool {
        if self.everything {
            return true;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.contains(&host) || self.suffixes.iter().any(|s| host.ends_with(s))
    }
}

impl fmt::Display for AllowList {
    /// The list in the variable's syntax (`(none)` when empty), for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut entries: Vec<String> = Vec::new();
        if self.everything {
            entries.push("*".into());
        }
        entries.extend(self.blocks.iter().map(ToString::to_string));
        entries.extend(self.hosts.iter().cloned());
        entries.extend(self.suffixes.iter().map(|s| format!("*{s}")));
        if entries.is_empty() {
            return f.write_str("(none)");
        }
        f.write_str(&entries.join(","))
    }
}

fn bad(entry: &str) -> AllowError {
    AllowError::Entry(entry.to_owned())
}

/// An address, bracketed or not (`[::1]`).
fn parse_ip(entry: &str) -> Option<IpAddr> {
    let bare = entry
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .unwrap_or(entry);
    bare.parse().ok()
}

/// `name` lower-cased without its trailing dot, if it is a host name: dot-separated
/// labels of letters, digits, `-` and `_`, at most 253 characters.
fn host_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (!name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok)).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_of_every_form_parse_and_match() {
        let list = AllowList::parse(
            " 10.1.0.0/16, 192.0.2.7 ,fd00::/8,[::1], Billing.Internal., *.svc.example ,",
        )
        .unwrap();
        assert!(!list.allows_everything());
        assert!(list.allows_ip(ip("10.1.200.3")));
        assert!(!list.allows_ip(ip("10.2.0.1")));
        assert!(list.allows_ip(ip("192.0.2.7")));
        assert!(!list.allows_ip(ip("192.0.2.8")));
        assert!(list.allows_ip(ip("fd00::5")));
        assert!(list.allows_ip(ip("::1")));
        assert!(
            list.allows_ip(ip("::ffff:10.1.0.9")),
            "a mapped address matches its IPv4 block"
        );
        assert!(list.allows_host("billing.internal"));
        assert!(list.allows_host("BILLING.internal."));
        assert!(
            !list.allows_host("x.billing.internal"),
            "exact names are exact"
        );
        assert!(list.allows_host("a.svc.example"));
        assert!(list.allows_host("a.b.svc.example"));
        assert!(!list.allows_host("svc.example"), "a wildcard needs a label");
        assert!(!list.allows_host("evilsvc.example"));
        assert_eq!(
            list.to_string(),
            "10.1.0.0/16,192.0.2.7/32,fd00::/8,::1/128,billing.internal,*.svc.example"
        );
    }

    #[test]
    fn star_allows_everything_and_empty_allows_nothing() {
        let all = AllowList::parse("*").unwrap();
        assert!(all.allows_everything());
        assert!(all.allows_ip(ip("169.254.169.254")) && all.allows_host("anything"));
        let none = AllowList::parse(" , ").unwrap();
        assert_eq!(none, AllowList::none());
        assert!(!none.allows_ip(ip("127.0.0.1")) && !none.allows_host("localhost"));
        assert_eq!(none.to_string(), "(none)");
    }

    #[test]
    fn the_loopback_list_allows_this_machine_only() {
        let l = AllowList::loopback();
        assert!(l.allows_ip(ip("127.0.0.1")) && l.allows_ip(ip("127.1.2.3")));
        assert!(l.allows_ip(ip("::1")) && l.allows_ip(ip("::ffff:127.0.0.1")));
        assert!(l.allows_host("localhost"));
        assert!(!l.allows_ip(ip("10.0.0.1")) && !l.allows_ip(ip("169.254.169.254")));
    }

    #[test]
    fn bad_entries_are_named() {
        for bad in [
            "http://x.example",
            "x.example:8080",
            "10.0.0.0/33",
            "*x.example",
            "*.",
            "a b",
            "a..b",
            "::1/200",
        ] {
            let e = AllowList::parse(&format!("10.0.0.1,{bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }
}
