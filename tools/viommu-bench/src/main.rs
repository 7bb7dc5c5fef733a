//! The viommu-bench command: everything it does is in [`viommu_bench::app`].

fn main() -> std::process::ExitCode {
    viommu_bench::app::main()
}
