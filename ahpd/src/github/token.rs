//! The GitHub token ahpd was lent (one for every feature that asks GitHub): from where `agentMergeToken` says (an environment variable
//! or a file), else the `gh` CLI's stored one (`gh auth token`, which reads its keyring or its
//! `hosts.yml`), else none, with a sentence saying what to set. The token is read when it is
//! needed and kept in no record; it is never logged, and shows only as `<set>` (`Debug`).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where `agentMergeToken` says the token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An environment variable of the daemon.
    Env(String),
    /// A file holding it.
    File(PathBuf),
}

impl TokenSource {
    /// The config's `agentMergeToken` value (checked already), if set.
    pub fn of_config(value: &Value) -> Option<Self> {
        if let Some(name) = value.get("env").and_then(Value::as_str) {
            return Some(Self::Env(name.to_owned()));
        }
        value.get("file").and_then(Value::as_str).map(|path| Self::File(PathBuf::from(path)))
    }
}

/// A token: its text is reached only through [`Token::secret`], and it prints as `<set>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The text, for the `Authorization` header alone.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// A token for unit tests.
    #[cfg(test)]
    pub fn for_tests(text: &str) -> Self {
        Self(text.to_owned())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<set>)")
    }
}

/// The token for `host`, or the sentence saying what to set, starting with `who` ("Agent Merge")
/// needing it. `gh` runs in `folder`.
pub async fn token(who: &str, source: Option<&TokenSource>, host: &str, folder: &Path) -> Result<Token, String> {
    let needs = format!("{who} needs a GitHub token:");
    let found = match source {
        Some(TokenSource::Env(name)) => match std::env::var(name) {
            Ok(text) if !text.trim().is_empty() => text,
            _ => return Err(format!("{needs} the environment variable {name} that agentMergeToken names is not set in ahpd's environment; set it and restart ahpd.")),
        },
        Some(TokenSource::File(path)) => match std::fs::read_to_string(path) {
            Ok(text) if !text.trim().is_empty() => text,
            Ok(_) => return Err(format!("{needs} the file {} that agentMergeToken names is empty; write the token in it.", path.display())),
            Err(e) => return Err(format!("{needs} the file {} that agentMergeToken names could not be read ({e}).", path.display())),
        },
        None => crate::shortcommand::output("gh", &["auth", "token", "--hostname", host], folder).await.unwrap_or_default(),
    };
    let text = found.trim();
    if text.is_empty() {
        return Err(format!(
            "{needs} sign the gh CLI in to {host} (gh auth login --hostname {host}), or name one in ahpd's config with agentMergeToken ({{\"env\": \"NAME\"}} or {{\"file\": \"PATH\"}}) and restart ahpd."
        ));
    }
    Ok(Token(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_prints_as_set() {
        assert_eq!(format!("{:?}", Token("ghp_secret".into())), "Token(<set>)");
        assert_eq!(TokenSource::of_config(&serde_json::json!({ "env": "GH" })), Some(TokenSource::Env("GH".into())));
        assert_eq!(TokenSource::of_config(&Value::Null), None);
    }

    #[tokio::test]
    async fn a_configured_file_is_read_and_an_empty_one_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        std::fs::write(&file, "ghp_from_file\n").expect("written");
        let source = TokenSource::File(file.clone());
        let token = token("Agent Merge", Some(&source), "github.com", dir.path()).await.expect("read");
        assert_eq!(token.secret(), "ghp_from_file");
        std::fs::write(&file, "\n").expect("emptied");
        let refused = super::token("Agent Merge", Some(&source), "github.com", dir.path()).await.expect_err("refused");
        assert!(refused.starts_with("Agent Merge needs a GitHub token: the file "), "{refused}");
    }
}
