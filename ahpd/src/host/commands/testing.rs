//! This host's own commands for tests: `ahpd/test/advanceClock` moves a manual clock, and
//! `ahpd/test/fillStore` fills the session store's test page limit or empties it again.

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

    /// Tests only: `{full: true}` fills the room the store's page limit leaves (a daemon started
    /// with `AHPD_TEST_STORE_MAX_PAGES`), `{full: false}` gives it back. Any other daemon does not
    /// answer it.
    pub(super) fn fill_store(&self, _conn: &mut ConnState, params: Value) -> Result<Value, AhpError> {
        if !crate::store::Store::room_for_tests() {
            return Err(AhpError::method_not_found("ahpd/test/fillStore"));
        }
        let full = params
            .get("full")
            .and_then(Value::as_bool)
            .ok_or_else(|| AhpError::invalid_params("full must be true or false"))?;
        let core = self.lock();
        core.store().fill_for_test(full).map_err(|e| AhpError::internal(e.to_string()))?;
        Ok(serde_json::json!({ "full": full }))
    }
}
