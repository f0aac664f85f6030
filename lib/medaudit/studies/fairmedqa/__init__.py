"""FairMedQA (seeds 001 and 004: Xiao et al. 2025): neutralised vignettes,
agent-generated adversarial variants and the disparity metrics, one module
per section of seed 004 (lowest first; a module imports only those above it
in this list, tests/test_layers.py checks):

- :mod:`.config` (§3.1 "Definition of Sensitive Attributes";
  ``params/fairmedqa.yaml``): the attributes, groups, pairs, the agents'
  settings and the texts' condition names;
- :mod:`.neutralise` (§3.1 "Clinical Vignette Neutralization", seed 001 A.5):
  the rule-based rewrite and the checks of an LLM's;
- :mod:`.generation` (§3.2 "Adversarial Variant Generation", A.3 rounds):
  the Generation → Fusion → Validation loop and its checks;
- :mod:`.answers` (§4.2 "Evaluation Configurations"): how the evaluated
  models are asked, their budgets, protocols and stored answers;
- :mod:`.metrics` (§4.1 "Evaluation Metrics", A.2 Table 3): accuracy, CFR,
  AD, McNemar, Cohen's h;
- :mod:`.validation` (A.3, Fig. 6): the Validation-Agent's accuracy;
- :mod:`.figures` (§5.2 Figs. 3-4, A.3 Figs. 5-6, seed 001 Fig. 7);
- :mod:`.cpv` (§4.2 "Benchmarking Effectiveness Validation", §5.1 Table 1):
  the CPV-style baseline and its comparison with FairMedQA;
- :mod:`.versions` (§5.3, Table 2): old → new model versions;
- :mod:`.arms`: the mitigation arms (not a section of the seed).

Import what you use from its module (``from medaudit.studies.fairmedqa import
metrics``): the package re-exports nothing.
"""
