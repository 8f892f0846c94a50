//! The child guard against real processes: `sh` scripts that fork grandchildren into their group.

use std::time::Instant;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::*;

fn sh(script: &str) -> ChildCommand {
    ChildCommand::new("sh").args(["-c", script])
}

/// The live (not zombie) processes of group `pgid`, from /proc.
fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let Some((_, rest)) = stat.rsplit_once(')') else { return false };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.first() != Some(&"Z") && fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
        })
        .collect()
}

/// Polls /proc until group `pgid` has no live process, with a generous bound (a failure bound,
/// not a measurement: the time taken is printed).
async fn until_group_gone(pgid: i32) -> Vec<i32> {
    let started = Instant::now();
    let mut left = group_members(pgid);
    while !left.is_empty() && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        left = group_members(pgid);
    }
    eprintln!("group {pgid} gone after {:?}", started.elapsed());
    left
}

/// Starts a shell that forks two sleeping grandchildren into its group and says when they run.
async fn family() -> (Child, Pipes, i32) {
    let (child, mut pipes) = sh("sleep 600 & sleep 600 & echo ready; wait").spawn().expect("spawn sh");
    let mut lines = BufReader::new(&mut pipes.stdout).lines();
    assert_eq!(lines.next_line().await.expect("read").as_deref(), Some("ready"));
    let pgid = child.pid();
    assert!(group_members(pgid).len() >= 3, "the shell and its two sleeps: {:?}", group_members(pgid));
    (child, pipes, pgid)
}

#[tokio::test]
async fn dropping_the_guard_leaves_no_process_of_its_group() {
    let (child, _pipes, pgid) = family().await;
    drop(child);
    let left = until_group_gone(pgid).await;
    assert!(left.is_empty(), "still in group {pgid}: {left:?}");
}

#[tokio::test]
async fn stop_ends_the_whole_group_of_a_process_that_ignores_stdin_and_sigterm() {
    let (child, mut pipes) = sh("trap '' TERM; sleep 600 & echo ready; wait").spawn().expect("spawn sh");
    let mut lines = BufReader::new(&mut pipes.stdout).lines();
    assert_eq!(lines.next_line().await.expect("read").as_deref(), Some("ready"));
    drop(pipes.stdin.take());
    let status = child.stop(Duration::from_millis(100)).await;
    assert_eq!(describe_exit(status), "was killed by signal 9 (SIGKILL)");
    let left = until_group_gone(child.pid()).await;
    assert!(left.is_empty(), "still in the group: {left:?}");
}

#[tokio::test]
async fn a_group_that_ends_with_its_leader_loses_its_background_jobs_when_the_leader_exits() {
    let (child, _pipes) = sh("sleep 600 & exit 0").end_group_with_leader().spawn().expect("spawn sh");
    assert_eq!(child.wait().await.and_then(|s| s.code()), Some(0));
    let left = until_group_gone(child.pid()).await;
    assert!(left.is_empty(), "the background sleep outlived its shell: {left:?}");
}

#[tokio::test]
async fn what_a_process_says_on_stderr_until_its_end_is_in_the_tail_once_read() {
    // The shell exits at once; something it started says the last words a moment later,
    // holding stderr open until then.
    let (child, _pipes) = sh("(sleep 0.2; echo boom >&2) & exit 3").spawn().expect("spawn sh");
    let status = child.wait().await;
    assert_eq!(describe_exit(status), "exited with code 3");
    child.stderr_read(Duration::from_secs(10)).await;
    assert_eq!(child.tail().last_lines(8), "boom");
}

#[tokio::test]
async fn a_dead_process_says_how_it_died_and_what_it_said() {
    let (child, _pipes) = sh("echo dying >&2; exit 7").spawn().expect("spawn sh");
    let status = child.settle(Duration::from_secs(10)).await;
    assert_eq!(describe_exit(status), "exited with code 7");
    assert_eq!(child.tail().text(), "dying");
}

#[tokio::test]
async fn what_cannot_start_is_a_sentence() {
    let Err(missing) = ChildCommand::new("/no/such/agent").spawn() else { panic!("spawned") };
    assert_eq!(
        missing.to_string(),
        "/no/such/agent was not found; install it, or put its directory on the PATH the daemon runs with"
    );
    let Err(nowhere) = sh("true").cwd("/no/such/folder").spawn() else { panic!("spawned") };
    assert_eq!(nowhere.to_string(), "sh could not be started in /no/such/folder, which does not exist");
}

#[tokio::test]
async fn stderr_can_be_the_callers_and_stdin_nothing() {
    let (child, pipes) = sh("cat; echo to-stderr >&2").stdin_null().stderr_to_caller().spawn().expect("spawn sh");
    assert!(pipes.stdin.is_none());
    let mut said = String::new();
    let mut stderr = pipes.stderr.expect("stderr is the caller's");
    stderr.read_to_string(&mut said).await.expect("read");
    assert_eq!(said, "to-stderr\n");
    assert_eq!(child.settle(Duration::from_secs(10)).await.and_then(|s| s.code()), Some(0));
    assert!(child.tail().is_blank());
}

#[test]
fn exits_in_words() {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(describe_exit(Some(ExitStatus::from_raw(3 << 8))), "exited with code 3");
    assert_eq!(describe_exit(Some(ExitStatus::from_raw(9))), "was killed by signal 9 (SIGKILL)");
    assert_eq!(describe_exit(None), "ended (its exit status could not be read)");
    assert_eq!(signal_name(15), "SIGTERM");
}

/// A `sleep` in a process group of its own, started without the guard (as a grandchild would be).
#[allow(clippy::disallowed_methods)] // started without the guard on purpose
fn stranger() -> std::process::Child {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("sleep").arg("600").process_group(0).spawn().expect("spawn sleep")
}

fn named(pid: u32) -> ProcessGroup {
    let pgid = i32::try_from(pid).expect("a pid");
    ProcessGroup { pgid, leader_start: groups::leader_start(pgid).expect("it runs") }
}

#[tokio::test]
async fn a_named_group_is_ended_only_while_it_is_still_that_group() {
    let mut sleeper = stranger();
    let group = named(sleeper.id());
    let impostor = ProcessGroup { leader_start: "another start".into(), ..group.clone() };
    assert_eq!(groups::end_if_ours(&impostor), groups::GroupEnd::NotOurs);
    assert_eq!(group_members(group.pgid).len(), 1, "a group whose leader is another process is left alone");
    assert_eq!(groups::end_if_ours(&group), groups::GroupEnd::Ended);
    let _ = sleeper.wait();
    assert_eq!(groups::end_if_ours(&group), groups::GroupEnd::Gone);
    let own = ProcessGroup { pgid: nix::unistd::getpgrp().as_raw(), leader_start: String::new() };
    assert_eq!(groups::end_if_ours(&own), groups::GroupEnd::NotOurs, "never this process's own group");
}

#[tokio::test]
async fn a_group_whose_leader_is_gone_is_ended_while_its_members_run() {
    // The shell leads the group and exits; the sleep it started stays in the group.
    #[allow(clippy::disallowed_methods)] // started without the guard on purpose
    let mut shell = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sh")
            .args(["-c", "sleep 600 & echo started"])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn sh")
    };
    let group = named(shell.id());
    let _ = shell.wait();
    assert_eq!(group_members(group.pgid).len(), 1, "the sleep outlived its shell");
    assert_eq!(groups::end_if_ours(&group), groups::GroupEnd::Ended);
    assert!(until_group_gone(group.pgid).await.is_empty());
}

#[tokio::test]
async fn what_a_child_reported_ends_when_it_dies_and_is_in_the_register_until_then() {
    let mut grandchild = stranger();
    let reported = named(grandchild.id());
    let (child, mut pipes) = sh("read line").spawn().expect("spawn sh");
    child.reported(vec![reported.clone()]);
    let recorded = groups::recorded();
    assert!(recorded.iter().any(|g| g.pgid == child.pid()), "its own group: {recorded:?}");
    assert!(recorded.contains(&reported), "what it reported: {recorded:?}");
    drop(pipes.stdin.take());
    child.wait().await;
    let left = until_group_gone(reported.pgid).await;
    assert!(left.is_empty(), "the reported group ended with its reporter: {left:?}");
    assert!(!groups::recorded().contains(&reported));
    let _ = grandchild.wait();
}

#[tokio::test]
async fn a_short_command_that_overstays_its_time_is_ended_with_its_whole_group() {
    let said = std::env::temp_dir().join(format!("agent-runner-overstays-{}", std::process::id()));
    let mut command = std::process::Command::new("sh");
    command.arg("-c").arg(format!("echo $$ > {}; sleep 600 & sleep 600", said.display()));
    let within = Duration::from_secs(2);
    let ended = tokio::task::spawn_blocking(move || super::run_within(command, within)).await.expect("joined");
    assert!(ended.expect("sh runs").is_none(), "it had not ended");
    let pgid: i32 = std::fs::read_to_string(&said).expect("the shell ran").trim().parse().expect("its pid");
    let _ = std::fs::remove_file(&said);
    assert!(until_group_gone(pgid).await.is_empty(), "the sleep it left went with it");
}
