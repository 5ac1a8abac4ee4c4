"""Drives Weft through the official Conductor Python SDK, as a Conductor user would:
definitions built with ConductorWorkflow and every task builder Weft runs, executed
synchronously, then the workflow, task and metadata clients' calls. Prints one line per
check; any failure raises (and exits non-zero)."""
import os
import sys
import time
import uuid

from conductor.client.configuration.configuration import Configuration
from conductor.client.http.models.correlation_ids_search_request import CorrelationIdsSearchRequest
from conductor.client.http.models.start_workflow_request import StartWorkflowRequest
from conductor.client.http.models.task_result import TaskResult
from conductor.client.http.models.task_result_status import TaskResultStatus
from conductor.client.orkes_clients import OrkesClients
from conductor.client.workflow.conductor_workflow import ConductorWorkflow
from conductor.client.workflow.task.do_while_task import LoopTask
from conductor.client.workflow.task.fork_task import ForkTask
from conductor.client.workflow.task.http_task import HttpInput, HttpTask
from conductor.client.workflow.task.human_task import HumanTask
from conductor.client.workflow.task.inline import InlineTask
from conductor.client.workflow.task.json_jq_task import JsonJQTask
from conductor.client.workflow.task.set_variable_task import SetVariableTask
from conductor.client.workflow.task.start_workflow_task import StartWorkflowTask
from conductor.client.workflow.task.sub_workflow_task import SubWorkflowTask
from conductor.client.workflow.task.switch_task import SwitchTask
from conductor.client.workflow.task.terminate_task import TerminateTask, WorkflowStatus
from conductor.client.workflow.task.wait_task import WaitTask

clients = OrkesClients(Configuration())
workflows = clients.get_workflow_client()
tasks = clients.get_task_client()
metadata = clients.get_metadata_client()
executor = clients.get_workflow_executor()
server = os.environ["CONDUCTOR_SERVER_URL"]


def check(cond, what, detail=None):
    if not cond:
        raise AssertionError(f"{what}: {detail!r}")
    print("ok:", what, flush=True)


def wait_status(workflow_id, statuses, seconds=60):
    deadline = time.time() + seconds
    while True:
        wf = workflows.get_workflow(workflow_id, include_tasks=True)
        if wf.status in statuses:
            return wf
        if time.time() > deadline:
            raise AssertionError(f"{workflow_id} is {wf.status}, not {statuses}")
        time.sleep(0.1)


# A registered child, run by SUB_WORKFLOW and START_WORKFLOW.
child = ConductorWorkflow(executor=executor, name="py_child", version=1)
child.add(InlineTask("double", "(function(){ return $.n * 2; })()", bindings={"n": "${workflow.input.n}"}))
child.output_parameters({"doubled": "${double.output.result}"})
child.register(overwrite=True)
check(metadata.get_workflow_def("py_child", version=1).name == "py_child", "register with ConductorWorkflow")

# One definition with every builder: SET_VARIABLE, INLINE, JSON_JQ_TRANSFORM, SWITCH,
# DO_WHILE (LoopTask), FORK/JOIN, SUB_WORKFLOW, HTTP, START_WORKFLOW, TERMINATE.
tour = ConductorWorkflow(executor=executor, name="py_tour", version=1)
vars_task = SetVariableTask("vars")
vars_task.input_parameter("greeting", "${workflow.input.greeting}")
jq = JsonJQTask("jq", "{total: (.items | map(.price) | add)}")
jq.input_parameter("items", "${workflow.input.items}")
size = SwitchTask("size", "${jq.output.result.total}", use_javascript=False)
big = InlineTask("big", "(function(){ return 'big'; })()")
small = InlineTask("small", "(function(){ return 'small'; })()")
size.switch_case("30", [big]).default_case([small])
loop = LoopTask("loop", 3, [InlineTask("step", "(function(){ return $.i; })()", bindings={"i": "${loop.output.iteration}"})])
fork = ForkTask("fork", [
    [InlineTask("left", "(function(){ return 'L'; })()")],
    [SubWorkflowTask("sub", "py_child", version=1).input_parameter("n", 21)],
])
http = HttpTask("http", HttpInput(uri=f"{server}/version", method="GET"))
start_req = StartWorkflowRequest(name="py_child", input={"n": 5})
starter = StartWorkflowTask("starter", "py_child", start_req, version=1)
tour_output = {
    "greeting": "${workflow.variables.greeting}",
    "total": "${jq.output.result.total}",
    "size": "${big.output.result}",
    "iterations": "${loop.output.iteration}",
    "doubled": "${sub.output.doubled}",
    "left": "${left.output.result}",
    "version": "${http.output.response.body}",
    "started": "${starter.output.workflowId}",
}
# A run a TERMINATE task ends has that task's workflowOutput as its output (Conductor's
# DeciderService.updateWorkflowOutput), whatever the definition's outputParameters say.
done = TerminateTask("done", WorkflowStatus.COMPLETED, "all steps ran")
done.input_parameter("workflowOutput", tour_output)
tour.add(vars_task).add(jq).add(size).add(loop).add(fork).add(http).add(starter).add(done)
tour.output_parameters(tour_output)
tour.register(overwrite=True)

run = tour.execute(
    workflow_input={"greeting": "hi", "items": [{"price": 10}, {"price": 20}]},
    wait_for_seconds=60,
)
check(run.status == "COMPLETED", "execute runs every builder to COMPLETED", run)
out = run.output
check(out["greeting"] == "hi", "SET_VARIABLE", out)
check(out["total"] == 30, "JSON_JQ_TRANSFORM", out)
check(out["size"] == "big", "SWITCH (value-param)", out)
check(out["iterations"] == 3, "DO_WHILE (LoopTask)", out)
check(out["doubled"] == 42, "FORK/JOIN with a SUB_WORKFLOW branch", out)
check(out["left"] == "L", "INLINE in a fork branch", out)
check(isinstance(out["version"], str) and out["version"], "HTTP", out)
check(len(out["started"]) > 0, "START_WORKFLOW", out)
started = wait_status(out["started"], ["COMPLETED"])
check(started.output["doubled"] == 10, "the started workflow ran", started.output)

# HUMAN: execute returns at its deadline (the run waits for a person), the task client
# completes the task, the run ends.
review = ConductorWorkflow(executor=executor, name="py_review", version=1)
review.add(HumanTask("approve", display_name="Approve"))
review.output_parameters({"by": "${approve.output.by}"})
review.register(overwrite=True)
waiting = review.execute(workflow_input={}, wait_for_seconds=1)
check(waiting.status == "RUNNING", "HUMAN waits", waiting.status)
human = [t for t in waiting.tasks if t.reference_task_name == "approve"][0]
check(human.status == "IN_PROGRESS", "HUMAN task IN_PROGRESS", human.status)
result = TaskResult(
    workflow_instance_id=waiting.workflow_id,
    task_id=human.task_id,
    status=TaskResultStatus.COMPLETED,
    output_data={"by": "Grace"},
)
tasks.update_task(result)
reviewed = wait_status(waiting.workflow_id, ["COMPLETED"])
check(reviewed.output["by"] == "Grace", "HUMAN completed through the task client", reviewed.output)

# Workflow client: correlation ids (one name, and the batch form), variables, status,
# search, removal.
corr = f"corr-{uuid.uuid4()}"
first = workflows.start_workflow(StartWorkflowRequest(name="py_review", version=1, correlation_id=corr))
second = workflows.start_workflow(StartWorkflowRequest(name="py_child", version=1, input={"n": 1}, correlation_id=corr))
wait_status(second, ["COMPLETED"])
by_corr = workflows.get_by_correlation_ids("py_review", [corr, "nobody"], include_tasks=True)
check([w.workflow_id for w in by_corr[corr]] == [first], "get_by_correlation_ids", by_corr)
check(by_corr["nobody"] == [], "every correlation id asked for is a key", by_corr)
batch = workflows.get_by_correlation_ids_in_batch(
    CorrelationIdsSearchRequest(correlation_ids=[corr], workflow_names=["py_review", "py_child"]),
    include_completed=True,
)
check(sorted(w.workflow_id for w in batch[corr]) == sorted([first, second]), "get_by_correlation_ids_in_batch", batch)
workflows.update_variables(first, {"reviewer": "Ada"})
status = workflows.get_workflow_status(first, include_output=True, include_variables=True)
check(status.variables.get("reviewer") == "Ada", "update_variables", status.variables)
workflows.terminate_workflow(first, reason="done with it")
check(workflows.get_workflow(first).status == "TERMINATED", "terminate_workflow")
workflows.delete_workflow(first)
try:
    workflows.get_workflow(first)
    check(False, "delete_workflow removes the run")
except Exception as e:  # the SDK raises its ApiException for the 404
    check("404" in str(e) or "not found" in str(e).lower(), "delete_workflow removes the run", str(e))

# WAIT: execute returns as soon as the run blocks; BLOCKING_TASK answers the task; the
# task resource's signal endpoints and update_task_sync complete it.
gate = ConductorWorkflow(executor=executor, name="py_gate", version=1)
gate.add(WaitTask("hold"))
gate.add(InlineTask("after", "(function(){ return 'after'; })()"))
gate.add(WaitTask("hold2"))
gate.output_parameters({"after": "${after.output.result}", "note": "${hold2.output.note}"})
gate.register(overwrite=True)
blocked = executor.execute_workflow_with_return_strategy(
    StartWorkflowRequest(name="py_gate", version=1), wait_for_seconds=30, return_strategy="BLOCKING_TASK")
check(blocked.reference_task_name == "hold", "execute with BLOCKING_TASK answers the WAIT", blocked)
check(str(getattr(blocked.status, "value", blocked.status)) == "IN_PROGRESS", "the blocking WAIT is IN_PROGRESS", blocked.status)
gate_id = blocked.workflow_id
tasks.taskResourceApi.signal_workflow_task_async(gate_id, "COMPLETED", {"from": "signal"})
moved = wait_status(gate_id, ["RUNNING"])
deadline = time.time() + 30
while not any(t.reference_task_name == "hold2" for t in moved.tasks):
    check(time.time() < deadline, "signal completes the pending WAIT", moved.tasks)
    time.sleep(0.1)
    moved = workflows.get_workflow(gate_id, include_tasks=True)
synced = tasks.update_task_sync(gate_id, "hold2", "COMPLETED", {"note": "synced"})
check(synced.status == "COMPLETED", "update_task_sync answers the workflow after the update", synced.status)
check(synced.output == {"after": "after", "note": "synced"}, "the run went on past both WAITs", synced.output)

# Bulk operations and definition reads.
pausable = [workflows.start_workflow(StartWorkflowRequest(name="py_gate", version=1)) for _ in range(2)]
bulk = clients.get_workflow_client().workflowResourceApi.api_client.call_api(
    "/workflow/bulk/pause", "PUT", body=pausable + ["nobody"],
    header_params={"Content-Type": "application/json", "Accept": "application/json"},
    response_type="BulkResponse", _return_http_data_only=True)
check(sorted(bulk.bulk_successful_results) == sorted(pausable), "bulk pause", bulk)
check("nobody" in bulk.bulk_error_results, "bulk pause reports the unknown id", bulk)
check(workflows.get_workflow(pausable[0]).status == "PAUSED", "bulk pause took effect")
for wid in pausable:
    workflows.terminate_workflow(wid, reason="bulk test over")
defs = metadata.get_all_workflow_defs()
check({"py_tour", "py_child", "py_gate"} <= {d.name for d in defs}, "get_all_workflow_defs")

# Task client: queue sizes answered from the broker; poll data (written once a second).
sizes = tasks.get_queue_size_for_task("py_nobody_polls")
check(sizes == 0, "get_queue_size_for_task", sizes)
polled = tasks.poll_task("py_polled", worker_id="tour-worker")
check(not getattr(polled, "task_id", None), "poll_task of an empty queue gives no task", polled)
deadline = time.time() + 30
while True:
    polls = tasks.get_task_poll_data("py_polled")
    if polls or time.time() > deadline:
        break
    time.sleep(0.2)
check([(p.queue_name, p.worker_id) for p in polls] == [("py_polled", "tour-worker")],
      "get_task_poll_data", polls)
check(polls[0].last_poll_time > 1_577_836_800_000, "poll data time in ms", polls)
print("all checks passed", flush=True)
