"""The cultural-cue study (seed 003: Rezaei & Shakeri 2026, "Counterfactual
Cultural Cues Reduce Medical QA Accuracy in LLMs: Identifier vs Context
Effects"), one module per section of the analysis, in the order a notebook uses them:

- :mod:`.config`: the study's definitions (``params/cultures.yaml``), one :class:`CulturalConfig`
  passed explicitly to every function that needs it;
- :mod:`.variants` (section 1): the 150 released items, the rebuilt neutral control, the 9 variants per
  item, the 4-option MedQA mapping, the answer plan and the stored answers read back;
- :mod:`.checks` (section 2): each variant diffed against its original;
- :mod:`.metrics` (section 3): accuracy, Δ Avg (eq. 2), Cochran's Q, flips and harmful flips
  (eqs. 3-4), intervals that cover, the verdicts and the component analysis;
- :mod:`.judge` (section 4): the culture-referential [YES]/[NO] judge and Table III's aggregation;
- :mod:`.diversity` (section 5): mean pairwise cosine similarity of the added texts;
- :mod:`.exhibits` (section 6): tables shaped like Tables I-V, and figures;
- :mod:`.augment` (section 7): the few-shot augmenter of other MedQA items and its checks;
- :mod:`.table3`: Table III recounted under both gold readings (the published page).

The package's namespace is the study's public surface (``cultural.flip_rates``): each name is
defined once, in its section's module, and re-exported here; the sections import each other,
never this package. The model calls live in the notebook and in :mod:`medaudit.studies.agents`.
"""
from .config import BASELINES, CulturalConfig, FORMS, NEUTRAL, ORIGINAL, load_config, neutral_sentence
from .variants import (AUTHORS_API_TEMPERATURE, AUTHORS_EXPLAIN_MAX_TOKENS, CulturalSet, DECODINGS, FORM_PREFIX,
                       answer_gen, answer_plan, form_item_id, form_of, form_variants, map_four_option, stored_responses,
                       variants)
from .checks import check_summary, check_variants
from .metrics import (MARGIN, accuracy_intervals, cochran_table, component_table, cue_models,
                      cue_regressions, delta_avg, delta_avg_errors, flip_rates, idctx_delta, rate_interval)
from .judge import (JUDGE_CONTRASTS, JUDGE_SYSTEM, JUDGE_USER, judge_counts, judge_jobs, judge_labels, judge_messages,
                    judged, judged_units)
from .diversity import diversity, mean_pairwise_cosine
from .exhibits import (OPTION_FORMATS, accuracy_plot, arm_flips, component_plot, forest_plot, option_formats,
                       option_prompting, table_accuracy, table_flips, table_judge)
from .augment import (PIECES, augment_jobs, compose_variants, generated_set, other_items, piece_examples,
                      piece_messages, piece_problems, tidy_piece)
