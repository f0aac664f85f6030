"""Data preparation: the shipped datasets and definition files, item selection, vignette text,
counterfactual variants and their checks, dialogs, the published FairMedQA texts, gold readings and
human labels.
"""
