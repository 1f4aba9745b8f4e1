"""Accel: the headless engine of Accel Studio."""

__version__ = "0.1.0"
