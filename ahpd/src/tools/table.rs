//! The typed tool table: each host tool is declared once — its arguments as a `Deserialize` struct
//! whose JSON schema is derived from it (`schemars`), its name, what its call asks of the person
//! behind it, its effects, whether it runs with no session — and dispatched from here, the grant
//! checked here from the declaration before the tool runs.
//!
//! A call's arguments are checked against the derived schema, in the order the struct declares
//! its fields, and refused in the reference host's words (`Invalid <tool> input: <field> must be
//! a non-empty string.`, `… must be a string.`, `… a boolean.`, `… an object.`); only then are they
//! deserialized into the struct, which cannot fail on what the check let through. A field the tool
//! reads in words of its own (a range, an enum it names the values of) is declared [`Own`]: its
//! schema says its shape, and its Rust value is the raw JSON the tool reads. A tool whose input is
//! read by a parser of its own (Agent Merge's, the older single-entry shape of
//! `add_artifact_or_reference`) takes no typed arguments ([`Declared::reads_its_input`]).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use schemars::{JsonSchema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{HostTools, Refusal, ToolCall, ToolInfo, ToolResult};
use crate::host::{Core, Host};

/// Checks that whoever is behind a call holds `grant` (seed 000 "Grants"). A host with no users
/// directory has nobody to ask, and its tools act as they always did; the users directory (issue
/// 10) answers here in the host's own words: `<person> may not <grant> here`, or `this turn may not
/// session:write here` where nobody is behind the call.
fn authorize(core: &Core, call: &ToolCall, grant: &str) -> Result<(), Refusal> {
    use crate::users::Principal;
    if !core.has_users() {
        return Ok(());
    }
    let principal = call.caller.principal();
    if principal == Principal::Nobody {
        // Nobody behind the call: it holds the read half alone.
        return if crate::users::covers("*:read", grant) {
            Ok(())
        } else {
            Err(format!("this turn may not {grant} here").into())
        };
    }
    if core.allows(&principal, grant) {
        Ok(())
    } else {
        Err(crate::host::facade::refusal(&principal, grant).into())
    }
}

/// What a tool's run reads: the host's tools, the host, and the call.
#[derive(Clone, Copy)]
pub struct Cx<'a> {
    /// What the host's tools keep between calls.
    pub tools: &'a HostTools,
    /// The host.
    pub host: &'a Host,
    /// The call.
    pub call: &'a ToolCall,
    /// The tool's declaration.
    pub info: &'a ToolInfo,
}

impl Cx<'_> {
    /// Checks one of the grants the tool declares it asks by what the call names
    /// ([`Asks::OneOf`]), under the host's lock the tool holds: the person behind the call must
    /// hold it.
    pub fn require(&self, core: &Core, grant: &str) -> Result<(), Refusal> {
        match self.info.asks {
            Asks::OneOf(grants) if grants.contains(&grant) => authorize(core, self.call, grant),
            _ => Err(format!("{} does not declare that it asks {grant}.", self.info.definition.name).into()),
        }
    }
}

/// What a call of a tool asks of the person behind it (seed 000 "Grants").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asks {
    /// Nothing: it acts on what the calling session may already reach.
    Nothing,
    /// This grant, checked before the tool runs.
    Grant(&'static str),
    /// One of these, by what the call names (`archive_chat`: `chat:mark` for a nested chat,
    /// `session:mark` for a whole session): the tool asks it through [`Cx::require`] once it
    /// knows which, and no other.
    OneOf(&'static [&'static str]),
}

/// A tool's call on its way.
pub type Running<'a> = Pin<Box<dyn Future<Output = ToolResult> + Send + 'a>>;

type Run = Arc<dyn for<'a> Fn(Cx<'a>) -> Running<'a> + Send + Sync>;

/// One host tool: its declaration and its run.
#[derive(Clone)]
pub struct Tool {
    /// What it is and what the host knows of it.
    pub info: ToolInfo,
    run: Run,
}

impl Tool {
    /// Runs a call: the declared grant first, then the arguments, then the tool.
    pub async fn call(&self, tools: &HostTools, host: &Host, call: &ToolCall) -> ToolResult {
        if let Asks::Grant(grant) = self.info.asks {
            authorize(&host.lock(), call, grant)?;
        }
        (self.run)(Cx { tools, host, call, info: &self.info }).await
    }
}

/// A tool declared with the arguments `A`, before it is given its run.
pub struct Declared<A> {
    info: ToolInfo,
    args: PhantomData<fn() -> A>,
}

/// Declares a tool of `group` named `name`, taking the arguments `A` (its input schema derived
/// from them).
pub fn declare<A: JsonSchema>(group: super::Group, name: &str, description: &str) -> Declared<A> {
    Declared { info: ToolInfo::new(group, name, description, schema_of::<A>()), args: PhantomData }
}

impl<A: DeserializeOwned + JsonSchema + Send + 'static> Declared<A> {
    /// Changes the declaration (its title, effects, grant, …).
    pub fn with(mut self, change: impl FnOnce(ToolInfo) -> ToolInfo) -> Self {
        self.info = change(self.info);
        self
    }

    /// Gives it its run: `run` takes the call's arguments, checked and deserialized.
    pub fn runs<F>(self, run: F) -> Tool
    where
        F: for<'a> Fn(Cx<'a>, A) -> Running<'a> + Send + Sync + 'static,
    {
        let name = self.info.definition.name.clone();
        let checked = checker::<A>();
        let run = erase(move |cx| match parse::<A>(&name, &checked, &cx.call.input) {
            Ok(args) => run(cx, args),
            Err(refusal) => Box::pin(std::future::ready(Err(refusal))),
        });
        Tool { info: self.info, run }
    }

    /// Gives it a run that answers at once.
    pub fn answers<F>(self, run: F) -> Tool
    where
        F: Fn(Cx<'_>, A) -> ToolResult + Send + Sync + 'static,
    {
        self.runs(move |cx, args| Box::pin(std::future::ready(run(cx, args))))
    }

    /// Gives it a run that reads the call's input with a parser of its own; `A` only says its
    /// schema.
    pub fn reads_its_input<F>(self, run: F) -> Tool
    where
        F: for<'a> Fn(Cx<'a>) -> Running<'a> + Send + Sync + 'static,
    {
        Tool { info: self.info, run: erase(run) }
    }
}

/// A run, its lifetimes named for every call.
fn erase<F>(run: F) -> Run
where
    F: for<'a> Fn(Cx<'a>) -> Running<'a> + Send + Sync + 'static,
{
    Arc::new(run)
}

/// A field the tool reads in its own words, shaped as `T`: the schema says `T`, the checks here
/// leave it to the tool, and the field holds the raw JSON (`Option<Value>`).
pub struct Own<T>(PhantomData<T>);

/// Marks a property the tool reads itself; taken out of the schema a model is offered.
const OWN: &str = "x-ahpd-own";

impl<T: JsonSchema> JsonSchema for Own<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        format!("Own_{}", T::schema_name()).into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(generator: &mut SchemaGenerator) -> schemars::Schema {
        let mut schema = T::json_schema(generator);
        schema.insert(OWN.into(), Value::Bool(true));
        schema
    }
}

/// The schema a tool's arguments are checked against: derived from `A`, inlined, with the marks
/// of the fields the tool reads itself.
fn checker<A: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let mut schema = settings.into_generator().into_root_schema_for::<A>().to_value();
    tidy(&mut schema);
    if let Some(top) = schema.as_object_mut() {
        top.remove("title");
        top.remove("description");
        top.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    }
    schema
}

/// The input schema a model is offered for `A`: the checked one without this host's marks.
pub fn schema_of<A: JsonSchema>() -> Value {
    let mut schema = checker::<A>();
    unmark(&mut schema);
    schema
}

/// What `schemars` adds that the tools' schemas never said: a `format` of a number's width, the
/// `null` an optional field may be, a metadata title, an open object's `additionalProperties`.
fn tidy(schema: &mut Value) {
    let Some(node) = schema.as_object_mut() else { return };
    node.remove("format");
    node.remove("title");
    if node.get("additionalProperties") == Some(&Value::Bool(true)) {
        node.remove("additionalProperties");
    }
    if let Some(Value::Array(types)) = node.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if let [one] = kept.as_slice() {
            node.insert("type".into(), one.clone());
        }
    }
    if let Some(properties) = node.get_mut("properties").and_then(Value::as_object_mut) {
        properties.values_mut().for_each(tidy);
    }
    if let Some(items) = node.get_mut("items") {
        tidy(items);
    }
}

fn unmark(schema: &mut Value) {
    let Some(node) = schema.as_object_mut() else { return };
    node.remove(OWN);
    if let Some(properties) = node.get_mut("properties").and_then(Value::as_object_mut) {
        properties.values_mut().for_each(unmark);
    }
    if let Some(items) = node.get_mut("items") {
        unmark(items);
    }
}

/// Checks `input` against the schema and deserializes it into `A`.
fn parse<A: DeserializeOwned>(tool: &str, schema: &Value, input: &Value) -> Result<A, Refusal> {
    // A call with no arguments, or arguments that are not an object, names no field.
    let input = match input {
        Value::Object(fields) => Value::Object(fields.clone()),
        _ => Value::Object(Map::new()),
    };
    check(tool, schema, &input, "")?;
    serde_json::from_value(input).map_err(|e| format!("Invalid {tool} input: {e}.").into())
}

/// Checks the fields of one object, in the order the schema declares them.
fn check(tool: &str, schema: &Value, input: &Value, at: &str) -> Result<(), Refusal> {
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Ok(()) };
    for (name, property) in properties {
        if property.get(OWN) == Some(&Value::Bool(true)) {
            continue;
        }
        let path = if at.is_empty() { name.clone() } else { format!("{at}.{name}") };
        let required = required.contains(&name.as_str());
        let refuse =
            || Refusal::from(format!("Invalid {tool} input: {path} must be {}.", expected(property, required)));
        let value = input.get(name).filter(|v| !v.is_null());
        let Some(value) = value else {
            if required {
                return Err(refuse());
            }
            continue;
        };
        let fits = match property.get("type").and_then(Value::as_str) {
            Some("string") => value.as_str().is_some_and(|s| !required || !s.trim().is_empty()),
            Some("boolean") => value.is_boolean(),
            Some("number") => value.is_number(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("array") => value.is_array(),
            Some("object") => value.is_object(),
            _ => true,
        };
        if !fits {
            return Err(refuse());
        }
        if value.is_object() {
            check(tool, property, value, &path)?;
        }
    }
    Ok(())
}

/// What a field must be, in the reference host's words.
fn expected(property: &Value, required: bool) -> &'static str {
    match property.get("type").and_then(Value::as_str) {
        Some("string") if required => "a non-empty string",
        Some("string") => "a string",
        Some("boolean") => "a boolean",
        Some("number") | Some("integer") => "a number",
        Some("array") => "an array",
        Some("object") => "an object",
        _ => "given",
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct Example {
        /// The session to read.
        session: String,
        /// A filter.
        workspace: Option<String>,
        /// Whether to.
        include_archived: Option<bool>,
        /// Where.
        range: Option<Place>,
        /// Read by the tool.
        #[schemars(with = "Option<Own<f64>>")]
        offset: Option<Value>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct Place {
        /// One-based.
        start_line: f64,
    }

    fn parsed(input: Value) -> Result<Example, Refusal> {
        parse::<Example>("t", &checker::<Example>(), &input)
    }

    #[test]
    fn the_schema_says_what_the_struct_takes_and_nothing_of_schemars_own() {
        assert_eq!(
            schema_of::<Example>(),
            json!({
                "type": "object",
                "properties": {
                    "session": { "type": "string", "description": "The session to read." },
                    "workspace": { "type": "string", "description": "A filter." },
                    "includeArchived": { "type": "boolean", "description": "Whether to." },
                    "range": {
                        "type": "object",
                        "description": "Where.",
                        "properties": { "startLine": { "type": "number", "description": "One-based." } },
                        "required": ["startLine"]
                    },
                    "offset": { "type": "number", "description": "Read by the tool." }
                },
                "required": ["session"]
            })
        );
    }

    #[test]
    fn a_field_that_does_not_fit_is_refused_in_the_reference_hosts_words() {
        let refused = |input: Value| parsed(input).expect_err("refused").0;
        assert_eq!(refused(json!({})), "Invalid t input: session must be a non-empty string.");
        assert_eq!(refused(json!({ "session": "  " })), "Invalid t input: session must be a non-empty string.");
        assert_eq!(refused(json!({ "session": "s", "workspace": 3 })), "Invalid t input: workspace must be a string.");
        assert_eq!(
            refused(json!({ "session": "s", "includeArchived": "yes" })),
            "Invalid t input: includeArchived must be a boolean."
        );
        assert_eq!(refused(json!({ "session": "s", "range": [] })), "Invalid t input: range must be an object.");
        assert_eq!(
            refused(json!({ "session": "s", "range": {} })),
            "Invalid t input: range.startLine must be a number."
        );
        assert_eq!(refused(json!("no")), "Invalid t input: session must be a non-empty string.");
    }

    #[test]
    fn what_fits_is_deserialized_and_the_tools_own_fields_kept_as_sent() {
        let example =
            parsed(json!({ "session": "s", "workspace": null, "offset": "later", "range": { "startLine": 2 } }))
                .expect("it fits");
        assert_eq!(example.session, "s");
        assert_eq!((example.workspace, example.include_archived), (None, None));
        assert_eq!(example.range.map(|r| r.start_line), Some(2.0));
        assert_eq!(example.offset, Some(json!("later")));
    }
}
