"""`studio passes`: every pass with its summary, parameters and requirements, whether it can
run here (and why not), and the runtimes with their availability."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("passes", help="list optimization passes and their parameters")
    p.add_argument("name", nargs="?", help="show one pass in detail")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--device", default="cpu", help="say which passes can run on this device (default cpu)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from accel.models.runtime import runtimes
    from accel.passes import get_pass, list_passes

    passes = [get_pass(args.name)] if args.name else list_passes()
    infos = [{**p.describe(), "unavailable": p.unavailable_reason(args.device)} for p in passes]
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
        _print_pass(info)
    if not args.name:
        print("\n== runtimes ==")
        for r in runtimes():
            why = r.unavailable_reason(args.device)
            print(f"{r.kind} ({r.label}): {'available' if why is None else 'unavailable: ' + why}")
    print()
    return 0


def _print_pass(info: dict) -> None:
    req = info["requires"]
    needs = [f"{'/'.join(req['model_kinds'])} model"]
    if req["cuda"]:
        needs.append("CUDA")
    needs += req["libraries"]
    print(f"\n{info['name']}: {info['summary']}")
    print(f"  needs: {', '.join(needs)}" + (f"  ({req['note']})" if req.get("note") else ""))
    if info["unavailable"]:
        print(f"  unavailable: {info['unavailable']}")
    for prm in info["params"]:
        default = "required" if prm["required"] else f"default {json.dumps(prm['default'])}"
        choices = f" one of {prm['choices']}" if prm.get("choices") else ""
        print(f"  --{prm['name']} ({prm['type']}, {default}){choices}: {prm['description']}")
