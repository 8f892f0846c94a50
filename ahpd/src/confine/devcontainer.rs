//! The image a `container` session runs: the repository's own dev container, as the ecosystem
//! writes it (`.devcontainer/devcontainer.json`, or `.devcontainer.json` at the top: JSON with
//! comments), with `image` (run as named), or `build.dockerfile` with `build.context` and
//! `build.args` (built through the engine's API from a tar of the context); else the image the
//! config names (`containerImage`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::engine::ContainerEngine;

/// What a repository's dev container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// An image, as named.
    Image(String),
    /// An image built from a Dockerfile.
    Build {
        /// The Dockerfile.
        dockerfile: PathBuf,
        /// The folder it is built in.
        context: PathBuf,
        /// `--build-arg`s.
        args: std::collections::HashMap<String, String>,
    },
}

/// Where a repository keeps its dev container, the first found of the two the spec names.
fn file_of(worktree: &Path) -> Option<PathBuf> {
    [worktree.join(".devcontainer/devcontainer.json"), worktree.join(".devcontainer.json")]
        .into_iter()
        .find(|p| p.is_file())
}

/// The dev container `worktree`'s repository names, if it has one; `Err` says why it cannot be
/// read.
pub fn read(worktree: &Path) -> Option<Result<Spec, String>> {
    let file = file_of(worktree)?;
    Some(parse(&file))
}

fn parse(file: &Path) -> Result<Spec, String> {
    let shown = file.display();
    let text = std::fs::read_to_string(file).map_err(|e| format!("{shown} cannot be read: {e}"))?;
    let value = jsonc_parser::parse_to_serde_value(&text, &Default::default())
        .map_err(|e| format!("{shown} is not JSON with comments: {e}"))?
        .unwrap_or(Value::Null);
    let folder = file.parent().unwrap_or(Path::new("."));
    let build = &value["build"];
    let dockerfile = build["dockerfile"].as_str().or_else(|| value["dockerFile"].as_str());
    if let Some(dockerfile) = dockerfile {
        let context = build["context"].as_str().or_else(|| value["context"].as_str()).unwrap_or(".");
        let args = build["args"]
            .as_object()
            .map(|a| a.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        return Ok(Spec::Build { dockerfile: folder.join(dockerfile), context: folder.join(context), args });
    }
    match value["image"].as_str() {
        Some(image) => Ok(Spec::Image(image.to_owned())),
        None => Err(format!(
            "{shown} names neither an image nor a build.dockerfile (a Docker Compose dev container is not supported)"
        )),
    }
}

/// The image for the session in `worktree`: its dev container's (built now when it says how),
/// else `default`.
pub async fn image(engine: &ContainerEngine, worktree: &Path, default: Option<&str>) -> Result<String, String> {
    match read(worktree) {
        Some(Ok(Spec::Image(image))) => Ok(image),
        Some(Ok(Spec::Build { dockerfile, context, args })) => build(engine, worktree, &dockerfile, &context, args).await,
        Some(Err(why)) => Err(why),
        None => default.map(str::to_owned).ok_or_else(|| {
            "the repository has no .devcontainer/devcontainer.json and this host names no image for container sessions (containerImage)".to_owned()
        }),
    }
}

/// Builds the dev container's image, tagged by its repository's folder, from a tar of its
/// context (without `.git`); the engine's layer cache makes a build it has done before cheap.
async fn build(
    engine: &ContainerEngine,
    worktree: &Path,
    dockerfile: &Path,
    context: &Path,
    args: std::collections::HashMap<String, String>,
) -> Result<String, String> {
    let canonical = |p: &Path| p.canonicalize().map_err(|e| format!("{} cannot be read: {e}", p.display()));
    let (dockerfile, context) = (canonical(dockerfile)?, canonical(context)?);
    let inside = dockerfile
        .strip_prefix(&context)
        .map_err(|_| format!("{} is not inside its build context {}", dockerfile.display(), context.display()))?
        .display()
        .to_string();
    let tar = tokio::task::spawn_blocking(move || tar_of(&context))
        .await
        .map_err(|e| format!("the build context could not be read: {e}"))??;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(worktree.display().to_string().as_bytes());
    let tag = format!("localhost/ahpd-devcontainer-{}:latest", &hex_of(&digest)[..12]);
    engine.build(&tag, &inside, args, tar).await?;
    Ok(tag)
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A tar of `context`, its `.git` left out.
fn tar_of(context: &Path) -> Result<Vec<u8>, String> {
    let failed = |e: std::io::Error| format!("the build context {} could not be read: {e}", context.display());
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    let entries = std::fs::read_dir(context).map_err(failed)?;
    for entry in entries {
        let entry = entry.map_err(failed)?;
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let path = entry.path();
        if entry.file_type().map_err(failed)?.is_dir() {
            tar.append_dir_all(&name, &path).map_err(failed)?;
        } else {
            tar.append_path_with_name(&path, &name).map_err(failed)?;
        }
    }
    tar.into_inner().map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join(name);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, text).expect("write");
        (dir, file)
    }

    #[test]
    fn an_image_is_read_through_comments_and_trailing_commas() {
        let (dir, _) =
            written(".devcontainer/devcontainer.json", "// the team's box\n{ \"image\": \"img:1\", /* x */ }");
        assert_eq!(read(dir.path()), Some(Ok(Spec::Image("img:1".into()))));
    }

    #[test]
    fn a_build_is_read_relative_to_the_file() {
        let (dir, file) = written(
            ".devcontainer/devcontainer.json",
            r#"{ "build": { "dockerfile": "Containerfile", "context": "..", "args": { "V": "1" } } }"#,
        );
        let folder = file.parent().expect("parent").to_owned();
        let Some(Ok(Spec::Build { dockerfile, context, args })) = read(dir.path()) else { panic!("a build") };
        assert_eq!(dockerfile, folder.join("Containerfile"));
        assert_eq!(context, folder.join(".."));
        assert_eq!(args.get("V").map(String::as_str), Some("1"));
    }

    #[test]
    fn a_file_naming_neither_says_so_and_none_is_none() {
        let (dir, _) = written(".devcontainer.json", r#"{ "dockerComposeFile": "x.yml" }"#);
        assert!(read(dir.path()).is_some_and(|r| r.is_err_and(|e| e.contains("names neither an image"))));
        let empty = tempfile::tempdir().expect("temp dir");
        assert_eq!(read(empty.path()), None);
    }
}
