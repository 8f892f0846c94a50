//! The automation commands: `runAutomation`, `fetchAutomationRuns` and
//! `listAutomationTriggerDefinitions`, and this host's own `ahpd/automationSchedulePreview` (a
//! schedule's next occurrences, for a client's editor), answered by the automations feature
//! (`facade::Automations`); a host without one refuses them as commands it does not serve.

use ahp_types::commands::{FetchAutomationRunsParams, ListAutomationTriggerDefinitionsParams, RunAutomationParams};
use serde_json::Value;

use super::to_value;
use crate::host::errors::AhpError;
use crate::host::facade::Automations;
use crate::host::requests::ConnState;
use crate::host::Host;

impl Host {
    /// The automations feature, or the refusal of a host that keeps none.
    fn automations_for(&self, method: &str) -> Result<std::sync::Arc<dyn Automations>, AhpError> {
        let feature = self.lock().automations.clone();
        feature.ok_or_else(|| AhpError::method_not_found(&format!("{method} (this host keeps no automations)")))
    }

    pub(super) fn run_automation(&self, conn: &mut ConnState, params: RunAutomationParams) -> Result<Value, AhpError> {
        let feature = self.automations_for("runAutomation")?;
        to_value(&feature.run(self, &conn.principal, params)?)
    }

    pub(super) fn fetch_automation_runs(
        &self,
        _conn: &mut ConnState,
        params: FetchAutomationRunsParams,
    ) -> Result<Value, AhpError> {
        let feature = self.automations_for("fetchAutomationRuns")?;
        feature.fetch_runs(self, params)?;
        Ok(serde_json::json!({}))
    }

    pub(super) fn list_automation_trigger_definitions(
        &self,
        _conn: &mut ConnState,
        params: ListAutomationTriggerDefinitionsParams,
    ) -> Result<Value, AhpError> {
        let feature = self.automations_for("listAutomationTriggerDefinitions")?;
        to_value(&feature.trigger_definitions(&params))
    }

    pub(super) fn automation_schedule_preview(&self, _conn: &mut ConnState, params: Value) -> Result<Value, AhpError> {
        let feature = self.automations_for("ahpd/automationSchedulePreview")?;
        feature.preview(&params, self.config().clock.now())
    }
}
