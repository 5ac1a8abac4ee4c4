//! Event locations, as Conductor writes them: where an event handler listens
//! (docs/event-handlers.md) and where an EVENT task publishes (its `sink`).
//!
//! `amqp:<queue>` and Conductor's `amqp_queue:<queue>` name a queue;
//! `amqp_exchange:<exchange>[:<routing key>]` and Conductor's
//! `amqp_exchange:<exchange>?routingKey=…&exchangeType=…&bindQueueName=…` an exchange;
//! Conductor's own `conductor:<workflow>:<name>` an internal queue of the namespace
//! (`<ns>.conductor.<workflow>.<name>`), what an EVENT task with the sink `conductor`
//! publishes to and an event handler of that event listens to.

/// A queue or an exchange named by an event location.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventLocation {
    /// A queue (`amqp:<queue>`, Conductor's `amqp_queue:<queue>`), declared by Weft with
    /// its dead-letter queue.
    Queue(String),
    /// Conductor's internal queue `conductor:<rest>`: `rest` is `<workflow>:<name>` as
    /// a handler writes it; an EVENT task's sink may say just `conductor` or
    /// `conductor:<name>`, completed with its workflow (and task reference).
    Conductor(String),
    /// An exchange (`amqp_exchange:<exchange>:<routing key>`, or Conductor's
    /// `amqp_exchange:<exchange>?routingKey=…&exchangeType=…&bindQueueName=…`): Weft
    /// declares the exchange and a queue bound to it with the routing key.
    Exchange {
        /// The exchange.
        exchange: String,
        /// The routing key, when the location gives one (a listener binds with `#`
        /// without one, a publisher sends with the empty key).
        routing_key: Option<String>,
        /// `topic` (the default) or `direct`.
        topic: bool,
        /// The bound queue, when the event names one (`bindQueueName`).
        queue: Option<String>,
    },
}

impl EventLocation {
    /// Reads an event location; the error says what is wrong with it.
    pub fn parse(event: &str) -> Result<Self, String> {
        if event == "conductor" {
            return Ok(Self::Conductor(String::new()));
        }
        let (kind, rest) = event.split_once(':').ok_or_else(|| {
            format!(
                "{event:?} names no event location: expected amqp:<queue>, amqp_queue:<queue>, \
                 amqp_exchange:<exchange>[:<routing key>] or conductor:<workflow>:<name>"
            )
        })?;
        let (name, params) = match rest.split_once('?') {
            Some((name, params)) => (name, params),
            None => (rest, ""),
        };
        let params = query_params(params)?;
        match kind {
            "amqp" | "amqp_queue" => {
                non_empty(name, "queue")?;
                if let Some((key, _)) = params.first() {
                    return Err(format!("a queue location takes no parameter {key:?}"));
                }
                Ok(Self::Queue(name.to_owned()))
            }
            "conductor" => {
                non_empty(rest, "queue")?;
                Ok(Self::Conductor(rest.to_owned()))
            }
            "amqp_exchange" => {
                let (exchange, key) = match name.split_once(':') {
                    Some((exchange, key)) => (exchange, Some(key)),
                    None => (name, None),
                };
                non_empty(exchange, "exchange")?;
                let mut routing_key = key.map(str::to_owned);
                let mut topic = true;
                let mut queue = None;
                for (param, value) in params {
                    match param.as_str() {
                        "routingkey" => routing_key = Some(value),
                        "exchangetype" => {
                            topic = match value.as_str() {
                                "topic" => true,
                                "direct" => false,
                                other => {
                                    return Err(format!(
                                    "exchangeType {other:?}: Weft uses topic and direct exchanges"
                                ))
                                }
                            }
                        }
                        "bindqueuename" => queue = Some(value).filter(|q| !q.is_empty()),
                        // Conductor's queue options: Weft's queues are durable, shared and
                        // persistent; the values are accepted and not used.
                        "durable" | "exclusive" | "autodelete" | "deliverymode" | "maxpriority" => {
                        }
                        other => return Err(format!("unknown parameter {other:?}")),
                    }
                }
                Ok(Self::Exchange {
                    exchange: exchange.to_owned(),
                    routing_key: routing_key.filter(|k| !k.is_empty()),
                    topic,
                    queue,
                })
            }
            other => Err(format!(
                "{other:?} locations are not offered: Weft speaks amqp:<queue>, \
                 amqp_queue:<queue>, amqp_exchange:<exchange>[:<routing key>] and \
                 conductor:<workflow>:<name>"
            )),
        }
    }
}

impl EventLocation {
    /// The queue of a [`EventLocation::Conductor`] location under namespace `ns`:
    /// `<ns>.conductor.<workflow>.<name>`.
    pub fn conductor_queue(ns: &str, rest: &str) -> String {
        format!("{ns}.conductor.{}", rest.replace(':', "."))
    }
}

fn non_empty(name: &str, what: &str) -> Result<(), String> {
    match name.trim().is_empty() {
        true => Err(format!("the {what} name is empty")),
        false => Ok(()),
    }
}

/// `a=1&b=2`, keys lower-cased (Conductor reads them case-insensitively).
fn query_params(params: &str) -> Result<Vec<(String, String)>, String> {
    params
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => Ok((k.to_ascii_lowercase(), v.to_owned())),
            None => Err(format!("parameter {p:?} has no value")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_in_weft_and_conductor_forms() {
        assert_eq!(
            EventLocation::parse("amqp:orders"),
            Ok(EventLocation::Queue("orders".into()))
        );
        assert_eq!(
            EventLocation::parse("amqp_queue:orders?durable=true"),
            Err("a queue location takes no parameter \"durable\"".into())
        );
        assert_eq!(
            EventLocation::parse("amqp_exchange:shop:order.*"),
            Ok(EventLocation::Exchange {
                exchange: "shop".into(),
                routing_key: Some("order.*".into()),
                topic: true,
                queue: None
            })
        );
        assert_eq!(
            EventLocation::parse(
                "amqp_exchange:shop?exchangeType=direct&routingKey=paid&bindQueueName=q"
            ),
            Ok(EventLocation::Exchange {
                exchange: "shop".into(),
                routing_key: Some("paid".into()),
                topic: false,
                queue: Some("q".into())
            })
        );
        assert!(EventLocation::parse("sqs:orders")
            .unwrap_err()
            .contains("not offered"));
        assert!(EventLocation::parse("orders")
            .unwrap_err()
            .contains("names no event location"));
        assert!(EventLocation::parse("amqp:").unwrap_err().contains("empty"));
        assert_eq!(
            EventLocation::parse("conductor:flow:done"),
            Ok(EventLocation::Conductor("flow:done".into()))
        );
        assert_eq!(
            EventLocation::parse("conductor"),
            Ok(EventLocation::Conductor(String::new()))
        );
        assert_eq!(
            EventLocation::conductor_queue("weft", "flow:done"),
            "weft.conductor.flow.done"
        );
    }
}
