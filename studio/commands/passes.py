"""`studio passes`: every pass with its summary, parameters and requirements."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("passes", help="list optimization passes and their parameters")
    p.add_argument("name", nargs="?", help="show one pass in detail")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from accel.passes import get_pass, list_passes

    passes = [get_pass(args.name)] if args.name else list_passes()
    infos = [p.describe() for p in passes]
    if args.json:
        for i in infos:
            i.pop("schema", None)
        print(json.dumps(infos, indent=2))
        return 0
    category = None
    for info in infos:
        if info["category"] != category:
            category = info["category"]
            print(f"\n== {category} ==")
        req = info["requires"]
        needs = [f"{'/'.join(req['model_kinds'])} model"]
        if req["cuda"]:
            needs.append("CUDA")
        needs += req["libraries"]
        print(f"\n{info['name']}: {info['summary']}")
        print(f"  needs: {', '.join(needs)}" + (f"  ({req['note']})" if req.get("note") else ""))
        for prm in info["params"]:
            default = "required" if prm["required"] else f"default {json.dumps(prm['default'])}"
            choices = f" one of {prm['choices']}" if prm.get("choices") else ""
            print(f"  --{prm['name']} ({prm['type']}, {default}){choices}: {prm['description']}")
    print()
    return 0
