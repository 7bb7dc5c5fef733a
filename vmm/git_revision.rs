// The git revision both build scripts embed: vmm/build.rs and
// tools/viommu-bench/build.rs include this file (a build-dependency crate
// of its own would be more machinery than these thirty lines).

use std::process::Command;

/// `git describe --always --dirty` of the checkout the build runs in
/// ("unknown" outside one); cargo builds again when HEAD or the index
/// changes (a commit, a checkout).
fn git_revision() -> String {
    let rev = Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    for p in ["HEAD", "index"] {
        if let Some(path) = git_path(p) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    rev
}

/// The path of `.git/NAME` (worktrees keep theirs elsewhere).
fn git_path(name: &str) -> Option<String> {
    let o = Command::new("git")
        .args(["rev-parse", "--path-format=absolute", "--git-path", name])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}
