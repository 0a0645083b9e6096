"""Joins a Genesis bench JSON and a PyTorch reference JSON into one table.

Usage: python3 compare.py TORCH.json GENESIS.json [GENESIS.json ...]
ratio = PyTorch time / Genesis time (above 1: Genesis is faster).
"""
import json
import sys

ours = {}
for path in sys.argv[2:]:
    try:
        ours.update({r["name"]: r for r in json.load(open(path))["results"]})
    except (OSError, KeyError, ValueError) as e:
        print(f"(skipping {path}: {e})")
ref_doc = json.load(open(sys.argv[1]))
ref = {r["name"]: r for r in ref_doc["results"]}
print(f'device: {ref_doc.get("device")}, torch {ref_doc.get("torch")}')
print(f'{"case":<18} {"genesis ms":>11} {"GB/s":>8} {"torch ms":>10} {"GB/s":>8} {"ratio":>7}')
for name, r in ours.items():
    t = ref.get(name)
    if t is None:
        print(f'{name:<18} {r["median_ms"]:>11.4f} {r["gb_per_s"]:>8.0f} {"-":>10} {"-":>8} {"-":>7}')
        continue
    ratio = t["median_ms"] / r["median_ms"]
    print(f'{name:<18} {r["median_ms"]:>11.4f} {r["gb_per_s"]:>8.0f} {t["median_ms"]:>10.4f} '
          f'{t["gb_per_s"]:>8.0f} {ratio:>7.3f}')
