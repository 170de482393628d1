//! The suite's own limit on the commands its tests wait for
//! (`common::wait_within`, `common::CHILD_LIMIT`): a command past its limit
//! is killed and fails its test instead of holding the suite; one writing
//! more than a pipe holds is read as it writes and ends. Neither needs
//! root (the shared helpers' root check is left unused here).
#![allow(unused_macros, unused_imports)]

mod common;

use common::OutputWithin as _;
use std::process::Command;
use std::time::Duration;

#[test]
fn a_command_past_its_limit_is_killed_and_fails_its_test() {
    let child = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let failed =
        std::panic::catch_unwind(|| common::wait_within(child, Duration::from_millis(300), "sleep 600 did not end"));
    let message = failed.expect_err("the limit did not fail the test");
    let message = message.downcast_ref::<String>().unwrap();
    assert!(message.starts_with("sleep 600 did not end"), "{message}");
    // Killed and waited for: no such process is left.
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    assert_eq!(unsafe { libc::kill(pid, 0) }, -1, "sleep 600 still runs");
}

#[test]
fn a_command_writing_more_than_a_pipe_holds_ends_within_its_limit() {
    let out = Command::new("head")
        .args(["-c", "1000000", "/dev/zero"])
        .output_within_limit()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 1_000_000);
}
