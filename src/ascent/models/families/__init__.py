"""Model families: one module per family, each declaring what is specific to it
(``ascent.models.families.spec``), looked up by the checkpoint's ``model_type``
(``ascent.models.families.registry``)."""

from ascent.models.families.registry import (
    FAMILIES,
    NoNativeFamily,
    family_of,
    model_type_of,
    native_family,
    native_model_types,
    native_refusal,
)
from ascent.models.families.spec import ModelFamily

__all__ = [
    "FAMILIES",
    "ModelFamily",
    "NoNativeFamily",
    "family_of",
    "model_type_of",
    "native_family",
    "native_model_types",
    "native_refusal",
]
