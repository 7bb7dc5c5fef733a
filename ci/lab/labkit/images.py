"""Building what the lab boots: our programs for the lab host (cargo) and
the lab image (build-image.sh: the lab host's kernel and initramfs with
the guest kernels, the guest image and our programs in it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .base import LAB_DIR, REPO, LabError
from .host import HOST_IOMMUS

# What a guest scenario builds and ships into the lab host.
BENCH_BINS = [("viommu-bench", "viommu-bench"), ("vmm", "vmm"), ("vmm", "vmmctl")]


def cargo_bins(bins: list[tuple[str, str]], quiet: bool = False) -> list[str]:
    """Build our programs for the lab host (release); returns their paths."""
    if not bins:
        return []
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    cmd = ["cargo", "build", "--release", "--locked"] + (["--quiet"] if quiet else [])
    for pkg, name in bins:
        cmd += ["-p", pkg, "--bin", name]
    if not quiet:
        print(f"[lab] {' '.join(cmd)}", file=sys.stderr)
    if subprocess.run(cmd, cwd=REPO).returncode != 0:
        raise LabError(f"building {', '.join(n for _, n in bins)} failed")
    return [str(target / "release" / name) for _, name in bins]


def c_bins(sources: list[tuple[str, str]], out_dir: Path) -> list[str]:
    """Build small C programs for the lab host, static (gcc -static-pie
    -O2 -pthread: no libraries to ship; static-pie, not -static, since
    build-image.sh's copy_with_libs runs ldd on it, which fails on a
    plain static binary): (SOURCE under ci/lab, NAME) -> OUT_DIR/NAME;
    returns their paths."""
    paths = []
    for src, name in sources:
        out = out_dir / name
        cmd = ["gcc", "-static-pie", "-O2", "-pthread", "-Wall", "-o", str(out), str(LAB_DIR / src)]
        if subprocess.run(cmd).returncode != 0:
            raise LabError(f"building {name} failed ({' '.join(cmd)})")
        paths.append(str(out))
    return paths


def distro_drive() -> Path:
    """The directory of the Debian 13 VM's drive (ci/lab/debian-vm: made
    once and cached): disk.img, the lab host's NVMe from the start, and
    the vmlinuz and initrd.img of its /boot."""
    cmd = [str(LAB_DIR / "debian-vm")]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise LabError("making the Debian 13 VM's drive failed (ci/lab/debian-vm)")
    return Path(out.stdout.strip().splitlines()[-1])


def build_image_command(guest_kernels: set[str], bins: list[str], host_iommu: str = "vtd",
                        host_kernel: str = "6.12", vmm_qemu: str = "", userland: str = "", distro: str = "") -> list[str]:
    """build-image.sh's command line (build_image())."""
    kind = HOST_IOMMUS[host_iommu]["kernel"]
    cmd = [str(LAB_DIR / "build-image.sh"), "--guest-kernels", ",".join(sorted(guest_kernels)),
           "--host-kernel", f"{kind}-{host_kernel}" if kind == "labhost" else kind]
    if vmm_qemu:
        cmd += ["--vmm-qemu", vmm_qemu]
    if userland:
        cmd += ["--userland", userland]
    if distro:
        cmd += ["--distro", distro]
    for b in bins:
        cmd += ["--bin", b]
    return cmd


def build_image(guest_kernels: set[str], bins: list[str], run_dir: Path, host_iommu: str = "vtd",
                host_kernel: str = "6.12", vmm_qemu: str = "", userland: str = "", distro: str = "") -> dict[str, str]:
    """Run build-image.sh and return its HOST_KERNEL / HOST_INITRD;
    HOST_KERNEL the version of the lab's own kernel where HOST_IOMMU needs
    one; VMM_QEMU a Debian 13 root's QEMU wrapper (outer_qemu()) to put in
    the lab host as the stock VMM under test; USERLAND the wrapper of a
    Debian 13 root with more packages (userland_root()) to put in the lab
    host whole, as /lab/debian13; DISTRO a distro_drive() directory whose
    kernel and initramfs go to /lab/distro."""
    cmd = build_image_command(guest_kernels, bins, host_iommu, host_kernel, vmm_qemu, userland, distro)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "LAB_RUN_DIR": str(run_dir)})
    if out.returncode != 0:
        raise LabError(f"building the lab image failed ({' '.join(cmd)})")
    env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    for k in ("HOST_KERNEL", "HOST_INITRD"):
        if k not in env:
            raise LabError(f"build-image.sh did not report {k}")
    return env


