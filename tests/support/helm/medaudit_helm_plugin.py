"""HELM plugin (crfm-helm 0.5.16): a tiny multiple-choice scenario of the medaudit
smoke items ($MEDAUDIT_HELM_ITEMS: outputs/smoke/data/items.jsonl) and the run spec function
`medaudit_mcq:variant=...` that runs it with HELM's multiple_choice_joint adapter.

variant=gender       4 test items, zero-shot, HELM data augmentation with two
                     GenderPerturbation copies (terms, male->female and
                     female->male; both named "gender"), original included,
                     unchanged copies skipped (as HELM's data_augmentation
                     run expander does).
variant=trials       2 test items, 1 in-context example from a train pool of 2,
                     sample_train=False: train trial t uses train item t, so the
                     two trials' prompts differ (run with --num-train-trials 2).
variant=trials_same  1 test item, 1 in-context example from a train pool of 1:
                     both trials have the same prompt (a temperature-0 repeat).

Load with:  PYTHONPATH=<dir of this file> helm-run --plugins medaudit_helm_plugin ...
(tests/support/helm_roundtrip.sh, `make harness-check`, does it all).
"""
import json
import os
from typing import List

from helm.benchmark.adaptation.common_adapter_specs import get_multiple_choice_joint_adapter_spec
from helm.benchmark.augmentations.data_augmenter import DataAugmenterSpec
from helm.benchmark.augmentations.perturbation import PerturbationSpec
from helm.benchmark.metrics.common_metric_specs import get_exact_match_metric_specs
from helm.benchmark.run_spec import RunSpec, run_spec_function
from helm.benchmark.scenarios.scenario import (
    CORRECT_TAG, TEST_SPLIT, TRAIN_SPLIT, Input, Instance, Output, Reference, Scenario, ScenarioSpec,
)

ITEMS = os.environ.get("MEDAUDIT_HELM_ITEMS", "outputs/smoke/data/items.jsonl")

VARIANTS = {
    #               test item ids                                              train item ids
    #                                                                          max_train sample_train
    "gender":      (["medqa4-0390", "medqa4-0572", "medqa4-0834", "medqa4-0858"], [],                       0, True),
    "trials":      (["medqa4-0572", "medqa4-0697"],                             ["medqa4-0923", "medqa4-1206"],
                    1, False),
    "trials_same": (["medqa4-0834"],                                            ["medqa4-1206"],          1, True),
}


class MedauditMCQScenario(Scenario):
    name = "medaudit_mcq"
    description = "medaudit smoke items (MedQA 4-option) as a HELM multiple-choice scenario"
    tags = ["question_answering", "medicine"]

    def __init__(self, variant: str = "gender", items_path: str = ITEMS):
        super().__init__()
        self.variant = variant
        self.items_path = items_path

    def get_instances(self, output_path: str) -> List[Instance]:
        test_ids, train_ids, _, _ = VARIANTS[self.variant]
        items = {}
        with open(self.items_path, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                items[d["item_id"]] = d
        out = []
        for split, ids in ((TRAIN_SPLIT, train_ids), (TEST_SPLIT, test_ids)):
            for iid in ids:
                d = items[iid]
                refs = [Reference(Output(text=d["options"][k]), tags=[CORRECT_TAG] if k == d["answer_idx"] else [])
                        for k in sorted(d["options"])]
                # the instance id is our item_id (HELM keeps ids a scenario sets)
                out.append(Instance(input=Input(text=d["question"]), references=refs, split=split, id=iid))
        return out


def _gender(source: str, target: str) -> PerturbationSpec:
    return PerturbationSpec(
        class_name="helm.benchmark.augmentations.gender_perturbation.GenderPerturbation",
        args={"mode": "terms", "prob": 1.0, "source_class": source, "target_class": target},
    )


@run_spec_function("medaudit_mcq")
def get_medaudit_mcq_run_spec(variant: str = "gender") -> RunSpec:
    _, _, max_train, sample_train = VARIANTS[variant]
    adapter_spec = get_multiple_choice_joint_adapter_spec(
        instructions="The following are multiple choice questions about medicine. "
                     "Answer with a single letter only.",
        input_noun="Question",
        output_noun="Answer",
        max_train_instances=max_train,
        max_tokens=1,
        sample_train=sample_train,
    )
    augmenter = DataAugmenterSpec()
    if variant == "gender":
        augmenter = DataAugmenterSpec(
            perturbation_specs=[_gender("male", "female"), _gender("female", "male")],
            should_augment_train_instances=False,
            should_include_original_train=True,
            should_skip_unchanged_train=True,
            should_augment_eval_instances=True,
            should_include_original_eval=True,
            should_skip_unchanged_eval=True,
            seeds_per_instance=1,
        )
    return RunSpec(
        name=f"medaudit_mcq:variant={variant}",
        scenario_spec=ScenarioSpec(class_name="medaudit_helm_plugin.MedauditMCQScenario", args={"variant": variant}),
        adapter_spec=adapter_spec,
        metric_specs=get_exact_match_metric_specs(),
        data_augmenter_spec=augmenter,
        groups=["medaudit_mcq"],
    )
