"""optimum-intel's OpenVINO export of a saved Hugging Face causal LM, in a process of its own.

The hand-written peers of bench/bench_llm.py: ``OVModelForCausalLM.from_pretrained(folder,
export=True, quantization_config=OVWeightQuantizationConfig(...))`` then ``save_pretrained``,
optimum-intel's defaults otherwise. optimum-intel 2.2 needs transformers<5.6 and the studio
runs a newer one, so bench_llm runs this script with ``PYTHONPATH`` set to a ``pip install
--target`` folder holding transformers 5.5, optimum-intel and optimum (and the tokenizers /
huggingface-hub versions that transformers wants). Third-party telemetry is off as in every
studio process.

Usage: PYTHONPATH=SITE python bench/optimum_export.py HF_FOLDER OUT_FOLDER --bits 8|4 [--group 128]

The site, made once (the rest comes from the studio's venv):
    .venv/bin/python -m pip install --no-deps --target SITE transformers==5.5.4 \
        optimum-intel==2.2.0 optimum==2.3.0 tokenizers==0.22.2 "huggingface-hub>=1.0,<1.22"
    .venv/bin/python -m pip install --target SITE httpx
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # after PYTHONPATH: the site's transformers comes first

from accel.privacy import disable_telemetry  # noqa: E402

disable_telemetry()
# The studio's diffusers needs a newer huggingface_hub than transformers 5.5 accepts; an LM
# export does not use it, and optimum imports it only where it can.
sys.modules["diffusers"] = None  # type: ignore[assignment]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_folder")
    ap.add_argument("out")
    ap.add_argument("--bits", type=int, choices=(4, 8), required=True)
    ap.add_argument("--group", type=int, default=128, help="int4 group size")
    args = ap.parse_args()
    import transformers
    from optimum.intel import OVModelForCausalLM, OVWeightQuantizationConfig

    print(f"transformers {transformers.__version__}", flush=True)
    q = OVWeightQuantizationConfig(
        bits=args.bits, sym=args.bits == 4, group_size=args.group if args.bits == 4 else -1
    )
    model = OVModelForCausalLM.from_pretrained(
        args.hf_folder, export=True, quantization_config=q, compile=False
    )
    model.save_pretrained(args.out)
    print(f"saved {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
