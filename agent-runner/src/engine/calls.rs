//! The tool calls of one turn and what has been said of each: started, ready (running or asking),
//! answered by a person, done. Every backend's mapper keeps its calls here, with what it knows of
//! each beside them (its names, its input), so the calls are said by seed 004's rules the same way
//! everywhere: a call creates its own part once, is readied once, and a call a person denied is
//! said no more (the host moved it to cancelled already).

use std::collections::HashMap;

use ahp_types::state::{ToolCallContributor, ToolCallResult};

use crate::turn::{Question, TurnWriter};

/// One tool call of a turn.
#[derive(Debug, Clone, Default)]
pub struct Call<X> {
    /// What the backend keeps of it (its names, its input).
    pub of: X,
    /// `chat/toolCallReady` was said: it runs, or it asks.
    pub ready: bool,
    /// It waited for a person.
    pub asked: bool,
    /// A person allowed it.
    pub approved: bool,
    /// Its result was said, or a person denied it.
    pub done: bool,
}

/// The calls of one turn, by id.
#[derive(Debug)]
pub struct Calls<X> {
    calls: HashMap<String, Call<X>>,
}

impl<X> Default for Calls<X> {
    fn default() -> Self {
        Self { calls: HashMap::new() }
    }
}

impl<X> Calls<X> {
    /// A call, by id.
    pub fn get(&self, id: &str) -> Option<&Call<X>> {
        self.calls.get(id)
    }

    /// A call, by id, to change what the backend keeps of it.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Call<X>> {
        self.calls.get_mut(id)
    }

    /// True for a call of this turn.
    pub fn contains(&self, id: &str) -> bool {
        self.calls.contains_key(id)
    }

    /// Every call, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Call<X>)> {
        self.calls.iter()
    }

    /// Keeps a call nothing is said of (a question the runtime asks as a tool).
    pub fn keep(&mut self, id: &str, of: X) -> &mut Call<X> {
        self.calls.entry(id.to_owned()).or_insert_with(|| Call {
            of,
            ready: false,
            asked: false,
            approved: false,
            done: false,
        })
    }

    /// Starts a call the first time its id is seen (`chat/toolCallStart`, its own part); answers
    /// false, saying nothing, for a call already started.
    pub fn start(
        &mut self,
        writer: &mut TurnWriter,
        id: &str,
        tool_name: &str,
        display_name: &str,
        contributor: Option<ToolCallContributor>,
        of: X,
    ) -> bool {
        if self.calls.contains_key(id) {
            return false;
        }
        writer.tool_start(id, tool_name, display_name, contributor);
        self.keep(id, of);
        true
    }

    /// The call runs without asking (`confirmed: not-needed`): said once, and never of a call
    /// that asked, or is done.
    pub fn running(&mut self, writer: &mut TurnWriter, id: &str, invocation: &str, input: Option<String>) -> bool {
        let Some(call) = self.calls.get_mut(id).filter(|c| !c.ready && !c.done) else { return false };
        call.ready = true;
        writer.tool_running(id, invocation, input);
        true
    }

    /// The call waits for a person: `chat/toolCallReady` without `confirmed`, with the question.
    pub fn asks(
        &mut self,
        writer: &mut TurnWriter,
        id: &str,
        invocation: &str,
        input: Option<String>,
        question: Question,
    ) {
        let Some(call) = self.calls.get_mut(id).filter(|c| !c.done) else { return };
        call.ready = true;
        call.asked = true;
        writer.tool_asks(id, invocation, input, question);
    }

    /// A person allowed or denied the call; a denied one is done (the host cancelled it).
    pub fn answered(&mut self, id: &str, approved: bool) {
        if let Some(call) = self.calls.get_mut(id) {
            call.approved = approved;
            call.done |= !approved;
        }
    }

    /// The call ended with `result`: said once, and never of a call a person denied.
    pub fn complete(&mut self, writer: &mut TurnWriter, id: &str, result: ToolCallResult) -> bool {
        let Some(call) = self.calls.get_mut(id).filter(|c| !c.done) else { return false };
        call.done = true;
        writer.tool_complete(id, result);
        true
    }

    /// Marks a call done without saying anything (its end is said elsewhere).
    pub fn done(&mut self, id: &str) {
        if let Some(call) = self.calls.get_mut(id) {
            call.done = true;
        }
    }
}
