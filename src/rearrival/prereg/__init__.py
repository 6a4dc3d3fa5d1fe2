"""Preregistration commits and the audit of their order (docs/DESIGN.md §8)."""
