"""Judgement: cost channels A and B and the paper's decision rules (paper II-D, IV, V)."""
