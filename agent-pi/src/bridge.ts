// ahpd's bridge into pi. The pi worker writes this file into its data folder at every start and
// loads it with `-e`; edits here are overwritten. It speaks to the worker over pi's own RPC pipe:
//
//   worker -> bridge   the `/ahpd <json>` command, sent as a prompt (runs at once, starts no run):
//                        {"op":"setup","system":[..],"tools":[..]}   words for the system prompt, host tools
//                        {"op":"tools","tools":[..]}                 the host's and clients' tools changed
//                        {"op":"turn","turnId":"..","instructions":".."|null}   the next prompt's turn
//   bridge -> worker   an `input` dialog titled "ahpd" whose placeholder is a JSON request, answered
//                      with a JSON value:
//                        {"op":"gate","toolCallId","toolName","input"} -> {"allow":bool,"reason"?}
//                        {"op":"tool","toolCallId","name","input"}     -> {"success","text","error"?}
//                      and `setStatus("ahpd", json)` for what needs no answer:
//                        {"op":"entry","id","role":"user"}   the session entry a user message became
//
// Hidden instructions travel as a custom message with `display: false` (a client never sees it) and
// only the running turn's instructions stay in what the model is sent.

const TITLE = "ahpd";
const INSTRUCTIONS = "ahpd-instructions";

type HostTool = { name: string; label?: string; description?: string; parameters?: unknown };

export default function ahpdBridge(pi: any) {
  let turn: { turnId?: string; instructions?: string | null } = {};
  let system: string[] = [];
  let hostTools = new Set<string>();
  let userMessageEnded = false;

  async function ask(ctx: any, request: object, signal?: AbortSignal): Promise<any> {
    const answer = await ctx.ui.input(TITLE, JSON.stringify(request), { signal });
    if (typeof answer !== "string") return undefined;
    try {
      return JSON.parse(answer);
    } catch {
      return undefined;
    }
  }

  function offer(tools: HostTool[]) {
    const offered = new Set<string>();
    for (const tool of tools) {
      offered.add(tool.name);
      pi.registerTool({
        name: tool.name,
        label: tool.label || tool.name,
        description: tool.description || tool.name,
        parameters: tool.parameters || { type: "object", properties: {} },
        async execute(toolCallId: string, params: unknown, signal: AbortSignal, _onUpdate: unknown, ctx: any) {
          const answer = await ask(ctx, { op: "tool", toolCallId, name: tool.name, input: params }, signal);
          if (!answer) throw new Error("The tool call was cancelled.");
          if (!answer.success) throw new Error(answer.text || answer.error || `${tool.name} failed`);
          return { content: [{ type: "text", text: String(answer.text ?? "") }], details: {} };
        },
      });
    }
    const active: string[] = pi.getActiveTools();
    const kept = active.filter((name) => offered.has(name) || !hostTools.has(name));
    const missing = [...offered].filter((name) => !kept.includes(name));
    pi.setActiveTools([...kept, ...missing]);
    hostTools = offered;
  }

  pi.registerCommand("ahpd", {
    description: "ahpd's bridge (internal)",
    handler: async (args: string) => {
      const message = JSON.parse(args);
      if (message.op === "setup") {
        system = Array.isArray(message.system) ? message.system : [];
        offer(Array.isArray(message.tools) ? message.tools : []);
      } else if (message.op === "tools") {
        offer(Array.isArray(message.tools) ? message.tools : []);
      } else if (message.op === "turn") {
        turn = { turnId: message.turnId, instructions: message.instructions };
      }
    },
  });

  pi.on("before_agent_start", async (event: any) => {
    const result: any = {};
    if (system.length > 0) result.systemPrompt = `${event.systemPrompt}\n\n${system.join("\n\n")}`;
    if (turn.instructions) {
      result.message = {
        customType: INSTRUCTIONS,
        content: turn.instructions,
        display: false,
        details: { turnId: turn.turnId },
      };
    }
    return result;
  });

  // The host's instructions are for their own turn: earlier turns' stay in the session file but
  // are not sent again.
  pi.on("context", async (event: any) => {
    const messages = event.messages.filter(
      (m: any) => !(m.role === "custom" && m.customType === INSTRUCTIONS && m.details?.turnId !== turn.turnId),
    );
    if (messages.length !== event.messages.length) return { messages };
  });

  // Tools the host and its clients offer are run by the host and allowed there; pi's own ask.
  pi.on("tool_call", async (event: any, ctx: any) => {
    if (hostTools.has(event.toolName)) return;
    const answer = await ask(
      ctx,
      { op: "gate", toolCallId: event.toolCallId, toolName: event.toolName, input: event.input },
      ctx.signal,
    );
    if (!answer || answer.allow !== true) {
      return { block: true, reason: answer?.reason || "The host did not allow this tool call." };
    }
  });

  // A user message is written to the session after its message_end handlers ran, so the entry it
  // became is the leaf when the next event arrives.
  pi.on("message_end", async (event: any) => {
    if (event.message?.role === "user") userMessageEnded = true;
  });
  const reportUserEntry = async (_event: any, ctx: any) => {
    if (!userMessageEnded) return;
    userMessageEnded = false;
    const leaf = ctx.sessionManager.getLeafEntry();
    if (leaf && leaf.type === "message" && leaf.message?.role === "user") {
      ctx.ui.setStatus(TITLE, JSON.stringify({ op: "entry", id: leaf.id, role: "user" }));
    }
  };
  pi.on("message_start", reportUserEntry);
  pi.on("turn_end", reportUserEntry);
  pi.on("agent_end", reportUserEntry);
}
