"""The four studies, one module or package each, on the shared layers below them: seed 000's
multiple-choice calibration and open-ended case study, the SOAP-note audit (seed 002), the cultural-cue
study (seed 003) and FairMedQA (seeds 001 and 004).
"""
