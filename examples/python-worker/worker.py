"""A Weft worker in Python, over plain AMQP (pika): the `greet` activities.

It speaks the wire protocol of docs/protocol.md and nothing else: it takes activity
tasks from `<ns>.activity.<task>`, claims each attempt with a request to the heartbeat
queue (answered through RabbitMQ's direct reply-to), runs it, and publishes the result
to `<ns>.commands` with the routing key the task names (`replyTo`) — no shard hash, no
Weft library. With `WEFT_PROTOCOL_SCHEMAS` set to docs/protocol, every message it
receives and sends is checked against its JSON Schema first.

    pip install pika==1.3.2 [jsonschema]
    WEFT_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f WEFT_NAMESPACE=weft python worker.py
"""

import datetime
import json
import os
import signal
import socket
import sys
import time
import uuid

import pika

NAMESPACE = os.environ.get("WEFT_NAMESPACE", "weft")
URL = os.environ.get("WEFT_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
WORKER_ID = "python-%s-%d" % (socket.gethostname(), os.getpid())
CLAIM_TIMEOUT = 30.0


class Failure(Exception):
    """An activity failure; `terminal` ones are not retried."""

    def __init__(self, reason, terminal=False):
        super().__init__(reason)
        self.terminal = terminal


def field(data, name):
    if data.get(name) is None:
        raise Failure("input `%s` is missing" % name, terminal=True)
    return data[name]


HANDLERS = {
    "make_name": lambda i: {"name": "%s Weft" % field(i, "first")},
    "shout": lambda i: {"text": str(field(i, "text")).upper()},
    "count": lambda i: {"result": "%s x%s" % (field(i, "text"), int(field(i, "n")))},
}


def load_schemas():
    folder = os.environ.get("WEFT_PROTOCOL_SCHEMAS")
    if not folder:
        return None
    import jsonschema

    schemas = {}
    for name in os.listdir(folder):
        if name.endswith(".schema.json"):
            with open(os.path.join(folder, name)) as f:
                schema = json.load(f)
            kind = schema.get("properties", {}).get("type", {}).get("const")
            if kind:
                schemas[kind] = jsonschema.Draft202012Validator(schema)
    return schemas


SCHEMAS = load_schemas()
CHECKED = {}


def check(message):
    """Validates an envelope against the schema of its type (when asked to)."""
    if SCHEMAS is None:
        return
    validator = SCHEMAS.get(message.get("type"))
    if validator is None:
        raise SystemExit("no schema for message type %r" % message.get("type"))
    validator.validate(message)
    CHECKED[message["type"]] = CHECKED.get(message["type"], 0) + 1


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def envelope(kind, workflow_id, run_id, payload):
    message = {"id": str(uuid.uuid4()), "type": kind, "version": 1,
               "workflowId": workflow_id, "runId": run_id, "time": now(),
               "payload": payload}
    check(message)
    return message


class Worker:
    def __init__(self):
        self.connection = pika.BlockingConnection(pika.URLParameters(URL))
        self.tasks = self.connection.channel()
        self.tasks.basic_qos(prefetch_count=16)
        self.results = self.connection.channel()
        self.results.confirm_delivery()
        self.requests = self.connection.channel()
        self.requests.basic_consume("amq.rabbitmq.reply-to", self.on_reply, auto_ack=True)
        self.replies = {}
        self.taken = []
        self.stopping = False
        for name in HANDLERS:
            queue = "%s.activity.%s" % (NAMESPACE, name)
            # Declared as Weft declares it: durable, dead-lettering to <queue>.dlq, a
            # priority queue of ten levels (0-9).
            self.tasks.queue_declare(queue + ".dlq", durable=True)
            self.tasks.queue_declare(queue, durable=True, arguments={
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue + ".dlq",
                "x-max-priority": 9})
            self.tasks.queue_bind(queue, NAMESPACE + ".activity", routing_key=name)
            self.tasks.basic_consume(queue, self.on_task)

    def on_task(self, channel, method, properties, body):
        self.taken.append((method.delivery_tag, method.redelivered, body))

    def on_reply(self, channel, method, properties, body):
        self.replies[properties.correlation_id] = json.loads(body)

    def call(self, message):
        """Sends a request to the heartbeat queue and waits for its answer."""
        correlation = str(uuid.uuid4())
        properties = pika.BasicProperties(
            reply_to="amq.rabbitmq.reply-to", correlation_id=correlation,
            message_id=message["id"], content_type="application/json")
        self.requests.basic_publish("", NAMESPACE + ".heartbeat", json.dumps(message), properties)
        deadline = time.monotonic() + CLAIM_TIMEOUT
        while correlation not in self.replies:
            if time.monotonic() > deadline:
                return None
            self.connection.process_data_events(time_limit=0.05)
        answer = self.replies.pop(correlation)
        check(answer)
        return answer

    def run(self):
        while not self.stopping:
            self.connection.process_data_events(time_limit=0.2)
            while self.taken:
                self.execute(*self.taken.pop(0))
        self.connection.close()

    def execute(self, tag, redelivered, body):
        message = json.loads(body)
        check(message)
        task = message["payload"]
        started = now()
        claim = {"taskId": task["taskId"], "attempt": task["attempt"],
                 "workflowId": task["workflowId"], "runId": task["runId"],
                 "taskName": task["taskName"], "taskRef": task["taskRef"],
                 "workerId": WORKER_ID,
                 "responseTimeoutSeconds": task.get("responseTimeoutSeconds", 0),
                 "inputBytes": len(json.dumps(task.get("input"))),
                 "replyTo": task["replyTo"], "startedAt": started}
        if redelivered:
            claim["takeover"] = True
        answer = self.call(envelope("ClaimAttempt", task["workflowId"], task["runId"], claim))
        if answer is None:
            self.tasks.basic_nack(tag, requeue=True)  # no answer: claimed again later
            return
        verdict = answer["payload"]["results"].get(task["taskId"])
        if verdict is None:
            self.tasks.basic_nack(tag, requeue=True)  # not written: claimed again later
            return
        if verdict["action"] == "DEFER":
            # Over its task's limit: not run, still SCHEDULED. Given back after the advised
            # wait (not at once, which would have the broker hand it straight back).
            wait = verdict.get("retryAfterMs", 500) / 1000.0
            self.connection.call_later(
                wait, lambda: self.tasks.basic_nack(tag, requeue=True))
            return
        if verdict["action"] != "CONTINUE":
            self.tasks.basic_ack(tag)  # stopped, or another worker holds it
            return
        result = {"taskId": task["taskId"], "runId": task["runId"],
                  "attempt": task["attempt"], "workerId": WORKER_ID, "startedAt": started}
        try:
            result["output"] = HANDLERS[task["taskName"]](task.get("input") or {})
            kind = "ActivityCompleted"
        except Failure as failure:
            result.update(reason=str(failure), terminal=failure.terminal, output={})
            kind = "ActivityFailed"
        except Exception as error:  # a bug in a handler: retried per the task's policy
            result.update(reason="%s: %s" % (type(error).__name__, error), output={})
            kind = "ActivityFailed"
        out = envelope(kind, task["workflowId"], task["runId"], result)
        properties = pika.BasicProperties(delivery_mode=2, message_id=out["id"],
                                          content_type="application/json")
        # Confirmed before the task is acknowledged: a crash in between redelivers it.
        self.results.basic_publish(NAMESPACE + ".commands", task["replyTo"],
                                   json.dumps(out), properties)
        self.tasks.basic_ack(tag)


def main():
    worker = Worker()

    def stop(signum, frame):
        worker.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("worker %s ready" % WORKER_ID, flush=True)
    worker.run()
    print("checked %s" % json.dumps(CHECKED, sort_keys=True), flush=True)


if __name__ == "__main__":
    sys.exit(main())
