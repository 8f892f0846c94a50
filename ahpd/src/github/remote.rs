//! A GitHub repository: the one a folder's `origin` remote names (read with git), or one named
//! `owner/name`, and the API that serves it (github.com's, a GitHub Enterprise host's `/api/v3`, or
//! the base URL `agentMergeApiUrl` names).

use std::path::Path;

use url::Url;

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

/// Why a folder's `origin` names no GitHub repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRemote {
    /// The folder's repository has no `origin` remote.
    NoOrigin,
    /// Its `origin` (this URL) names no repository on a GitHub host.
    NotGitHub(String),
}

impl Remote {
    /// The `origin` remote of the repository `folder` is in.
    pub async fn of(folder: &Path) -> Result<Self, NoRemote> {
        let url = crate::shortcommand::output("git", &["remote", "get-url", "origin"], folder)
            .await
            .map_err(|_| NoRemote::NoOrigin)?;
        Self::parse(&url).ok_or(NoRemote::NotGitHub(url))
    }

    /// `owner/name` on the host whose API is `api` (github.com's when it is api.github.com).
    pub fn named(full_name: &str, api: &str) -> Option<Self> {
        let (owner, repo) = full_name.trim().split_once('/')?;
        let valid = |part: &str| {
            !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !valid(owner) || !valid(repo) || repo.ends_with(".git") {
            return None;
        }
        let host = Url::parse(api).ok().and_then(|u| u.host_str().map(str::to_ascii_lowercase));
        let host = match host.as_deref() {
            None | Some("api.github.com") => "github.com".to_owned(),
            Some(other) => other.to_owned(),
        };
        Some(Self { host, owner: owner.to_owned(), repo: repo.to_owned() })
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
        assert_eq!(Remote::named("owner/repo", "https://api.github.com"), Some(want));
        assert_eq!(Remote::named("owner", "https://api.github.com"), None);
        assert_eq!(Remote::named("owner/repo/x", "https://api.github.com"), None);
        let named = Remote::named("team/tool", "https://ghe.example.com/api/v3").expect("named");
        assert_eq!(named.host, "ghe.example.com");
    }
}
