"""medaudit: the helper library of a research compendium that audits how
clinically irrelevant identity cues change language-model answers and
confidence in medicine.

Modules:

- running: ``config`` (the one schema every profile and override is
  validated against), ``runner`` (runs a notebook with only its declared
  parameters; keeps a failed one under ``outputs/<profile>/failed/``);
- data preparation: ``data`` (loading and validating the shipped datasets),
  ``text`` (sentence boundaries, content words), ``selection`` (age parsing, keyword
  screens, funnels), ``perturb`` (templated counterfactuals), ``dialogs``
  (turns and de-identification);
- inference: ``llm`` (backends, the response store, ``llm.runs``: the one
  runner every request goes through, ``llm.mcq``: the multiple-choice
  protocol, import), ``formats`` (the table of prompt formats: prompt,
  parser, letters), ``parse`` (reading answers and verdicts, one status
  vocabulary), ``prompts`` (templates), ``agents`` (LLM writers of variants:
  ask, check, revise, record every attempt), ``judging`` (the one judge
  stage: every LLM judge, cached, satisfiable from imported verdicts);
- shared by the studies: ``definitions`` (a study's YAML definition file
  read once into a checked pydantic model), ``variants`` (checks of an edited vignette against
  its original), ``scoring`` (one answer per question, gold, complete cases,
  accuracy), ``labels`` (human-label CSVs and judge agreement),
  ``llm.embeddings`` (sentence embeddings);
- analysis: ``uncertainty`` (confidence from samples), ``metrics``,
  ``stats`` (paired tests, bootstrap, non-additivity, agreement), ``calibration`` (notebook 04
  glue), ``openended`` (seed 000 §4), ``soap`` (seed 002), ``cultural``
  (seed 003), ``fairmedqa`` (seeds 001/004);
- outputs: ``tables``, ``plots``, ``colophon`` (the last cell of every notebook), ``site`` and
  ``published`` (the HTML report), ``atomic`` (temporary file + rename),
  ``paths``;
- benchmarks: ``bench`` (K-sample path vs naive), ``bench_bootstrap``.
"""
__version__ = "0.1.0"
