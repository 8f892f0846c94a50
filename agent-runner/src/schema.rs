//! Settings schemas as backends and the host declare them: a property (of a session's settings or
//! of the root config), a choice among named values, and the schema of a few properties whose
//! defaults are the defaults of the session.

use ahp_types::common::JsonObject;
use ahp_types::state::{ConfigPropertySchema, SessionConfigPropertySchema, SessionConfigSchema};
use protocol::SchemaResult;
use serde_json::Value;

/// A property of `kind` ("string", "boolean", …) a person may change while the session runs.
pub fn property(kind: &str, title: &str, description: Option<String>) -> SessionConfigPropertySchema {
    SessionConfigPropertySchema {
        r#type: kind.into(),
        title: title.into(),
        description,
        default: None,
        r#enum: None,
        enum_labels: None,
        enum_descriptions: None,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
        enum_dynamic: None,
        session_mutable: Some(true),
    }
}

/// A string property that is one of `values`, each shown by the label at its place, `default`
/// first chosen.
pub fn choice(
    title: &str,
    description: &str,
    default: &str,
    values: &[&str],
    labels: &[&str],
) -> SessionConfigPropertySchema {
    let mut choice = property("string", title, Some(description.into()));
    choice.default = Some(Value::String(default.into()));
    choice.r#enum = Some(values.iter().map(|v| Value::String((*v).into())).collect());
    choice.enum_labels = Some(labels.iter().map(|l| (*l).into()).collect());
    choice
}

/// The schema of `properties` under their keys; each one's default is the session's default.
pub fn schema_of(properties: Vec<(&str, SessionConfigPropertySchema)>) -> SchemaResult {
    let defaults: JsonObject =
        properties.iter().filter_map(|(key, p)| Some(((*key).to_owned(), p.default.clone()?))).collect();
    SchemaResult {
        schema: SessionConfigSchema {
            r#type: "object".into(),
            properties: properties.into_iter().map(|(key, p)| (key.to_owned(), p)).collect(),
            required: None,
        },
        defaults,
    }
}

/// A property of the root config (or a list's item) of `kind`, described by `description`.
pub fn config_property(kind: &str, title: &str, description: Option<String>) -> ConfigPropertySchema {
    ConfigPropertySchema {
        r#type: kind.into(),
        title: title.into(),
        description,
        default: None,
        r#enum: None,
        enum_labels: None,
        enum_descriptions: None,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
    }
}
