//! A session's settings before it exists: `resolveSessionConfig` (the schema and the values a
//! session would start with, and its backend's commands) and `sessionConfigCompletions` (asked of the agent's worker).

use ahp_types::commands::{ResolveSessionConfigParams, SessionConfigCompletionsParams};
use serde_json::Value;

use super::{check_root_channel, Reply};
use crate::host::catalog::resolve_config;
use crate::host::errors::AhpError;
use crate::host::requests::ConnState;
use crate::host::Host;

impl Host {
    pub(super) fn resolve_session_config(
        &self,
        _conn: &mut ConnState,
        params: ResolveSessionConfigParams,
    ) -> Result<Value, AhpError> {
        check_root_channel("resolveSessionConfig", &params.channel)?;
        let core = self.lock();
        let provider = core.pick_provider(params.provider.as_deref())?;
        let schema = core.started_schema(&provider)?;
        let values = resolve_config(&schema, params.config.as_ref())?;
        // The commands behind a slash a session of it would offer, for a new-session form to show
        // before there is a session (a session's own are on its `_meta.commands`).
        let commands = core.commands_value(&provider);
        Ok(serde_json::json!({ "schema": schema.schema, "values": values, "_meta": { "commands": commands } }))
    }

    pub(super) fn session_config_completions(
        &self,
        conn: &mut ConnState,
        reply: Reply,
        params: SessionConfigCompletionsParams,
    ) {
        // Bound first: a guard in the match's scrutinee would live through the arms, and the
        // error arm's send takes the same lock (a deadlock the fuzzer found).
        let picked = self.lock().pick_provider(params.provider.as_deref());
        let provider = match picked {
            Ok(p) => p,
            Err(e) => return reply.send(self, Err(e)),
        };
        // Asked of the backend only for a key its schema marks `enumDynamic` (which the host does
        // for every key the backend says it answers); any other key has no values to offer.
        let answers =
            self.lock().agent(&provider).and_then(|a| a.schema.as_ref()).is_some_and(|s| {
                s.schema.properties.get(&params.property).is_some_and(|p| p.enum_dynamic == Some(true))
            });
        if !answers {
            return reply.send(self, Ok(serde_json::json!({ "items": [] })));
        }
        let (host, waiting) = (self.clone(), conn.in_flight.begin());
        self.spawn("session config completions", async move {
            let result = host.ask_completions(&provider, params).await;
            // Counted off before the answer goes, so a client that sends again on reading it is
            // never refused for the request it was just answered.
            drop(waiting);
            reply.send(&host, result);
        });
    }

    async fn ask_completions(&self, provider: &str, params: SessionConfigCompletionsParams) -> Result<Value, AhpError> {
        let worker = self
            .supervisor()
            .worker(provider, self.config().worker_wait)
            .await
            .map_err(|e| AhpError::internal(e.to_string()))?;
        let ask = protocol::CompletionsParams {
            property: params.property,
            query: params.query,
            config: params.config.unwrap_or_default(),
            working_directory: params.working_directory,
        };
        let answer: protocol::CompletionsResult = worker
            .peer
            .request(protocol::methods::parent::COMPLETIONS, ask)
            .await
            .map_err(|e| AhpError::internal(format!("The {provider} agent could not answer: {e}")))?;
        let items: Vec<Value> = answer
            .items
            .into_iter()
            .map(|i| {
                let value = match i.value {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let mut item = serde_json::json!({ "value": value, "label": i.label });
                if let Some(d) = i.description {
                    item["description"] = Value::String(d);
                }
                item
            })
            .collect();
        Ok(serde_json::json!({ "items": items }))
    }
}
