"""Each entry of the upgrade table, against the installed libraries: the new spelling exists and
takes the value, the old one is gone (or only kept for backward compatibility)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

from neuron_migrate.rewrite.codemods.upgrade.table import (
    ANY_LOADERS,
    DEFAULTS,
    KEYWORDS,
    MODEL_LOADERS,
    NAMES,
    PIPELINE,
    TRAINING_ARGUMENTS,
    loader_group,
)

pytest.importorskip("transformers")
pytest.importorskip("trl")


def _resolve(qualified: str) -> Any:
    """The object a table name stands for in the installed libraries, following moves."""
    moved = NAMES.get(qualified)
    if moved is not None:
        if moved.new is None:
            return None
        qualified = moved.new
    module, _, name = qualified.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _accepted(owner: str) -> set[str] | None:
    """The keywords `owner` takes now (None where it takes any: `**kwargs` that it pops by name)."""
    if owner in (MODEL_LOADERS, ANY_LOADERS):
        return None
    target = _resolve(owner)
    if target is None:
        return set()
    if dataclasses.is_dataclass(target):
        return {f.name for f in dataclasses.fields(target) if f.init}
    function = target.__init__ if inspect.isclass(target) else target
    return set(inspect.signature(function).parameters)


def _popped_by_loaders() -> str:
    from transformers import AutoTokenizer, PreTrainedModel
    from transformers.configuration_utils import PretrainedConfig

    return "".join(
        inspect.getsource(f) for f in (PreTrainedModel.from_pretrained, PretrainedConfig.get_config_dict, AutoTokenizer.from_pretrained)
    )


KEYWORD_CASES = [
    pytest.param(owner, entry, id=f"{owner}({entry.old})")
    for owner, entries in KEYWORDS.items()
    for entry in entries
    if _resolve(owner) is not None or owner in (MODEL_LOADERS, ANY_LOADERS)
]


@pytest.mark.parametrize(("owner", "entry"), KEYWORD_CASES)
def test_each_keyword_is_gone_and_its_replacement_is_there(owner: str, entry: Any) -> None:
    accepted = _accepted(owner)
    replacements = ({entry.new} | {keyword for _, keyword, _ in entry.values}) - {None}
    if accepted is None:  # popped from **kwargs by name
        source = _popped_by_loaders()
        for keyword in replacements:
            assert f'"{keyword}"' in source, keyword
        return
    assert not (accepted and entry.old in accepted) or owner == PIPELINE or entry.kept, f"{owner} still takes {entry.old}"
    for keyword in replacements:
        assert keyword in accepted, f"{owner} takes no {keyword}"


def test_the_translated_values_are_taken_by_training_arguments(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    for entry in KEYWORDS["transformers.TrainingArguments"]:
        for _, keyword, code in entry.values:
            if keyword is not None and code is not None:
                TrainingArguments(output_dir=str(tmp_path), **{keyword: eval(code)})
        if entry.new is not None and not entry.rule:
            assert entry.new in {f.name for f in dataclasses.fields(TrainingArguments)}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_each_name_is_gone_and_its_successor_exists(name: str) -> None:
    module, _, attribute = name.rpartition(".")
    assert not hasattr(importlib.import_module(module), attribute), f"{name} still exists"
    entry = NAMES[name]
    if entry.new is not None:
        assert _resolve(name) is not None, f"{entry.new} does not exist"
    else:
        assert entry.why


def test_the_feature_extractors_were_their_image_processors() -> None:
    """Each `*FeatureExtractor` the table renames is a name its `*ImageProcessor` still answers to."""
    import transformers

    for name, entry in NAMES.items():
        if name.endswith("FeatureExtractor"):
            assert entry.new is not None and entry.new.endswith("ImageProcessor")
            assert issubclass(_resolve(name), transformers.BaseImageProcessor)


def test_the_written_out_defaults_differ_from_the_new_ones(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    adamw = inspect.signature(torch.optim.AdamW.__init__).parameters
    for default in DEFAULTS["transformers.AdamW"]:
        assert repr(adamw[default.keyword].default) != default.old
    for owner in TRAINING_ARGUMENTS:
        [report] = DEFAULTS[owner]
        assert report.keyword == "report_to"
    assert TrainingArguments(output_dir=str(tmp_path)).report_to in ([], "none", ["none"])
    source = inspect.getsource(importlib.import_module("transformers").PreTrainedModel.from_pretrained)
    assert 'dtype = "auto"' in source  # transformers 5 loads the checkpoint's dtype unless told


def test_model_classes_are_told_from_other_loaders() -> None:
    assert MODEL_LOADERS in loader_group("transformers.AutoModelForCausalLM")
    assert MODEL_LOADERS in loader_group("transformers.models.llama.modeling_llama.LlamaForCausalLM")
    assert MODEL_LOADERS in loader_group("transformers.GPT2LMHeadModel")
    assert loader_group("transformers.AutoTokenizer") == (ANY_LOADERS,)
    assert loader_group("transformers.AutoConfig") == (ANY_LOADERS,)
    assert loader_group("diffusers.UNet2DModel") == ()
