"""labkit: the nested lab's runner (ci/lab/lab is its entry point).

The modules, each importing only those above it (no cycles):

  base                 paths (the lab, the repository, the cache), LabError, run-spec fields
  presets              guest kernels and parameters, the comparison's columns, the demo's settings
  scenarios_guests     the scenarios of the guests' DMA paths (smoke tests, comparisons, measurements)
  scenarios_programs   the scenarios that check the VMM, its VFIO backends and the bench tool
  scenarios            the catalogue: both, in their listed order, and the forms CI runs
  host                 the lab host's machine: outer QEMU, emulated IOMMU and NVMe, TSC, command line
  images               building our programs and the lab image (build-image.sh)
  kernels              the guest and lab host kernels a scenario needs, named to the bench tool
  trouble              the lab host's trouble kinds as one table (TROUBLES); the emulation's faults
  console              reading a lab host's serial console (Collector)
  judge                judging a run's results: problems and warnings
  knobs                a scenario's settings, the lab host's lab.NAME knobs, the table's flags
  rounds               a round of lab host boots, fresh ones taking over after a trouble
  results              the verdict, the bench tool's table and chart, --save
  boot                 one lab host boot and the watch over its console
  run                  running a scenario from its flags to its judged results
  cli                  the command line (run, demo, build, kernels, table)
  census               ci/lab/fault-census: counting faults over lab results

base, presets and trouble import nothing of labkit; the catalogue
(scenarios*) only presets; trouble is the one place the lab host's
trouble kinds are defined, read by console, judge, rounds and census;
only cli imports run, and nothing imports cli.
"""
