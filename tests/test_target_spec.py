"""``migrate/targets/titan_spec.py`` (titan's class defaults, as data for the migrator) is current."""

from __future__ import annotations

from titan.migrate.plan import converters, model_keys, trainers
from titan.migrate.specgen import target_codegen
from titan.migrate.targets import titan_spec

from titan.models import FAMILY_ALIASES, SUPPORTED_MODELS


def test_target_spec_is_current():
    namespace: dict = {}
    exec(target_codegen.generate(), namespace)
    assert namespace["CLASSES"] == titan_spec.CLASSES, "stale: run `make schema`"


def test_every_class_the_plan_names_is_in_the_spec():
    for cls in (
        trainers.TRAINER,
        trainers.FT_TRAINER,
        trainers.FLUX_TRAINER,
        trainers.IN_BACKWARD,
    ):
        assert cls in titan_spec.CLASSES
    for cls in converters.converter_classes().values():
        assert cls in titan_spec.CLASSES


def test_the_plan_knows_titans_families():
    assert model_keys.TITAN_FAMILIES == SUPPORTED_MODELS
    assert model_keys.FAMILY_ALIASES == FAMILY_ALIASES
