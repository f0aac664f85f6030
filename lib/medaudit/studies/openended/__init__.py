"""The open-ended case study (seed 000 §4, appendices B.4-B.6), one module per stage, in the order
notebook 05 uses them:

- :mod:`.reformulation` (B.4, verbatim): an LLM rewrites each item's final multiple-choice question as
  one open-ended sentence; the open variant of every condition is its vignette with that sentence
  replaced, so the vignette and the identity sentence cannot change; the checks a rewrite passes;
- :mod:`.answers`: K free-text samples per item and condition through the response store;
- :mod:`.clusters`: semantic clusters by three interchangeable methods (``llm``: the B.5 prompt,
  checked strictly, retried, repaired and counted; ``entailment``: bidirectional entailment with an
  LLM judge, Kuhn et al. 2023; ``embedding``: MiniLM average-linkage clusters), semantic entropy and
  confidence 1 - entropy / log K, as seed 000 normalises the option entropy;
- :mod:`.judge` (B.6): one seeded sample per cluster judged CORRECT / INCORRECT against the
  multiple-choice answer text, the verdict given to the whole cluster; B.6's instructions verbatim as
  the system message, the case (question, ground truth, answer) as the user message; what the judge
  sees of the question is the ``judge_context`` parameter (``"question"``, the default, or
  ``"vignette"``); unparsed verdicts are counted, never scored wrong;
- :mod:`.stages`: those LLM stages run through the store, and the question table (:func:`questions`),
  with the columns of the multiple-choice one (:func:`medaudit.studies.calibration.questions`), so the
  paired tests and seed tables of notebook 04 serve Table 2 unchanged;
- :mod:`.comparison`: the methods compared, human labels, agreement between label sources
  (:func:`medaudit.stats.agreement.agreement`) and partitions
  (:func:`medaudit.stats.agreement.partition_agreement`), failure cases;
- :mod:`.pipeline`: the notebook's stages, one call each, and its tables.

The package's namespace is the study's public surface (``openended.judge_all``): each name is
defined once, in its stage's module, and re-exported here; the stages import each other, never this
package.
"""
from .reformulation import (CORRECT, INCORRECT, METHODS, TRUNCATED, open_variants, reformulate, reformulate_messages,
                            reformulation_problems, rule_reformulation, rule_table)
from .answers import ANSWER_PROMPTS, answer_messages, answer_text, plan_answers
from .clusters import (cluster_messages, cluster_problems, cluster_token_budget, confidence, embedding_clusters,
                       entailment_clusters, entailment_messages, gguf_token_counter, labels_from_clusters,
                       longest_cluster_reply, read_clusters, relabel, repair_clusters, semantic_entropy)
from .judge import JUDGE_CONTEXTS, judge_messages, judge_picks
from .stages import answers_frame, embedding_run, entailment_run, judge_run, llm_clusters, questions
from .comparison import failure_cases, human_template, judged_units, method_agreement, method_table, problem_counts
from .pipeline import (cluster_all, collect_answers, control_table, judge_all, judge_controls, judge_parse_table,
                       reformulation_table, table2)
