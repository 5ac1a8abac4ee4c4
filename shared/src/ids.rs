//! Identifiers and the command-shard function.

/// The command shard of a workflow: `fnv1a64(workflowId) mod shards`.
///
/// Every publisher of commands (gateway, workers, heartbeat, history, decider) must
/// agree on this function, so it is a fixed, documented hash rather than Rust's
/// randomly seeded `DefaultHasher`.
pub fn shard_of(workflow_id: &str, shards: u16) -> u16 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = workflow_id
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    (hash % u64::from(shards.max(1))) as u16
}

/// A fresh, time-ordered id (UUIDv7): ids sort by creation time, which keeps
/// B-tree indexes on them append-mostly.
pub fn new_id() -> uuid::Uuid {
    uuid::Uuid::now_v7()
}

/// An id derived from `from` for `purpose`: the same for the same inputs, in any process
/// and version (the first 16 bytes of SHA-256 over both), and unrelated to `from`
/// otherwise. What a message re-published under a new id uses, so that handling the same
/// message twice (a redelivery) makes the same new id.
pub fn derived_id(from: uuid::Uuid, purpose: &str) -> uuid::Uuid {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::new()
        .chain_update(purpose.as_bytes())
        .chain_update(from.as_bytes())
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Uuid::from_bytes(bytes)
}

/// The id a task of run `run_id`'s predecessor (`task_id`) has in `run_id`, when a reset
/// kept it (name-based, so each run keeps its own task rows and a replay is the same).
pub fn kept_task_id(run_id: uuid::Uuid, task_id: uuid::Uuid) -> uuid::Uuid {
    uuid::Uuid::new_v5(&run_id, task_id.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_id_is_stable_and_differs_by_purpose_and_from() {
        let a = uuid::Uuid::from_u128(1);
        assert_eq!(derived_id(a, "park"), derived_id(a, "park"));
        assert_ne!(derived_id(a, "park"), derived_id(a, "other"));
        assert_ne!(
            derived_id(a, "park"),
            derived_id(uuid::Uuid::from_u128(2), "park")
        );
        assert_ne!(derived_id(a, "park"), a);
    }

    #[test]
    fn shard_is_stable_and_in_range() {
        // Pinned values: other languages' workers must compute the same shard.
        assert_eq!(shard_of("", 16), (0xcbf2_9ce4_8422_2325u64 % 16) as u16);
        for id in ["a", "wf-1", "0195f0c2-7c1e-7000-8000-000000000000"] {
            let s = shard_of(id, 16);
            assert!(s < 16);
            assert_eq!(s, shard_of(id, 16));
        }
        assert_eq!(shard_of("anything", 1), 0);
        assert_eq!(shard_of("anything", 0), 0);
    }
}
