#!/usr/bin/env python3
# Usage: python3 benches/results/archive/2026-11/miss-path.py RESULTS.json (a miss-workload
# run of viommu-bench with the columns ours+pool-only and ours+pool+reuse1000).
# The reuse cache's miss path in the guest, per round: DMA-API time per map
# call (map + unmap time, less the bounce copies and the IOMMU driver's
# part), with the cache and without, and the difference in the same lab host.
import json, statistics, sys
d = json.load(open(sys.argv[1]))
def per_map(c, ph):
    k = c["phases"].get(ph, {}).get("fio", {}).get("counters", {})
    t = lambda n: k.get("iommu-dma-time/" + n, 0)
    if not t("map_calls"):
        return None
    drv = sum(v for n, v in k.items() if n.startswith("iommu-dma-time/iommu_") and n.endswith("_ns"))
    return (t("map_ns") + t("unmap_ns") - t("copy_ns") - drv) / t("map_calls") / 1000
def busy(c, ph):
    f = c["phases"][ph]["fio"]; k = f["counters"]
    ios = f["read_iops"] * f["read_ms"] / 1000
    return (k.get("cpu/user", 0) + k.get("cpu/system", 0) + k.get("cpu/irq", 0)) * 10000 / ios
cells = {(c["round"], c["column"]): c for c in d["cells"]}
rounds = sorted({r for r, _ in cells})
for ph in ["randread-buffered-4k-j2", "randread-buffered-16k-j2", "randread-buffered-128k-j2"]:
    a, b, diff, cpu = [], [], [], []
    for r in rounds:
        x, y = cells.get((r, "ours+pool-only")), cells.get((r, "ours+pool+reuse1000"))
        if not x or not y or ph not in x["phases"] or ph not in y["phases"]:
            continue
        px, py = per_map(x, ph), per_map(y, ph)
        if px is None or py is None:
            continue
        a.append(px); b.append(py); diff.append(py - px); cpu.append(busy(x, ph))
    m = statistics.median
    print(f"{ph}: n={len(diff)} pool-only {m(a):.1f} [{min(a):.1f}-{max(a):.1f}] us/map, "
          f"with cache {m(b):.1f} [{min(b):.1f}-{max(b):.1f}], difference {m(diff):+.1f} "
          f"[{min(diff):+.1f}..{max(diff):+.1f}], above 0 in {sum(v > 0 for v in diff)} of {len(diff)}; "
          f"pool-only busy CPU {m(cpu):.0f} us/IO; difference / CPU {m(diff) / m(cpu) * 100:.1f}%")
