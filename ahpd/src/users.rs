//! The users directory: people, their roles, and hashed tokens (seed 000 "Grants"). With no
//! directory the host has nobody to ask and acts as it always did; with one, every command, client
//! action and tool call is checked against the grants of the person behind it, and a refusal is the
//! host's own sentence: `<person> may not <grant> here`.
//!
//! A grant is `<subject>:<operation>`; `read` and `write` are groups of operations, and `*`
//! matches any subject or operation. `session:write` covers every chat operation in the write
//! group; `session:read` covers reading a chat's turns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Who is behind a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The deployment's own connection token, or a host with no users directory: every grant.
    Root,
    /// A person in the users directory.
    Person(String),
    /// Nobody signed in on a host with a users directory: no grant at all.
    Nobody,
}

impl Principal {
    /// How a refusal names it.
    pub fn name(&self) -> &str {
        match self {
            Principal::Root => "root",
            Principal::Person(id) => id,
            Principal::Nobody => "nobody",
        }
    }
}

/// One person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// Their id.
    pub id: String,
    /// Their roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// `sha256:<hex>` of their token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// The file's shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsersFile {
    /// Roles beside the built-in ones, by name, as grants.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, Vec<String>>,
    /// The people.
    #[serde(default)]
    pub users: Vec<User>,
}

/// A users directory read from its file.
#[derive(Debug, Clone)]
pub struct Users {
    /// Where it lives.
    pub path: PathBuf,
    /// What it holds.
    pub file: UsersFile,
    /// The file's modification time and length when it was read (either changing means re-read).
    modified: Option<(std::time::SystemTime, u64)>,
}

/// What went wrong with the users directory.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    /// The file could not be read or written.
    #[error("{0}: {1}")]
    Io(PathBuf, String),
    /// The file is not a users directory.
    #[error("{0} is not a users directory: {1}")]
    Malformed(PathBuf, String),
    /// A role that does not exist.
    #[error("there is no role called {0}; the roles are {1}")]
    UnknownRole(String, String),
    /// Nobody by that id.
    #[error("there is no user called {0}")]
    UnknownUser(String),
    /// Somebody by that id already.
    #[error("there is a user called {0} already")]
    Exists(String),
}

/// The built-in roles and their grants.
pub fn builtin_role(name: &str) -> Option<Vec<&'static str>> {
    Some(match name {
        "admin" => vec!["*:*"],
        "member" => vec!["session:read", "session:write", "terminal:read", "terminal:write"],
        "guest" => vec!["session:read"],
        _ => return None,
    })
}

/// The operations of a subject's `read` and `write` groups.
fn group_of(subject: &str, operation: &str) -> Option<&'static str> {
    let read: &[&str] = match subject {
        "session" => &["list", "state", "read"],
        "chat" => &["turns", "read"],
        "config" => &["settings", "read"],
        "terminal" => &["output", "read"],
        _ => &["read"],
    };
    let write: &[&str] = match subject {
        "session" => &[
            "create",
            "dispose",
            "rename",
            "configure",
            "folders",
            "attach",
            "mark",
            "review",
            "changes",
            "worktree",
            "artifacts",
            "write",
        ],
        "chat" => &[
            "create", "fork", "dispose", "move", "send", "cancel", "answer", "tool", "draft", "folders", "mark",
            "truncate", "write",
        ],
        "config" => &["change", "write"],
        "terminal" => &["create", "dispose", "input", "resize", "claim", "rename", "clear", "write"],
        _ => &["write"],
    };
    if read.contains(&operation) {
        Some("read")
    } else if write.contains(&operation) {
        Some("write")
    } else {
        None
    }
}

/// True when `held` covers `needed` (`subject:operation`).
pub fn covers(held: &str, needed: &str) -> bool {
    let (Some((hs, ho)), Some((ns, no))) = (held.split_once(':'), needed.split_once(':')) else { return false };
    let subject_ok = hs == "*" || hs == ns;
    let operation_ok = ho == "*" || ho == no || group_of(ns, no) == Some(ho);
    if subject_ok && operation_ok {
        return true;
    }
    // A chat's operations are its session's: session:write covers the chat write group, and
    // session:read the chat read group.
    if ns == "chat" && (hs == "session" || hs == "*") {
        let group = group_of("chat", no);
        return ho == "*" || group.is_some_and(|g| g == ho);
    }
    false
}

fn stamp(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// SHA-256 of a token, as stored: `sha256:<hex>`.
pub fn hash_token(token: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(token.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A new random token.
pub fn new_token() -> String {
    format!("ahpd_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

impl Users {
    /// Reads the directory; a missing file is an empty one.
    pub fn load(path: &Path) -> Result<Self, UsersError> {
        let file = match std::fs::read_to_string(path) {
            Ok(text) => {
                serde_json::from_str(&text).map_err(|e| UsersError::Malformed(path.to_owned(), e.to_string()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => UsersFile::default(),
            Err(e) => return Err(UsersError::Io(path.to_owned(), e.to_string())),
        };
        let modified = stamp(path);
        Ok(Self { path: path.to_owned(), file, modified })
    }

    /// Reads the file again when it changed since it was read (`ahpd user rm` takes effect at a
    /// connection's next door). A file that no longer reads is nobody: it fails closed. Answers
    /// whether it changed.
    pub fn reload_if_changed(&mut self) -> bool {
        let now = stamp(&self.path);
        if now == self.modified {
            return false;
        }
        match Self::load(&self.path) {
            Ok(fresh) => *self = fresh,
            Err(e) => {
                tracing::error!("{e}; nobody is let in until it reads again");
                self.file = UsersFile::default();
                self.modified = now;
            }
        }
        true
    }

    /// Writes the directory back (atomically, readable by its owner alone).
    pub fn save(&self) -> Result<(), UsersError> {
        let text =
            serde_json::to_string_pretty(&self.file).map_err(|e| UsersError::Io(self.path.clone(), e.to_string()))?;
        crate::fsutil::write_private(&self.path, format!("{text}\n").as_bytes())
            .map_err(|e| UsersError::Io(self.path.clone(), e.to_string()))
    }

    /// The person a token belongs to.
    pub fn person_of(&self, token: &str) -> Option<String> {
        let hash = hash_token(token);
        self.file
            .users
            .iter()
            .find(|u| u.token.as_deref().is_some_and(|t| constant_time_eq(t.as_bytes(), hash.as_bytes())))
            .map(|u| u.id.clone())
    }

    /// Every grant a person holds through their roles.
    pub fn grants_of(&self, person: &str) -> Vec<String> {
        let Some(user) = self.file.users.iter().find(|u| u.id == person) else { return Vec::new() };
        let mut grants = Vec::new();
        for role in &user.roles {
            match (self.file.roles.get(role), builtin_role(role)) {
                (Some(custom), _) => grants.extend(custom.iter().cloned()),
                (None, Some(builtin)) => grants.extend(builtin.into_iter().map(str::to_owned)),
                (None, None) => tracing::warn!(user = person, role, "a role nobody defined; it grants nothing"),
            }
        }
        grants
    }

    /// True when the principal holds `grant`.
    pub fn allows(&self, principal: &Principal, grant: &str) -> bool {
        match principal {
            Principal::Root => true,
            Principal::Nobody => false,
            Principal::Person(id) => self.grants_of(id).iter().any(|g| covers(g, grant)),
        }
    }

    fn role_names(&self) -> String {
        let mut names: Vec<String> = ["admin", "member", "guest"].iter().map(|s| (*s).to_owned()).collect();
        names.extend(self.file.roles.keys().cloned());
        names.join(", ")
    }

    /// Adds a person with `roles`; answers their token (shown once, stored hashed).
    pub fn add(&mut self, id: &str, roles: Vec<String>) -> Result<String, UsersError> {
        if self.file.users.iter().any(|u| u.id == id) {
            return Err(UsersError::Exists(id.to_owned()));
        }
        for role in &roles {
            if builtin_role(role).is_none() && !self.file.roles.contains_key(role) {
                return Err(UsersError::UnknownRole(role.clone(), self.role_names()));
            }
        }
        let token = new_token();
        self.file.users.push(User { id: id.to_owned(), roles, token: Some(hash_token(&token)) });
        Ok(token)
    }

    /// Removes a person.
    pub fn remove(&mut self, id: &str) -> Result<(), UsersError> {
        let before = self.file.users.len();
        self.file.users.retain(|u| u.id != id);
        if self.file.users.len() == before {
            return Err(UsersError::UnknownUser(id.to_owned()));
        }
        Ok(())
    }

    /// Gives a person a new token (the old one stops working); answers it.
    pub fn new_token_for(&mut self, id: &str) -> Result<String, UsersError> {
        let user =
            self.file.users.iter_mut().find(|u| u.id == id).ok_or_else(|| UsersError::UnknownUser(id.to_owned()))?;
        let token = new_token();
        user.token = Some(hash_token(&token));
        Ok(token)
    }
}

/// Compares without leaking where the first difference is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_cover_their_groups() {
        assert!(covers("*:*", "session:write"));
        assert!(covers("session:write", "session:mark"));
        assert!(covers("session:write", "session:review"));
        assert!(covers("session:write", "chat:answer"), "a chat's write group is its session's");
        assert!(covers("session:write", "chat:tool"));
        assert!(covers("session:read", "chat:turns"));
        assert!(!covers("session:read", "session:write"));
        assert!(!covers("session:read", "chat:answer"));
        assert!(covers("chat:send", "chat:send"));
        assert!(!covers("chat:send", "session:write"));
        assert!(covers("session:*", "session:dispose"));
    }

    #[test]
    fn roles_and_tokens() {
        let dir = std::env::temp_dir().join(format!("ahpd-users-{}", uuid::Uuid::new_v4()));
        let mut users = Users::load(&dir.join("users.json")).expect("empty");
        let token = users.add("ana", vec!["member".into()]).expect("added");
        assert!(users.add("ana", vec![]).is_err());
        assert!(users.add("bo", vec!["wizard".into()]).is_err());
        assert_eq!(users.person_of(&token).as_deref(), Some("ana"));
        assert!(users.person_of("nope").is_none());
        let ana = Principal::Person("ana".into());
        assert!(users.allows(&ana, "session:write"));
        assert!(!users.allows(&ana, "config:write"));
        users.save().expect("saved");
        let again = Users::load(&dir.join("users.json")).expect("reads");
        assert_eq!(again.person_of(&token).as_deref(), Some("ana"));
        assert!(
            !std::fs::read_to_string(dir.join("users.json")).expect("file").contains(&token),
            "only the hash is kept"
        );
    }
}
