//! A test that cannot find what it needs (a program, root, a kernel feature): skipped with its reason
//! outside CI, failed under CI naming the install step, and counted so `scripts/test` can say at the
//! end how many tests skipped and why.
//!
//! "Under CI" is `CI` set to anything but an empty string, `0` or `false`, as CI services set it.
//! Each skip is appended as one line (`<test>\t<why>`) to the file `$AHPD_TEST_SKIPS` names, when it
//! names one; `scripts/test` makes a fresh one per run and reads it back after the tests.

use std::io::Write;

/// True when `CI` says this run is a CI run, where nothing may be skipped.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// The found value, or `None` after saying why the test skips; under CI a missing piece fails the
/// test instead, with `why` (which names the install step).
pub fn or_skip<T>(found: Result<T, String>) -> Option<T> {
    match found {
        Ok(value) => Some(value),
        Err(why) => {
            skipping(&why);
            None
        }
    }
}

/// Says the running test skips because of `why`, and keeps the line for the run's summary; under
/// CI, fails the test instead.
pub fn skipping(why: &str) {
    let test = current_test();
    if under_ci() {
        panic!("{test} cannot run here and CI is set, so it fails rather than skip: {why}");
    }
    eprintln!("skipped: {why}");
    if let Some(path) = std::env::var_os("AHPD_TEST_SKIPS") {
        let line = format!("{test}\t{}\n", why.replace(['\n', '\t'], " "));
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("could not note the skip in {}: {e}", std::path::Path::new(&path).display());
        }
    }
}

/// The name libtest gives the thread a test runs on (its path), or the binary's name.
fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .map(str::to_owned)
        .unwrap_or_else(|| std::env::args().next().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_found_value_is_handed_back() {
        assert_eq!(or_skip::<u8>(Ok(3)), Some(3));
    }
}
