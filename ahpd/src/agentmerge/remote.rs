//! The GitHub repository a folder's pull requests live on: its `origin` remote read with git, and
//! the API that serves it (github.com's, a GitHub Enterprise host's `/api/v3`, or the base URL
//! `agentMergeApiUrl` names).

use std::path::Path;

use url::Url;

use super::command;

/// A repository on a GitHub host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The host (`github.com`, or a GitHub Enterprise host).
    pub host: String,
    /// The owner (a user or an organization).
    pub owner: String,
    /// The repository's name.
    pub repo: String,
}

impl Remote {
    /// The `origin` remote of the repository `folder` is in.
    pub async fn of(folder: &Path) -> Result<Self, String> {
        let url = command::output("git", &["remote", "get-url", "origin"], folder).await.map_err(|_| {
            "Agent Merge cannot be enabled because the folder's repository has no origin remote.".to_owned()
        })?;
        Self::parse(&url).ok_or_else(|| {
            format!(
                "Agent Merge cannot be enabled because the origin remote ({url}) does not name a GitHub repository."
            )
        })
    }

    /// Reads `https://host/owner/repo(.git)`, `ssh://git@host/owner/repo.git` and the scp-like
    /// `git@host:owner/repo.git`.
    pub fn parse(remote: &str) -> Option<Self> {
        let remote = remote.trim();
        let url = match Url::parse(remote) {
            Ok(url) => url,
            // scp-like: `[user@]host:path`, which is no URL.
            Err(_) => {
                let (left, path) = remote.split_once(':')?;
                Url::parse(&format!("ssh://{left}/{}", path.trim_start_matches('/'))).ok()?
            }
        };
        if !matches!(url.scheme(), "https" | "http" | "ssh" | "git") {
            return None;
        }
        let host = url.host_str()?.to_ascii_lowercase();
        let mut parts = url.path_segments()?.filter(|s| !s.is_empty());
        let owner = parts.next()?.to_owned();
        let repo = parts.next()?.trim_end_matches(".git").to_owned();
        (parts.next().is_none() && !repo.is_empty()).then_some(Self { host, owner, repo })
    }

    /// The REST API's base URL: the configured one, github.com's, or the Enterprise host's.
    pub fn api_base(&self, configured: Option<&str>) -> String {
        match configured {
            Some(base) => base.trim_end_matches('/').to_owned(),
            None if self.host == "github.com" => "https://api.github.com".to_owned(),
            None => format!("https://{}/api/v3", self.host),
        }
    }

    /// `owner/repo`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_is_read_in_each_of_gits_spellings() {
        let want = Remote { host: "github.com".into(), owner: "owner".into(), repo: "repo".into() };
        for url in [
            "https://github.com/owner/repo.git",
            "https://github.com/owner/repo",
            "git@github.com:owner/repo.git",
            "ssh://git@github.com/owner/repo.git",
        ] {
            assert_eq!(Remote::parse(url), Some(want.clone()), "{url}");
        }
        assert_eq!(Remote::parse("/srv/git/repo.git"), None);
        assert_eq!(Remote::parse("https://github.com/owner"), None);
        let enterprise = Remote::parse("https://ghe.example.com/team/tool.git").expect("an enterprise remote");
        assert_eq!(enterprise.api_base(None), "https://ghe.example.com/api/v3");
        assert_eq!(want.api_base(None), "https://api.github.com");
        assert_eq!(want.api_base(Some("http://127.0.0.1:9/")), "http://127.0.0.1:9");
    }
}
