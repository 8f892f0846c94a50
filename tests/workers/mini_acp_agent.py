#!/usr/bin/env python3
"""A small coding agent that speaks ACP (Agent Client Protocol v1) on stdio and asks an OpenAI
chat completions API (the tests' mock, at $OPENAI_BASE_URL) what to do: the row the preset table
(tests/src/presets.rs) adds in its own test, to show what a new ACP agent costs.

It streams the model's words and reasoning, offers the model one shell tool (`shell`, whose every
command it asks the client about first, `session/request_permission`, and runs in the session's
folder) and the tools of the MCP servers it is handed over HTTP (`<server>_<tool>`), names one
mode and one model, one command (`/review`), and keeps each conversation in $MINI_ACP_STATE so
`session/load` takes it up in a new process. `session/cancel` closes the model's stream.

With `--abort-on-refusal` its only "no" to a command is `abort` ("No, and tell me what to do
differently"), which ends the prompt `cancelled`, as Codex's does. With `--replay-after-answer` it
answers `session/load` before it replays the conversation, as Gemini CLI 0.61 does (the ACP spec
has the answer come after).
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import uuid

ABORT_ON_REFUSAL = "--abort-on-refusal" in sys.argv[1:]
REPLAY_AFTER_ANSWER = "--replay-after-answer" in sys.argv[1:]
after_answer = []  # what is said once the request in hand is answered
STATE = os.environ.get("MINI_ACP_STATE", "")
BASE = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1").rstrip("/")
MODEL = os.environ.get("OPENAI_MODEL", "mock-model")
SYSTEM = "You are Mini, a small coding agent. Run commands with the shell tool."

out_lock = threading.Lock()
pending = {}  # our request id -> [event, answer]
pending_lock = threading.Lock()
sessions = {}  # session id -> Session
next_id = [0]


def send(message):
    with out_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def answer(msg_id, result):
    send({"jsonrpc": "2.0", "id": msg_id, "result": result})


def fail(msg_id, message):
    send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32603, "message": message}})


def ask(method, params):
    """A request to the client; waits for its answer."""
    with pending_lock:
        next_id[0] += 1
        msg_id = f"mini-{next_id[0]}"
        waiting = [threading.Event(), None]
        pending[msg_id] = waiting
    send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    waiting[0].wait()
    return waiting[1]


def update(session_id, body):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": body}})


def text_block(text):
    return {"type": "text", "text": text}


class Cancelled(Exception):
    pass


class Session:
    def __init__(self, session_id, cwd, servers, messages=None):
        self.id = session_id
        self.cwd = cwd
        self.servers = [s for s in servers or [] if s.get("url")]
        self.messages = messages or [{"role": "system", "content": SYSTEM}]
        self.cancelled = threading.Event()
        self.socket = None  # the model's stream, shut to cancel it
        self.mcp = {}  # server name -> headers (with its session id)

    def save(self):
        if STATE:
            os.makedirs(STATE, exist_ok=True)
            with open(os.path.join(STATE, self.id + ".json"), "w") as f:
                json.dump({"cwd": self.cwd, "messages": self.messages}, f)

    # ------------------------------------------------------------ MCP over HTTP

    def mcp_post(self, server, message):
        headers = self.mcp.setdefault(server["name"], {h["name"]: h["value"] for h in server.get("headers", [])})
        headers.update({"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        request = urllib.request.Request(server["url"], data=json.dumps(message).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=600) as reply:
            if reply.headers.get("Mcp-Session-Id"):
                headers["Mcp-Session-Id"] = reply.headers["Mcp-Session-Id"]
            body = reply.read().decode()
        if not body.strip():
            return {}
        if body.lstrip().startswith("{"):
            return json.loads(body)
        datas = [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
        return json.loads(datas[-1]) if datas else {}

    def mcp_tools(self):
        tools = []
        for server in self.servers:
            if "Mcp-Session-Id" not in self.mcp.get(server["name"], {}):
                self.mcp_post(server, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "mini-acp-agent", "version": "1"}}})
                self.mcp_post(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            listed = self.mcp_post(server, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            for tool in (listed.get("result") or {}).get("tools", []):
                tools.append({"type": "function", "function": {
                    "name": f"{server['name']}_{tool['name']}", "description": tool.get("description", ""),
                    "parameters": tool.get("inputSchema") or {"type": "object"}}})
        return tools

    # ------------------------------------------------------------ the model

    def stream(self, tools):
        """One streamed chat completion: the words and reasoning said as they come; answers the
        whole message."""
        url = urllib.parse.urlparse(BASE + "/chat/completions")
        body = json.dumps({"model": MODEL, "stream": True, "messages": self.messages, "tools": tools})
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
        if self.cancelled.is_set():
            raise Cancelled()
        reply = None
        try:
            connection.connect()
            # http.client lets go of its socket once a streamed answer begins (the answer holds
            # it): kept here so a cancel can shut it.
            self.socket = connection.sock
            if self.cancelled.is_set():
                raise Cancelled()
            connection.request("POST", url.path, body, {"Content-Type": "application/json",
                                                         "Authorization": "Bearer mini"})
            reply = connection.getresponse()
            if reply.status != 200:
                raise RuntimeError(f"the model answered HTTP {reply.status}: {reply.read().decode()[:200]}")
            text, calls = "", {}
            for raw in reply:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[5:]).get("choices", []):
                    delta = choice.get("delta") or {}
                    if delta.get("reasoning_content"):
                        update(self.id, {"sessionUpdate": "agent_thought_chunk",
                                         "content": text_block(delta["reasoning_content"])})
                    if delta.get("content"):
                        text += delta["content"]
                        update(self.id, {"sessionUpdate": "agent_message_chunk", "content": text_block(delta["content"])})
                    for call in delta.get("tool_calls") or []:
                        held = calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
                        held["id"] = call.get("id") or held["id"]
                        function = call.get("function") or {}
                        held["name"] += function.get("name") or ""
                        held["arguments"] += function.get("arguments") or ""
        except (OSError, http.client.HTTPException):
            if self.cancelled.is_set():
                raise Cancelled()
            raise
        finally:
            self.socket = None
            if reply is not None:
                reply.close()
            connection.close()
        if self.cancelled.is_set():
            raise Cancelled()
        message = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in calls.values()]
        return message

    def cancel(self):
        self.cancelled.set()
        stream = self.socket
        if stream is not None:
            try:
                stream.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ------------------------------------------------------------ tools

    def shell(self, call_id, command):
        """Asks the client, then runs `command` in the session's folder; answers (what the
        model is told, whether the turn goes on)."""
        update(self.id, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": f"Run {command}",
                         "kind": "execute", "status": "pending", "rawInput": {"command": command}})
        refusal = ({"optionId": "abort", "name": "No, and tell me what to do differently", "kind": "reject_once"}
                   if ABORT_ON_REFUSAL else {"optionId": "reject", "name": "Reject", "kind": "reject_once"})
        asked = ask("session/request_permission", {
            "sessionId": self.id,
            "toolCall": {"toolCallId": call_id, "title": f"Run {command}", "kind": "execute",
                         "rawInput": {"command": command}},
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}, refusal]})
        outcome = (asked or {}).get("outcome") or {}
        if outcome.get("outcome") != "selected" or outcome.get("optionId") != "allow":
            update(self.id, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "failed",
                             "content": [{"type": "content", "content": text_block("The person refused.")}]})
            return "The person refused to run this command.", not ABORT_ON_REFUSAL
        update(self.id, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"})
        ran = subprocess.run(["sh", "-c", command], cwd=self.cwd, capture_output=True, text=True)
        output = (ran.stdout + ran.stderr).strip() or f"(exit {ran.returncode})"
        update(self.id, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                         "status": "completed" if ran.returncode == 0 else "failed",
                         "content": [{"type": "content", "content": text_block(output)}]})
        return output, True

    def host_tool(self, call_id, name, arguments):
        server = next(s for s in self.servers if name.startswith(s["name"] + "_"))
        tool = name[len(server["name"]) + 1:]
        update(self.id, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": f"{server['name']}: {tool}",
                         "kind": "other", "status": "in_progress", "rawInput": arguments})
        reply = self.mcp_post(server, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                       "params": {"name": tool, "arguments": arguments}})
        result = reply.get("result") or {}
        text = " ".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        failed = bool(result.get("isError")) or "error" in reply
        update(self.id, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                         "status": "failed" if failed else "completed",
                         "content": [{"type": "content", "content": text_block(text)}]})
        return text

    # ------------------------------------------------------------ a prompt

    def prompt(self, blocks):
        self.cancelled.clear()
        words = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        self.messages.append({"role": "user", "content": words})
        tools = [{"type": "function", "function": {"name": "shell", "description": "Run a shell command",
                                                   "parameters": {"type": "object",
                                                                  "properties": {"command": {"type": "string"}}}}}]
        tools += self.mcp_tools()
        try:
            while True:
                message = self.stream(tools)
                self.messages.append(message)
                if not message.get("tool_calls"):
                    return "end_turn"
                for call in message["tool_calls"]:
                    name, call_id = call["function"]["name"], call["id"] or str(uuid.uuid4())
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                    if name == "shell":
                        told, going_on = self.shell(call_id, arguments.get("command", ""))
                    else:
                        told, going_on = self.host_tool(call_id, name, arguments), True
                    self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": told})
                    if not going_on:
                        return "cancelled"
        except Cancelled:
            return "cancelled"
        finally:
            self.save()


# ---------------------------------------------------------------- the methods


def initialize(_params):
    return {"protocolVersion": 1, "agentInfo": {"name": "mini-acp-agent", "version": "1.0.0"},
            "agentCapabilities": {"loadSession": True, "mcpCapabilities": {"http": True, "sse": False},
                                  "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False}},
            "authMethods": []}


def offers(session_id):
    return {"sessionId": session_id,
            "modes": {"currentModeId": "ask", "availableModes": [
                {"id": "ask", "name": "Ask", "description": "Asks before every command"}]},
            "configOptions": [{"id": "model", "name": "Model", "category": "model", "type": "select",
                               "currentValue": MODEL, "options": [{"value": MODEL, "name": "Mock Model"}]}]}


def announce_commands(session_id):
    update(session_id, {"sessionUpdate": "available_commands_update",
                        "availableCommands": [{"name": "review", "description": "Review the changes"}]})


def new_session(params):
    session = Session(str(uuid.uuid4()), params["cwd"], params.get("mcpServers"))
    sessions[session.id] = session
    threading.Timer(0.05, announce_commands, [session.id]).start()
    return offers(session.id)


def load_session(params):
    path = os.path.join(STATE, params["sessionId"] + ".json") if STATE else ""
    if not path or not os.path.exists(path):
        raise RuntimeError(f"no conversation {params['sessionId']}")
    with open(path) as f:
        kept = json.load(f)
    session = Session(params["sessionId"], params["cwd"], params.get("mcpServers"), kept["messages"])
    sessions[session.id] = session

    def replay():
        for message in kept["messages"]:
            if message["role"] == "user":
                update(session.id, {"sessionUpdate": "user_message_chunk", "content": text_block(message["content"])})
            elif message["role"] == "assistant" and message.get("content"):
                update(session.id, {"sessionUpdate": "agent_message_chunk", "content": text_block(message["content"])})

    if REPLAY_AFTER_ANSWER:
        after_answer.append(replay)
    else:
        replay()
    announce_commands(session.id)
    return {key: value for key, value in offers(session.id).items() if key != "sessionId"}


def prompt(msg_id, params):
    session = sessions.get(params["sessionId"])
    if session is None:
        fail(msg_id, f"no session {params['sessionId']}")
        return
    try:
        answer(msg_id, {"stopReason": session.prompt(params.get("prompt", []))})
    except Exception as error:  # the model's failure is the prompt's
        fail(msg_id, str(error))


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, msg_id = message.get("method"), message.get("id")
        if method is None:
            with pending_lock:
                waiting = pending.pop(msg_id, None)
            if waiting:
                waiting[1] = message.get("result")
                waiting[0].set()
            continue
        params = message.get("params") or {}
        if method == "session/cancel":
            session = sessions.get(params.get("sessionId"))
            if session:
                session.cancel()
            continue
        if method == "session/prompt":
            threading.Thread(target=prompt, args=(msg_id, params), daemon=True).start()
            continue
        handlers = {"initialize": initialize, "session/new": new_session, "session/load": load_session,
                    "session/set_mode": lambda _p: {}}
        if method in handlers:
            try:
                answer(msg_id, handlers[method](params))
            except Exception as error:
                fail(msg_id, str(error))
            while after_answer:
                after_answer.pop(0)()
        elif msg_id is not None:
            send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
