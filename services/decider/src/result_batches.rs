//! Commands sent together: results (docs/worker-sdk.md, "Results sent together") and
//! starts (docs/decider.md, "Starts sent together"). An `ActivityResults` or
//! `StartWorkflows` delivery is taken apart into one delivery per command before a shard
//! applies its batch, and the commands' dispositions are put back together into the
//! message's. A command inside such a message is applied exactly as it would have been
//! alone: same envelope, same trace context, same place in the shard's order.

use weft::activity_batch::{ActivityResultBatch, StartWorkflowBatch, RESULTS_KIND, STARTS_KIND};
use weft::bus::{Delivery, Disposition};

/// A batch of deliveries with every `ActivityResults` taken apart.
#[derive(Debug)]
pub struct Unpacked {
    /// What the shard applies: each delivery as it came, or each result of one.
    pub deliveries: Vec<Delivery>,
    /// What each delivery of the batch as it came became.
    pub origins: Origins,
}

/// What each delivery of a batch became when [`unpack`]ed.
#[derive(Debug, Default)]
pub struct Origins(Vec<Origin>);

/// What one delivery of the batch became.
#[derive(Debug)]
enum Origin {
    /// Itself.
    One,
    /// `count` commands of one message, in order: results or starts (`what`, singular).
    Several { count: usize, what: &'static str },
    /// Nothing: a message of commands that cannot be used, and why.
    Refused(String),
}

/// Takes every `ActivityResults` and `StartWorkflows` of `deliveries` apart; the others
/// stay as they are.
pub fn unpack(deliveries: Vec<Delivery>) -> Unpacked {
    let mut unpacked = Unpacked {
        deliveries: Vec::with_capacity(deliveries.len()),
        origins: Origins(Vec::with_capacity(deliveries.len())),
    };
    for delivery in deliveries {
        let (messages, what) = match delivery.envelope.kind.as_str() {
            RESULTS_KIND => (ActivityResultBatch::unpack(&delivery.envelope), "result"),
            STARTS_KIND => (StartWorkflowBatch::unpack(&delivery.envelope), "start"),
            _ => {
                unpacked.deliveries.push(delivery);
                unpacked.origins.0.push(Origin::One);
                continue;
            }
        };
        match messages {
            Ok(messages) => {
                unpacked.origins.0.push(Origin::Several {
                    count: messages.len(),
                    what,
                });
                unpacked
                    .deliveries
                    .extend(messages.into_iter().map(|m| Delivery {
                        envelope: m.envelope,
                        traceparent: m.traceparent,
                        redelivered: delivery.redelivered,
                        queue: delivery.queue.clone(),
                        reply_to: None,
                        correlation_id: None,
                    }));
            }
            Err(e) => unpacked.origins.0.push(Origin::Refused(e.to_string())),
        }
    }
    unpacked
}

impl Origins {
    /// One disposition per delivery of the batch as it came, from one per delivery of
    /// [`Unpacked::deliveries`]: a message of results (or starts) is acknowledged when
    /// each of its commands is; given back when one is (the others are ignored when it
    /// comes again: their attempts have ended, their runs exist); dead-lettered, naming
    /// which commands and why, when one is and none is given back (the others took
    /// effect).
    pub fn repack(self, dispositions: Vec<Disposition>) -> Vec<Disposition> {
        let mut dispositions = dispositions.into_iter();
        self.0
            .into_iter()
            .map(|origin| match origin {
                Origin::One => dispositions.next().unwrap_or(Disposition::Requeue),
                Origin::Refused(why) => Disposition::DeadLetter(why),
                Origin::Several { count, what } => {
                    let mut requeue = false;
                    let mut dead = Vec::new();
                    for i in 0..count {
                        match dispositions.next().unwrap_or(Disposition::Requeue) {
                            Disposition::Ack => {}
                            Disposition::Requeue => requeue = true,
                            Disposition::DeadLetter(why) => dead.push(format!("{what} {i}: {why}")),
                        }
                    }
                    if requeue {
                        Disposition::Requeue
                    } else if dead.is_empty() {
                        Disposition::Ack
                    } else {
                        Disposition::DeadLetter(format!(
                            "{} (the other {what}s of the message were applied)",
                            dead.join("; ")
                        ))
                    }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uuid::Uuid;
    use weft::messages::{ActivityCompleted, Command};
    use weft::Envelope;

    use super::*;

    fn delivery(envelope: Envelope, traceparent: Option<&str>) -> Delivery {
        Delivery {
            envelope,
            traceparent: traceparent.map(str::to_owned),
            redelivered: true,
            queue: "ns.commands.3".into(),
            reply_to: Some("amq.rabbitmq.reply-to".into()),
            correlation_id: Some("c".into()),
        }
    }

    fn completed(workflow_id: &str) -> Envelope {
        let done = ActivityCompleted {
            task_id: Uuid::new_v4(),
            run_id: Uuid::new_v4(),
            attempt: 1,
            output: json!({"n": workflow_id}),
            worker_id: None,
            started_at: None,
            eager: None,
        };
        Envelope::new(
            workflow_id,
            Some(done.run_id),
            &Command::ActivityCompleted(done),
        )
        .unwrap()
    }

    fn results(envelopes: &[(&Envelope, Option<&str>)]) -> Envelope {
        let bodies: Vec<(Vec<u8>, Option<&str>)> = envelopes
            .iter()
            .map(|(e, t)| (e.to_bytes().unwrap(), *t))
            .collect();
        let parts: Vec<(&[u8], Option<&str>)> =
            bodies.iter().map(|(b, t)| (b.as_slice(), *t)).collect();
        Envelope::from_bytes(&ActivityResultBatch::encode(&parts).unwrap()).unwrap()
    }

    /// A command that is not a result (what it says does not matter here).
    fn start() -> Envelope {
        let mut start = completed("wf-s");
        start.kind = "StartWorkflow".into();
        start
    }

    #[test]
    fn results_sent_together_are_applied_one_by_one_in_their_place() {
        let (a, b, s) = (completed("wf-a"), completed("wf-b"), start());
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let unpacked = unpack(vec![
            delivery(s.clone(), None),
            delivery(results(&[(&a, Some(trace)), (&b, None)]), Some("outer")),
        ]);
        let got: Vec<_> = unpacked.deliveries.iter().map(|d| d.envelope.id).collect();
        assert_eq!(
            got,
            [s.id, a.id, b.id],
            "each result in the message's place"
        );
        let inner = &unpacked.deliveries[1];
        assert_eq!(inner.envelope, a, "the envelope as it was sent");
        assert_eq!(inner.traceparent.as_deref(), Some(trace), "its own trace");
        assert!(inner.redelivered, "redelivered with its message");
        assert_eq!(inner.queue, "ns.commands.3");
        assert_eq!(inner.reply_to, None, "a result is no request");
        assert_eq!(unpacked.deliveries[2].traceparent, None);

        let all_applied = unpacked.origins.repack(vec![Disposition::Ack; 3]);
        assert_eq!(all_applied, [Disposition::Ack, Disposition::Ack]);
    }

    #[test]
    fn a_message_of_results_is_settled_by_what_became_of_each() {
        let (a, b) = (completed("wf-a"), completed("wf-b"));
        let batch = || {
            unpack(vec![
                delivery(results(&[(&a, None), (&b, None)]), None),
                delivery(start(), None),
            ])
        };
        let back = batch().origins.repack(vec![
            Disposition::Ack,
            Disposition::Requeue,
            Disposition::Ack,
        ]);
        assert_eq!(back, [Disposition::Requeue, Disposition::Ack]);

        let dead = batch().origins.repack(vec![
            Disposition::DeadLetter("bad".into()),
            Disposition::Ack,
            Disposition::DeadLetter("worse".into()),
        ]);
        let Disposition::DeadLetter(why) = &dead[0] else {
            panic!("{dead:?}");
        };
        assert!(
            why.contains("result 0: bad") && why.contains("other results"),
            "{why}"
        );
        assert_eq!(dead[1], Disposition::DeadLetter("worse".into()));
    }

    #[test]
    fn a_message_of_results_that_cannot_be_used_is_dead_lettered_whole() {
        let mut stranger = results(&[(&completed("wf-a"), None)]);
        stranger.payload = json!({"messages": [{"envelope": start()}]});
        let unpacked = unpack(vec![delivery(stranger, None), delivery(start(), None)]);
        assert_eq!(unpacked.deliveries.len(), 1, "only the start is applied");
        let settled = unpacked.origins.repack(vec![Disposition::Ack]);
        assert!(
            matches!(&settled[0], Disposition::DeadLetter(why) if why.contains("StartWorkflow")),
            "{settled:?}"
        );
        assert_eq!(settled[1], Disposition::Ack);
    }

    fn starts(envelopes: &[&Envelope]) -> Envelope {
        let bodies: Vec<Vec<u8>> = envelopes.iter().map(|e| e.to_bytes().unwrap()).collect();
        let parts: Vec<(&[u8], Option<&str>)> =
            bodies.iter().map(|b| (b.as_slice(), None)).collect();
        Envelope::from_bytes(&StartWorkflowBatch::encode(&parts).unwrap()).unwrap()
    }

    #[test]
    fn starts_sent_together_are_applied_one_by_one_and_nothing_else_goes_with_them() {
        let (mut a, mut b) = (start(), start());
        a.workflow_id = "wf-a".into();
        b.workflow_id = "wf-b".into();
        let unpacked = unpack(vec![delivery(starts(&[&a, &b]), None)]);
        let got: Vec<_> = unpacked.deliveries.iter().map(|d| &d.envelope).collect();
        assert_eq!(got, [&a, &b], "each start as it was sent, in order");
        assert!(unpacked.deliveries.iter().all(|d| d.redelivered));
        let settled = unpacked.origins.repack(vec![
            Disposition::Ack,
            Disposition::DeadLetter("bad".into()),
        ]);
        assert!(
            matches!(&settled[0], Disposition::DeadLetter(why)
                if why.contains("start 1: bad") && why.contains("other starts")),
            "{settled:?}"
        );

        let smuggled = starts(&[&a, &completed("wf-c")]);
        let unpacked = unpack(vec![delivery(smuggled, None)]);
        assert!(
            unpacked.deliveries.is_empty(),
            "a result never rides with starts"
        );
        let settled = unpacked.origins.repack(Vec::new());
        assert!(
            matches!(&settled[0], Disposition::DeadLetter(why) if why.contains("ActivityCompleted")),
            "{settled:?}"
        );
    }
}
