"""Compare sm120kit's NVML snapshot with nvidia-smi on the same machine.

  python scripts/compare_nvml.py SNAPSHOT.json NVIDIA_SMI_Q.txt QUERY.csv

SNAPSHOT.json is `python -m sm120kit.facts.nvml` output; QUERY.csv is
`nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,driver_version,
compute_cap,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,
persistence_mode,ecc.mode.current,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,...
--format=csv`; NVIDIA_SMI_Q.txt is `nvidia-smi -q` (for the CUDA driver version).
Prints one line per compared figure and exits 1 if a static figure differs.
Live figures (memory used, clocks) are printed but only reported, not judged.
"""

from __future__ import annotations

import csv
import json
import re
import sys


def _num(s: str) -> float | None:
    m = re.search(r"-?\d+(\.\d+)?", s)
    return float(m.group(0)) if m else None


def main() -> int:
    snap = json.load(open(sys.argv[1]))
    q = open(sys.argv[2]).read()
    rows = list(csv.DictReader(open(sys.argv[3]), skipinitialspace=True))
    bad = 0

    def cmp(what: str, ours: object, theirs: object, judged: bool = True) -> None:
        nonlocal bad
        same = ours == theirs
        if judged and not same:
            bad += 1
        tag = "same" if same else ("DIFF" if judged else "live")
        print(f"{tag:5} {what:34} sm120kit={ours!r} nvidia-smi={theirs!r}")

    m = re.search(r"CUDA Version\s*:\s*([\d.]+)", q)
    if m and snap.get("cuda_driver_version"):
        v = int(snap["cuda_driver_version"])
        cmp("cuda driver version", f"{v // 1000}.{(v % 1000) // 10}", m.group(1))
    for row, g in zip(rows, snap.get("gpus", []), strict=False):
        key = {k.split(" [")[0].strip(): v.strip() for k, v in row.items()}
        # nvidia-smi prints the long names in the CSV header (clocks.sm -> clocks.current.sm)
        for short, long in (("clocks.sm", "clocks.current.sm"), ("clocks.mem", "clocks.current.memory"),
                            ("clocks.max.mem", "clocks.max.memory")):
            key.setdefault(short, key.get(long, ""))
        i = g["index"]
        cmp(f"gpu{i} name", g["name"], key["name"])
        cmp(f"gpu{i} uuid", g["uuid"], key["uuid"])
        cmp(f"gpu{i} pci bus id", (g["pci_bus_id"] or "").lower()[-12:], key["pci.bus_id"].lower()[-12:])
        cmp(f"gpu{i} memory total MiB", (g["memory_total"] or 0) // (1 << 20), int(_num(key["memory.total"]) or 0))
        cmp(f"gpu{i} memory used MiB", (g["memory_used"] or 0) // (1 << 20), int(_num(key["memory.used"]) or 0), judged=False)
        cmp(f"gpu{i} driver", snap.get("driver_version"), key["driver_version"])
        cc = g.get("compute_capability") or [None, None]
        cmp(f"gpu{i} compute capability", f"{cc[0]}.{cc[1]}", key["compute_cap"])
        cmp(f"gpu{i} pcie gen current", g.get("pcie_gen_current"), int(_num(key["pcie.link.gen.current"]) or -1), judged=False)
        cmp(f"gpu{i} pcie gen max", g.get("pcie_gen_max"), int(_num(key["pcie.link.gen.max"]) or -1))
        cmp(f"gpu{i} pcie width current", g.get("pcie_width_current"), int(_num(key["pcie.link.width.current"]) or -1), judged=False)
        cmp(f"gpu{i} pcie width max", g.get("pcie_width_max"), int(_num(key["pcie.link.width.max"]) or -1))
        cmp(f"gpu{i} persistence", g.get("persistence_mode"), key["persistence_mode"] == "Enabled")
        ecc = key["ecc.mode.current"]
        cmp(f"gpu{i} ecc current", g.get("ecc_mode_current"), {"Enabled": 1, "Disabled": 0}.get(ecc, ecc))
        cmp(f"gpu{i} clock sm MHz", g.get("clock_sm_mhz"), int(_num(key["clocks.sm"]) or -1), judged=False)
        cmp(f"gpu{i} clock mem MHz", g.get("clock_mem_mhz"), int(_num(key["clocks.mem"]) or -1), judged=False)
        cmp(f"gpu{i} clock sm max MHz", g.get("clock_sm_max_mhz"), int(_num(key["clocks.max.sm"]) or -1))
        cmp(f"gpu{i} clock mem max MHz", g.get("clock_mem_max_mhz"), int(_num(key["clocks.max.mem"]) or -1))
    print(f"static differences: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
