"""medaudit: the helper library of a research compendium that audits how
clinically irrelevant identity cues change language-model answers and
confidence in medicine.

Modules: ``data`` (loading and validating the shipped datasets), ``text``
(sentence boundaries), ``selection`` (age parsing, keyword screens, funnels),
``perturb`` (templated counterfactuals), ``dialogs`` (turns and
de-identification), ``tables`` and ``report`` (outputs and colophon),
``paths`` (where things live).
"""
__version__ = "0.1.0"
