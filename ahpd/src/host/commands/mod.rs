//! Every AHP command a client sends, declared once: its method, its params type, the grant it asks
//! and its handler. The checks every command goes through — an unknown method, params that are not
//! an object, the pending-request limit, the handshake, the `channel` an AHP command must name, the
//! grant, and the params' shape — are made here, in this order, from the table; a handler sees
//! only params that passed them, already read into their type.
//!
//! A command cannot be declared without a grant: [`Command`]'s constructors take one, and
//! [`Grant`] has no default. The handlers live beside this file by domain: `handshake`,
//! `subscriptions`, `sessions`, `chats`, `changesets`, `config`, `automations` and `testing`; a client action
//! (`dispatchAction`) is `actions.rs`'s, and the terminal commands `terminal_channels.rs`'s.

mod automations;
mod changesets;
mod chats;
mod config;
mod handshake;
mod sessions;
mod subscriptions;
mod testing;

use std::sync::LazyLock;

use ahp_types::commands::{
    AuthenticateParams, CompletionsParams, CreateChatParams, CreateSessionParams, CreateTerminalParams,
    DisposeChatParams, DisposeSessionParams, DisposeTerminalParams, FetchAutomationRunsParams, FetchTurnsParams,
    InitializeParams, InvokeChangesetOperationParams, ListAutomationTriggerDefinitionsParams, ListSessionsParams,
    ReconnectParams, ResolveSessionConfigParams, ResourceReadParams, RunAutomationParams,
    SessionConfigCompletionsParams, SubscribeParams,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::core::{ConnId, Frame};
use super::errors::{parse_params, AhpError};
use super::grants::{Grant, USERS_RESOURCE};
use super::limits::over_limit;
use super::requests::{response, ConnState};
use super::{Core, Host};
use crate::users::Principal;

pub use self::chats::CHAT_MOVES_OFF;

/// Where a request's answer goes: the connection that sent it, under its id.
pub struct Reply {
    conn: ConnId,
    id: Value,
}

impl Reply {
    /// Answers now.
    pub fn send(self, host: &Host, result: Result<Value, AhpError>) {
        host.send_to(self.conn, response(&self.id, result));
    }

    /// Answers under the host's lock, so the answer goes out before any action that follows it.
    pub fn send_locked(self, core: &mut Core, result: Result<Value, AhpError>) {
        core.ch.send(self.conn, response(&self.id, result));
    }

    /// Answers with a frame already encoded (under the host's lock).
    pub fn send_frame_locked(self, core: &mut Core, encode: impl FnOnce(&Value) -> Frame) {
        let frame = encode(&self.id);
        core.ch.send(self.conn, frame);
    }

    /// The connection the answer goes to.
    pub fn conn(&self) -> ConnId {
        self.conn
    }
}

type Returns = Box<dyn Fn(&Host, &mut ConnState, &str, Value) -> Result<Value, AhpError> + Send + Sync>;
type Answers = Box<dyn Fn(&Host, &mut ConnState, Reply, &str, Value) + Send + Sync>;
type Notified = Box<dyn Fn(&Host, &mut ConnState, Value) + Send + Sync>;

/// What runs a command once it passed every check.
enum Handler {
    /// Its answer is what it returns.
    Returns(Returns),
    /// It answers itself: under the host's lock, ordered against actions, or later from a task.
    Answers(Answers),
    /// An AHP command this host does not serve (yet): refused as such.
    Unserved,
    /// A notification: nothing is answered.
    Notified(Notified),
}

impl Handler {
    /// A handler whose answer is what it returns, its params read into `P` first.
    fn returns<P: DeserializeOwned + 'static>(f: fn(&Host, &mut ConnState, P) -> Result<Value, AhpError>) -> Self {
        Self::Returns(Box::new(move |host, conn, method, params| f(host, conn, parse_params(method, params)?)))
    }

    /// A handler that answers itself, its params read into `P` first (a wrong shape is answered
    /// here).
    fn answers<P: DeserializeOwned + 'static>(f: fn(&Host, &mut ConnState, Reply, P)) -> Self {
        Self::Answers(Box::new(move |host, conn, reply, method, params| match parse_params(method, params) {
            Ok(params) => f(host, conn, reply, params),
            Err(e) => reply.send(host, Err(e)),
        }))
    }

    /// A notification's handler; it takes its params as they came (a notification cannot be
    /// refused, so a malformed one is ignored where it is read).
    fn notified(f: fn(&Host, &mut ConnState, Value)) -> Self {
        Self::Notified(Box::new(f))
    }
}

/// When a request may come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Any time, answered before every other check (`ping`).
    AtOnce,
    /// Only as a connection's first request (`initialize`, `reconnect`).
    Handshake,
    /// Only once the handshake succeeded.
    Initialized,
}

/// One command.
pub struct Command {
    /// Its JSON-RPC method.
    pub method: &'static str,
    /// What the connection's person must hold to send it.
    pub grant: Grant,
    /// When it may come.
    pub phase: Phase,
    /// Its params must name the `channel` it addresses (every AHP command's do).
    pub names_channel: bool,
    handler: Handler,
}

impl Command {
    /// An AHP request, sent once the handshake succeeded, naming its channel.
    fn request(method: &'static str, grant: Grant, handler: Handler) -> Self {
        Self { method, grant, phase: Phase::Initialized, names_channel: true, handler }
    }

    /// An AHP request this host does not serve.
    fn unserved(method: &'static str, grant: Grant) -> Self {
        Self::request(method, grant, Handler::Unserved)
    }

    /// A notification.
    fn notification(method: &'static str, grant: Grant, handler: fn(&Host, &mut ConnState, Value)) -> Self {
        Self { method, grant, phase: Phase::Initialized, names_channel: false, handler: Handler::notified(handler) }
    }

    /// Sent as a connection's first request.
    fn handshake(mut self) -> Self {
        self.phase = Phase::Handshake;
        self
    }

    /// Answered before any other check.
    fn at_once(mut self) -> Self {
        self.phase = Phase::AtOnce;
        self
    }

    /// Not an AHP command: its params name no channel.
    fn without_channel(mut self) -> Self {
        self.names_channel = false;
        self
    }
}

/// The requests a client sends, in AHP's order.
fn requests() -> Vec<Command> {
    use Handler as H;
    vec![
        Command::request("ping", Grant::Anyone, H::returns::<Value>(|_, _, _| Ok(Value::Null)))
            .at_once()
            .without_channel(),
        Command::request("initialize", Grant::Anyone, H::answers::<InitializeParams>(Host::initialize)).handshake(),
        Command::request("reconnect", Grant::Anyone, H::answers::<ReconnectParams>(Host::reconnect)).handshake(),
        Command::request("authenticate", Grant::Anyone, H::returns::<AuthenticateParams>(Host::authenticate)),
        Command::request("subscribe", Grant::Watch, H::answers::<SubscribeParams>(Host::subscribe)),
        Command::request("listSessions", Grant::SessionList, H::answers::<ListSessionsParams>(Host::list_sessions)),
        Command::request(
            "resolveSessionConfig",
            Grant::SessionRead,
            H::returns::<ResolveSessionConfigParams>(Host::resolve_session_config),
        ),
        Command::request(
            "sessionConfigCompletions",
            Grant::SessionRead,
            H::answers::<SessionConfigCompletionsParams>(Host::session_config_completions),
        ),
        Command::request("createSession", Grant::SessionWrite, H::answers::<CreateSessionParams>(Host::create_session)),
        Command::request(
            "disposeSession",
            Grant::SessionDelete,
            H::returns::<DisposeSessionParams>(Host::dispose_session_command),
        ),
        Command::request("createChat", Grant::SessionWrite, H::returns::<CreateChatParams>(Host::create_chat)),
        Command::request("disposeChat", Grant::SessionWrite, H::returns::<DisposeChatParams>(Host::dispose_chat)),
        // Refused in every case while chat moves are off, so nothing is asked first.
        Command::request("moveChat", Grant::Anyone, H::returns::<Value>(Host::move_chat)),
        Command::request("fetchTurns", Grant::ChatTurns, H::answers::<FetchTurnsParams>(Host::fetch_turns)),
        Command::request("completions", Grant::SessionRead, H::answers::<CompletionsParams>(Host::completions)),
        // AHP commands this host does not serve: refused as such, whoever asks.
        Command::request(
            "createTerminal",
            Grant::TerminalCreate,
            H::returns::<CreateTerminalParams>(Host::create_terminal),
        ),
        Command::request(
            "disposeTerminal",
            Grant::TerminalDispose,
            H::returns::<DisposeTerminalParams>(Host::dispose_terminal),
        ),
        // Merging, discarding and committing a session's work are writes to it.
        Command::request(
            "invokeChangesetOperation",
            Grant::SessionWrite,
            H::answers::<InvokeChangesetOperationParams>(Host::invoke_changeset_operation),
        ),
        // Only the file contents a changeset names: reading them is reading the session.
        Command::request("resourceRead", Grant::SessionRead, H::answers::<ResourceReadParams>(Host::resource_read)),
        Command::unserved("resourceWrite", Grant::Anyone),
        Command::unserved("resourceList", Grant::Anyone),
        Command::unserved("resourceCopy", Grant::Anyone),
        Command::unserved("resourceMove", Grant::Anyone),
        Command::unserved("resourceDelete", Grant::Anyone),
        Command::unserved("resourceResolve", Grant::Anyone),
        Command::unserved("resourceMkdir", Grant::Anyone),
        Command::unserved("resourceRequest", Grant::Anyone),
        Command::unserved("createResourceWatch", Grant::Anyone),
        // Automations: starting a run writes sessions; the rest reads what they are.
        Command::request(
            "listAutomationTriggerDefinitions",
            Grant::SessionRead,
            H::returns::<ListAutomationTriggerDefinitionsParams>(Host::list_automation_trigger_definitions),
        ),
        Command::request("runAutomation", Grant::SessionWrite, H::returns::<RunAutomationParams>(Host::run_automation)),
        Command::request(
            "fetchAutomationRuns",
            Grant::SessionRead,
            H::returns::<FetchAutomationRunsParams>(Host::fetch_automation_runs),
        ),
        // This host's own: a schedule's next occurrences, for an automation editor's preview.
        Command::request(
            "ahpd/automationSchedulePreview",
            Grant::SessionRead,
            H::returns::<Value>(Host::automation_schedule_preview),
        ),
        // This host's own, for tests on a manual clock.
        Command::request("ahpd/test/advanceClock", Grant::ConfigWrite, H::returns::<Value>(Host::advance_clock))
            .without_channel(),
        // And for tests of a full store.
        Command::request("ahpd/test/fillStore", Grant::ConfigWrite, H::returns::<Value>(Host::fill_store))
            .without_channel(),
    ]
}

/// The notifications a client sends.
fn notifications() -> Vec<Command> {
    vec![
        // Each action asks its own grant (`grants::action_grant`), checked as it is dispatched.
        Command::notification("dispatchAction", Grant::EachAction, |host, conn, params| {
            host.dispatch_action(conn, params)
        }),
        Command::notification("unsubscribe", Grant::Anyone, Host::unsubscribe),
    ]
}

static REQUESTS: LazyLock<Vec<Command>> = LazyLock::new(requests);
static NOTIFICATIONS: LazyLock<Vec<Command>> = LazyLock::new(notifications);

/// The request `method` names, if this host knows it.
pub fn request(method: &str) -> Option<&'static Command> {
    REQUESTS.iter().find(|c| c.method == method)
}

/// The notification `method` names, if this host knows it.
pub fn notification(method: &str) -> Option<&'static Command> {
    NOTIFICATIONS.iter().find(|c| c.method == method)
}

impl Host {
    /// Handles a request: every check from its command's entry, then its handler.
    pub(super) fn handle_request(&self, conn: &mut ConnState, id: Value, method: &str, params: Value) {
        let reply = Reply { conn: conn.id, id };
        if !params.is_null() && !params.is_object() {
            return reply.send(self, Err(AhpError::invalid_params("params must be an object")));
        }
        let command = request(method);
        if let Some(command) = command.filter(|c| c.phase == Phase::AtOnce) {
            return self.run(command, conn, reply, params);
        }
        if let Err(e) = self.admit(conn, command, method, &params) {
            return reply.send(self, Err(e));
        }
        let Some(command) = command else {
            return reply.send(self, Err(AhpError::method_not_found(method)));
        };
        if let Err(e) = self.check_grant(conn, command.grant, &params) {
            let refused_listing =
                command.grant == Grant::SessionList && e.code == ahp_types::errors::ahp_error_codes::PERMISSION_DENIED;
            // The listing is cut to the person: without session:read it is empty, not an error.
            let result = if refused_listing { Ok(serde_json::json!({ "items": [] })) } else { Err(e) };
            return reply.send(self, result);
        }
        if command.phase == Phase::Handshake && conn.initialized {
            return reply.send(self, Err(AhpError::invalid_request("This connection is initialized already")));
        }
        let remote = self.remote_for_request(method, &params);
        if let Some(remotes) = remote {
            // What another host holds is that host's to answer (seed 004's relay).
            let relayed = remotes.request(self, method, params);
            let host = self.clone();
            return self.spawn("relay a request to a remote host", async move { reply.send(&host, relayed.await) });
        }
        self.run(command, conn, reply, params);
    }

    /// The checks before a request's grant: the pending-request limit, the handshake, and the
    /// channel an AHP command names.
    fn admit(&self, conn: &ConnState, command: Option<&Command>, method: &str, params: &Value) -> Result<(), AhpError> {
        let waiting = conn.in_flight.count();
        if waiting >= conn.limits.max_pending_requests {
            return Err(over_limit(
                "maxPendingRequestsPerConnection",
                conn.limits.max_pending_requests,
                format!(
                    "This connection has {waiting} requests waiting for their answers, this host's limit \
                     (maxPendingRequestsPerConnection); send {method} again once one is answered"
                ),
            ));
        }
        if !conn.initialized && command.is_none_or(|c| c.phase != Phase::Handshake) {
            return Err(AhpError::invalid_request("initialize or reconnect must be the first request"));
        }
        let names_channel = command.is_some_and(|c| c.names_channel);
        if names_channel && params.get("channel").and_then(Value::as_str).is_none() {
            return Err(AhpError::invalid_params(format!("Invalid {method} params: \"channel\" is required")));
        }
        Ok(())
    }

    fn run(&self, command: &Command, conn: &mut ConnState, reply: Reply, params: Value) {
        match &command.handler {
            Handler::Returns(f) => {
                let result = f(self, conn, command.method, params);
                reply.send(self, result);
            }
            Handler::Answers(f) => f(self, conn, reply, command.method, params),
            Handler::Unserved => {
                let e = AhpError::method_not_found(&format!("{} (this host does not serve it yet)", command.method));
                reply.send(self, Err(e));
            }
            Handler::Notified(f) => f(self, conn, params),
        }
    }

    /// Handles a notification: ignored before the handshake, and when unknown.
    pub(super) fn handle_notification(&self, conn: &mut ConnState, method: &str, params: Value) {
        if !conn.initialized {
            tracing::debug!(conn = conn.id, method, "a notification before the handshake; ignored");
            return;
        }
        let Some(command) = notification(method) else {
            tracing::debug!(conn = conn.id, method, "an unknown notification; ignored");
            return;
        };
        if let Err(e) = self.check_grant(conn, command.grant, &params) {
            tracing::debug!(conn = conn.id, method, "a notification its sender may not send; ignored: {e}");
            return;
        }
        if let Handler::Notified(f) = &command.handler {
            f(self, conn, params);
        }
    }

    /// The grant check at the dispatch boundary: nobody signed in is asked to; a person without
    /// the grant is told the host's sentence; deleting a session is its owner's say.
    fn check_grant(&self, conn: &ConnState, grant: Grant, params: &Value) -> Result<(), AhpError> {
        let channel = params.get("channel").and_then(Value::as_str).unwrap_or("");
        let Some(name) = grant.name(channel) else { return Ok(()) };
        let mut core = self.lock();
        if core.users.is_none() {
            return Ok(());
        }
        // A person removed, or given a new role, is so from their next command on.
        core.refresh_users();
        if conn.principal == Principal::Nobody {
            return Err(AhpError::auth_required(USERS_RESOURCE));
        }
        core.require(&conn.principal, name)?;
        if grant == Grant::SessionDelete && self.ensure_loaded(&mut core, channel) {
            core.may_dispose(&conn.principal, channel)?;
        }
        Ok(())
    }
}

/// Refuses a command that addresses anything but the root channel.
fn check_root_channel(method: &str, channel: &str) -> Result<(), AhpError> {
    if channel == ahp_types::ROOT_RESOURCE_URI {
        Ok(())
    } else {
        Err(AhpError::invalid_params(format!(
            "Invalid {method} params: channel must be {}, not {channel}",
            ahp_types::ROOT_RESOURCE_URI
        )))
    }
}

/// Encodes an answer as it is.
fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, AhpError> {
    serde_json::to_value(value).map_err(|e| AhpError::internal(format!("could not encode the answer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_is_declared_once() {
        let mut methods: Vec<&str> = REQUESTS.iter().chain(NOTIFICATIONS.iter()).map(|c| c.method).collect();
        let all = methods.len();
        methods.sort_unstable();
        methods.dedup();
        assert_eq!(methods.len(), all, "a method declared twice");
    }

    #[test]
    fn commands_name_their_grants() {
        let grant = |method: &str, channel: &str| request(method).expect(method).grant.name(channel);
        assert_eq!(grant("subscribe", "ahp-chat:/x"), Some("chat:turns"));
        assert_eq!(grant("subscribe", "ahp-session:/x"), Some("session:read"));
        assert_eq!(grant("subscribe", "agenthost:/root"), None);
        assert_eq!(grant("subscribe", "ahp-root://"), None);
        assert_eq!(grant("createSession", "ahp-chat:/x"), Some("session:write"));
        assert_eq!(grant("disposeSession", "ahp-session:/x"), Some("session:write"));
        assert_eq!(grant("listSessions", "ahp-root://"), Some("session:read"));
        assert_eq!(grant("fetchTurns", "ahp-chat:/x"), Some("chat:turns"));
        assert_eq!(grant("ahpd/test/advanceClock", ""), Some("config:write"));
        assert_eq!(grant("ahpd/test/fillStore", ""), Some("config:write"));
        assert_eq!(grant("createTerminal", "ahp-terminal:/t"), Some("terminal:create"));
        assert_eq!(grant("disposeTerminal", "ahp-terminal:/t"), Some("terminal:dispose"));
        assert_eq!(grant("subscribe", "ahp-terminal:/t"), Some("terminal:output"));
        assert_eq!(grant("initialize", "ahp-chat:/x"), None);
        assert!(request("unsubscribe").is_none(), "a notification, not a request");
        assert!(notification("unsubscribe").is_some());
    }
}
