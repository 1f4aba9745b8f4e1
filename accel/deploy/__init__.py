"""Deploying an optimized model to a serving system (Triton Inference Server)."""
