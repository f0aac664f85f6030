"""Benchmarks that print ratios measured in one run on the same machine
(``python -m medaudit.bench``).
"""
