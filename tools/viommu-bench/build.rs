//! Embeds the tool's git revision (`git describe --always --dirty`) as
//! `VIOMMU_BENCH_GIT_REVISION`; "unknown" outside a git checkout.

use std::process::Command;

fn main() {
    let rev = Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=VIOMMU_BENCH_GIT_REVISION={rev}");
    // Again when HEAD moves or the index changes (a commit, a checkout).
    for p in ["HEAD", "index"] {
        if let Some(path) = git_path(p) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
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
