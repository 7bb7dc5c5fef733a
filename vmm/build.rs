//! Embeds the VMM's git revision (`git describe --always --dirty`) as
//! `VMM_GIT_REVISION`; "unknown" outside a git checkout.

include!("git_revision.rs");

fn main() {
    println!("cargo:rustc-env=VMM_GIT_REVISION={}", git_revision());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=git_revision.rs");
}
