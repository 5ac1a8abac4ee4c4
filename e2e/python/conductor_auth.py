"""The official Conductor Python SDK, configured with an application key
(AuthenticationSettings(key_id, key_secret)) as against an Orkes server, drives a Weft
gateway with auth on: it trades the key for a token (POST /api/token), registers a
definition, starts a run, and its TaskHandler worker polls and completes the task. A
wrong secret is refused. Prints one line per check; any failure raises."""
import os
import time

from conductor.client.automator.task_handler import TaskHandler
from conductor.client.configuration.configuration import Configuration
from conductor.client.configuration.settings.authentication_settings import AuthenticationSettings
from conductor.client.http.models.start_workflow_request import StartWorkflowRequest
from conductor.client.http.models.workflow_def import WorkflowDef
from conductor.client.http.models.workflow_task import WorkflowTask
from conductor.client.orkes_clients import OrkesClients
from conductor.client.worker.worker_task import worker_task


@worker_task(task_definition_name="auth_greet")
def greet(name: str) -> dict:
    return {"greeting": "Hello, " + name}


def check(cond, what, detail=None):
    if not cond:
        raise AssertionError(f"{what}: {detail!r}")
    print("ok:", what, flush=True)


def configuration(secret):
    return Configuration(
        authentication_settings=AuthenticationSettings(key_id=os.environ["KEY_ID"], key_secret=secret)
    )


if __name__ == "__main__":
    config = configuration(os.environ["KEY_SECRET"])
    clients = OrkesClients(config)
    metadata = clients.get_metadata_client()
    workflows = clients.get_workflow_client()

    definition = WorkflowDef(
        name="auth_greet_wf",
        version=1,
        tasks=[
            WorkflowTask(
                name="auth_greet",
                task_reference_name="g",
                type="SIMPLE",
                input_parameters={"name": "${workflow.input.name}"},
            )
        ],
        output_parameters={"greeting": "${g.output.greeting}"},
        schema_version=2,
    )
    metadata.register_workflow_def(definition, overwrite=True)
    check(metadata.get_workflow_def("auth_greet_wf", version=1).name == "auth_greet_wf", "register with a key")

    handler = TaskHandler(configuration=config, scan_for_annotated_workers=True)
    handler.start_processes()
    try:
        workflow_id = workflows.start_workflow(
            StartWorkflowRequest(name="auth_greet_wf", version=1, input={"name": "Ada"})
        )
        check(bool(workflow_id), "start with a key", workflow_id)
        deadline = time.time() + 60
        while True:
            wf = workflows.get_workflow(workflow_id, include_tasks=True)
            if wf.status != "RUNNING" or time.time() > deadline:
                break
            time.sleep(0.2)
        check(wf.status == "COMPLETED", "the SDK's worker completed the run", wf.status)
        check(wf.output.get("greeting") == "Hello, Ada", "the worker's output", wf.output)
    finally:
        handler.stop_processes()

    refused = OrkesClients(configuration("weft_not_the_secret")).get_workflow_client()
    try:
        refused.get_workflow(workflow_id)
    except Exception as e:  # the SDK's AuthorizationException (an ApiException)
        check(getattr(e, "status", None) == 401, "a wrong secret is refused", e)
    else:
        raise AssertionError("a wrong secret read a run")
    print("all checks passed", flush=True)
