//! The outbound guard (docs/outbound.md): every HTTP call Weft makes on behalf of a
//! definition — an HTTP task, a hook delivery — goes through it, so a definition cannot
//! make Weft call the machine it runs on, its private network or the cloud metadata
//! service (server-side request forgery).
//!
//! By default a call may reach public unicast addresses over http or https only
//! ([`ranges`] lists what is refused and why); `WEFT_OUTBOUND_ALLOW` ([`allow`]) lets
//! chosen addresses and host names through. The check is made on the address the
//! client connects to: host names are resolved by [`resolve::GuardedResolver`], which
//! drops refused addresses; a URL naming an address is checked before the call
//! ([`Guard::check_url`]); each redirect hop is checked by [`redirect::policy`]. A
//! refusal is a [`Refused`] error, found in the client's error with [`Refused::find`].
//!
//! [`Guard::client_builder`] puts these pieces on a `reqwest` client.

pub mod allow;
pub mod cidr;
pub mod guard;
pub mod ranges;
pub mod redirect;
pub mod refused;
pub mod resolve;

pub use allow::{AllowError, AllowList};
pub use cidr::Cidr;
pub use guard::Guard;
pub use refused::Refused;
