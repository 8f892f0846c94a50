#!/usr/bin/env python3
"""A complete ahpd worker in Python, from docs/workers.md alone: it says your words back.

The test suite runs it as an agent of kind `command` to show the worker protocol is really
language-neutral. Options: `reply` (a prefix for every answer); `heldCompletions` (offer
completions for the property `target` and hold every `agent/completions` request until one asks
with the query `release`, which answers them all: requests that stay in flight as long as a test
needs). Logs go to stderr only. A message `die` makes it say a line in colour on stderr and exit
mid-turn, as a worker that crashes in its own colours.
"""
import json
import sys
import time
from datetime import datetime, timezone

PROTOCOL_VERSION = 1
sessions = {}  # chat URI -> settings
options = {}
held = []  # ids of agent/completions requests not answered yet


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(msg_id, result):
    send({"jsonrpc": "2.0", "id": msg_id, "result": result})


def fail(msg_id, code, message):
    send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def emit(chat, action):
    send({"jsonrpc": "2.0", "method": "emit", "params": {"chat": chat, "channel": "chat", "action": action}})


def schema():
    properties = {}
    if options.get("heldCompletions"):
        # A key whose values are asked for (`agent/completions`), not listed.
        properties["target"] = {"type": "string", "title": "Target", "sessionMutable": True}
    return {
        "schema": {"type": "object", "properties": properties},
        "defaults": {},
    }


def send_message(params):
    chat, turn_id, text = params["chat"], params["turnId"], params["message"]["text"]
    started = time.monotonic()
    words = (options.get("reply", "") + text).split(" ")
    part_id = turn_id + ":0"
    emit(chat, {"type": "chat/responsePart", "turnId": turn_id,
                "part": {"kind": "markdown", "id": part_id, "content": words[0]}})
    if text == "die":
        sys.stderr.write("\x1b[2m" + datetime.now(timezone.utc).isoformat() + "\x1b[0m \x1b[31mERROR\x1b[0m going down\n")
        sys.stderr.flush()
        sys.exit(1)
    for word in words[1:]:
        emit(chat, {"type": "chat/delta", "turnId": turn_id, "partId": part_id, "content": " " + word})
    duration = int((time.monotonic() - started) * 1000)
    emit(chat, {"type": "chat/turnComplete", "turnId": turn_id, "duration": duration})


def handle(msg):
    method, msg_id, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        if params.get("protocolVersion") != PROTOCOL_VERSION:
            fail(msg_id, -32602, "this worker speaks worker protocol 1")
            return
        options.update(params.get("options") or {})
        if options.get("spawnSleeper"):
            # A grandchild the daemon must not leave behind when it stops.
            import subprocess
            sleeper = subprocess.Popen(["sleep", "1000"])
            with open(options["spawnSleeper"], "w") as f:
                f.write(str(sleeper.pid))
        answer(msg_id, {"protocolVersion": PROTOCOL_VERSION, "agent": {
            "provider": params.get("provider", "py-echo"), "displayName": "Python echo",
            "description": "A worker written in Python",
            "features": {"completions": ["target"]} if options.get("heldCompletions") else {}}})
    elif method == "agent/schema":
        answer(msg_id, schema())
    elif method == "agent/completions":
        held.append(msg_id)
        if params.get("query") == "release":
            for waiting in held:
                answer(waiting, {"items": [{"value": "main", "label": "main"}]})
            held.clear()
    elif method == "session/create":
        sessions[params["start"]["chat"]] = params["start"].get("settings", {})
        answer(msg_id, {})
    elif method == "session/sendMessage":
        if params["chat"] not in sessions:
            fail(msg_id, -32042, "no session here for " + params["chat"])
            return
        answer(msg_id, None)  # handed over; the turn streams next
        send_message(params)
    elif method in ("session/abort", "session/close", "session/setDraft", "session/setTools"):
        if method == "session/close":
            sessions.pop(params.get("chat"), None)
        answer(msg_id, None)
    elif method == "shutdown":
        sessions.clear()
        answer(msg_id, {})
    elif msg_id is not None:
        fail(msg_id, -32601, "this worker does not answer " + str(method))


def main():
    print("python echo worker started " + datetime.now(timezone.utc).isoformat(), file=sys.stderr)
    for line in sys.stdin:
        line = line.strip()
        if line:
            handle(json.loads(line))


if __name__ == "__main__":
    main()
