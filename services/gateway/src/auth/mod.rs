//! Who may do what (docs/security.md): tokens with scopes, checked on every route by one
//! table ([`scopes::ROUTES`]), and the audit trail of every change.

mod guard;
pub mod principal;
pub mod routes;
pub mod scopes;
pub mod verify;

pub use guard::{guard, metrics_guard, request_audit};
pub use principal::Principal;
pub use scopes::{Scope, ROUTES};
pub use verify::Authenticator;
