"""A traced graph was an object of its own; `torch.compile(model)` is a wrapper around the model.

What the code did with the traced object must keep its meaning: its `save()`, the tuple it
returned, the positional tensors it was called with; and where the compiled wrapper would be
stored on the very module it wraps, the rewrite leaves a TODO instead of a module that contains
itself.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from neuron_migrate.rewrite.engine import rewrite_source
from tests.optimum.conftest import ROOT, run_script

FIXTURES = ROOT / "tests" / "fixtures" / "rewrite" / "neuronx_trace"
TODO = "# TODO(neuron-migrate NM023)"


def migrate(source: str) -> str:
    result = rewrite_source(textwrap.dedent(source), "trace.py")
    assert result.error is None, result.error
    return result.migrated


def migrate_fixture(name: str) -> str:
    path = FIXTURES / name
    result = rewrite_source(path.read_text(), str(path))
    assert result.error is None, result.error
    return result.migrated


@pytest.mark.slow
def test_saved_called_and_unpacked_like_the_traced_graph(
    tmp_path: Path, tiny_bert: Path, eager_compile: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    script = tmp_path / "classify.py"
    script.write_text(migrate_fixture("traced_object_uses.in.py"))
    monkeypatch.chdir(tmp_path)
    sentences = ["the cat sat", "a dog ran fast"]
    output = run_script(
        script, "--model_dir", str(tiny_bert), *[a for s in sentences for a in ("--sentence", s)]
    )
    printed = [
        [float(v) for v in line.split()[1:]]
        for line in output.splitlines()
        if line.startswith("logits")
    ]
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    for sentence, logits in zip(sentences, printed, strict=True):
        encoded = tokenizer(sentence, padding="max_length", max_length=16, return_tensors="pt")
        with torch.no_grad():
            expected = model(encoded["input_ids"], encoded["attention_mask"]).logits[0]
        assert logits == pytest.approx(expected.tolist(), abs=1e-4)
    saved = torch.load(tmp_path / "classifier.pt")
    assert set(saved) == set(model.state_dict())


def test_compiled_module_stored_on_itself_is_a_todo_and_really_breaks() -> None:
    migrated = migrate_fixture("compiled_into_itself.in.py")
    assert migrated.count("would hold") == 2
    namespace: dict[str, object] = {}
    exec(compile(migrated, "compiled_into_itself.py", "exec"), namespace)
    encoder = namespace["Encoder"](torch.nn.Linear(4, 4))  # type: ignore[operator]
    namespace["compile_encoder"](encoder, torch.randn(2, 4))  # type: ignore[operator]
    with pytest.raises(RecursionError):  # what the TODO warns about
        encoder.state_dict()


def test_forward_replaced_by_its_compiled_self_keeps_the_module(eager_compile: None) -> None:
    migrated = migrate_fixture("compiled_into_itself.in.py")
    namespace: dict[str, object] = {}
    exec(compile(migrated, "compiled_into_itself.py", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.encoder = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    hidden = torch.randn(2, 4)
    expected = model.encoder(hidden)
    namespace["compile_forward"](model, hidden)  # type: ignore[operator]
    assert torch.equal(model.encoder(hidden), expected)
    assert set(model.state_dict()) == {"encoder.0.weight", "encoder.0.bias"}


# A file that looks the device up more than once reads it from one module constant.
DEVICE = "DEVICE"


@pytest.mark.parametrize(
    ("example", "warm"),
    [
        # The inputs move to the model's device, as only Neuron copies host tensors in itself.
        ("torch.rand(1, 3, 224, 224)", f"traced(torch.rand(1, 3, 224, 224).to({DEVICE}))"),
        ("(ids, mask)", f"traced(ids.to({DEVICE}), mask.to({DEVICE}))"),
        ("inputs", None),  # a tensor or a tuple: the warm-up is a TODO, never a guess
    ],
)
def test_warm_up_calls_keep_the_meaning_of_the_example(example: str, warm: str | None) -> None:
    migrated = migrate(
        f"""
        import torch
        import torch_neuronx

        traced = torch_neuronx.trace(model, {example})
        out = traced(*batch)
        """
    )
    if warm is None:
        assert TODO in migrated and "traced(*inputs)" in migrated.split(TODO, 1)[1]
        assert "\ntraced(" not in migrated
    else:
        assert f"\n{warm}\n" in migrated and TODO not in migrated.split(warm, 1)[0]
    assert "out = traced(*batch)" in migrated  # calls keep their positional tensors
    # ... which, off Neuron, must be where the model is
    assert "`traced` runs on the device: pass it inputs there" in migrated.split("out = traced(*batch)")[0].splitlines()[-1]


def test_saving_a_traced_expression_that_cannot_be_repeated_is_a_todo() -> None:
    migrated = migrate(
        """
        import torch
        import torch_neuronx

        traced = torch_neuronx.trace(Wrapper(base), (ids,))
        traced.save("wrapped.pt")
        torch.jit.save(traced, "wrapped.pt")
        """
    )
    assert migrated.count(TODO) == 1  # one TODO per cause: both saves are the same one
    assert 'traced.save("wrapped.pt")' in migrated  # left in place, under its TODO


def test_torchscript_outputs_stay_tuples_where_the_file_unpacks_them() -> None:
    migrated = migrate(
        """
        import torch_neuronx
        from transformers import AutoModel

        model = AutoModel.from_pretrained("bert-base-uncased", torchscript=True)
        traced = torch_neuronx.trace(model, (ids, mask))
        (hidden, pooled) = traced(ids, mask)
        """
    )
    assert 'from_pretrained("bert-base-uncased", return_dict=False, dtype=torch.float32)' in migrated


@pytest.fixture(scope="module")
def tiny_vit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, num_labels=3,
    )
    out = tmp_path_factory.mktemp("tiny_vit")
    ViTForImageClassification(config).eval().save_pretrained(out)
    return out


def test_torchscript_is_dropped_where_outputs_are_indexed(tiny_vit: Path) -> None:
    """`return_dict=False` would break models such as ViT inside their own `forward`; a
    `ModelOutput` reads by index and by name alike."""
    migrated = migrate(
        """
        import torch_neuronx
        from transformers import ViTForImageClassification

        model = ViTForImageClassification.from_pretrained(path, torchscript=True)
        traced = torch_neuronx.trace(model, (pixels,))
        """
    )
    assert "from_pretrained(path, dtype=torch.float32)" in migrated
    from transformers import ViTForImageClassification

    pixels = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        outputs = ViTForImageClassification.from_pretrained(tiny_vit).eval()(pixels)
        assert torch.equal(outputs[0], outputs["logits"])
        with pytest.raises(AttributeError):  # what `return_dict=False` would have done
            ViTForImageClassification.from_pretrained(tiny_vit, return_dict=False).eval()(pixels)


def test_a_module_compiled_in_place_saves_the_weights_it_wraps(eager_compile: None) -> None:
    migrated = migrate(
        """
        import torch
        import torch_neuronx

        def compile_and_save(pipe, example, path):
            pipe.unet = torch_neuronx.trace(pipe.unet, example)
            torch.jit.save(pipe.unet, path)
        """
    )
    assert "torch.save(pipe.unet._orig_mod.state_dict(), path)" in migrated
    namespace: dict[str, object] = {}
    exec(compile(migrated, "save.py", "exec"), namespace)
    pipe = torch.nn.Module()
    pipe.unet = torch.nn.Linear(3, 3)
    expected = {k: v.clone() for k, v in pipe.unet.state_dict().items()}
    saved: dict[str, dict[str, torch.Tensor]] = {}
    original_save = torch.save
    torch.save = lambda obj, path: saved.setdefault(path, obj)  # type: ignore[assignment]
    try:
        namespace["compile_and_save"](pipe, torch.randn(1, 3), "unet.pt")  # type: ignore[operator]
    finally:
        torch.save = original_save
    fresh = torch.nn.Linear(3, 3)
    fresh.load_state_dict(saved["unet.pt"])  # loads into a plain module, as the script will
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in expected.items())


def test_a_load_after_the_module_is_deleted_stays_a_todo() -> None:
    migrated = migrate(
        """
        import torch
        import torch_neuronx

        traced = torch_neuronx.trace(encoder, (ids, mask))
        torch.jit.save(traced, "encoder.pt")
        del encoder, traced
        wrapper.encoder = torch.jit.load("encoder.pt")
        """
    )
    assert "encoder.load_state_dict" not in migrated
    assert 'wrapper.encoder = torch.jit.load("encoder.pt")' in migrated.split(TODO)[-1]
