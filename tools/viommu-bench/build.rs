//! Embeds the tool's git revision (`git describe --always --dirty`) as
//! `VIOMMU_BENCH_GIT_REVISION`; "unknown" outside a git checkout.

include!("../../vmm/git_revision.rs");

fn main() {
    println!(
        "cargo:rustc-env=VIOMMU_BENCH_GIT_REVISION={}",
        git_revision()
    );
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../../vmm/git_revision.rs");
}
