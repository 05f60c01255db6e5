"""The lines where real models fail to compile for Neuron: the dynamic truth `recall.py` scores.

Builds tiny random models from the config classes of the installed transformers (fixed seeds,
nothing downloaded), compiles each model's `forward` with `torch.compile(fullgraph=True,
dynamic=False)` on the test stand-in `neuron` backend (it rejects symbolic shapes and boolean
`index_put`, as TorchNeuron's does), runs one prefill and, for decoders, four decode steps, and
writes one record per failure: the file and line inside the installed packages that Dynamo (or
the backend) names, and why. A model whose forward compiles again at every decode step is
recorded at the line that makes the growing cache.

    python benchmarks/check/dynamo_truth.py --out benchmarks/check/truth.json
    python benchmarks/check/dynamo_truth.py --models llama,mixtral   # a subset
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SITE = Path(sysconfig.get_paths()["purelib"]).resolve()


def _backend() -> Any:
    """The stand-in `neuron` backend (the tests' one until it moves into the package)."""
    try:
        from neuron_migrate.validate import neuron_backend  # type: ignore[attr-defined]
    except ImportError:
        from tests.checks import neuron_backend
    return neuron_backend


def _in_site(filename: str) -> bool:
    try:
        Path(filename).resolve().relative_to(SITE)
    except ValueError:
        return False
    return "/torch/" not in filename


def _user_frame(error: BaseException) -> tuple[str, int] | None:
    """The innermost frame in the installed model code that the error names."""
    stack = getattr(error, "real_stack", None)
    frames = list(stack) if stack else []
    text = "".join(traceback.format_exception(error))
    if not frames:
        import re

        found = re.findall(r'File "([^"]+)", line (\d+)', text)
        frames = [type("F", (), {"filename": f, "lineno": int(n)}) for f, n in found]
    for frame in reversed(frames):
        if _in_site(frame.filename):
            return str(Path(frame.filename).resolve().relative_to(SITE)), int(frame.lineno)
    return None


def _symbolic_node_frame(gm: torch.fx.GraphModule) -> tuple[str, int] | None:
    """For a rejected graph: where the first node with a symbolic (data-dependent) size was made."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    for node in gm.graph.nodes:
        value = node.meta.get("example_value", node.meta.get("val"))
        try:
            symbolic = value is not None and bool(free_symbols(value))
        except Exception:  # values that are not tensors or symbols
            symbolic = False
        if symbolic:
            trace = node.meta.get("stack_trace") or ""
            import re

            for filename, line in reversed(re.findall(r'File "([^"]+)", line (\d+)', trace)):
                if _in_site(filename):
                    return str(Path(filename).resolve().relative_to(SITE)), int(line)
    return None


LAST_GRAPH: dict[str, Any] = {}


def _locating_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    LAST_GRAPH["gm"] = gm
    return _backend().neuron(gm, example_inputs)


# -- the models -------------------------------------------------------------------------------


def _causal(
    config_name: str, model_name: str, experts: str | None = None, **overrides: Any
) -> Callable[[], tuple[Any, dict[str, Any]]]:
    def build() -> tuple[Any, dict[str, Any]]:
        import transformers

        config = getattr(transformers, config_name)(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
            **overrides,
        )
        if experts is not None:  # the per-expert loop instead of grouped matmuls
            config._experts_implementation = experts
        model = getattr(transformers, model_name)(config).eval()
        return model, {"input_ids": torch.randint(0, 64, (1, 6))}

    return build


def _gpt2() -> tuple[Any, dict[str, Any]]:
    import transformers

    config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=64)
    return transformers.GPT2LMHeadModel(config).eval(), {"input_ids": torch.randint(0, 64, (1, 6))}


def _whisper(spec_augment: bool = False) -> tuple[Any, dict[str, Any]]:
    import transformers

    config = transformers.WhisperConfig(
        vocab_size=64,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=8,
        max_source_positions=16,
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        apply_spec_augment=spec_augment,
        mask_time_prob=0.5 if spec_augment else 0.0,
        mask_time_length=2,
    )
    model = transformers.WhisperForConditionalGeneration(config)
    model.train(spec_augment)  # SpecAugment masks only in training
    return model, {
        "input_features": torch.randn(1, 8, 32),
        "decoder_input_ids": torch.randint(3, 64, (1, 4)),
    }


MODELS: dict[str, Callable[[], tuple[Any, dict[str, Any]]]] = {
    "llama": _causal("LlamaConfig", "LlamaForCausalLM"),
    "mistral": _causal("MistralConfig", "MistralForCausalLM"),
    "mixtral": _causal(
        "MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2
    ),
    "qwen2_moe": _causal(
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
    ),
    "mixtral_expert_loop": _causal(
        "MixtralConfig",
        "MixtralForCausalLM",
        experts="eager",
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
    "qwen2_moe_expert_loop": _causal(
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        experts="eager",
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
    ),
    "gpt2": _gpt2,
    "whisper": _whisper,
    "whisper_spec_augment": lambda: _whisper(spec_augment=True),
}


def probe(name: str, build: Callable[[], tuple[Any, dict[str, Any]]], decode_steps: int) -> dict[str, Any]:
    """Compile one model's forward and say where (and whether) it fails or recompiles."""
    backend = _backend()
    torch.manual_seed(0)
    model, inputs = build()
    torch._dynamo.reset()
    backend.STATE.graphs, backend.STATE.symbolic = 0, []
    LAST_GRAPH.clear()
    compiled = torch.compile(model.forward, backend=_locating_backend, dynamic=False, fullgraph=True)
    record: dict[str, Any] = {"model": name, "graphs": 0}
    try:
        with torch.no_grad():
            out = compiled(**inputs, use_cache=not model.training)
            cache = getattr(out, "past_key_values", None)
            ids_key = "decoder_input_ids" if "decoder_input_ids" in inputs else "input_ids"
            for _ in range(decode_steps if cache is not None and not model.training else 0):
                step = {k: v for k, v in inputs.items() if k != ids_key}
                step[ids_key] = torch.randint(3, 64, (1, 1))
                out = compiled(**step, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
    except Exception as error:  # the failure is what this measures
        root = backend._root(error)
        if isinstance(root, backend.NeuronRejected):
            where = _symbolic_node_frame(LAST_GRAPH["gm"]) if "gm" in LAST_GRAPH else None
            reason = f"rejected by the neuron backend: {str(root).splitlines()[0][:160]}"
        else:
            where = _user_frame(error)
            reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:160]}"
        record.update(status="fails", reason=reason)
        if where:
            record["file"], record["line"] = where
        record["graphs"] = backend.STATE.graphs
        return record
    record["graphs"] = backend.STATE.graphs
    if backend.STATE.graphs > 1:
        record.update(
            status="recompiles",
            reason=f"compiled {backend.STATE.graphs} times for one prefill and {decode_steps} decode steps",
        )
        where = _cache_line(model)
        if where:
            record["file"], record["line"] = where
    else:
        record["status"] = "compiles"
    return record


def _cache_line(model: Any) -> tuple[str, int] | None:
    """The line of the model's source that builds a `DynamicCache` when none is passed in."""
    for cls in type(model).__mro__:
        module = sys.modules.get(cls.__module__)
        path = getattr(module, "__file__", None)
        if not path or not _in_site(path):
            continue
        for number, text in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if "DynamicCache(" in text and "=" in text and not text.lstrip().startswith("#"):
                return str(Path(path).resolve().relative_to(SITE)), number
        break
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    parser.add_argument("--decode-steps", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("truth.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    records = []
    for name in args.models.split(","):
        record = probe(name, MODELS[name], args.decode_steps)
        print(json.dumps(record), flush=True)
        records.append(record)
    truth = [
        {"file": r["file"], "line": r["line"], "reason": f"{r['model']}: {r['reason']}"}
        for r in records
        if "file" in r
    ]
    args.out.write_text(json.dumps({"models": records, "truth": truth}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
