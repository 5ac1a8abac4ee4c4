//! The guard: the default rules plus the allow-list, applied to a URL before a call, to
//! the addresses a host name resolves to, and to each redirect.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;

use super::allow::AllowList;
use super::ranges;
use super::redirect;
use super::refused::Refused;
use super::resolve::GuardedResolver;

/// Decides which outbound calls may be made. Cheap to clone (the allow-list is shared).
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allow: Arc<AllowList>,
}

impl Guard {
    /// The default rules, relaxed by `allow`.
    pub fn new(allow: AllowList) -> Self {
        Self {
            allow: Arc::new(allow),
        }
    }

    /// The guard `config` asks for (`WEFT_OUTBOUND_ALLOW`); the default rules alone when
    /// the variable is unset.
    pub fn from_config(config: &crate::Config) -> Self {
        Self::new(config.outbound_allow.clone().unwrap_or_default())
    }

    /// The allow-list in force.
    pub fn allow_list(&self) -> &AllowList {
        &self.allow
    }

    /// Whether an address outside the public unicast ranges may be reached: `Err` names
    /// its range.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        if self.allow.allows_ip(ip) {
            return Ok(());
        }
        match ranges::blocked(ip) {
            Some(blocked) => Err(Refused::Address(blocked)),
            None => Ok(()),
        }
    }

    /// What can be judged from the URL alone: the scheme (http or https), and a host
    /// written as an address. A host name passes here; its addresses are judged when it
    /// is resolved ([`Guard::filter_resolved`]), since only they say where the call goes.
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused::Scheme(url.scheme().to_owned()));
        }
        let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
            return Err(Refused::NoHost);
        };
        // The URL parser writes every IPv4 spelling of http(s) hosts (`0x7f.1`,
        // `2130706433`) as dotted decimal, and IPv6 in brackets.
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.check_ip(ip),
            Err(_) => Ok(()),
        }
    }

    /// The addresses `host` resolved to that may be reached. All of them when the name
    /// is allowed; otherwise the refused ones are dropped, and when none is left the
    /// refusal of the first is the error.
    pub fn filter_resolved(
        &self,
        host: &str,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Refused> {
        let addrs: Vec<SocketAddr> = addrs.into_iter().collect();
        if self.allow.allows_host(host) {
            return Ok(addrs);
        }
        let mut first_refused = None;
        let mut kept = Vec::with_capacity(addrs.len());
        for addr in addrs {
            match self.check_ip(addr.ip()) {
                Ok(()) => kept.push(addr),
                Err(Refused::Address(blocked)) => {
                    first_refused.get_or_insert(blocked);
                }
                Err(other) => return Err(other),
            }
        }
        match (kept.is_empty(), first_refused) {
            (true, Some(blocked)) => Err(Refused::Resolved {
                host: host.to_owned(),
                blocked,
            }),
            _ => Ok(kept),
        }
    }

    /// A client builder that resolves through the guard (so the address connected to
    /// is the address checked) and follows redirects only as far as the guard allows,
    /// at most `max_redirects` hops (0: none is followed and the 3xx is the answer).
    ///
    /// Proxies from the environment (`HTTP_PROXY`, ...) are not used while the guard is
    /// on: through a proxy the client resolves and connects to the proxy, never to the
    /// target, so the target's address could not be checked. With `*` the guard is off
    /// and the client behaves as reqwest's default, proxies included.
    ///
    /// Callers still check the request's URL with [`Guard::check_url`] before sending:
    /// a URL naming an address is connected to without being resolved.
    pub fn client_builder(&self, max_redirects: usize) -> reqwest::ClientBuilder {
        let mut builder = reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver::new(self.clone())))
            .redirect(redirect::policy(self.clone(), max_redirects));
        if !self.allow.allows_everything() {
            builder = builder.no_proxy();
        }
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn sock(s: &str) -> SocketAddr {
        SocketAddr::new(s.parse().unwrap(), 0)
    }

    #[test]
    fn urls_are_judged_by_scheme_and_literal_address() {
        let g = Guard::default();
        assert_eq!(g.check_url(&url("https://api.example.com/x")), Ok(()));
        assert_eq!(g.check_url(&url("http://8.8.8.8/")), Ok(()));
        assert_eq!(
            g.check_url(&url("ftp://files.example.com/a")),
            Err(Refused::Scheme("ftp".into()))
        );
        assert!(matches!(
            g.check_url(&url("file:///etc/passwd")),
            Err(Refused::Scheme(_))
        ));
        for refused in [
            "http://127.0.0.1:8080/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://0x7f.1/",
            "http://2130706433/",
            "http://10.0.0.5/",
            "http://[fe80::1]/",
        ] {
            assert!(
                matches!(g.check_url(&url(refused)), Err(Refused::Address(_))),
                "{refused}"
            );
        }
        let e = g.check_url(&url("http://10.0.0.5/x")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "outbound call refused: 10.0.0.5 is in a private range (10.0.0.0/8); \
             allow it with WEFT_OUTBOUND_ALLOW"
        );
    }

    #[test]
    fn the_allow_list_lets_addresses_through_but_not_other_schemes() {
        let g = Guard::new(AllowList::parse("127.0.0.0/8,10.0.0.5").unwrap());
        assert_eq!(g.check_url(&url("http://127.0.0.1:9/")), Ok(()));
        assert_eq!(g.check_url(&url("http://10.0.0.5/")), Ok(()));
        assert!(g.check_url(&url("http://10.0.0.6/")).is_err());
        let off = Guard::new(AllowList::everything());
        assert_eq!(off.check_url(&url("http://169.254.169.254/")), Ok(()));
        assert!(matches!(
            off.check_url(&url("gopher://x/")),
            Err(Refused::Scheme(_))
        ));
    }

    #[test]
    fn resolved_addresses_are_filtered_and_an_all_refused_name_is_refused() {
        let g = Guard::default();
        let kept = g
            .filter_resolved("mixed.example", [sock("10.0.0.1"), sock("93.184.216.34")])
            .unwrap();
        assert_eq!(kept, vec![sock("93.184.216.34")]);
        let e = g
            .filter_resolved("localhost", [sock("::1"), sock("127.0.0.1")])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "outbound call refused: localhost resolves to ::1, which is the loopback \
             address (::1/128); allow it with WEFT_OUTBOUND_ALLOW"
        );
        let by_name = Guard::new(AllowList::parse("*.corp.example").unwrap());
        assert_eq!(
            by_name
                .filter_resolved("db.corp.example", [sock("10.0.0.1")])
                .unwrap(),
            vec![sock("10.0.0.1")]
        );
        let by_block = Guard::new(AllowList::parse("10.0.0.0/8").unwrap());
        assert_eq!(
            by_block
                .filter_resolved("anything.example", [sock("10.0.0.1"), sock("::1")])
                .unwrap(),
            vec![sock("10.0.0.1")]
        );
    }

    #[test]
    fn a_refusal_is_found_among_an_errors_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("connecting failed")]
        struct Outer(#[source] Box<dyn std::error::Error + Send + Sync>);
        let inner = Refused::NoHost;
        let outer = Outer(Box::new(inner.clone()));
        assert_eq!(Refused::find(&outer), Some(&inner));
        let unrelated = Outer("dns error".into());
        assert_eq!(Refused::find(&unrelated), None);
    }
}
