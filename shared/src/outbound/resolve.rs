//! Name resolution through the guard: the client connects only to addresses the guard
//! accepted, so a name that resolves to a public address when checked and to a private
//! one when connected (DNS rebinding) cannot slip through — there is one lookup, and
//! its checked result is what the client connects to.

use std::net::SocketAddr;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::guard::Guard;

/// A `reqwest` resolver that looks names up with the system resolver (as reqwest's
/// default does) and keeps only the addresses the guard accepts.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    guard: Guard,
}

impl GuardedResolver {
    /// A resolver filtering through `guard`.
    pub fn new(guard: Guard) -> Self {
        Self { guard }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: the client puts the URL's port (or the scheme's) in its place.
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept = guard.filter_resolved(&host, found)?;
            let addrs: Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::{AllowList, Refused};

    #[tokio::test]
    async fn localhost_is_refused_after_resolution_unless_allowed() {
        let strict = GuardedResolver::new(Guard::default());
        let e = strict
            .resolve("localhost".parse().unwrap())
            .await
            .err()
            .expect("refused");
        let refused = Refused::find(e.as_ref()).expect("a refusal");
        assert!(
            matches!(refused, Refused::Resolved { host, .. } if host == "localhost"),
            "{refused}"
        );

        let by_name = GuardedResolver::new(Guard::new(AllowList::parse("localhost").unwrap()));
        let addrs: Vec<_> = by_name
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));

        let by_block = GuardedResolver::new(Guard::new(AllowList::loopback()));
        let addrs: Vec<_> = by_block
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(!addrs.is_empty());
    }
}
