//! The flowchart's reads on PostgreSQL (see [`crate::store::graph`]): one
//! repeatable-read snapshot of a run's task rows and its frozen definition.

use async_trait::async_trait;
use uuid::Uuid;

use super::PgStore;
use crate::dsl::WorkflowDef;
use crate::store::backend::GraphStore;
use crate::store::graph::RunVersion;
use crate::store::graph_build::{self, Graph, GraphRow};
use crate::{Error, Result};

const GRAPH_ROWS: &str = "SELECT task_id, task_ref, task_type, seq, iteration, attempt, status,
        (extract(epoch FROM scheduled_time) * 1000)::bigint AS scheduled_ms,
        (extract(epoch FROM start_time) * 1000)::bigint AS start_ms,
        (extract(epoch FROM end_time) * 1000)::bigint AS end_ms,
        input_bytes, output_bytes,
        CASE WHEN task_type IN ('SWITCH', 'DECISION')
            THEN COALESCE(output->>'selectedCase', output->'caseOutput'->>0) END
            AS selected_case,
        CASE WHEN task_type = 'SUB_WORKFLOW' THEN output->>'subWorkflowId' END
            AS sub_workflow_id,
        CASE WHEN task_type = 'FORK_JOIN_DYNAMIC' AND jsonb_typeof(output->'forkedTasks') = 'array'
            THEN output->'forkedTasks' END AS forked
    FROM tasks WHERE run_id = $1";

#[async_trait]
impl GraphStore for PgStore {
    /// The run `run_id` of `workflow_id` (or its current run) and its version.
    async fn run_version(
        &self,
        workflow_id: &str,
        run_id: Option<Uuid>,
    ) -> Result<Option<RunVersion>> {
        let q = match run_id {
            Some(run) => sqlx::query_as::<_, RunVersion>(
                "SELECT run_id, version FROM runs WHERE run_id = $1 AND workflow_id = $2",
            )
            .bind(run)
            .bind(workflow_id),
            None => sqlx::query_as::<_, RunVersion>(
                "SELECT run_id, version FROM runs WHERE workflow_id = $1 AND is_current",
            )
            .bind(workflow_id),
        };
        Ok(q.fetch_optional(&self.pool).await?)
    }

    /// The graph of run `run_id` of `workflow_id`, computed from one repeatable-read
    /// snapshot of the primary: its version, task rows and definition agree. `None`: no
    /// such run.
    async fn run_graph(&self, workflow_id: &str, run_id: Uuid) -> Result<Option<Graph>> {
        graph_on(&self.pool, workflow_id, run_id).await
    }

    /// The graph from the read replica when it has caught up with `version` (an ended
    /// run's graph, whose version no longer moves, nearly always), from the primary
    /// otherwise.
    async fn run_graph_at_least(
        &self,
        workflow_id: &str,
        run_id: Uuid,
        version: i64,
    ) -> Result<Option<Graph>> {
        self.replica_read_if(
            |pool| async move { graph_on(&pool, workflow_id, run_id).await },
            |graph| graph.as_ref().is_some_and(|g| g.version >= version),
        )
        .await
    }
}

/// The graph of run `run_id` of `workflow_id` as `pool`'s database has it, from one
/// repeatable-read snapshot.
async fn graph_on(pool: &sqlx::PgPool, workflow_id: &str, run_id: Uuid) -> Result<Option<Graph>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let Some(version) = sqlx::query_scalar::<_, i64>(
        "SELECT version FROM runs WHERE run_id = $1 AND workflow_id = $2",
    )
    .bind(run_id)
    .bind(workflow_id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let (definition, traceparent) = sqlx::query_as::<_, (serde_json::Value, Option<String>)>(
        "SELECT attributes->'definition', attributes->>'traceparent' FROM history_events
             WHERE run_id = $1 AND event_id = 1",
    )
    .bind(run_id)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| Error::Decode(format!("run {run_id} has no WorkflowStarted event")))?;
    let rows = sqlx::query_as::<_, GraphRow>(GRAPH_ROWS)
        .bind(run_id)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    let def: WorkflowDef = serde_json::from_value(definition)?;
    let mut graph = graph_build::build(workflow_id, run_id, version, &def, &rows);
    // traceparent: version-traceid-spanid-flags.
    graph.trace_id = traceparent.and_then(|tp| tp.split('-').nth(1).map(str::to_owned));
    Ok(Some(graph))
}
