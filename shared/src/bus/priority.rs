//! Task priority on the bus (Conductor's `priority`, 0–99 on a start, higher first).
//!
//! A run started with a priority carries it on the envelopes of its activity tasks
//! ([`crate::Envelope::priority`]); the bus turns it into the broker's message priority,
//! one of ten levels (`priority / 10`), and activity queues are priority queues with
//! [`MAX_LEVEL`] as their highest level (RabbitMQ's `x-max-priority`; the in-process bus
//! orders its queues the same way). Ten levels, not a hundred: RabbitMQ keeps one
//! sub-queue per level, and its guidance is to stay under ten. A queue declared before
//! priorities existed keeps working without them (docs/priority.md).

/// The highest broker priority level (`x-max-priority` of activity queues).
pub const MAX_LEVEL: u8 = 9;

/// The broker level of Conductor's `priority` (0–99): `priority / 10`, at most
/// [`MAX_LEVEL`].
pub fn level(priority: u8) -> u8 {
    (priority / 10).min(MAX_LEVEL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conductor_priorities_map_to_ten_levels() {
        assert_eq!(level(0), 0);
        assert_eq!(level(9), 0);
        assert_eq!(level(10), 1);
        assert_eq!(level(55), 5);
        assert_eq!(level(99), 9);
        assert_eq!(level(255), MAX_LEVEL);
    }
}
