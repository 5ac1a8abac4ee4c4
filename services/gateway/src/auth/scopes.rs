//! What each route needs: the one table every request is checked against.
//!
//! A route missing from [`ROUTES`] is refused to everyone (fail closed), so a new route
//! cannot be served without a scope; the e2e test walks this table and asks each route
//! with a token lacking its scope.

use std::fmt;
use std::str::FromStr;

/// A permission a token carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Runs, history, graph, search, definitions, the UI's data.
    Read,
    /// Start runs and send signals.
    Start,
    /// Terminate, pause, resume, skip, reset, retry, restart, rerun, remove.
    Operate,
    /// Workflow and task definitions, event handlers.
    Define,
    /// Poll, update and heartbeat tasks (optionally of listed task types only).
    Work,
    /// Tokens and the audit trail.
    Admin,
}

impl Scope {
    /// Every scope, in the order they are listed.
    pub const ALL: [Scope; 6] = [
        Scope::Read,
        Scope::Start,
        Scope::Operate,
        Scope::Define,
        Scope::Work,
        Scope::Admin,
    ];

    /// The scope's name in tokens and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Start => "start",
            Self::Operate => "operate",
            Self::Define => "define",
            Self::Work => "work",
            Self::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| {
                format!("unknown scope {s:?}; scopes are read, start, operate, define, work, admin")
            })
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Anyone, without a token (health, version, the UI's page, the token exchange).
    Open,
    /// Any valid token (Conductor endpoints answered 501, unknown paths).
    Authenticated,
    /// A token with one of these scopes.
    Any(&'static [Scope]),
}

/// How a state-changing route is audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audit {
    /// Not a change (reads, and worker traffic: polls, updates, heartbeats).
    No,
    /// Recorded after the answer, with its status, under this action.
    After(&'static str),
    /// Recorded by the handler in the change's own transaction (starts, tokens).
    InTransaction,
}

/// One route: method, path template (as axum matched it), need, audit.
#[derive(Debug, Clone, Copy)]
pub struct RouteRule {
    /// HTTP method.
    pub method: &'static str,
    /// The route's path template.
    pub path: &'static str,
    /// Who may call it.
    pub need: Need,
    /// How it is audited.
    pub audit: Audit,
}

const fn rule(method: &'static str, path: &'static str, need: Need, audit: Audit) -> RouteRule {
    RouteRule {
        method,
        path,
        need,
        audit,
    }
}

const READ: Need = Need::Any(&[Scope::Read]);
const START: Need = Need::Any(&[Scope::Start]);
const OPERATE: Need = Need::Any(&[Scope::Operate]);
const DEFINE: Need = Need::Any(&[Scope::Define]);
const WORK: Need = Need::Any(&[Scope::Work]);
const ADMIN: Need = Need::Any(&[Scope::Admin]);
/// A task read by the worker holding it, or by anyone who reads runs.
const READ_OR_WORK: Need = Need::Any(&[Scope::Read, Scope::Work]);
/// Completing a task by its reference name: a worker's update, or a signal to a WAIT or
/// HUMAN task.
const WORK_OR_START: Need = Need::Any(&[Scope::Work, Scope::Start]);

use Audit::{After, InTransaction, No};

/// Every route of the gateway (the UI's assets and the 501 routes aside: see
/// [`need_of`]).
pub const ROUTES: &[RouteRule] = &[
    // Health and identity.
    rule("GET", "/health", Need::Open, No),
    rule("GET", "/api/health", Need::Open, No),
    rule("GET", "/api/version", Need::Open, No),
    rule("GET", "/", Need::Open, No),
    rule("GET", "/ui/app.css", Need::Open, No),
    rule("GET", "/ui/app.js", Need::Open, No),
    rule("GET", "/api/ui/config", Need::Open, No),
    rule("POST", "/api/token", Need::Open, No),
    // Tokens and the audit trail.
    rule("GET", "/api/admin/tokens", ADMIN, No),
    rule("POST", "/api/admin/tokens", ADMIN, InTransaction),
    rule("DELETE", "/api/admin/tokens/{name}", ADMIN, InTransaction),
    rule("GET", "/api/audit", ADMIN, No),
    rule("GET", "/api/workflow/{id}/audit", READ, No),
    // Workflow definitions.
    rule("GET", "/api/metadata/workflow", READ, No),
    rule(
        "POST",
        "/api/metadata/workflow",
        DEFINE,
        After("definition.create"),
    ),
    rule(
        "PUT",
        "/api/metadata/workflow",
        DEFINE,
        After("definition.update"),
    ),
    rule("POST", "/api/metadata/workflow/validate", DEFINE, No),
    rule("GET", "/api/metadata/workflow/names", READ, No),
    rule("GET", "/api/metadata/workflow/names-and-versions", READ, No),
    rule("GET", "/api/metadata/workflow/latest-versions", READ, No),
    rule("GET", "/api/metadata/workflow/{name}/versions", READ, No),
    rule("GET", "/api/metadata/workflow/{name}", READ, No),
    rule("GET", "/api/metadata/workflow/{name}/stats", READ, No),
    rule(
        "DELETE",
        "/api/metadata/workflow/{name}/{version}",
        DEFINE,
        After("definition.delete"),
    ),
    // Task definitions.
    rule("GET", "/api/metadata/taskdefs", READ, No),
    rule(
        "POST",
        "/api/metadata/taskdefs",
        DEFINE,
        After("taskdef.create"),
    ),
    rule(
        "PUT",
        "/api/metadata/taskdefs",
        DEFINE,
        After("taskdef.update"),
    ),
    rule("GET", "/api/metadata/taskdefs/{name}", READ, No),
    rule(
        "DELETE",
        "/api/metadata/taskdefs/{name}",
        DEFINE,
        After("taskdef.delete"),
    ),
    // Event handlers.
    rule("GET", "/api/event", READ, No),
    rule("POST", "/api/event", DEFINE, After("event_handler.create")),
    rule("PUT", "/api/event", DEFINE, After("event_handler.update")),
    rule("GET", "/api/event/{event}", READ, No),
    rule(
        "DELETE",
        "/api/event/{event}",
        DEFINE,
        After("event_handler.delete"),
    ),
    rule("GET", "/api/event/{name}/executions", READ, No),
    // Starts and signals.
    rule("POST", "/api/workflow", START, InTransaction),
    rule("POST", "/api/workflow/{id}", START, InTransaction),
    rule(
        "POST",
        "/api/workflow/execute/{name}/{version}",
        START,
        InTransaction,
    ),
    rule(
        "POST",
        "/api/workflow/{id}/signal/{name}",
        START,
        After("workflow.signal"),
    ),
    rule(
        "POST",
        "/api/tasks/{workflow_id}/{task_ref}/signal",
        START,
        After("task.signal"),
    ),
    rule(
        "POST",
        "/api/tasks/{workflow_id}/{task_ref}/signal/sync",
        START,
        After("task.signal"),
    ),
    rule(
        "POST",
        "/api/tasks/{workflow_id}/{task_ref}/{status}",
        WORK_OR_START,
        After("task.update_by_ref"),
    ),
    rule(
        "POST",
        "/api/tasks/{workflow_id}/{task_ref}/{status}/sync",
        WORK_OR_START,
        After("task.update_by_ref"),
    ),
    // Reads of runs.
    rule("GET", "/api/workflow/{id}", READ, No),
    rule("GET", "/api/workflow/{id}/status", READ, No),
    rule("GET", "/api/workflow/{id}/history", READ, No),
    rule("GET", "/api/workflow/{id}/graph", READ, No),
    rule("GET", "/api/workflow/{id}/hooks", READ, No),
    rule("GET", "/api/workflow/{id}/runs", READ, No),
    rule("GET", "/api/workflow/{id}/tasks", READ, No),
    rule("POST", "/api/workflow/{id}/correlated", READ, No),
    rule(
        "GET",
        "/api/workflow/{id}/correlated/{correlation_id}",
        READ,
        No,
    ),
    rule("POST", "/api/workflow/correlated/batch", READ, No),
    rule("GET", "/api/workflow/running/{name}", READ, No),
    rule("GET", "/api/workflow/search", READ, No),
    rule("GET", "/api/workflow/search-v2", READ, No),
    rule("GET", "/api/admin/task/{task_type}", READ, No),
    // Operations.
    rule(
        "DELETE",
        "/api/workflow/{id}",
        OPERATE,
        After("workflow.terminate"),
    ),
    rule(
        "PUT",
        "/api/workflow/{id}/pause",
        OPERATE,
        After("workflow.pause"),
    ),
    rule(
        "PUT",
        "/api/workflow/{id}/resume",
        OPERATE,
        After("workflow.resume"),
    ),
    rule(
        "POST",
        "/api/workflow/{id}/resetcallbacks",
        OPERATE,
        After("workflow.reset_callbacks"),
    ),
    rule(
        "PUT",
        "/api/workflow/{id}/skiptask/{task_ref}",
        OPERATE,
        After("workflow.skip_task"),
    ),
    rule(
        "POST",
        "/api/workflow/{id}/reset",
        OPERATE,
        After("workflow.reset"),
    ),
    rule(
        "POST",
        "/api/workflow/{id}/rerun",
        OPERATE,
        After("workflow.rerun"),
    ),
    rule(
        "POST",
        "/api/workflow/{id}/retry",
        OPERATE,
        After("workflow.retry"),
    ),
    rule(
        "POST",
        "/api/workflow/{id}/restart",
        OPERATE,
        After("workflow.restart"),
    ),
    rule(
        "POST",
        "/api/workflow/{id}/variables",
        OPERATE,
        After("workflow.update_variables"),
    ),
    rule("PUT", "/api/workflow/decide/{id}", OPERATE, No),
    rule(
        "DELETE",
        "/api/workflow/{id}/remove",
        OPERATE,
        After("workflow.remove"),
    ),
    rule(
        "DELETE",
        "/api/workflow/{id}/terminate-remove",
        OPERATE,
        After("workflow.terminate_remove"),
    ),
    rule(
        "PUT",
        "/api/workflow/bulk/pause",
        OPERATE,
        After("bulk.pause"),
    ),
    rule(
        "PUT",
        "/api/workflow/bulk/resume",
        OPERATE,
        After("bulk.resume"),
    ),
    rule(
        "POST",
        "/api/workflow/bulk/restart",
        OPERATE,
        After("bulk.restart"),
    ),
    rule(
        "POST",
        "/api/workflow/bulk/retry",
        OPERATE,
        After("bulk.retry"),
    ),
    rule(
        "POST",
        "/api/workflow/bulk/terminate",
        OPERATE,
        After("bulk.terminate"),
    ),
    rule(
        "DELETE",
        "/api/workflow/bulk/remove",
        OPERATE,
        After("bulk.remove"),
    ),
    rule(
        "DELETE",
        "/api/workflow/bulk/terminate-remove",
        OPERATE,
        After("bulk.terminate_remove"),
    ),
    // Workers.
    rule("GET", "/api/tasks/poll/{task_type}", WORK, No),
    rule("GET", "/api/tasks/poll/batch/{task_type}", WORK, No),
    rule("POST", "/api/tasks", WORK, No),
    rule("POST", "/api/tasks/update-v2", WORK, No),
    rule("POST", "/api/tasks/heartbeat", WORK, No),
    rule("POST", "/api/tasks/{task_id}/heartbeat", WORK, No),
    rule("POST", "/api/tasks/{task_id}/log", WORK, No),
    rule("GET", "/api/tasks/{task_id}/log", READ_OR_WORK, No),
    rule("GET", "/api/tasks/{task_id}", READ_OR_WORK, No),
    rule("GET", "/api/tasks/queue/sizes", READ_OR_WORK, No),
    rule("GET", "/api/tasks/queue/size", READ_OR_WORK, No),
    rule("GET", "/api/tasks/queue/all", READ_OR_WORK, No),
    rule("GET", "/api/tasks/queue/polldata", READ_OR_WORK, No),
    rule("GET", "/api/tasks/queue/polldata/all", READ_OR_WORK, No),
];

/// The rule of `method` on the route `path` (a template), if the table has one.
pub fn rule_of(method: &str, path: &str) -> Option<&'static RouteRule> {
    // HEAD is answered by GET routes.
    let method = if method == "HEAD" { "GET" } else { method };
    ROUTES.iter().find(|r| r.path == path && r.method == method)
}

/// What a request on `path` (a template) with `method` needs; `None` when the table has
/// no rule: the route is refused (a route must not be served without a scope).
pub fn need_of(method: &str, path: Option<&str>) -> Option<(Need, Audit)> {
    let Some(path) = path else {
        // No route matched: a token is still needed to learn that.
        return Some((Need::Authenticated, Audit::No));
    };
    if let Some(rule) = rule_of(method, path) {
        return Some((rule.need, rule.audit));
    }
    if crate::routes::not_offered::is_not_offered(method, path) {
        return Some((Need::Authenticated, Audit::No));
    }
    None
}

/// Whether the table knows the route `path` with some method (then a request with
/// another method is answered 405, as the router would).
pub fn is_known_route(path: &str) -> bool {
    ROUTES.iter().any(|r| r.path == path)
        || crate::routes::not_offered::endpoints().any(|(_, p)| p == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_from_their_names_only() {
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
        }
        assert!("Read"
            .parse::<Scope>()
            .unwrap_err()
            .contains("unknown scope"));
    }

    #[test]
    fn each_route_has_one_rule() {
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!(
                    !(a.method == b.method && a.path == b.path),
                    "{} {} twice",
                    a.method,
                    a.path
                );
            }
        }
    }

    #[test]
    fn a_route_without_a_rule_is_refused_and_an_unknown_path_needs_a_token() {
        assert_eq!(need_of("PATCH", Some("/api/workflow/{id}")), None);
        assert_eq!(need_of("GET", None), Some((Need::Authenticated, Audit::No)));
        assert_eq!(
            need_of("HEAD", Some("/api/workflow/{id}")),
            Some((READ, Audit::No))
        );
    }
}
