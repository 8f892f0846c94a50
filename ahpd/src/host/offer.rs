//! What a session is offered, and running what its model calls: the host's own tools (the
//! catalogue registered with the host, `facade::Tools`), then its clients' (`clients.rs`) — as
//! specs for its backends, as definitions for `SessionState.serverTools`, and as instructions for
//! the system prompt — and a call routed to the client that runs it or to the catalogue.

use ahp_types::state::ToolDefinition;
use protocol::{ToolOutcome, ToolSpec};

use super::ports::{Caller, Offered, ToolCall};
use super::{Core, Host};
use crate::bounds::{Bound, CallKind};

impl Core {
    /// The host's own tools `session` is offered: none for a provider whose plugin says
    /// `hostTools: false`.
    pub fn host_tools(&self, session: &str) -> Vec<Offered> {
        if !self.takes_host_tools(session) {
            return Vec::new();
        }
        self.tools.offered(self, session)
    }

    /// True unless the session's provider's plugin says `hostTools: false`.
    pub fn takes_host_tools(&self, session: &str) -> bool {
        self.sessions.get(session).is_none_or(|meta| !self.host_tools_withheld.contains(&meta.provider))
    }

    /// True when `session` is offered the host's own tool `name`.
    pub fn offers_host_tool(&self, session: &str, name: &str) -> bool {
        self.host_tools(session).iter().any(|t| t.spec.definition.name == name)
    }

    /// The tools a backend is handed for a session: the host's offered tools, then the clients'.
    pub fn tool_specs(&self, session: &str) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.host_tools(session).into_iter().map(|t| t.spec).collect();
        specs.extend(self.client_tool_specs(session));
        specs
    }

    /// The instructions of the offered tools, for the system prompt.
    pub fn tool_instructions(&self, session: &str) -> Vec<String> {
        self.host_tools(session).into_iter().filter_map(|t| t.instruction.map(str::to_owned)).collect()
    }

    /// The definitions `SessionState.serverTools` reports.
    pub fn server_tools(&self, session: &str) -> Vec<ToolDefinition> {
        self.host_tools(session).into_iter().map(|t| t.spec.definition).collect()
    }
}

impl Host {
    /// Runs a call of one of the host's own tools (from a backend's model, a session's tools
    /// endpoint, or `/mcp`), bounded from here, its dispatch: its deadline and its output cap.
    pub async fn run_tool(&self, name: &str, call: ToolCall) -> ToolOutcome {
        let tools = self.lock().tools.clone();
        let kind = if tools.waits_for_person(name) { CallKind::HostToolAskingPerson } else { CallKind::HostTool };
        let bound = Bound::of(kind, self.config().client_tool_timeout_ms);
        bound.run(&self.config().clock, name, tools.run(self, name, call)).await
    }

    /// Runs a tool a backend's model called in `chat`: one this session is offered, or refused.
    pub async fn run_tool_for_chat(&self, params: protocol::ToolRunParams) -> ToolOutcome {
        enum Route {
            Refused(String),
            Client,
            Host(ToolCall),
        }
        let route = {
            let core = self.lock();
            match core.chats.get(&params.chat).map(|m| m.session.clone()) {
                None => Route::Refused(format!("There is no chat {}.", params.chat)),
                Some(session) if core.client_tool(&session, &params.name).is_some() => Route::Client,
                Some(session) if !core.offers_host_tool(&session, &params.name) => {
                    Route::Refused(format!("No tool named {} is offered in this session.", params.name))
                }
                Some(session) => Route::Host(ToolCall {
                    session: Some(session),
                    chat: Some(params.chat.clone()),
                    turn_id: Some(params.turn_id.clone()),
                    tool_call_id: Some(params.tool_call_id.clone()),
                    // The call acts as the person who sent its turn, if that turn still runs.
                    caller: Caller::Turn(
                        core.running_sender(&params.chat)
                            .filter(|_| core.running_turn(&params.chat).as_deref() == Some(params.turn_id.as_str())),
                    ),
                    input: params.input.clone(),
                }),
            }
        };
        let call = match route {
            Route::Refused(why) => return ToolOutcome::failed(why),
            Route::Client => {
                return self.run_client_tool(&params.chat, Some(params.tool_call_id), &params.name, params.input).await
            }
            Route::Host(call) => call,
        };
        self.run_tool(&params.name, call).await
    }
}
