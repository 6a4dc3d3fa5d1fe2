"""Preregistration commits and the audit of their order (SPEC 9)."""
