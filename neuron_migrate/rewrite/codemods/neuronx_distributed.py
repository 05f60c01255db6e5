"""NM024: neuronx-distributed, transformers-neuronx, NxD Inference and Inf1 torch-neuron need a person.

Their code is written around the old stack's own model-parallel layers and runtimes, so each use
gets a TODO that names the native replacement; `move_model_to_device` and `divide` have mechanical ones.
"""

from __future__ import annotations

from collections.abc import Callable
from string import Template
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.oldstack import INF1_IMPORT
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    FileFacts,
    MigrationContext,
    arg_value,
    branch_taken,
    code_of,
    elif_taken,
    expr,
    has_star_args,
)
from neuron_migrate.rewrite.codemods.nxd_layouts import LAYER_NAMES, LAYERS, Layer, layer_style
from neuron_migrate.rewrite.codemods.nxd_state import (
    AS_LIST,
    IS_INITIALIZED,
    MESH_BUILT,
    MESH_QUERIES,
    REPLICA_GROUPS,
    STATE,
)
from neuron_migrate.rewrite.codemods.optimum.support import (
    PLATFORM_TARGET,
    mark_named_module,
    mark_run_time_import,
    mark_star_import,
    note_run_time_import,
)

NXD = "neuronx_distributed"
MOVE_TO_DEVICE = (
    f"{NXD}.utils.model_utils.move_model_to_device",
    f"{NXD}.parallel_layers.move_model_to_device",
)
DIVIDE = (f"{NXD}.parallel_layers.utils.divide",)
DIVIDE_HELPER = '''\
def $name(numerator, denominator):
    """`numerator // denominator`, which must divide exactly (as NxD's `divide` checked)."""
    if numerator % denominator != 0:
        raise ValueError(f"{numerator} is not divisible by {denominator}")
    return numerator // denominator
'''
# NxD's probes of the torch version, whose answer natively (torch 2.x, past 2.0) is known: an
# `if` that one of them decides keeps the branch it takes.
VERSION_PROBES = {
    f"{NXD}.parallel_layers.utils.requires_init_pg_override": False,  # torch 2.0 only
    f"{NXD}.parallel_layers.utils.is_torch_version_greater_than_2": True,
}
# torch_xla's `local_process_count()` (or the world size over `HOST_WORLD_SIZE`): what torchrun
# calls LOCAL_WORLD_SIZE.
LOCAL_WORLD_SIZE = (f"{NXD}.parallel_layers.utils.get_local_world_size",)
INF1_TRACE = ("torch.neuron.trace", "torch_neuron.trace")
KINDS = {"tp": "tensor-parallel", "dp": "data-parallel"}
PIPELINE_MODEL = (f"{NXD}.pipeline.NxDPPModel", f"{NXD}.pipeline.model.NxDPPModel")
INF1 = "Inf1 code: keep it on the Inf1 stack, or port it to `torch.compile(model, dynamic=False)` on `neuron`"

ROOTS = (NXD, "transformers_neuronx", "neuronx_distributed_inference", "torch_neuron")

# Worked TODOs: what a person writes instead, spelled out with this program's own values.
PIPELINE = (
    "`{name}` cuts the model into pipeline stages: use `torch.distributed.pipelining` and `Schedule1F1B` on a \"pp\" mesh axis"
)
INFERENCE = (
    "`{name}`: NxD inference: `parallelize_module`, `torch.compile(dynamic=False)`, warm each bucket"
)
TRACE_CALLS = (f"{NXD}.trace.parallel_model_trace", f"{NXD}.parallel_model_trace")
MODEL_BUILDERS = (f"{NXD}.ModelBuilder", f"{NXD}.trace.model_builder.ModelBuilder")


def inference_todo(qualified: str, written: str, given: Callable[[int | None, str], str | None]) -> str | None:
    """The worked TODO of an NxD Core inference call, with its own model, inputs and TP degree
    (`given(position, keyword)`: the code of that argument, None if absent); None for other calls."""

    def value(position: int | None, keyword: str, default: str) -> str:
        code = given(position, keyword)
        if code is None:
            return default
        code = " ".join(code.split())
        return code if len(code) <= 20 else code[:17] + "..."

    degree = value(None, "tp_degree", "1")
    ranks = f"{degree} ranks" if degree.isdigit() else f"`{degree}` ranks"
    short = written.rpartition(".")[2]
    if qualified in TRACE_CALLS:
        build, inputs = value(0, "func", "the model function"), value(1, "example_inputs", "the example inputs")
        return f"`{short}`: shard `{build}()` over {ranks}, `torch.compile(dynamic=False)`, warm on `{inputs}`"
    if qualified in MODEL_BUILDERS:
        loader = given(None, "checkpoint_loader")
        weights = f", load `{value(None, 'checkpoint_loader', '')}`" if loader is not None else ""
        return f"`{short}`: per `add`ed model: shard over {ranks}{weights}, `torch.compile(dynamic=False)`, warm each shape"
    return None


TP_PLAN = 'shard plain `nn.Linear`/`nn.Embedding` layers with `parallelize_module(model, mesh["tp"], plan)`'


def _layer_advice(name: str) -> str:
    """What replaces an NxD parallel layer, both of its layouts spelled out (NxD's default first)."""
    layer = LAYERS[name]
    default, other = layer.switch_default, not layer.switch_default
    return f"`nn.{layer.native}` + `{layer.styles[default]}` (other if `{layer.switch}={other}`)"


class NeuronxDistributed(Codemod):
    """Marks neuronx-distributed, transformers-neuronx, NxD Inference and Inf1 code for a person.

    ## What it does
    Adds a TODO at each use of `neuronx_distributed` (parallel layers, `parallel_state`,
    `NxDPPModel`, its optimizers, checkpoints, trainer API and Lightning strategy),
    `transformers_neuronx`, `neuronx_distributed_inference` and Inf1's `torch.neuron.trace`,
    naming the native replacement: DTensor and `parallelize_module` plans on a `DeviceMesh`,
    `DistributedConfig` for transformers models, `torch.distributed.pipelining`, FSDP2,
    `torch.distributed.checkpoint` (DCP), and `generate` with a static cache for inference. A
    parallel layer's TODO names the style that lays it out as the call asked NxD to
    (`gather_output`, `input_is_parallel`, `shard_across_embedding`, sequence parallelism), or
    both where the call decides at run time. NxD Core inference calls (`parallel_model_trace`,
    `ModelBuilder`) get a worked TODO with the call's own model, example inputs, TP degree and
    checkpoint loader.
    `move_model_to_device(model, device)` becomes `model.to(device)`, `divide(a, b)` a helper of
    the file's own that checks the division is exact and returns `a // b`, `get_local_world_size()`
    torchrun's `LOCAL_WORLD_SIZE`, and an `if` decided by
    NxD's torch-version probes (`if requires_init_pg_override():`, true on torch 2.0 alone)
    keeps the branch native torch takes. Star imports of these
    packages and modules named in strings (`importlib.import_module(...)`, patch targets) get a
    TODO as well: what they reach cannot be seen.

    ## Why
    These libraries are built on torch_xla and their own sharded layers; the model code itself
    changes shape when it moves to DTensor, so a rewrite would only hide the real work.

    ## Example
    ```python
    from neuronx_distributed.parallel_layers import ColumnParallelLinear
    self.up = ColumnParallelLinear(hidden, 4 * hidden, gather_output=False)
    ```

    ## Use instead
    ```python
    self.up = nn.Linear(hidden, 4 * hidden)
    # after building the model:
    parallelize_module(model, mesh["tp"], {"layers.*.up": ColwiseParallel()})
    ```

    ## Fix safety
    Not a fix: the TODOs say what to write. Imports stay while code uses them.

    ## By hand
    - Parallel layers: build the model from `nn.Linear`/`nn.Embedding` and shard it with
      `parallelize_module(model, mesh["tp"], plan)`, or pass
      `distributed_config=DistributedConfig(tp_size=...)` to `from_pretrained` for transformers
      models. NxD's defaults (`gather_output=True`, `input_is_parallel=False`) are the styles with
      `Replicate()` layouts.
    - `parallel_state` queries: build `mesh = init_device_mesh(device_type, (dist.get_world_size()
      // tp, tp), mesh_dim_names=("dp", "tp"))` where `initialize_model_parallel` ran; its rows,
      runs of consecutive ranks, are the tensor-parallel groups. A `DeviceMesh` has nothing of its
      own to tear down. Pipeline queries are those of a ("pp", "dp", "tp") mesh when the model is
      cut into `torch.distributed.pipelining` stages, 1 and 0 when it is not.
    - `NxDPPModel`: build a ("pp", "dp", "tp") mesh, cut the plain model at the same layers with
      `pipe = pipeline(model, mb_args=(one_microbatch,), split_spec={"<layer path>":
      SplitPoint.BEGINNING, ...})`, take this rank's stage with `pipe.build_stage(
      mesh["pp"].get_local_rank(), device, group=mesh["pp"].get_group())` and drive it with
      `Schedule1F1B(stage, n_microbatches=..., loss_fn=...)` (NxD's default schedule;
      `ScheduleGPipe` runs all forwards first): `run_train(**batch)` becomes
      `schedule.step(**batch)` on the first stage and `schedule.step(target=labels, losses=losses)`
      on the last. transformers models: `DistributedConfig(pp_size=...)`.
    - `NeuronZero1Optimizer` sharded the optimizer state over the data-parallel ranks, averaged
      the gradients, clipped their norm in `step()` (`max_norm` 1.0 by default) and stepped fp32
      copies of lower-precision parameters: shard the model with `fully_shard(model,
      mesh=mesh["dp"])`, clip with `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`
      before a plain optimizer steps, and keep fp32 parameters with
      `MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)` where the
      model ran in bf16. Checkpoints: DCP of `get_state_dict(model, optimizer)`, `set_state_dict`
      after loading.
    - NxD's inference path (`ModelBuilder`, `NxDModel`, `trace`, `shard_checkpoint`): shard the
      same model with `parallelize_module` (or load it with `distributed_config=`), load its full
      weights (`set_model_state_dict` shards them), compile it with `torch.compile(model,
      backend="neuron", dynamic=False, fullgraph=True)`, call it once per bucket with that bucket's
      example inputs, and pad requests to the nearest bucket so no new shape compiles.
    - `nki_flash_attn_func(q, k, v)` is causal unless `causal=False`: `enable_gqa=True` where `k`
      and `v` have fewer heads, `dropout_p=` and `scale=` for the kernel's `dropout_p` and
      `softmax_scale`; with the kernel's default `transpose_nki_inputs=True` the inputs came as
      (batch, heads, head_dim, seq): give SDPA `q.transpose(-1, -2)`, and the same for `k`, `v`.
    - `parallel_cross_entropy` charged a target outside the vocabulary (-100) the log-sum-exp of
      the shifted logits, where `F.cross_entropy` under `loss_parallel()` gives 0: mask such
      targets out. NxD's `LayerNorm` had its parameters summed over the tensor-parallel ranks by
      `allreduce_sequence_parallel_gradients`; `SequenceParallel(sequence_dim=...,
      use_local_output=True)` sums them in backward. `clip_grad_norm_` refuses a mix of DTensor
      and plain parameters: count replicated parameters once.
    - LoRA: `peft.get_peft_model(model, peft.LoraConfig(r=..., lora_alpha=..., lora_dropout=...,
      target_modules=[...]))`, `merge_and_unload()` to fold the adapters in, then shard; NxD's
      `lora_rank` (default 16) is peft's `r` (default 8: pass it). Quantization: keep the model in
      bfloat16, or quantize the plain model with torchao before sharding it
      (`quantize_(model, Int8WeightOnlyConfig())`, `Float8WeightOnlyConfig()` for fp8) once torchao
      is verified on the `neuron` device.
    - `set_random_seed(seed)` seeded `random`, NumPy and torch; DTensor keeps the random ops of
      shards consistent itself. `rmsg(msg)` prefixed a message with this process's ranks
      (`mesh.get_coordinate()` gives the mesh position). `get_logger` printed on rank 0 only.
      `requires_init_pg_override()` was true on torch 2.0 alone. `get_platform_lnc()` is
      `NEURON_LOGICAL_NC_CONFIG` if set, else 2 on Trn2/Trn3.
    - transformers-neuronx and NxD Inference: `AutoModelForCausalLM.from_pretrained(id,
      dtype=torch.bfloat16, device_map="neuron")` (or `distributed_config=` under torchrun) and
      `generate` with `cache_implementation="static"`, `max_cache_len=<n_positions>` and
      `CompileConfig(backend="neuron", dynamic=False)`; `to_neuron()` and `sample()` go.
    - Inf1's torch-neuron (`torch.neuron.trace`) is out of scope for TorchNeuron, which runs on
      Trn2/Trn3 only and owns the `torch.neuron` namespace.
    """

    code = "NM024"
    name = "neuronx-distributed"
    summary = "neuronx-distributed, transformers-neuronx, NxDI and Inf1 code -> TODOs naming the native replacement"
    triggers = (*ROOTS, "torch.neuron.trace")
    markers = ROOTS  # also reached by `importlib.import_module(...)` or `import *`

    @classmethod
    def applies(cls, facts: FileFacts, text: str) -> bool:
        return super().applies(facts, text) or INF1_IMPORT.search(text) is not None  # `import torch.neuron`
    manual: ClassVar[dict[str, str]] = {
        # neuronx_distributed: parallel layers and state
        f"{NXD}.parallel_layers.layers.ColumnParallelLinear": _layer_advice("ColumnParallelLinear"),
        f"{NXD}.parallel_layers.ColumnParallelLinear": _layer_advice("ColumnParallelLinear"),
        f"{NXD}.parallel_layers.layers.RowParallelLinear": _layer_advice("RowParallelLinear"),
        f"{NXD}.parallel_layers.RowParallelLinear": _layer_advice("RowParallelLinear"),
        f"{NXD}.parallel_layers.layers.ParallelEmbedding": _layer_advice("ParallelEmbedding"),
        f"{NXD}.parallel_layers.ParallelEmbedding": _layer_advice("ParallelEmbedding"),
        f"{NXD}.modules.qkv_linear": "use separate q/k/v `nn.Linear` sharded with `ColwiseParallel()`; replicate KV heads if fewer than `tp_size`",
        f"{NXD}.parallel_layers.parallel_state.initialize_model_parallel": 'build `mesh = init_device_mesh(device_type, (world // tp, tp))` with axes ("dp", "tp")',
        # Utilities with a plain counterpart (the family's advice below would be wrong for them).
        f"{NXD}.parallel_layers.parallel_state.rmsg": "`{name}(msg)`: prefix the message with `dist.get_rank()` in an f-string",
        f"{NXD}.parallel_layers.utils.get_local_world_size": '`{name}()` is the number of processes on this host: `int(os.environ["LOCAL_WORLD_SIZE"])` under torchrun',
        f"{NXD}.parallel_layers.utils.requires_init_pg_override": "`{name}()` is `torch.__version__.startswith(\"2.0\")`: always False natively",
        f"{NXD}.parallel_layers.utils.divide": "`{name}(a, b)` is `a // b` after checking that `b` divides `a` exactly",
        f"{NXD}.kernels.flash_attn.nki_flash_attn_func": "`{name}(q, k, v)`: `F.scaled_dot_product_attention(q, k, v, is_causal=True)` (inputs batch, heads, seq, dim)",
        **dict.fromkeys(
            (f"{NXD}.utils.model_utils.get_platform_target", "neuronx_distributed_inference.models.config.get_platform_target"),
            PLATFORM_TARGET,
        ),
        f"{NXD}.utils.tensor_capture": "`{name}`: capture intermediate tensors with `module.register_forward_hook(...)` instead",
        f"{NXD}.parallel_layers.parallel_state.destroy_model_parallel": "`{name}()`: a `DeviceMesh`'s groups end with `dist.destroy_process_group()`",
        "neuronx_distributed_inference.models.config.get_platform_lnc": '`{name}()` is the logical NeuronCore configuration: `NEURON_LOGICAL_NC_CONFIG` if set, else 2 on Trn2/Trn3 and 1 before',
        f"{NXD}.utils.model_utils.get_platform_lnc": '`{name}()` is the logical NeuronCore configuration: `NEURON_LOGICAL_NC_CONFIG` if set, else 2 on Trn2/Trn3 and 1 before',
        f"{NXD}.parallel_layers.utils.is_torch_version_greater_than_2": "`{name}()` is `torch.__version__.startswith(\"2\")`",
        f"{NXD}.parallel_layers.utils.is_pjrt_device": '`{name}()` tests `PJRT_DEVICE == "NEURON"`, never set natively: test `device.type == "neuron"`',
        f"{NXD}.utils.logger.get_logger": "`{name}`: use `logging.getLogger(name)` and log under `if dist.get_rank() == 0:`",
        f"{NXD}.utils.random.set_random_seed": "`{name}(seed)`: use `random.seed(seed)`, `np.random.seed(seed)` and `torch.manual_seed(seed)`",
        f"{NXD}.utils.tensor_utils.cumsum": "`{name}(x)`: use `torch.cumsum(x, dim=0)`",
        f"{NXD}.utils.cpu_mode": '`{name}()` is `int(os.environ.get("NXD_CPU_MODE", "0")) > 0`, an NxD switch: test the device type instead',
        f"{NXD}.lightning.NeuronTQDMProgressBar": "use Lightning's `TQDMProgressBar` (`lightning.pytorch.callbacks`), which it extends",
        f"{NXD}.lightning.progress_bar.NeuronTQDMProgressBar": "use Lightning's `TQDMProgressBar` (`lightning.pytorch.callbacks`), which it extends",
        f"{NXD}.lightning.NeuronTensorBoardLogger": "use Lightning's `TensorBoardLogger` (`lightning.pytorch.loggers`), which it extends",
        f"{NXD}.lightning.logger.NeuronTensorBoardLogger": "use Lightning's `TensorBoardLogger` (`lightning.pytorch.loggers`), which it extends",
        "neuronx_distributed_inference.utils.distributed.get_tp_group": '`{name}(config)` -> `mesh["tp"].get_group()` of the model\'s `DeviceMesh`',
        f"{NXD}.parallel_layers.parallel_state": 'ask the `DeviceMesh` instead: `mesh["tp"].get_local_rank()`, `mesh["dp"].size()`, `mesh["tp"].get_group()`',
        **{name: f'`{{name}}()` -> `mesh["{dim}"].{query}` ({MESH_BUILT})' for name, (dim, query) in MESH_QUERIES.items()},
        **{
            name: f'`{{name}}()` -> `mesh["{MESH_QUERIES[name][0]}"].get_group()`; `as_list=True`: '
            f"`{REPLICA_GROUPS[rows][1].format(mesh='mesh')}`"
            for name, rows in AS_LIST.items()
        },
        **{
            name: f"`{{name}}()` -> `{rows.format(mesh='mesh')}` ({KINDS[dim]} ranks)"
            for name, (dim, rows) in REPLICA_GROUPS.items()
        },
        IS_INITIALIZED: "`{name}()` -> `mesh is not None`, with `mesh = None` at module level",
        **{
            f"{STATE}.get_pipeline_model_parallel_{query}": f'`{{name}}()` -> `mesh["pp"].{native}` with pipeline stages, '
            f"`{alone}` without"
            for query, native, alone in (("size", "size()", 1), ("rank", "get_local_rank()", 0))
        },
        f"{NXD}.parallel_layers.mappings": "express the region mapping as a DTensor layout (`SequenceParallel()`, or `redistribute`)",
        f"{NXD}.parallel_layers.loss_functions.parallel_cross_entropy": '`{name}(logits, target)`: `F.cross_entropy` of the DTensor logits under `loss_parallel()`',
        f"{NXD}.parallel_layers.layer_norm.LayerNorm": "`{name}`: use `nn.LayerNorm` (with sequence parallelism, sharded by `SequenceParallel()`)",
        f"{NXD}.parallel_layers.random": "seed with `torch.manual_seed(seed)`: DTensor random ops keep shards consistent",
        f"{NXD}.parallel_layers.grads": "clip all gradients, sharded and not: on a partly sharded model, sum the shards' squared norms over `mesh[\"tp\"]`",
        f"{NXD}.parallel_layers.checkpointing": "use DCP `torch.distributed.checkpoint.save/load` of the DTensor state dict, or `save_pretrained`",
        f"{NXD}.parallel_layers.save": "use DCP `torch.distributed.checkpoint.save` of the DTensor state dict, or `save_pretrained`",
        f"{NXD}.parallel_layers.load": "use DCP `torch.distributed.checkpoint.load` into the DTensor state dict, or `from_pretrained`",
        f"{NXD}.parallel_layers": TP_PLAN,
        f"{NXD}.pipeline": PIPELINE,
        **dict.fromkeys(
            (f"{NXD}.optimizer.NeuronZero1Optimizer", f"{NXD}.optimizer.zero_redundancy_optimizer.NeuronZero1Optimizer"),
            '`{name}` is ZeRO-1: `fully_shard(model, mesh=mesh["dp"])`, clip with `clip_grad_norm_`, then a plain optimizer steps',
        ),
        f"{NXD}.optimizer": "use `torch.optim.AdamW` on a model sharded with FSDP2 `fully_shard(model, mp_policy=...)`",
        f"{NXD}.trainer.initialize_parallel_optimizer": "use `torch.optim.AdamW` on a model sharded with FSDP2 `fully_shard(...)`",
        f"{NXD}.trainer.initialize_parallel_model": "use `DistributedConfig` in `from_pretrained`, else `parallelize_module` + `fully_shard`",
        f"{NXD}.trainer.neuronx_distributed_config": "use `DistributedConfig` for transformers, else a `DeviceMesh` + `fully_shard`",
        **dict.fromkeys(
            (f"{NXD}.save_checkpoint", f"{NXD}.trainer.save_checkpoint", f"{NXD}.trainer.checkpoint.save_checkpoint"),
            "use DCP `torch.distributed.checkpoint.save` of `get_state_dict(model, optimizer)`",
        ),
        **dict.fromkeys(
            (f"{NXD}.load_checkpoint", f"{NXD}.trainer.load_checkpoint", f"{NXD}.trainer.checkpoint.load_checkpoint"),
            "use `torch.distributed.checkpoint.load` (DCP), then `set_state_dict`",
        ),
        **dict.fromkeys(
            (
                f"{NXD}.initialize_parallel_model",
                f"{NXD}.initialize_parallel_optimizer",
                f"{NXD}.neuronx_distributed_config",
            ),
            "use `DistributedConfig` for transformers, else `parallelize_module` + `fully_shard`",
        ),
        f"{NXD}.trainer": "use FSDP2 / DTensor on a `DeviceMesh`, or `transformers.Trainer` with `DistributedConfig`",
        f"{NXD}.lightning": "use Lightning's FSDP/DDP strategy on the `neuron` device (not verified on TorchNeuron)",
        f"{NXD}.lightning.NeuronXLAStrategy": "use Lightning's `ModelParallelStrategy(tensor_parallel_size=...)`, sharding in `configure_model`",
        f"{NXD}.lightning.NeuronXLAPrecisionPlugin": 'give the precision to the Trainer: `precision="bf16-mixed"` (or `"bf16-true"`)',
        f"{NXD}.utils.model_utils": 'for meta-device init use `torch.device("meta")` + `model.to_empty(device=...)`',
        **dict.fromkeys(
            (f"{NXD}.trace.parallel_model_save", f"{NXD}.parallel_model_save"),
            "`{name}`: save the plain model's `state_dict()` (DCP if sharded); compiled graphs are not saved",
        ),
        **dict.fromkeys(
            (f"{NXD}.trace.parallel_model_load", f"{NXD}.parallel_model_load"),
            "`{name}`: rebuild the model, load its `state_dict()`, `torch.compile(dynamic=False)` it again",
        ),
        **dict.fromkeys(
            (f"{NXD}.trace", *(f"{NXD}.{name}" for name in ("ModelBuilder", "NxDModel", "BaseNxDModel", "TorchScriptNxDModel", "shard_checkpoint", "NxDParallelState", "convert_nxd_model_to_torchscript_model"))),
            INFERENCE,
        ),
        f"{NXD}.quantization": "`{name}` is NxD quantization: keep the model in bfloat16, or quantize the plain model with torchao",
        f"{NXD}.modules.lora": "`{name}` is NxD's LoRA: use `peft.get_peft_model(model, peft.LoraConfig(r=lora_rank, ...))` on the plain model",
        f"{NXD}.modules.moe.moe_fused_tkg._convert_torch_dtype_to_nki_dtype": "`{name}`: native experts run in the torch dtype itself",
        f"{NXD}.modules.moe": "use transformers' expert parallelism (`DistributedConfig(ep_size=...)`) or your own experts sharded with DTensor",
        f"{NXD}.utils.activation_checkpoint": "use `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)`",
        NXD: "`{name}` is neuronx-distributed API: rewrite with DTensor, FSDP2, `torch.distributed.pipelining` and DCP",
        # transformers-neuronx and NxD Inference
        "transformers_neuronx": '`{name}` -> `AutoModelForCausalLM.from_pretrained(id, device_map="neuron")`, static cache',
        "neuronx_distributed_inference": '`{name}` (NxD Inference) -> a transformers model, `device_map="neuron"`, static cache',
        # Inf1
        "torch_neuron": INF1,
    }

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        self._elifs: set[int] = set()

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> Any:
        test = original_node.test
        answer = VERSION_PROBES.get(self.qualify(test.func) or "") if isinstance(test, cst.Call) and not test.args else None
        if answer is None:
            return updated_node
        self.changed(f"`if {code_of(test)}:` -> the branch native torch takes (the test is {answer})")
        if id(original_node) in self._elifs:
            return elif_taken(updated_node, answer)
        return branch_taken(self.ctx, updated_node, answer)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        mark_run_time_import(self, original_node, ROOTS)
        name = self.qualify(original_node.func)
        if name in MOVE_TO_DEVICE:
            model = arg_value(updated_node, 0, "model")
            device = arg_value(updated_node, 1, "device")
            if model is not None and device is not None:
                self.changed("`move_model_to_device(model, device)` -> `model.to(device)`")
                return cst.parse_expression(f"{code_of(model.value)}.to({code_of(device.value)})")
        if name in DIVIDE and len(updated_node.args) == 2 and not has_star_args(updated_node):
            helper = self.ctx.unused_name("divide_exactly")
            self.changed("`divide(a, b)` -> a helper of the file's own: `a // b`, checked to divide exactly")
            self.ctx.need_helper(helper, Template(DIVIDE_HELPER).substitute(name=helper))
            return updated_node.with_changes(func=cst.Name(helper))
        if name in LOCAL_WORLD_SIZE and not updated_node.args:
            self.changed("`get_local_world_size()` -> `LOCAL_WORLD_SIZE`")
            return expr(self.ctx.local_world_size_expr())
        if name in LAYER_NAMES and self.qualify(updated_node.func) == name:
            self._layer_todo(updated_node, LAYERS[LAYER_NAMES[name]])
        if name in INF1_TRACE:
            self.todo(INF1)
        if name in PIPELINE_MODEL:
            self._pipeline_todo(original_node)
        written = code_of(original_node.func)
        todo = inference_todo(name or "", written, lambda position, keyword: _code(arg_value(original_node, position, keyword)))
        if todo is not None:
            self.todo(todo, explains=(written,))
        return updated_node

    def _layer_todo(self, call: cst.Call, layer: Layer) -> None:
        """A parallel layer left in place: the one layout this call gives it, where it says."""
        positional = [arg for arg in call.args if arg.keyword is None]
        if layer.native == "LayerNorm" or has_star_args(call) or len(positional) > len(layer.sizes):
            return  # the family's advice
        given = {arg.keyword.value: code_of(arg.value) for arg in call.args if arg.keyword is not None}
        style = layer_style(layer, given)
        if not style:
            return
        written = code_of(call.func)
        self.todo(
            f"`{written}` -> `nn.{layer.native}` sharded by `{style}` in a plan",
            explains=(written,),
        )

    def _pipeline_todo(self, call: cst.Call) -> None:
        """`NxDPPModel(...)`: the native pipeline, with this call's own cut and microbatches."""
        written = code_of(call.func)
        module = arg_value(call, 0, "module")
        layer = arg_value(call, 1, "transformer_layer_cls")
        cuts = arg_value(call, None, "pipeline_cuts")
        microbatches = arg_value(call, 2, "num_microbatches")
        model = code_of(module.value) if module is not None else "the model"
        where = (
            f"at the layers `{code_of(cuts.value)}` names"
            if cuts is not None
            else f"between its `{code_of(layer.value)}` layers"
            if layer is not None
            else "where NxD's partitioner cut it"
        )
        n = code_of(microbatches.value) if microbatches is not None else "1"
        self.todo(
            f"`{written}`: stage `{model}` {where} with `torch.distributed.pipelining` (`n_microbatches={n}`)",
            explains=(written,),
        )

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> Any:
        if any(code_of(alias.name) in ("torch_neuron", "torch.neuron") for alias in updated_node.names):
            self.todo(INF1)
        return updated_node

    def visit_Call(self, node: cst.Call) -> None:
        note_run_time_import(self, node)

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> Any:
        mark_star_import(self, original_node, ROOTS)
        return updated_node

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.SimpleString:
        mark_named_module(self, original_node, ROOTS)
        return updated_node


def _code(arg: cst.Arg | None) -> str | None:
    return code_of(arg.value) if arg is not None else None
