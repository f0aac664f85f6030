"""Exhibits of a notebook: tables (CSV, Markdown, LaTeX), figures, what an exhibit is, and the
sentences of findings written from a run's tables.
"""
