"""The kernels a scenario boots: the lab's guest kernels (VARIANT or
VARIANT-VERSION) and its lab host's own, what CI builds ahead
(`ci/lab/lab kernels`, with the fixed outer QEMUs: `ci/lab/lab outer-qemus`), and how the bench tool is told which is which."""

from __future__ import annotations

from .base import LabError
from .host import DEFAULT_OUTER_QEMU, FIXED_OUTER_QEMUS, HOST_IOMMUS
from .scenarios import SCENARIOS

# Guest kernels the lab fetches as packages instead of building
# (build-image.sh: ci/lab/debian-kernel), by the name runs give them.
FETCHED_KERNELS = ("debian-6.12",)
# The patched variants a run may name: the series on tinyconfig (patched)
# and on the config of the Debian package above (debpatched: build.sh
# --base-config, which build-image.sh gives it; no scenario CI runs boots
# it, so CI does not build it ahead).
PATCHED_VARIANTS = ("patched", "debpatched")


def guest_kernels_of(sc: dict, specs: list[str]) -> set[str]:
    """The lab's guest kernels (VARIANT or VARIANT-VERSION) a scenario boots
    with these runs: the runs' and its own guest_kernels; none for one that
    boots no guest (vfio-backend, vmm-errors)."""
    return {s.split(":")[3] for s in specs} | set(sc.get("guest_kernels", []))


def scenarios_named(names: list[str]) -> list[dict]:
    """The scenarios of these names, in order; an unknown name is an error."""
    for name in names:
        if name not in SCENARIOS:
            raise LabError(f"no scenario {name!r} (ci/lab/lab run --help lists them)")
    return [SCENARIOS[n] for n in names]


def kernels_to_build(names: list[str]) -> list[tuple[str, str]]:
    """(VERSION, VARIANT) of every kernel the lab builds for these
    scenarios run with their own settings, in the order they first need
    them: each one's guest kernels, then its lab host's own kernel (--host-
    iommu virtio); each kernel once. What CI builds ahead, in the
    background, while the steps before need none (ci/prebuild-kernels.sh)."""
    out: list[tuple[str, str]] = []
    for sc in scenarios_named(names):
        wanted = sorted(guest_kernels_of(sc, sc["runs"]))
        if HOST_IOMMUS[sc.get("host_iommu", "vtd")]["kernel"] == "labhost":
            wanted.append(f"labhost-{sc.get('host_kernel', '6.12')}")
        for k in wanted:
            if k in FETCHED_KERNELS or k.startswith("debpatched-"):
                continue
            variant, _, version = k.partition("-")
            if (version or "6.1", variant) not in out:
                out.append((version or "6.1", variant))
    return out


def outer_qemus_to_build(names: list[str]) -> list[str]:
    """The versions of the fixed outer QEMUs (ci/lab/outer-qemu/build
    --qemu VERSION) these scenarios run their lab hosts under with their
    own settings, each once: what CI builds ahead beside the kernels."""
    out: list[str] = []
    for sc in scenarios_named(names):
        outer = sc.get("outer_qemu", DEFAULT_OUTER_QEMU)
        if outer in FIXED_OUTER_QEMUS and outer.removesuffix("-fixed") not in out:
            out.append(outer.removesuffix("-fixed"))
    return out


def kernel_knob(kernel: str) -> str:
    """The knob that names a lab guest kernel (VARIANT[-VERSION]) to the lab
    host by its variant: kernel_stock or kernel_patched."""
    return "kernel_stock" if kernel.split("-", 1)[0] == "baseline" else "kernel_patched"


def own_kernel_knobs(sc: dict) -> dict[str, str]:
    """The kernel knobs of a scenario that boots guests itself (vmm-exits,
    vmm-boot: its guest_kernels), as tool_specs gives the bench tool's: its
    script finds the kernel at /lab/guest/NAME.bzImage by lab_arg."""
    return {kernel_knob(g): g for g in sc.get("guest_kernels", [])}



def tool_specs(specs: list[str]) -> tuple[list[str], dict[str, str]]:
    """The bench tool knows two guest kernels by role (--kernel-stock,
    --kernel-patched) and more by name (--kernel NAME=PATH); the lab has one
    per VARIANT-VERSION. Returns SPECS with KERNEL as the tool names it
    (baseline, patched, or the lab's name of a second version of a variant,
    e.g. baseline-7.3 beside baseline-6.12) and the knobs that tell the lab
    host's bench_args which kernel is which ({"kernel_stock":
    "baseline-6.12", "kernels": "baseline-7.3", ...})."""
    out, names, named = [], {}, []
    for spec in specs:
        f = spec.split(":", 4)
        if len(f) < 4:
            raise LabError(f"--runs {spec!r}: want TAG:VMM:IOMMU:KERNEL[:OPTS]")
        variant = f[3].split("-", 1)[0]
        if f[3] in FETCHED_KERNELS:
            # A distribution's kernel: always by name.
            if f[3] not in named:
                named.append(f[3])
            out.append(spec)
            continue
        if variant not in ("baseline", *PATCHED_VARIANTS):
            raise LabError(f"--runs {spec!r}: kernel {f[3]!r} is not baseline[-VERSION], patched[-VERSION], "
                           f"debpatched-VERSION or one of {', '.join(FETCHED_KERNELS)}")
        knob = kernel_knob(f[3])
        if names.setdefault(knob, f[3]) != f[3]:
            # A second kernel in the role: by its own name.
            if f[3] not in named:
                named.append(f[3])
        else:
            # The first in its role: by the role (the tool's baseline or patched).
            f[3] = "baseline" if knob == "kernel_stock" else "patched"
        out.append(":".join(f))
    if named:
        names["kernels"] = ",".join(named)
    return out, names


# Lab hosts booted for one round when the lab host's own kernel crashes:


