"""Whether the original and a step's model fit in memory side by side (else the step is
timed apart: accel.timing.rounds.apart_timing)."""

from __future__ import annotations

# The original and a step's model are timed side by side only when together they take at
# most this share of the free memory (RAM, or VRAM on CUDA).
MEMORY_SHARE = 0.5


def free_memory_bytes(device: str = "cpu") -> int | None:
    """Free memory for models on ``device``: CUDA: ``torch.cuda.mem_get_info``; otherwise
    the RAM available to new allocations (psutil). None where unknown."""
    try:
        if str(device).startswith("cuda"):
            import torch

            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no probe on this platform: assume they fit
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**27 else f"{n / 2**20:.0f} MiB"


def side_by_side_problem(
    reference_bytes: float | None, candidate_bytes: float | None, device: str = "cpu"
) -> str | None:
    """Why the original and a step's model should not be timed side by side (None: they
    fit): together they take more than ``MEMORY_SHARE`` of the free RAM (VRAM on CUDA)."""
    free = free_memory_bytes(device)
    if not free or not reference_bytes or not candidate_bytes:
        return None
    need = float(reference_bytes) + float(candidate_bytes)
    if need <= MEMORY_SHARE * free:
        return None
    where = "VRAM" if str(device).startswith("cuda") else "RAM"
    return (
        f"the original ({_gib(float(reference_bytes))}) and the step's model "
        f"({_gib(float(candidate_bytes))}) take more than half of the free {where} "
        f"({_gib(free)})"
    )
