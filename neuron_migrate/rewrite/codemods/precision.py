"""The precision policy that replaces `XLA_USE_BF16=1`: float32 everywhere, bf16 where data moves to
the device, as the old stack did it.

Under `XLA_USE_BF16=1` (or `XLA_DOWNCAST_BF16=1`) the program built its model and its data in
float32 on the host, and the XLA bridge stored every float tensor as bf16 when it reached the
device. The faithful native program does the same explicitly: the model is initialised in float32
and cast where it moves (`model.to(device, torch.bfloat16)`, AWS's recommended replacement), float
inputs are cast where they move, float tensors created on the device are created in bf16, and
integer tensors (token ids, labels) are left alone. Initialising in bf16 instead
(`torch.set_default_dtype`) would draw other initial weights and host data than the original did.

Where the switch was set only on some runs, or read back to choose behaviour, it becomes a flag of
the program (`USE_BF16`), set where the switch was. transformers' loaders keep their checkpoint's
dtype, so they get `dtype=torch.bfloat16`; a move whose data might be floats or integers gets a
TODO, as does a device loader, whose batches the program moved without casting.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from neuron_migrate.core.oldstack import PRECISION
from neuron_migrate.rewrite.codemods.base import (
    append_arg,
    code_of,
    expr,
    is_docstring,
    keyword_arg,
    stmt,
    string_value,
)
from neuron_migrate.rewrite.codemods.tensor_kinds import Kind, TensorKinds
from neuron_migrate.rewrite.codemods.xla_device import XLA_DEVICE
from neuron_migrate.rewrite.codemods.xla_launch import XlaDeviceNames

if TYPE_CHECKING:
    from neuron_migrate.rewrite.codemods.base import Codemod

LOADERS = ("from_pretrained", "from_config")
DTYPE_KEYWORDS = ("dtype", "torch_dtype")
# What `from_pretrained` loads without parameters to cast.
NOT_A_MODEL = re.compile(r"(Tokenizer(Fast)?|Config|Processor|FeatureExtractor|Scheduler|Dataset)$")
TRANSFORMERS_MODEL = re.compile(r"^(AutoModel\w*|\w*(Model|For[A-Z]\w*|LMHeadModel))$")
# Factories whose result is float by default: created on the device, they were bf16 there.
DEVICE_FACTORIES = frozenset(
    f"torch.{n}" for n in ("zeros", "ones", "empty", "rand", "randn", "eye", "linspace", "logspace")
)
# Factories whose dtype follows their data (the argument at this position, or all for `arange`):
# a float literal made a float tensor, bf16 on the device; an int literal an int64 one.
VALUE_FACTORIES = {"torch.full": 1, "torch.tensor": 0, "torch.as_tensor": 0, "torch.arange": None}
VALUE_KEYWORDS = {"torch.full": "fill_value", "torch.tensor": "data", "torch.as_tensor": "data"}
VALUE_WORDS = {"torch.full": "its fill value is a float", "torch.arange": "its bounds are floats"}
FLOAT32 = frozenset({"torch.float32", "torch.float"})
# Dtypes the switch leaves alone: integers, booleans, and the 16-bit floats it never widened.
KEPT_DTYPES = frozenset(
    f"torch.{n}"
    for n in (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "long",
        "int",
        "short",
        "bool",
        "bfloat16",
        "float16",
        "half",
    )
)
DEVICE_LOADERS = (
    "torch_xla.distributed.parallel_loader.MpDeviceLoader",
    "torch_xla.distributed.parallel_loader.ParallelLoader",
)
FLAG = "USE_BF16"


class PrecisionPolicy:
    """The precision policy of one file: where it is set, and the moves and loads it must reach."""

    def __init__(self, codemod: Codemod) -> None:
        self.codemod = codemod
        self.variable: str | None = None  # the switch this program turned on
        self.unconditional = False  # set at module level, so in force wherever data moves
        self.kinds: TensorKinds | None = None
        self.devices: frozenset[str] = frozenset()  # variables that hold the XLA device
        self._flag: str | None = None
        self.defaults: dict[int, cst.BaseStatement] = {}  # `FLAG = False` put before a statement
        self.flag_switches: dict[int, cst.CSTNode] = {}  # the `FLAG = True` statements we wrote
        self.global_in: set[str] = set()  # functions that set the flag
        self.explained = False  # the comment that says why the casts are there is written
        self.switched = False  # a switch has been met (module-level code after it sees the flag)

    @property
    def dtype(self) -> str | None:
        return PRECISION[self.variable] if self.variable else None

    def start(self, switches: Sequence[tuple[str, bool]], module: cst.Module) -> None:
        if not switches:
            return
        self.variable = switches[0][0]
        self.unconditional = any(unconditional for _, unconditional in switches)
        self.kinds = TensorKinds(self.codemod.qualify)
        self.kinds.scan(module)
        devices = XlaDeviceNames(self.codemod.qualify)
        devices.scan(module)
        self.devices = devices.names()

    # -- the flag ---------------------------------------------------------------------------------
    def flag(self) -> str:
        """The program's own bf16 flag; with an unconditional policy it is defined after the imports."""
        if self._flag is None:
            self._flag = self.codemod.ctx.unused_name(FLAG)
            if self.unconditional:  # the policy is explained once, where it first acted
                why = f"  # was {self.variable}=1" if self.explained else ""
                comment = "" if self.explained else f"{self._comment()}\n"
                self.codemod.ctx.module_prologue.append(f"{comment}{self._flag} = True{why}\n")
        return self._flag

    def _comment(self) -> str:
        self.explained = True
        return (
            f"# Explicit precision policy (was {self.variable}=1, which stored float tensors as "
            f"{self.dtype} on the device): float32 on the host, {self.dtype} where data moves to the device."
        )

    def _explain_here(self) -> None:
        if not self.explained:
            self.codemod.ctx.comment(self._comment())

    def switch(self, function: str | None) -> cst.BaseSmallStatement | None:
        """What replaces a switch turned on here (None: nothing, the policy holds everywhere)."""
        self.note_policy()
        self.switched = True
        ctx = self.codemod.ctx
        if self.unconditional:
            return None
        flag = self.flag()
        if function is not None:
            self.global_in.add(function)
            if not self.explained:
                ctx.module_prologue.append(f"{self._comment()}\n{flag} = False\n")
        elif not self.defaults:
            top = ctx.frames[0]
            default = stmt(f"{self._comment()}\n{flag} = False\n")
            top.before.append(default)
            self.defaults[id(top)] = default
        switch = cst.Assign([cst.AssignTarget(cst.Name(flag))], cst.Name("True"))
        self.flag_switches[id(switch)] = switch
        return switch

    def collapsed(self, node: cst.If) -> cst.SimpleStatementLine | None:
        """`if test: FLAG = True` at the top of the module, alone: `FLAG = test`."""
        body = node.body
        if (
            node.orelse is not None
            or not isinstance(body, cst.IndentedBlock)
            or len(body.body) != 1
        ):
            return None
        line = body.body[0]
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        if id(line.body[0]) not in self.flag_switches or len(self.flag_switches) != 1:
            return None
        frames = self.codemod.ctx.frames
        default = self.defaults.pop(id(frames[0]), None) if len(frames) == 1 else None
        if default is None:
            return None
        frames[0].before.remove(default)
        flag = self.flag()
        test = node.test.with_changes(lpar=[], rpar=[])
        assign = cst.Assign([cst.AssignTarget(cst.Name(flag))], test)
        assert isinstance(default, cst.SimpleStatementLine)
        return cst.SimpleStatementLine(
            [assign], leading_lines=[*node.leading_lines, *default.leading_lines]
        )

    def readable_here(self, function: str | None) -> bool:
        """A reader in module-level code before any switch reads the environment the program was
        started in, not a setting of its own: no flag can stand for it."""
        return function is not None or self.switched

    def test(self, negate: bool) -> cst.BaseExpression:
        flag = self.flag()
        return expr(f"not {flag}") if negate else cst.Name(flag)

    def cast(self, otherwise: str = "None") -> str:
        torch = self.codemod.ctx.torch()
        if self.unconditional:
            return f"{torch}.{self.dtype}"
        return f"{torch}.{self.dtype} if {self.flag()} else {otherwise}"

    def note_policy(self) -> None:
        dtype = self.dtype
        self.codemod.ctx.note(
            self.codemod.code,
            f"precision policy changed form: {self.variable}=1 made XLA store float tensors as {dtype} on "
            f"the device; the migrated code builds everything in float32 as before and casts where data "
            f"moves to the device: the model (`.to(device, torch.{dtype})`), float inputs and float "
            f"tensors created on the device; integer tensors stay as they are, models loaded with "
            f"`from_pretrained` get `dtype=torch.{dtype}`, and TODOs mark moves of data whose kind is "
            "not known. Check with `neuron-migrate validate`, which judges bf16 runs against their noise floor",
        )

    # -- calls the policy must reach ----------------------------------------------------------------
    def leave_call(
        self, original: cst.Call, call: cst.Call, function: str | None
    ) -> cst.BaseExpression:
        if self.dtype is None:
            return call
        name = self.codemod.qualify(original.func)
        if name in DEVICE_LOADERS:
            self.codemod.todo(
                f"`{self.variable}=1` made batches' float tensors {self.dtype}, this loader does not: "
                f"cast them with `.to(torch.{self.dtype})`"
            )
            return call
        if name in DEVICE_FACTORIES or name in VALUE_FACTORIES:
            return self._created_on_device(original, call, name)
        if not isinstance(call.func, cst.Attribute):
            return call
        if call.func.attr.value in LOADERS:
            return self._loaded_model(call, call.func)
        if call.func.attr.value == "to":
            return self._moved(original, call, function)
        return call

    def _is_device(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Name) and node.value in self.devices:
            return True
        return isinstance(node, cst.Call) and self.codemod.qualify(node.func) in XLA_DEVICE

    def _moved(
        self, original: cst.Call, call: cst.Call, function: str | None
    ) -> cst.BaseExpression:
        """`x.to(device)`: the model and float tensors get the device dtype; ints stay as they are."""
        positional = [a for a in original.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a for a in original.args if a.keyword is not None}
        if len(positional) > 2 or any(a.star for a in original.args):
            return call
        device = (
            positional[0].value if positional else getattr(keywords.get("device"), "value", None)
        )
        if device is None or not self._is_device(device):
            return call
        dtype = keywords.get("dtype") or (positional[1] if len(positional) == 2 else None)
        if dtype is not None:  # `x.to(device, torch.float32)`: bf16 there all the same
            return self._with_dtype(original, call, original.args.index(dtype))
        assert isinstance(original.func, cst.Attribute) and self.kinds is not None
        kind = self.kinds.kind(original.func.value, function or "")
        receiver = code_of(original.func.value)
        if kind in (Kind.INT, Kind.LOADED):
            return call
        if kind is None:
            self.codemod.todo(
                f"`{self.variable}=1` stored `{receiver}` as {self.dtype} if it holds floats: if so, "
                f"move it with `.to({code_of(device)}, torch.{self.dtype})`"
            )
            return call
        cast = expr(self.cast())
        self._explain_here()
        self.codemod.changed(
            f"`{receiver}.to(...)` -> cast to {self.dtype} where it moves to the device (was {self.variable}=1)"
        )
        if positional:
            args = list(call.args)
            at = next(i for i, a in enumerate(args) if a.keyword is None)
            first = args[at].with_changes(
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            )
            dtype_arg = cst.Arg(cast, comma=args[at].comma)
            return call.with_changes(args=[*args[:at], first, dtype_arg, *args[at + 1 :]])
        return call.with_changes(args=append_arg(call, call.args, keyword_arg("dtype", cast)))

    def _created_on_device(self, original: cst.Call, call: cst.Call, name: str) -> cst.Call:
        """A tensor made on the device: bf16 there if it was float32, whether by default, by its
        data or by the dtype it asked for."""
        keywords = {a.keyword.value: a for a in original.args if a.keyword is not None}
        device = keywords.get("device")
        if (
            device is None
            or not self._is_device(device.value)
            or any(a.star for a in original.args)
        ):
            return call
        given = keywords.get("dtype")
        if given is not None:
            return self._with_dtype(original, call, original.args.index(given))
        if name in VALUE_FACTORIES:
            kind = _data_kind(original, name)
            if kind == "whole":
                return call
            if kind is None:
                self.codemod.todo(
                    f"`{self.variable}=1` stored this tensor as {self.dtype} if "
                    f"{VALUE_WORDS.get(name, 'its data are floats')}: if so, pass `dtype=torch.{self.dtype}`"
                )
                return call
        self._explain_here()
        self.codemod.changed(
            f"a float tensor created on the device -> `dtype=torch.{self.dtype}` (was {self.variable}=1)"
        )
        return call.with_changes(
            args=append_arg(call, call.args, keyword_arg("dtype", expr(self.cast())))
        )

    def _with_dtype(self, original: cst.Call, call: cst.Call, at: int) -> cst.Call:
        """A tensor that asked for a dtype on the device: a float32 one was stored in bf16."""
        dtype = original.args[at].value
        qualified = self.codemod.qualify(dtype) or ""
        if qualified in KEPT_DTYPES:
            return call
        if qualified not in FLOAT32:
            self.codemod.todo(
                f"`{self.variable}=1` stored float32 as {self.dtype}: if `{code_of(dtype)}` is a float dtype, "
                "pass the narrower one here"
            )
            return call
        self._explain_here()
        self.codemod.changed(
            f"a float32 tensor on the device -> `torch.{self.dtype}` (was {self.variable}=1)"
        )
        cast = expr(self.cast(otherwise=code_of(dtype)))
        args = list(call.args)
        args[at] = args[at].with_changes(value=cast)
        return call.with_changes(args=args)

    def _loaded_model(self, call: cst.Call, func: cst.Attribute) -> cst.Call:
        owner = code_of(func.value).rsplit(".", 1)[-1]
        if NOT_A_MODEL.search(owner):
            return call
        dtype = self.dtype
        given = next(
            (a for a in call.args if a.keyword is not None and a.keyword.value in DTYPE_KEYWORDS),
            None,
        )
        if given is not None:
            if (
                self.codemod.qualify(given.value) != f"torch.{dtype}"
                and string_value(given.value) != dtype
            ):
                self._todo(
                    f"it asks for `{code_of(given.value)}` here: pass `dtype=torch.{dtype}` to keep {dtype}"
                )
            return call
        qualified = self.codemod.qualify(func.value) or ""
        transformers = qualified.startswith("transformers.") and TRANSFORMERS_MODEL.match(owner)
        if not transformers or not self.unconditional or any(a.star for a in call.args):
            self._todo(
                f"pass `dtype=torch.{dtype}` (`torch_dtype=` in diffusers)"
            )
            return call
        torch = self.codemod.ctx.torch()
        self.codemod.changed(
            f"`{owner}.{func.attr.value}(...)` -> `dtype=torch.{dtype}` (it keeps its checkpoint's dtype otherwise)"
        )
        return call.with_changes(
            args=append_arg(call, call.args, keyword_arg("dtype", expr(f"{torch}.{dtype}")))
        )

    def _todo(self, advice: str) -> None:
        self.codemod.todo(f"`{self.variable}=1` made this model {self.dtype}: {advice}")

    # -- functions that set the flag ----------------------------------------------------------------
    def leave_function(self, name: str, node: cst.FunctionDef) -> cst.FunctionDef:
        """A function that sets the flag declares it global (the switch was process-wide)."""
        if name not in self.global_in or self._flag is None:
            return node
        body = node.body
        if not isinstance(body, cst.IndentedBlock):
            return node
        statements = list(body.body)
        at = 1 if statements and is_docstring(statements[0]) else 0
        declaration = cst.SimpleStatementLine([cst.Global([cst.NameItem(cst.Name(self._flag))])])
        statements.insert(at, declaration)
        return node.with_changes(body=body.with_changes(body=statements))


def _data_kind(call: cst.Call, name: str) -> str | None:
    """ "float" or "whole" (ints, bools) for the data of a value factory written as literals; None
    when the code does not say."""
    position = VALUE_FACTORIES[name]
    if position is None:  # arange(start, end, step): float if any of them is
        values = [a.value for a in call.args if a.keyword is None]
        values += [
            a.value
            for a in call.args
            if a.keyword is not None and a.keyword.value in ("start", "end", "step")
        ]
    else:
        positional = [a.value for a in call.args if a.keyword is None]
        keyword = next(
            (
                a.value
                for a in call.args
                if a.keyword is not None and a.keyword.value == VALUE_KEYWORDS[name]
            ),
            None,
        )
        values = (
            [positional[position]]
            if len(positional) > position
            else [keyword]
            if keyword is not None
            else []
        )
    kinds = [_literal_kind(v) for v in values]
    if not kinds or None in kinds:
        return None
    return "float" if "float" in kinds else "whole"


def _literal_kind(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Float):
        return "float"
    if isinstance(node, cst.Integer) or (
        isinstance(node, cst.Name) and node.value in ("True", "False")
    ):
        return "whole"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus | cst.Plus):
        return _literal_kind(node.expression)
    if isinstance(node, cst.List | cst.Tuple) and node.elements:
        kinds = [_literal_kind(e.value) for e in node.elements if isinstance(e, cst.Element)]
        if len(kinds) != len(node.elements) or None in kinds:
            return None
        return "float" if "float" in kinds else "whole"
    return None
