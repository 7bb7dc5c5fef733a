# Scenario: the guests of lab.runs=TAG:VMM:IOMMU:KERNEL[:OPTS],..., run by
# viommu-bench (tools/viommu-bench) exactly as on a user's host. It prints
# one @@LAB-CELL@@ {json} line per guest (and the logs of guests that did
# not finish well) on this console; its progress lines go here too.
bench_args >/tmp/bench.args
run_bench
rc=$?
# 1: some guest failed or hung, which the lab judges from the cells.
[ $rc -le 1 ]
