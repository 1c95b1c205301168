#!/usr/bin/env python3
"""check_tuner_table.py TABLE BUILD_DIR: the table the tuner smoke test wrote is complete: it names
this build's source hash, Halide version and a CPU, and each bucket has a measured default and tuned
figure per shape, a margin that is their geometric mean, and GeneratorParams the build accepts."""
import json
import math
import sys

table_path, build_dir = sys.argv[1], sys.argv[2]
with open(table_path) as f:
    table = json.load(f)
with open(f"{build_dir}/attention_tuning.json") as f:
    info = json.load(f)
errors = []
for key in ("target", "cpu", "halide_version", "source_hash", "buckets"):
    if not table.get(key):
        errors.append(f"missing {key}")
if table.get("source_hash") != info["source_hash"]:
    errors.append(f"source_hash {table.get('source_hash')} is not the build's {info['source_hash']}")
if table.get("halide_version") != info["halide_version"]:
    errors.append("halide_version differs from the build's")
for row in table.get("buckets", []):
    name = row.get("bucket", "?")
    if not row.get("shapes"):
        errors.append(f"{name}: no shapes")
        continue
    ratios = []
    for shape in row["shapes"]:
        if not (shape["default_gflops"] > 0 and shape["tuned_gflops"] > 0):
            errors.append(f"{name} {shape['shape']}: unmeasured")
            continue
        ratios.append(shape["tuned_gflops"] / shape["default_gflops"])
    margin = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 0
    if abs(margin - row["margin"]) > 0.01:
        errors.append(f"{name}: margin {row['margin']} is not the shapes' geomean {margin:.3f}")
    params = row.get("params", "").split()
    if not params or not params[0].startswith("query_tiling="):
        errors.append(f"{name}: params '{row.get('params')}' do not start with query_tiling")
    if row["tuned"] and min(ratios) < 0.99:
        errors.append(f"{name}: shipped although slower than the default on a shape")
if errors:
    sys.exit("tuner table " + table_path + ":\n  " + "\n  ".join(errors))
print(f"{table_path}: {len(table['buckets'])} bucket(s) complete")
