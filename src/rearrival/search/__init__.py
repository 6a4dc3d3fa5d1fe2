"""The configuration search and the Section V-D advice (paper Section V)."""
