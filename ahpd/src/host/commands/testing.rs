//! This host's own command for tests: `ahpd/test/advanceClock` moves a manual clock.

use serde_json::Value;

use crate::host::errors::AhpError;
use crate::host::requests::ConnState;
use crate::host::Host;

impl Host {
    /// Tests only: moves a manual clock (`AHPD_TEST_CLOCK=manual`) forward by `ms`. A daemon on
    /// wall time does not answer it.
    pub(super) fn advance_clock(&self, _conn: &mut ConnState, params: Value) -> Result<Value, AhpError> {
        let clock = &self.config().clock;
        if !clock.is_manual() {
            return Err(AhpError::method_not_found("ahpd/test/advanceClock"));
        }
        let ms = params
            .get("ms")
            .and_then(Value::as_u64)
            .ok_or_else(|| AhpError::invalid_params("ms must be a whole number"))?;
        clock.advance(std::time::Duration::from_millis(ms));
        Ok(serde_json::json!({ "now": clock.now() }))
    }
}
