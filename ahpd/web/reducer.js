// reducer.js: the page's own fold of AHP 1.0.0 actions into root, session and chat state — the part
// of the official reducers (crate `ahp`, types/reducers.ts) that the window shows. States are
// mutated in place; every response part touched gets its `_v` counter bumped so the view redraws
// that part alone.

export const Status = { Idle: 1, Error: 2, InProgress: 8, InputNeeded: 24, IsRead: 32, IsArchived: 64 };
const ACTIVITY = 31;

/** The activity part of a status: Idle, Error, InProgress or InputNeeded. */
export const activityOf = (status) => (status ?? 0) & ACTIVITY;

const setActivity = (status, activity) => ((status ?? 0) & ~ACTIVITY) | activity;

export function applyRoot(root, a) {
  switch (a.type) {
    case 'root/agentsChanged': root.agents = a.agents; break;
    case 'root/activeSessionsChanged': root.activeSessions = a.activeSessions; break;
    case 'root/terminalsChanged': root.terminals = a.terminals; break;
    case 'root/configChanged':
      if (root.config) root.config.values = a.replace ? a.config : { ...root.config.values, ...a.config };
      break;
    default: return false;
  }
  return true;
}

export function applySession(s, a) {
  switch (a.type) {
    case 'session/ready': s.lifecycle = 'ready'; break;
    case 'session/creationFailed': s.lifecycle = 'failed'; s.creationError = a.error; break;
    case 'session/chatAdded': {
      const i = s.chats.findIndex((c) => c.resource === a.summary.resource);
      if (i >= 0) s.chats[i] = a.summary; else s.chats.push(a.summary);
      break;
    }
    case 'session/chatRemoved':
      s.chats = s.chats.filter((c) => c.resource !== a.chat);
      if (s.defaultChat === a.chat) delete s.defaultChat;
      break;
    case 'session/chatUpdated': {
      const c = s.chats.find((x) => x.resource === a.chat);
      if (c) for (const k of ['title', 'status', 'activity', 'modifiedAt', 'changes', 'origin', 'workingDirectories']) {
        if (a.changes[k] !== undefined) c[k] = a.changes[k];
      }
      break;
    }
    case 'session/chatsReordered': {
      const by = new Map(s.chats.map((c) => [c.resource, c]));
      if (a.chats.length === s.chats.length && a.chats.every((u) => by.has(u))) s.chats = a.chats.map((u) => by.get(u));
      break;
    }
    case 'session/defaultChatChanged': if (a.defaultChat) s.defaultChat = a.defaultChat; else delete s.defaultChat; break;
    case 'session/titleChanged': s.title = a.title; break;
    case 'session/isReadChanged': s.status = a.isRead ? s.status | Status.IsRead : s.status & ~Status.IsRead; break;
    case 'session/isArchivedChanged':
      s.status = a.isArchived ? s.status | Status.IsArchived : s.status & ~Status.IsArchived;
      break;
    case 'session/activityChanged': s.activity = a.activity; break;
    case 'session/changesetsChanged': s.changesets = a.changesets; break;
    case 'session/metaChanged': s._meta = a._meta; break;
    case 'session/serverToolsChanged': s.serverTools = a.tools; break;
    case 'session/configChanged':
      if (s.config) s.config.values = a.replace ? a.config : { ...s.config.values, ...a.config };
      break;
    case 'session/activeClientSet': {
      const list = s.activeClients ?? (s.activeClients = []);
      const i = list.findIndex((c) => c.clientId === a.activeClient.clientId);
      if (i >= 0) list[i] = a.activeClient; else list.push(a.activeClient);
      break;
    }
    case 'session/activeClientRemoved':
      s.activeClients = (s.activeClients ?? []).filter((c) => c.clientId !== a.clientId);
      break;
    case 'session/inputNeededSet': {
      const list = s.inputNeeded ?? (s.inputNeeded = []);
      const i = list.findIndex((r) => r.id === a.request.id);
      if (i >= 0) list[i] = a.request; else list.push(a.request);
      break;
    }
    case 'session/inputNeededRemoved':
      s.inputNeeded = (s.inputNeeded ?? []).filter((r) => r.id !== a.id);
      if (!s.inputNeeded.length) delete s.inputNeeded;
      break;
    default: return false;
  }
  return true;
}

/** Applies a chat action; answers whether it changed anything the view shows. */
export function applyChat(c, a) {
  const turn = c.activeTurn;
  const mine = turn && a.turnId === turn.id;
  switch (a.type) {
    case 'chat/turnStarted': {
      c.activeTurn = { id: a.turnId, startedAt: a.startedAt, message: a.message, responseParts: [], _v: 0 };
      c.status = setActivity(c.status, Status.InProgress) & ~Status.IsRead;
      c.modifiedAt = a.startedAt;
      if (a.queuedMessageId) removePending(c, a.queuedMessageId);
      break;
    }
    case 'chat/responsePart':
      if (!mine || a.part.kind === 'error') return false;
      turn.responseParts.push({ ...a.part, _v: 1 });
      break;
    case 'chat/delta': case 'chat/reasoning': {
      if (!mine) return false;
      const kind = a.type === 'chat/delta' ? 'markdown' : 'reasoning';
      const part = turn.responseParts.find((p) => p.kind === kind && p.id === a.partId);
      if (!part) return false;
      part.content += a.content;
      part._v = (part._v ?? 0) + 1;
      break;
    }
    case 'chat/usage': if (!mine) return false; turn.usage = a.usage; break;
    case 'chat/turnComplete': return endTurn(c, a, 'complete');
    case 'chat/turnCancelled': return endTurn(c, a, 'cancelled');
    case 'chat/error': return endTurn(c, a, 'error');
    case 'chat/turnResume': {
      const last = c.turns[c.turns.length - 1];
      if (c.activeTurn || !last || last.id !== a.turnId || last.state !== 'error') return false;
      c.turns.pop();
      c.activeTurn = { id: last.id, startedAt: last.startedAt, message: last.message, responseParts: last.responseParts.filter((p) => p.kind !== 'error'), usage: last.usage };
      c.status = setActivity(c.status, Status.InProgress) & ~Status.IsRead;
      break;
    }
    case 'chat/toolCallStart':
      if (!mine) return false;
      turn.responseParts.push({
        kind: 'toolCall', _v: 1,
        toolCall: { status: 'streaming', toolCallId: a.toolCallId, toolName: a.toolName, displayName: a.displayName, intention: a.intention, contributor: a.contributor },
      });
      break;
    case 'chat/toolCallDelta': return toolCall(c, a, ['streaming'], (t) => {
      if (a.content) t.partialInput = (t.partialInput ?? '') + a.content;
      if (a.invocationMessage !== undefined) t.invocationMessage = a.invocationMessage;
    });
    case 'chat/toolCallReady': return toolCall(c, a, ['streaming', 'running', 'pending-confirmation'], (t) => {
      const keep = { toolCallId: t.toolCallId, toolName: t.toolName, displayName: t.displayName, intention: a.intention ?? t.intention, contributor: a.contributor ?? t.contributor };
      for (const k of Object.keys(t)) delete t[k];
      Object.assign(t, keep, {
        invocationMessage: a.invocationMessage, toolInput: a.toolInput, confirmationTitle: a.confirmationTitle,
        riskAssessment: a.riskAssessment, edits: a.edits, editable: a.editable, options: a.options,
      });
      if (a.confirmed) { t.status = 'running'; t.confirmed = a.confirmed; } else t.status = 'pending-confirmation';
    });
    case 'chat/toolCallConfirmed': return toolCall(c, a, ['pending-confirmation'], (t) => {
      const option = (t.options ?? []).find((o) => o.id === a.selectedOptionId);
      if (a.approved) {
        t.status = 'running';
        t.confirmed = a.confirmed ?? 'not-needed';
        if (a.editedToolInput !== undefined) t.toolInput = a.editedToolInput;
      } else {
        t.status = 'cancelled';
        t.reason = a.reason ?? 'denied';
        t.reasonMessage = a.reasonMessage;
      }
      if (option) t.selectedOption = option;
    });
    case 'chat/toolCallComplete': return toolCall(c, a, ['running', 'pending-confirmation', 'auth-required'], (t) => {
      if (t.status === 'auth-required' && a.result.success) return;
      if (t.status === 'pending-confirmation') t.confirmed = 'not-needed';
      Object.assign(t, a.result);
      t.status = a.requiresResultConfirmation && t.status !== 'auth-required' ? 'pending-result-confirmation' : 'completed';
    });
    case 'chat/toolCallResultConfirmed': return toolCall(c, a, ['pending-result-confirmation'], (t) => {
      if (a.approved) t.status = 'completed';
      else { t.status = 'cancelled'; t.reason = 'result-denied'; }
    });
    case 'chat/toolCallContentChanged': return toolCall(c, a, ['running'], (t) => { t.content = a.content; });
    case 'chat/toolCallAuthRequired': return toolCall(c, a, ['running'], (t) => { t.status = 'auth-required'; t.auth = a.auth; });
    case 'chat/toolCallAuthResolved': return toolCall(c, a, ['auth-required'], (t) => { t.status = 'running'; delete t.auth; });
    case 'chat/pendingMessageSet':
      if (a.kind === 'steering') c.steeringMessage = { id: a.id, message: a.message };
      else {
        const list = c.queuedMessages ?? (c.queuedMessages = []);
        const i = list.findIndex((m) => m.id === a.id);
        if (i >= 0) list[i] = { id: a.id, message: a.message }; else list.push({ id: a.id, message: a.message });
      }
      break;
    case 'chat/pendingMessageRemoved':
      if (a.kind === 'steering') { if (c.steeringMessage?.id === a.id) delete c.steeringMessage; else return false; }
      else removePending(c, a.id);
      break;
    case 'chat/queuedMessagesReordered': {
      if (!c.queuedMessages) return false;
      const by = new Map(c.queuedMessages.map((m) => [m.id, m]));
      const first = a.order.filter((id) => by.has(id)).map((id) => by.get(id));
      c.queuedMessages = first.concat(c.queuedMessages.filter((m) => !a.order.includes(m.id)));
      break;
    }
    case 'chat/inputRequested': {
      if (!turn) return false;
      const part = turn.responseParts.find((p) => p.kind === 'inputRequest' && p.request.id === a.request.id && !p.response);
      if (part) { part.request = { ...a.request, answers: a.request.answers ?? part.request.answers }; part._v++; }
      else turn.responseParts.push({ kind: 'inputRequest', request: a.request, _v: 1 });
      c.status = setActivity(c.status, Status.InputNeeded) & ~Status.IsRead;
      return true;
    }
    case 'chat/inputAnswerChanged': {
      const part = openRequest(c, a.requestId);
      if (!part) return false;
      const answers = part.request.answers ?? (part.request.answers = {});
      if (a.answer === undefined || a.answer === null) delete answers[a.questionId]; else answers[a.questionId] = a.answer;
      part._v++;
      return true;
    }
    case 'chat/inputCompleted': {
      const part = openRequest(c, a.requestId);
      if (!part) return false;
      if (a.answers) part.request.answers = { ...(part.request.answers ?? {}), ...a.answers };
      part.response = a.response;
      part._v++;
      recompute(c);
      return true;
    }
    case 'chat/changesetsChanged': if (a.changesets) c.changesets = a.changesets; else delete c.changesets; break;
    case 'chat/activityChanged': c.activity = a.activity; break;
    case 'chat/isReadChanged': c.status = a.isRead ? c.status | Status.IsRead : c.status & ~Status.IsRead; break;
    case 'chat/isArchivedChanged': c.status = a.isArchived ? c.status | Status.IsArchived : c.status & ~Status.IsArchived; break;
    case 'chat/truncated': {
      if (a.turnId) {
        const i = c.turns.findIndex((t) => t.id === a.turnId);
        if (i < 0) return false;
        c.turns = c.turns.slice(0, i + 1);
      } else { c.turns = []; delete c.turnsNextCursor; }
      delete c.activeTurn;
      c.status = setActivity(c.status, Status.Idle);
      break;
    }
    case 'chat/turnsLoaded': {
      const have = new Set(c.turns.map((t) => t.id));
      c.turns = a.turns.filter((t) => !have.has(t.id)).concat(c.turns);
      c.turnsNextCursor = a.turnsNextCursor;
      break;
    }
    default: return false;
  }
  return true;
}

function removePending(c, id) {
  if (c.steeringMessage?.id === id) delete c.steeringMessage;
  if (c.queuedMessages) {
    c.queuedMessages = c.queuedMessages.filter((m) => m.id !== id);
    if (!c.queuedMessages.length) delete c.queuedMessages;
  }
}

function openRequest(c, requestId) {
  return c.activeTurn?.responseParts.find((p) => p.kind === 'inputRequest' && p.request.id === requestId && !p.response);
}

function toolCall(c, a, from, change) {
  const turn = c.activeTurn;
  if (!turn || turn.id !== a.turnId) return false;
  const part = turn.responseParts.find((p) => p.kind === 'toolCall' && p.toolCall.toolCallId === a.toolCallId);
  if (!part || !from.includes(part.toolCall.status)) return false;
  change(part.toolCall);
  part._v++;
  recompute(c);
  return true;
}

/** The chat's activity from its running turn: waiting for a person, running, or idle. */
function recompute(c) {
  const turn = c.activeTurn;
  if (!turn) return;
  const waiting = turn.responseParts.some((p) =>
    (p.kind === 'inputRequest' && !p.response) ||
    (p.kind === 'toolCall' && ['pending-confirmation', 'pending-result-confirmation', 'auth-required'].includes(p.toolCall.status)));
  c.status = setActivity(c.status, waiting ? Status.InputNeeded : Status.InProgress);
}

function endTurn(c, a, state) {
  const turn = c.activeTurn;
  if (!turn || turn.id !== a.turnId) return false;
  for (const p of turn.responseParts) {
    if (p.kind === 'toolCall' && !['completed', 'cancelled'].includes(p.toolCall.status)) {
      p.toolCall.status = 'cancelled';
      p.toolCall.reason = 'skipped';
      p._v++;
    }
  }
  if (state === 'error' && a.part) turn.responseParts.push({ ...a.part, _v: 1 });
  const duration = Math.max(0, a.duration ?? 0);
  c.turns.push({ id: turn.id, startedAt: turn.startedAt, duration, message: turn.message, responseParts: turn.responseParts, usage: turn.usage, state });
  delete c.activeTurn;
  c.status = setActivity(c.status, state === 'error' ? Status.Error : Status.Idle);
  const started = Date.parse(turn.startedAt);
  if (!Number.isNaN(started)) c.modifiedAt = new Date(started + duration).toISOString();
  return true;
}
