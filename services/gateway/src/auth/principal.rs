//! Who is calling: the token's name and what it may do.

use std::collections::BTreeSet;

use super::scopes::{Need, Scope};

/// The caller a valid token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name (what the audit trail records).
    pub name: String,
    /// Its scopes.
    pub scopes: BTreeSet<Scope>,
    /// The task types its `work` scope is limited to; `None`: every task type.
    pub task_types: Option<Vec<String>>,
}

impl Principal {
    /// The configured admin token: every scope.
    pub fn admin() -> Self {
        Self {
            name: "admin".to_owned(),
            scopes: Scope::ALL.into_iter().collect(),
            task_types: None,
        }
    }

    /// Whether the principal meets `need`.
    pub fn meets(&self, need: Need) -> bool {
        match need {
            Need::Open | Need::Authenticated => true,
            Need::Any(scopes) => scopes.iter().any(|s| self.scopes.contains(s)),
        }
    }

    /// Whether the principal may work on tasks of `task_type`.
    pub fn may_work_on(&self, task_type: &str) -> bool {
        match &self.task_types {
            None => true,
            Some(types) => types.iter().any(|t| t == task_type),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(types: Option<Vec<&str>>) -> Principal {
        Principal {
            name: "w".into(),
            scopes: [Scope::Work].into_iter().collect(),
            task_types: types.map(|t| t.into_iter().map(String::from).collect()),
        }
    }

    #[test]
    fn a_scope_is_met_by_holding_any_of_the_needed_ones() {
        let w = worker(None);
        assert!(w.meets(Need::Any(&[Scope::Read, Scope::Work])));
        assert!(!w.meets(Need::Any(&[Scope::Operate])));
        assert!(Principal::admin().meets(Need::Any(&[Scope::Admin])));
    }

    #[test]
    fn a_worker_limited_to_task_types_works_on_those_only() {
        let w = worker(Some(vec!["greet"]));
        assert!(w.may_work_on("greet"));
        assert!(!w.may_work_on("charge"));
        assert!(worker(None).may_work_on("charge"));
    }
}
