"""Where the model-parallel sizes of optimum-neuron training arguments must go natively.

`NeuronTrainingArguments(tensor_parallel_size=8)` sharded whatever model the Neuron trainer was
given. Natively transformers shards a model only while loading it, when `from_pretrained` gets a
`distributed_config`: so the sizes must travel from the arguments to the `from_pretrained` that
loads the trained model. This module finds those loads in the original file (stdlib `ast`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.rewrite.codemods.optimum.fields import PARALLEL_FIELDS

Qualifier = Callable[[ast.AST], "str | None"]
Scope = str | None  # the innermost enclosing function's name; None at module level

# `from_pretrained` keywords that already decide how the model is placed or sharded.
PLACEMENT_KEYWORDS = ("distributed_config", "tp_plan", "tp_size", "device_mesh", "trn_config")
DEFAULT_SIZES = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}

# The command-line flags of the model-parallel sizes, kept working next to `TrainingArguments`.
PARALLEL_ARGUMENTS = '''\
@{dataclass}
class ModelParallelArguments:
    """The model-parallel flags of optimum-neuron's `NeuronTrainingArguments`, under the same names."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    disable_sequence_parallel: bool = False

    def to_distributed_config(self):
        model_parallel_size = self.tensor_parallel_size * self.pipeline_parallel_size
        if model_parallel_size == 1:
            return None  # nothing to shard: the Trainer runs the data parallelism itself
        return {DistributedConfig}(
            tp_size=self.tensor_parallel_size,
            pp_size=self.pipeline_parallel_size,
            {remainder_comment}
            fsdp_size={world_size} // model_parallel_size,
            enable_sequence_parallel=not self.disable_sequence_parallel,
        )
'''
# Above the `fsdp_size=` of a sharded model's `DistributedConfig`.
REMAINDER_COMMENT = "# The processes beyond tp_size * pp_size train as data parallelism, as on optimum-neuron."


def data_parallel_size(world_size: str, sizes: list[str]) -> str | None:
    """The `fsdp_size=` source of a model sharded `tp_size * pp_size` ways, or None (unsharded).

    optimum-neuron ran the model on each group of `tp * pp` processes and used the groups as data
    parallelism; a `DistributedConfig` mesh must cover the world (`initialize_distributed_mesh`
    raises otherwise), and transformers 5.23 forms its data-parallel dimension as FSDP2 over
    `fsdp_size`, which averages the gradients over it as data parallelism did.
    """
    factors: list[str] = []
    product = 1
    for size in sizes:
        try:
            value = ast.literal_eval(size)
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, int):
            product *= value
        else:
            factors.append(size if _atomic(size) else f"({size})")
    if product != 1 or not factors:
        factors.insert(0, str(product))
    if factors == ["1"]:
        return None
    divisor = factors[0] if len(factors) == 1 else f"({' * '.join(factors)})"
    return f"{world_size} // {divisor}"


def _atomic(source: str) -> bool:
    """Can `source` take an operator's operand without parentheses?"""
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, ast.Name | ast.Attribute | ast.Call | ast.Subscript | ast.Constant)


@dataclass(frozen=True)
class ShardedLoad:
    """`model = X.from_pretrained(...)` whose model a Neuron trainer trains with `args_var`.

    `origin` says where those arguments come from in the load's function: "constructed"
    (`NeuronTrainingArguments(...)` there; `sizes` holds the source of its model-parallel
    keywords), "parsed" (an argument parser there), or "elsewhere" (a parameter, a global, or
    several assignments: the sizes cannot be seen).
    """

    args_var: str
    origin: str
    sizes: tuple[tuple[str, str], ...] = ()
    movable: bool = True  # the sizes mean the same at the load: literals, or names not rebound
    loader: str | None = None  # the qualified name of the class whose `from_pretrained` loads it
    dtype: str = ""  # the source of its `dtype=`/`torch_dtype=` ("" when none is given)


def enclosing_functions(tree: ast.AST) -> dict[int, Scope]:
    """id(node) -> the name of the innermost function the node is in (None: module level)."""
    scopes: dict[int, Scope] = {}
    for function in all_nodes(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(function):
                scopes.setdefault(id(inner), None)
                if inner is not function:
                    scopes[id(inner)] = function.name
    return scopes


def is_default_size(name: str, value: Any) -> bool:
    """Does this model-parallel keyword leave the model unsharded (a literal 1, or no pipeline)?"""
    if name == "disable_sequence_parallel":
        return True  # sequence parallelism only exists within tensor parallelism
    return value == DEFAULT_SIZES.get(name) or (name == "pipeline_parallel_size" and value is None)


def sharded_loads(
    tree: ast.AST,
    source: str,
    qualified: Qualifier,
    trainers: tuple[str, ...],
    argument_classes: tuple[str, ...],
    parsed: dict[str, Scope],
) -> dict[tuple[Scope, str], ShardedLoad]:
    """(function, model variable) of each `from_pretrained` whose model a Neuron trainer trains.

    `parsed` maps the variables an argument parser fills with Neuron training arguments to the
    function that parses them.
    """
    file = _File(tree, source, qualified, argument_classes)
    loads: dict[tuple[Scope, str], ShardedLoad] = {}
    for node in all_nodes(tree):
        if not (isinstance(node, ast.Call) and qualified(node.func) in trainers):
            continue
        model, args = _trainer_inputs(node)
        if not (isinstance(model, ast.Name) and isinstance(args, ast.Name)):
            continue
        scope = file.scopes.get(id(node))
        load = _only_load(file.assigned.get((scope, model.id), []))
        if load is None:
            continue
        parsed_here = args.id in parsed and parsed[args.id] == scope
        loads[(scope, model.id)] = file.origin(scope, args.id, load, parsed_here)
    return loads


class _File:
    """The assignments and name bindings of one file, by function."""

    def __init__(
        self, tree: ast.AST, source: str, qualified: Qualifier, argument_classes: tuple[str, ...]
    ) -> None:
        self.source = source
        self.qualified = qualified
        self.argument_classes = argument_classes
        self.scopes = enclosing_functions(tree)
        self.assigned: dict[tuple[Scope, str], list[ast.Assign]] = {}
        self.stores: dict[tuple[Scope, str], list[int]] = {}  # lines where a name is bound
        for node in all_nodes(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    key = (self.scopes.get(id(node)), target.id)
                    self.assigned.setdefault(key, []).append(node)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                key = (self.scopes.get(id(node)), node.id)
                self.stores.setdefault(key, []).append(node.lineno)

    def origin(
        self, scope: Scope, args_var: str, load: ast.Assign, parsed_here: bool
    ) -> ShardedLoad:
        call = load.value
        assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        loader = self.qualified(call.func.value)
        dtype = next(
            (ast.unparse(k.value) for k in call.keywords if k.arg in ("dtype", "torch_dtype")), ""
        )
        if parsed_here:
            return ShardedLoad(args_var, "parsed", loader=loader, dtype=dtype)
        assignments = self.assigned.get((scope, args_var), [])
        construction = assignments[0].value if len(assignments) == 1 else None
        if not (
            isinstance(construction, ast.Call)
            and self.qualified(construction.func) in self.argument_classes
            and all(k.arg is not None for k in construction.keywords)
        ):
            return ShardedLoad(args_var, "elsewhere", loader=loader, dtype=dtype)
        given = [k for k in construction.keywords if k.arg in PARALLEL_FIELDS]
        sizes = tuple(
            (str(k.arg), ast.get_source_segment(self.source, k.value) or "") for k in given
        )
        start, end = assignments[0].lineno, load.lineno
        one_line = all(text and "\n" not in text for _, text in sizes)
        movable = one_line and (
            all(isinstance(k.value, ast.Constant) for k in given)
            or (
                start < end
                and not any(
                    start < line <= end
                    for k in given
                    for name in ast.walk(k.value)
                    if isinstance(name, ast.Name)
                    for line in self.stores.get((scope, name.id), [])
                )
            )
        )
        return ShardedLoad(args_var, "constructed", sizes, movable, loader, dtype)


def _trainer_inputs(call: ast.Call) -> tuple[ast.AST | None, ast.AST | None]:
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    model = keywords.get("model", call.args[0] if call.args else None)
    args = keywords.get("args", call.args[1] if len(call.args) > 1 else None)
    return model, args


def _only_load(assignments: list[ast.Assign]) -> ast.Assign | None:
    """The one assignment from `X.from_pretrained(...)` (a model may be wrapped afterwards)."""
    loads = [
        a
        for a in assignments
        if isinstance(a.value, ast.Call)
        and isinstance(a.value.func, ast.Attribute)
        and a.value.func.attr == "from_pretrained"
    ]
    return loads[0] if len(loads) == 1 else None


def forwarded_to(
    tree: ast.AST,
    loads: dict[tuple[Scope, str], ShardedLoad],
    parsed: dict[str, Scope],
    readers: set[tuple[Scope, str]] = frozenset(),  # type: ignore[assignment]
) -> set[str]:
    """Functions whose trained model's arguments come, as a parameter, from parsed arguments.

    `main()` parses the flags and calls `train(script_args, training_args)`, which loads and
    trains the model: the parsed model-parallel sizes can reach that load through one new
    parameter. Only for a module-level function defined once, called once, from the function
    that parses, with plain parameters (no defaults, `*args` or `**kwargs`).
    """
    functions: dict[str, list[ast.FunctionDef]] = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.FunctionDef):
            functions.setdefault(node.name, []).append(node)
    scopes = enclosing_functions(tree)
    calls: dict[str, list[ast.Call]] = {}
    for node in all_nodes(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.setdefault(node.func.id, []).append(node)
    found = set()
    # (function, parameter): where a load's sizes, or a read of `param.trn_config`, come from.
    wanted = {(scope, load.args_var) for (scope, _), load in loads.items() if load.origin == "elsewhere"}
    for scope, args_var in wanted | set(readers):
        if scope is None or len(functions.get(scope, [])) != 1:
            continue
        params = functions[scope][0].args
        if params.vararg or params.kwarg or params.defaults or params.kwonlyargs:
            continue
        names = [a.arg for a in params.args]
        if args_var not in names or len(calls.get(scope, [])) != 1:
            continue
        call = calls[scope][0]
        given = _argument_for(call, names, args_var)
        caller = scopes.get(id(call))
        if isinstance(given, ast.Name) and given.id in parsed and parsed[given.id] == caller:
            found.add(scope)
    return found


def _argument_for(call: ast.Call, params: list[str], name: str) -> ast.AST | None:
    """The expression a call passes for parameter `name`."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    position = params.index(name)
    if position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
        return call.args[position]
    return None
