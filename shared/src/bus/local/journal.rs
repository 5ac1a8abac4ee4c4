//! The in-process bus's journal: persistent messages in a SQLite table, so that a process
//! killed mid-run loses none.
//!
//! One row per message and destination queue, written before `publish` returns (the
//! in-process "publisher confirm"), deleted once acknowledged, moved to the DLQ with its
//! message. At start the rows left by an earlier process are queued again, in order.
//!
//! The database file is shared with the store, which writes through its own pool: every
//! write goes through one writer task that takes whatever is waiting (up to
//! [`MAX_GROUP`] operations) and applies it as one short synchronous transaction of the
//! store's writer (`store::sqlite::writer`: prepared statements, no round trip per
//! row), so many publishes and acks share one commit and the journal holds the write
//! lock briefly. Acks are not waited for: one lost in a crash only means a redelivery
//! (at least once).

use std::time::Duration;

use rusqlite::params;
use sqlx::Row as _;
use tokio::sync::{mpsc, oneshot};

use crate::bus::transport::Message;
use crate::store::sqlite::SqliteWriter;
use crate::{Error, Result};

/// Operations applied in one transaction, at most.
const MAX_GROUP: usize = 512;
/// Attempts at a group before its operations fail (the database may be busy).
const ATTEMPTS: u32 = 3;

const CREATE: &str = "CREATE TABLE IF NOT EXISTS bus_journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ns TEXT NOT NULL,
    queue TEXT NOT NULL,
    body BLOB NOT NULL,
    headers TEXT NOT NULL
)";
const CREATE_INDEX: &str = "CREATE INDEX IF NOT EXISTS bus_journal_ns ON bus_journal (ns, seq)";

/// A message found in the journal at start.
#[derive(Debug)]
pub(crate) struct Row {
    /// Its row.
    pub(crate) seq: i64,
    /// The queue it waits in.
    pub(crate) queue: String,
    /// The message.
    pub(crate) message: Message,
}

type Done<T> = oneshot::Sender<Result<T>>;

/// One write, in the order it was asked for.
enum Op {
    Insert {
        queues: Vec<String>,
        body: Vec<u8>,
        headers: String,
        done: Done<Vec<i64>>,
    },
    Delete(i64),
    Relocate {
        seq: i64,
        queue: String,
        headers: String,
        done: Done<()>,
    },
    Forget {
        queues: Vec<String>,
        done: Done<()>,
    },
    Flush(Done<()>),
}

/// The handle on the writer task; the task ends once the handle is dropped and what was
/// asked before is written.
#[derive(Debug)]
pub(crate) struct Journal {
    ops: mpsc::UnboundedSender<Op>,
}

/// A receiver that yields the writer's outcome.
pub(crate) type Pending<T> = oneshot::Receiver<Result<T>>;

/// Waits for a journal write.
pub(crate) async fn wait<T>(pending: Pending<T>) -> Result<T> {
    pending
        .await
        .unwrap_or_else(|_| Err(Error::Bus("the bus journal's writer stopped".into())))
}

/// The properties of a message as the `headers` column holds them (JSON).
fn headers_of(message: &Message) -> String {
    serde_json::to_string(message).unwrap_or_else(|_| "{}".to_owned())
}

impl Journal {
    /// Creates the table if needed, reads the rows of namespace `ns` (in order) and
    /// starts the writer task.
    pub(crate) async fn open(writer: SqliteWriter, ns: &str) -> Result<(Self, Vec<Row>)> {
        let mut conn = writer.sqlx().await?;
        sqlx::query(CREATE).execute(&mut *conn).await?;
        sqlx::query(CREATE_INDEX).execute(&mut *conn).await?;
        let rows = sqlx::query(
            "SELECT seq, queue, body, headers FROM bus_journal WHERE ns = ? ORDER BY seq",
        )
        .bind(ns)
        .fetch_all(&mut *conn)
        .await?;
        drop(conn);
        let mut found = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: i64 = row.try_get("seq")?;
            let headers: String = row.try_get("headers")?;
            let mut message = serde_json::from_str::<Message>(&headers).unwrap_or_else(|e| {
                tracing::warn!(seq, error = %e, "unreadable properties in the bus journal; keeping the body");
                Message {
                    persistent: true,
                    ..Message::default()
                }
            });
            message.body = row.try_get("body")?;
            found.push(Row {
                seq,
                queue: row.try_get("queue")?,
                message,
            });
        }
        let (ops, rx) = mpsc::unbounded_channel();
        tokio::spawn(write(writer, ns.to_owned(), rx));
        Ok((Self { ops }, found))
    }

    fn send(&self, op: Op) {
        // The writer only stops once every handle is gone; if it died anyway, the
        // operation's `done` is dropped and its waiter gets an error.
        let _ = self.ops.send(op);
    }

    /// Writes `message` once per queue; the row ids come back in the same order.
    pub(crate) fn insert(&self, queues: &[String], message: &Message) -> Pending<Vec<i64>> {
        let (done, pending) = oneshot::channel();
        self.send(Op::Insert {
            queues: queues.to_vec(),
            body: message.body.clone(),
            headers: headers_of(message),
            done,
        });
        pending
    }

    /// Forgets an acknowledged message (not waited for).
    pub(crate) fn delete(&self, seq: i64) {
        self.send(Op::Delete(seq));
    }

    /// Moves row `seq` to `queue` with the properties of `message` (dead-lettering).
    pub(crate) fn relocate(&self, seq: i64, queue: &str, message: &Message) -> Pending<()> {
        let (done, pending) = oneshot::channel();
        self.send(Op::Relocate {
            seq,
            queue: queue.to_owned(),
            headers: headers_of(message),
            done,
        });
        pending
    }

    /// Forgets every message of `queues` (deleted queues).
    pub(crate) fn forget(&self, queues: Vec<String>) -> Pending<()> {
        let (done, pending) = oneshot::channel();
        self.send(Op::Forget { queues, done });
        pending
    }

    /// Resolves once everything asked before is written.
    pub(crate) fn flush(&self) -> Pending<()> {
        let (done, pending) = oneshot::channel();
        self.send(Op::Flush(done));
        pending
    }
}

/// The writer task: groups what is waiting into one transaction, again and again.
async fn write(writer: SqliteWriter, ns: String, mut ops: mpsc::UnboundedReceiver<Op>) {
    while let Some(first) = ops.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match ops.try_recv() {
                Ok(op) => group.push(op),
                Err(_) => break,
            }
        }
        let mut attempt = 1;
        let flushes_only = group.iter().all(|op| matches!(op, Op::Flush(_)));
        let outcome = loop {
            if flushes_only {
                break Ok(Vec::new());
            }
            match writer.transaction(|tx| apply(tx, &ns, &group)).await {
                Ok(inserted) => break Ok(inserted),
                Err(e) if attempt < ATTEMPTS => {
                    tracing::warn!(attempt, error = %e, "writing the bus journal failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                    attempt += 1;
                }
                Err(e) => break Err(e.to_string()),
            }
        };
        report(group, outcome);
    }
}

/// Answers every operation of a group with the group's outcome.
fn report(group: Vec<Op>, outcome: Result<Vec<Vec<i64>>, String>) {
    fn failed<T>(why: &str) -> Result<T> {
        Err(Error::Bus(format!("writing the bus journal: {why}")))
    }
    let mut inserted = match &outcome {
        Ok(inserted) => inserted.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    for op in group {
        match (op, &outcome) {
            (Op::Insert { done, .. }, Ok(_)) => {
                let _ = done.send(Ok(inserted.next().unwrap_or_default()));
            }
            (Op::Insert { done, .. }, Err(why)) => {
                let _ = done.send(failed(why));
            }
            (Op::Delete(seq), Err(why)) => {
                // The message will be delivered again after a restart: at least once.
                tracing::warn!(seq, error = %why, "forgetting an acknowledged message in the bus journal failed");
            }
            (Op::Delete(_), Ok(_)) => {}
            (Op::Relocate { done, .. } | Op::Forget { done, .. } | Op::Flush(done), outcome) => {
                let _ = done.send(match outcome {
                    Ok(_) => Ok(()),
                    Err(why) => failed(why),
                });
            }
        }
    }
}

/// Applies a group in the writer's transaction; the row ids of each insert, in order.
fn apply(tx: &rusqlite::Transaction<'_>, ns: &str, group: &[Op]) -> Result<Vec<Vec<i64>>> {
    let mut inserted = Vec::new();
    let mut deletes = Vec::new();
    for op in group {
        match op {
            Op::Insert {
                queues,
                body,
                headers,
                ..
            } => {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO bus_journal (ns, queue, body, headers) VALUES (?1, ?2, ?3, ?4)",
                )?;
                let mut seqs = Vec::with_capacity(queues.len());
                for queue in queues {
                    insert.execute(params![ns, queue, body, headers])?;
                    seqs.push(tx.last_insert_rowid());
                }
                inserted.push(seqs);
            }
            // Gathered at the end: a row is deleted only after its insert was confirmed,
            // so no later operation of the group touches it.
            Op::Delete(seq) => deletes.push(*seq),
            Op::Relocate {
                seq,
                queue,
                headers,
                ..
            } => {
                tx.prepare_cached(
                    "UPDATE bus_journal SET queue = ?1, headers = ?2 WHERE seq = ?3",
                )?
                .execute(params![queue, headers, seq])?;
            }
            Op::Forget { queues, .. } => {
                let mut forget =
                    tx.prepare_cached("DELETE FROM bus_journal WHERE ns = ?1 AND queue = ?2")?;
                for queue in queues {
                    forget.execute(params![ns, queue])?;
                }
            }
            Op::Flush(_) => {}
        }
    }
    if !deletes.is_empty() {
        let mut delete = tx.prepare_cached("DELETE FROM bus_journal WHERE seq = ?1")?;
        for seq in deletes {
            delete.execute([seq])?;
        }
    }
    Ok(inserted)
}
