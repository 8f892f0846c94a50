//! pi's models as AHP models: ids are `provider/modelId` (pi's own `--model` form), and a model that
//! reasons offers its thinking level as `config.thinkingLevel`.

use ahp_types::state::{ModelSelection, SessionModelInfo};
use serde_json::{json, Value};

/// pi's thinking levels, least first.
pub const THINKING_LEVELS: [&str; 6] = ["off", "minimal", "low", "medium", "high", "xhigh"];

/// An AHP model for one of pi's (`get_available_models`' `models[]`), offered under `provider`
/// (the AHP provider this worker serves).
pub fn model_info(provider: &str, model: &Value) -> Option<SessionModelInfo> {
    let id = model.get("id")?.as_str()?;
    let pi_provider = model.get("provider")?.as_str()?;
    let name = model.get("name").and_then(Value::as_str).unwrap_or(id);
    let vision =
        model.get("input").and_then(Value::as_array).map(|inputs| inputs.iter().any(|i| i.as_str() == Some("image")));
    let reasoning = model.get("reasoning").and_then(Value::as_bool).unwrap_or(false);
    let mut info = json!({
        "id": format!("{pi_provider}/{id}"),
        "provider": provider,
        "name": name,
        "maxContextWindow": model.get("contextWindow"),
        "maxOutputTokens": model.get("maxTokens"),
        "supportsVision": vision,
    });
    if reasoning {
        info["configSchema"] = json!({
            "type": "object",
            "properties": {
                "thinkingLevel": {
                    "type": "string",
                    "title": "Thinking",
                    "description": "How much the model thinks before it answers",
                    "enum": THINKING_LEVELS,
                    "default": "medium",
                }
            }
        });
    }
    strip_nulls(&mut info);
    serde_json::from_value(info).ok()
}

fn strip_nulls(value: &mut Value) {
    if let Value::Object(map) = value {
        map.retain(|_, v| !v.is_null());
    }
}

/// pi's `(provider, modelId)` for an AHP model id; `None` for an id that is not `provider/model`.
pub fn split_model_id(id: &str) -> Option<(&str, &str)> {
    let (provider, model) = id.split_once('/')?;
    (!provider.is_empty() && !model.is_empty()).then_some((provider, model))
}

/// The thinking level a selection asks for, when it names one pi knows.
pub fn thinking_level(selection: &ModelSelection) -> Option<String> {
    let level = selection.config.as_ref()?.get("thinkingLevel")?.as_str()?;
    THINKING_LEVELS.contains(&level).then(|| level.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pi_models_become_ahp_models() {
        let model = json!({"id": "mock-claude", "provider": "mock-anthropic", "reasoning": true,
            "input": ["text", "image"], "contextWindow": 32000, "maxTokens": 4096});
        let info = model_info("pi", &model).expect("a model");
        assert_eq!(info.id, "mock-anthropic/mock-claude");
        assert_eq!(info.provider, "pi");
        assert_eq!(info.name, "mock-claude");
        assert_eq!(info.max_context_window, Some(32000));
        assert_eq!(info.supports_vision, Some(true));
        assert!(info.config_schema.is_some());
        assert_eq!(split_model_id(&info.id), Some(("mock-anthropic", "mock-claude")));
        assert_eq!(split_model_id("nomodel"), None);
    }
}
