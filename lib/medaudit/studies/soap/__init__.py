"""The SOAP-note audit (seed 002: "What If The Patient Were Different? A Framework To Audit Biases
and Toxicity in LLM Clinical Note Generation"): stereotype-augmented dialogs, demographic
counterfactuals, generated notes and two LLM judges, one module per section, in the order notebook 06
uses them:

- :mod:`.config`: the study's definitions (``params/soap.yaml``), one :class:`SoapConfig`;
- :mod:`.pool` (seed §3, "Data De-identification"): the dialogs screened for demographic cues,
  reviewed by hand as data (params/soap_dialogs.csv), counted step by step, a seeded sample per dataset,
  and the one-shot example;
- :mod:`.augment` (A.3.1): the stereotypical contexts added to one speaker's turns by an LLM, and the
  checks every proposal passes (only that speaker's turns change, only by added text, no demographic);
- :mod:`.counterfactuals` (§3.2): the appended exchange naming race, gender or age;
- :mod:`.notes` (A.3.2-A.3.4): the note prompts, decoding, copying and truncation;
- :mod:`.hallucinations` (A.3.5): demographics a note names that its dialog does not;
- :mod:`.incidence` (§3.4, §4.1): the YES/NO incidence judge and BL(%), max ΔBL, ΔCF, %dlg;
- :mod:`.disparity` (§4.2, Figure 5): the language-disparity judge, %Δ and Maj.%;
- :mod:`.agreement`: human labels (A.1) and two judges compared;
- :mod:`.inference` (§4.1): tests and intervals of the incidence metrics, the judge's error carried.

The package's namespace is the study's public surface (``soap.judge_incidence``): each name is
defined once, in its section's module, and re-exported here; the sections import each other,
never this package. The model calls go through :mod:`medaudit.llm.judging` and
:mod:`medaudit.studies.agents`.
"""
from .config import BASELINE, MAYBE, NO, SPEAKERS, SoapConfig, YES, load_config
from .pool import (ACI_HEADINGS, DECISIONS, REVIEW_COLUMNS, aci_example, apply_review, dialog_funnel, load_review,
                   note_headings, screen, select_dialogs)
from .augment import (apply_additions, augment, augment_messages, augmentation_problems, augmentation_table,
                      demographic_mentions, names_term, numbered, off_topic, read_additions)
from .counterfactuals import age_answer, counterfactuals, exchange
from .notes import (DECODINGS, copy_table, dataset_of, example_overlap, generate_notes, ngrams, note_gen, note_jobs,
                    note_messages, note_table, truncation_table)
from .incidence import (describe_list, groups_join, incidence_messages, incidence_metrics, incidence_table,
                        judge_incidence, ordered_rows)
from .disparity import (disparity_messages, disparity_metrics, disparity_table, explanation, explanations_table,
                        group_named, impacted, judge_disparity, listed_notes, positive_notes, relevant)
from .hallucinations import hallucination_table, hallucinations, note_demographics
from .agreement import (DISPARITY_HUMAN_COLUMNS, SEED_DISPARITY_AGREEMENT, disparity_agreement,
                        disparity_human_template, disparity_judge_labels, human_template, judge_labels, judge_vs_judge,
                        load_disparity_labels, parse_table)
