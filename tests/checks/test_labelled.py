"""A labelled set in the style of real model and trainer code: what `check` must find at its
default severity (true cases, with the line) and what it must leave alone (false cases).

Each case is a pattern met in transformers, TRL or diffusers, written here from scratch: MoE
expert dispatch, SpecAugment on NumPy, trainer metrics, generation rounds, cache set-up in
`forward`, device-aware dtype helpers.
"""

from __future__ import annotations

import pytest

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import Severity

# (name, source, expected findings at the default severity: (code, line, severity))
CASES: list[tuple[str, str, list[tuple[str, int, str]]]] = [
    (
        "moe-expert-loop",
        """
import torch
from torch import nn


class SparseExperts(nn.Module):
    def forward(self, hidden, router_idx, router_w):
        out = torch.zeros_like(hidden)
        with torch.no_grad():
            hits = torch.nn.functional.one_hot(router_idx, num_classes=self.n_experts + 1)
            hits = hits.permute(2, 1, 0)
            active = torch.greater(hits.sum(dim=(-1, -2)), 0).nonzero()
        for e in active:
            e = e[0]
            if e == self.n_experts:
                continue
            out = out + self.proj[e](hidden) * router_w[..., :1]
        return out
""",
        [("NM101", 12, "warning"), ("NM112", 13, "warning"), ("NM112", 15, "warning")],
    ),
    (
        "expert-loop-replaced-by-grouped-matmuls-by-default",
        """
import torch
from torch import nn
from transformers.integrations import use_experts_implementation


@use_experts_implementation(has_gate=False)
class RoutedExperts(nn.Module):
    def forward(self, hidden, router_idx, router_w):
        out = torch.zeros_like(hidden)
        hits = torch.nn.functional.one_hot(router_idx, num_classes=self.n_experts).permute(2, 1, 0)
        for e in hits.sum(dim=(-1, -2)).nonzero():
            rows, cols = torch.where(hits[e[0]])
            if e == self.skip:
                continue
            out = out + self._expert(e, hidden[cols]) * router_w[cols, rows, None]
        return out

    def _expert(self, e, rows):
        if rows.sum() == 0:
            return rows
        return rows @ self.weight[e]
""",
        [],  # info: the loop runs only with experts_implementation="eager"
    ),
    (
        "conditional-expression-and-comprehension-filter",
        """
import torch


class Pooler(torch.nn.Module):
    def forward(self, states, scores):
        best = states[:, 0] if scores.max() > 0.5 else states.mean(1)
        kept = [s for s in states.unbind(0) if s.abs().sum() > 0]
        return best, kept
""",
        [("NM112", 7, "warning"), ("NM112", 8, "warning")],
    ),
    (
        "mask-by-dtype-not-name",
        """
import torch


class TokenDrop(torch.nn.Module):
    def forward(self, x, scores, threshold: float):
        hit = scores > threshold
        chosen = torch.tensor([1, 0, 1], dtype=torch.bool)
        return x[hit], x[chosen]
""",
        [("NM102", 9, "warning"), ("NM102", 9, "warning")],
    ),
    (
        "dynamic-cache-built-in-forward",
        """
from transformers import DynamicCache
from torch import nn


class TinyDecoder(nn.Module):
    def forward(self, input_ids, past_key_values=None, use_cache=True):
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        hidden = self.embed(input_ids)
        for layer in self.layers:
            hidden = layer(hidden, past_key_values=past_key_values)
        return hidden
""",
        [],  # `generate()` passes its own cache; a train or eval forward makes a fresh one per call
    ),
    (
        "hand-written-decode-loop-on-the-model-made-cache",
        """
import torch
from transformers import AutoModelForCausalLM

model = torch.compile(AutoModelForCausalLM.from_pretrained("tiny"), backend="neuron", dynamic=False)


@torch.no_grad()
def sample(prompt_ids, steps):
    result = model(input_ids=prompt_ids, use_cache=True)
    tokens = [prompt_ids]
    for _ in range(steps):
        tokens.append(result.logits[:, -1:].argmax(-1))
        result = model(input_ids=tokens[-1], past_key_values=result.past_key_values, use_cache=True)
    return torch.cat(tokens, dim=1)


@torch.no_grad()
def sample_static(prompt_ids, steps, cache):
    result = model(input_ids=prompt_ids, past_key_values=cache, use_cache=True)
    for _ in range(steps):
        result = model(input_ids=result.logits[:, -1:].argmax(-1), past_key_values=result.past_key_values)
    return result


@torch.no_grad()
def sample_state_space(prompt_ids, steps):
    result = model(input_ids=prompt_ids, use_cache=True)
    for _ in range(steps):
        result = model(input_ids=result.logits[:, -1:].argmax(-1), cache_params=result.cache_params)
    return result
""",
        [("NM307", 14, "warning")],
    ),
    (
        "topk-with-data-dependent-k-and-slice-from-item",
        """
import torch


class Retriever(torch.nn.Module):
    def forward(self, scores, lengths):
        k = int(lengths.max())
        top = torch.topk(scores, k).indices
        longest = lengths.max().item()
        return top, scores[:, :longest]
""",
        [("NM110", 7, "error"), ("NM109", 8, "warning"), ("NM110", 9, "error"), ("NM109", 10, "warning")],
    ),
    (
        "host-sync-in-a-training-step",
        """
import torch


class MyTrainer:
    def compute_loss(self, model, inputs):
        out = model(**inputs)
        n_tokens = inputs["attention_mask"].sum().item()
        self._metrics["tokens"].append(n_tokens)
        scale = out.loss.detach().abs().max().item()
        return out.loss / scale
""",
        [("NM110", 10, "warning")],
    ),
    (
        "trainer-orchestration-is-eager",
        """
import torch


class RolloutTrainer:
    def training_step(self, model, inputs):
        batch = self._generate_and_score(model, inputs)
        return model(**batch).loss

    def _generate_and_score(self, model, inputs):
        out = model.generate(**inputs, cache_implementation="static")
        texts = self.tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1]:])
        rewards = torch.tensor([self.reward_fn(t) for t in texts])
        keep = rewards > rewards.mean()
        if keep.any():
            out = out[keep]
        self._metrics["reward"].append(rewards.mean().item())
        return {"input_ids": out}
""",
        [],
    ),
    (
        "spec-augment-on-numpy",
        """
import numpy as np
import torch


def _span_mask(shape, prob, span, lengths):
    batch, seq = shape
    starts = np.random.randint(0, seq - span, size=(batch, int(prob * seq / span)))
    starts = starts + np.arange(span)[None, :1]
    if starts.max() > seq - 1:
        starts[starts > seq - 1] = seq - 1
    mask = np.zeros(shape, dtype=bool)
    return mask


class Encoder(torch.nn.Module):
    def forward(self, feats):
        return feats * 2
""",
        [],
    ),
    (
        "processor-outputs-moved-to-the-cpu",
        """
import torch


class Captioner(torch.nn.Module):
    def forward(self, pixel_values, sizes):
        grid = torch.as_tensor(sizes, device="cpu")
        rows = grid.prod(-1).tolist()
        return self.encoder(pixel_values), rows
""",
        [],
    ),
    (
        "a-cuda-method-of-its-own",
        """
import torch


class QuantizedModel(torch.nn.Module):
    def cuda(self, *args, **kwargs):
        for module in self.modules():
            if isinstance(module, PackedLinear):
                module.cuda(*args)
        return super().cuda(*args, **kwargs)
""",
        [],
    ),
    (
        "sliding-window-cache-length-kept-as-a-python-int",
        """
import torch


class SlidingKVLayer:
    is_compileable = True

    def __init__(self, window):
        self.window = window
        self.seen_tokens = 0
        self.keys = torch.zeros(1, 2, window, 16)

    def update(self, key_states):
        seen = self.seen_tokens
        wrapped = seen >= self.window
        self.seen_tokens += key_states.shape[-2]
        if wrapped:
            self.keys.copy_(torch.roll(self.keys, -1, dims=-2))
        return self.keys
""",
        [("NM117", 15, "warning")],
    ),
    (
        "rotary-table-cached-per-sequence-length",
        """
import torch
from torch import nn


class RotaryTable(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.cached_length = None
        self.cached_table = None

    def forward(self, hidden_states):
        length = hidden_states.shape[1]
        if self.cached_length == length and self.cached_table is not None:
            return self.cached_table
        self.cached_length = length
        freqs = torch.arange(length, dtype=torch.float32)[:, None] / self.dim
        self.cached_table = torch.cat([freqs.sin(), freqs.cos()], dim=-1)
        return self.cached_table
""",
        [("NM117", 15, "warning")],
    ),
    (
        "positional-buffer-moved-in-forward",
        """
import torch
from torch import nn


class SinusoidalEmbedding(nn.Module):
    def __init__(self, positions, dim):
        super().__init__()
        self.table = nn.Buffer(torch.randn(positions, dim), persistent=False)

    def forward(self, position_ids, inputs_embeds):
        self.table = self.table.to(device=inputs_embeds.device, dtype=inputs_embeds.dtype)
        return inputs_embeds + self.table[position_ids]
""",
        [("NM117", 12, "warning")],
    ),
    (
        "prefill-decided-by-the-cache-length",
        """
import torch
from torch import nn


class PromptDecoder(nn.Module):
    def forward(self, input_ids, past_key_values=None):
        hidden = self.embed(input_ids)
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        if past_length > 0:
            hidden = hidden[:, -1:]
        return self.layers(hidden, past_key_values)
""",
        [("NM112", 10, "warning")],
    ),
    (
        "configuration-flags-and-setters-are-not-state",
        """
import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.use_cache = config.use_cache
        self.gradient_checkpointing = False
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids):
        if self.gradient_checkpointing and self.training:
            input_ids = input_ids.clone()
        hidden = self.embed_tokens(input_ids)
        return hidden if self.use_cache else hidden * 2
""",
        [],
    ),
    (
        "lazily-initialised-static-cache-is-one-graph-more",
        """
import torch


class StaticKVLayer:
    is_compileable = True

    def __init__(self, max_len):
        self.max_len = max_len
        self.is_initialized = False

    def lazy_initialization(self, key_states):
        self.keys = torch.zeros(*key_states.shape[:2], self.max_len, key_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states, cache_position):
        if not self.is_initialized:
            self.lazy_initialization(key_states)
        self.keys.index_copy_(2, cache_position, key_states)
        return self.keys
""",
        [],  # info at most: it flips once
    ),
    (
        "step-counter-kept-out-of-the-graph",
        """
import torch
from torch import nn


class Warmup(nn.Module):
    def forward(self, x):
        if not torch.compiler.is_compiling():
            self.steps += 1
        return x * 2
""",
        [],
    ),
    (
        "device-guards-and-dtype-helpers",
        """
import torch


def adjust_dtype_for_device(dtype, device):
    return torch.float32 if device.type in ("mps", "neuron") and dtype == torch.float64 else dtype


class TimeEmbedding(torch.nn.Module):
    def forward(self, sample, timestep):
        if sample.device.type == "cuda":
            torch.cuda.synchronize()
        dtype = adjust_dtype_for_device(torch.float64 if isinstance(timestep, float) else torch.int64, sample.device)
        return torch.tensor([timestep], dtype=dtype, device=sample.device)
""",
        [],
    ),
]


@pytest.mark.parametrize(("source", "expected"), [(s, e) for _, s, e in CASES], ids=[n for n, _, _ in CASES])
def test_labelled_case(source: str, expected: list[tuple[str, int, str]]) -> None:
    report = check_source(source, "case.py", CheckOptions())
    assert report.error is None
    found = sorted((d.code, d.line, d.severity.label) for d in report.diagnostics)
    assert found == sorted(expected), "\n".join(d.text for d in report.diagnostics)


FIX_CASES = [
    (
        "empty-cache-outside-a-guard",
        "import torch\n\n\ndef evaluate(model, loader):\n    torch.cuda.empty_cache()\n    return [model(b) for b in loader]\n",
        None,
    ),
    (
        "padding-joined-with-other-tensors",
        """
import torch


def collate(self, prompts, completions):
    p = self.tokenizer(prompts, padding=True, padding_side="left", return_tensors="pt")
    c = self.tokenizer(completions, padding=True, padding_side="right", return_tensors="pt")
    ids = torch.cat((p["input_ids"], c["input_ids"]), dim=1)
    types = torch.cat((p["token_type_ids"], c["token_type_ids"]), dim=1)
    return ids, types
""",
        None,
    ),
    (
        "a-collator-not-from-transformers",
        "from trimming import DataCollatorWithPadding\n\ncollator = DataCollatorWithPadding(tokenizer)\n",
        None,
    ),
    (
        "comment-stays-with-its-line",
        "import torch\n\nmodel = torch.compile(\n    model,\n    backend='inductor',  # tuned on A100\n    dynamic=False,\n)\n",
        "import torch\n\nmodel = torch.compile(\n    model,\n      # tuned on A100\n    dynamic=False,\n)\n",
    ),
]


@pytest.mark.parametrize(("source", "fixed"), [(s, f) for _, s, f in FIX_CASES], ids=[n for n, _, _ in FIX_CASES])
def test_fixes_are_safe_everywhere(source: str, fixed: str | None) -> None:
    for unsafe in (False, True):
        report = check_source(source, "case.py", CheckOptions(fix=True, unsafe_fixes=unsafe))
        assert report.error is None
        if fixed is None and not unsafe:
            assert report.fixed is None, report.fixed
    report = check_source(source, "case.py", CheckOptions(fix=True))
    assert report.fixed == fixed


def test_padding_fixes_never_touch_a_joined_batch_even_unsafely() -> None:
    source = FIX_CASES[1][1]
    report = check_source(source, "case.py", CheckOptions(fix=True, unsafe_fixes=True))
    assert report.fixed is None
    assert {d.code for d in report.diagnostics} == {"NM301"}


def test_expert_loop_findings_name_the_setting_that_runs_it() -> None:
    source = CASES[1][1]
    report = check_source(source, "case.py", CheckOptions(min_severity=Severity.INFO))
    found = sorted((d.code, d.line) for d in report.diagnostics)
    assert found == [("NM101", 12), ("NM106", 13), ("NM112", 12), ("NM112", 14), ("NM112", 20)]
    for d in report.diagnostics:
        assert d.severity is Severity.INFO
        assert 'only with `experts_implementation="eager"`' in d.text, d.text
        assert "grouped_mm" in d.text


def test_a_helper_of_the_expert_loop_is_compiled_when_a_plain_forward_calls_it_too() -> None:
    head = (
        "import torch\nfrom torch import nn\nfrom transformers.integrations import use_experts_implementation\n\n\n"
        "def route(x):\n    if x.sum() > 0:\n        return x\n    return -x\n\n\n"
    )
    experts = "@use_experts_implementation\nclass Experts(nn.Module):\n    def forward(self, x):\n        return route(x)\n\n\n"
    shared = "class Shared(nn.Module):\n    def forward(self, x):\n        return route(x)\n\n\n"
    for source in (head + experts + shared, head + shared + experts):
        report = check_source(source, "case.py", CheckOptions())
        assert [(d.code, d.line, d.severity.label) for d in report.diagnostics] == [("NM112", 7, "warning")]
        assert "only with" not in report.diagnostics[0].text
    report = check_source(head + experts, "case.py", CheckOptions(min_severity=Severity.INFO))
    assert [(d.code, d.severity.label) for d in report.diagnostics] == [("NM112", "info")]
    assert "called from `forward` of `Experts`, traced only with" in report.diagnostics[0].text
