"""Statistics on arrays and tables, study-agnostic: accuracy and calibration metrics, per-question
confidence and scoring, paired tests and bootstraps, intervals, the reading of a contrast, power of a
test, mixed and conditional models, the judge's error.
"""
