"""NM009: XLA runtime environment variables go; the bf16 ones become an explicit dtype policy."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.oldstack import PRECISION, XLA_VARIABLE
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    code_of,
    expr,
    fix_trailing_comma,
    stmt,
    string_value,
)

ENVIRON = "os.environ"
GETENV = ("os.getenv", "os.environ.get")
SETTERS = ("os.environ.setdefault", "os.putenv")
UPDATE = ("os.environ.update",)

# An XLA variable being set in this file: `env["XLA_X"] = ...`, `("XLA_X", ...)`, `{"XLA_X": ...}`, `XLA_X=...`.
SETTING = re.compile(r"""['"](?:XLA_\w+|PT_XLA_\w+|PJRT_\w+)['"]\s*(?:\]\s*=[^=]|,|:)|\b(?:XLA_\w+|PJRT_\w+)=""")
TRUE_VALUES = frozenset({"1", "true", "True", "TRUE", "yes"})


def _key(node: cst.CSTNode) -> str | None:
    value = string_value(node)
    return value if value is not None and XLA_VARIABLE.match(value) else None


class XlaEnv(Codemod):
    """Removes XLA runtime environment variables; turns the bf16 switches into a dtype policy.

    ## What it does
    Deletes assignments of `XLA_*`, `PT_XLA_*` and `PJRT_*` variables (`os.environ[...] = ...`,
    `setdefault`, `update`, `putenv`, entries of env dicts handed to subprocesses, written as
    literals or as `dict(os.environ, NAME=value)`).
    `XLA_USE_BF16=1` / `XLA_DOWNCAST_BF16=1` become `torch.set_default_dtype(torch.bfloat16)`
    after the imports, and code that read them to choose behaviour now asks
    `torch.get_default_dtype() == torch.bfloat16`.

    ## Why
    These variables configured the XLA runtime. `XLA_USE_BF16=1` silently stored every float32
    tensor as bf16 on the device; natively nothing does that, so a plain deletion would change
    the precision of the whole run without a word.

    ## Example
    ```python
    os.environ["XLA_USE_BF16"] = "1"
    os.environ["PJRT_DEVICE"] = "NEURON"
    import torch
    ...
    if os.environ.get("XLA_USE_BF16") == "1":
        print("training in bf16")
    ```

    ## Use instead
    ```python
    import torch

    torch.set_default_dtype(torch.bfloat16)
    ...
    if torch.get_default_dtype() == torch.bfloat16:
        print("training in bf16")
    ```

    ## Fix safety
    The precision policy changes form: new float tensors and parameters are bf16 everywhere,
    including on the host, while data converted from numpy stays float32 until cast. The report
    says so; compare runs with `neuron-migrate validate`. `NEURON_*` runtime variables are kept.
    """

    code = "NM009"
    name = "xla-env"
    summary = "XLA env vars removed; `XLA_USE_BF16`/`XLA_DOWNCAST_BF16` -> explicit dtype policy"
    markers = ("XLA_", "PJRT_", "CPU_NUM_DEVICES", "TPU_NUM_DEVICES")
    needs_old_stack_import = False  # XLA_*/PJRT_* variables configure only the XLA runtime
    manual: ClassVar[dict[str, str]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.policy: str | None = None  # dtype set by a bf16/fp16 switch in this file
        self.depth = 0
        self.torch_imported = False  # seen `import torch` yet, in source order

    # -- where we are ---------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self.depth -= 1
        return updated_node

    def visit_Import(self, node: cst.Import) -> None:
        if any(code_of(alias.name).split(".")[0] == "torch" for alias in node.names):
            self.torch_imported = True

    def visit_Module(self, node: cst.Module) -> None:
        # Readers anywhere in the file follow a policy set anywhere in it: find it first.
        for variable, dtype in PRECISION.items():
            pattern = re.compile(rf"""['"]{variable}['"]\s*\]\s*=\s*['"]1['"]|['"]{variable}['"]\s*,\s*['"]1['"]|['"]{variable}['"]\s*:\s*['"]1['"]""")
            if pattern.search(self.ctx.source):
                self.policy = dtype

    # -- setters --------------------------------------------------------------------------------
    def _apply_policy(self, variable: str, value: str | None) -> None:
        dtype = PRECISION[variable]
        if value is None or value not in TRUE_VALUES:
            if value is None:
                self.todo(f"{variable} was set from a non-literal value; choose the dtype explicitly (`torch.set_default_dtype(torch.{dtype})` or `torch.autocast`)")
            return
        torch = self.ctx.torch()
        line = f"{torch}.set_default_dtype({torch}.{dtype})"
        comment = f"# Explicit precision policy (was {variable}=1, which stored float32 tensors as {dtype} on the device)."
        if len(self.ctx.frames) == 1:  # a plain module-level statement: after the imports
            block = f"{comment}\n{line}\n"
            if block not in self.ctx.module_prologue:
                self.ctx.module_prologue.append(block)
        else:  # conditional or inside a function: keep the condition, in place
            if self.depth == 0 and not self.torch_imported:
                self.ctx.insert_after(stmt("import torch\n"))
            self.ctx.comment(comment)
            self.ctx.insert_after(stmt(f"{line}\n"))
        self.ctx.note(
            self.code,
            f"precision policy changed: {variable}=1 made XLA store float32 tensors as {dtype}; "
            f"the migrated code calls `torch.set_default_dtype(torch.{dtype})` instead, so parameters and new "
            "float tensors are bf16 on every device while data built from numpy stays float32 until cast",
        )

    def _removed_setting(self, variable: str, value: cst.BaseExpression | None) -> None:
        if variable in PRECISION:
            self._apply_policy(variable, string_value(value) if value is not None else None)
        self.changed(f"removed the `{variable}` setting (XLA runtime only)")

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:
        if len(updated_node.targets) != 1:
            return updated_node
        target = updated_node.targets[0].target
        if not isinstance(target, cst.Subscript) or len(target.slice) != 1:
            return updated_node
        index = target.slice[0].slice
        if not isinstance(index, cst.Index):
            return updated_node
        variable = _key(index.value)
        if variable is None:
            return updated_node
        self._removed_setting(variable, updated_node.value)
        return self.ctx.remove(updated_node)

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = updated_node.value
        if not isinstance(call, cst.Call):
            return updated_node
        name = self.qualify(call.func)
        if name in SETTERS and len(call.args) == 2:
            variable = _key(call.args[0].value)
            if variable is not None:
                self._removed_setting(variable, call.args[1].value)
                return self.ctx.remove(updated_node)
        if (
            name in UPDATE
            and len(call.args) == 1
            and isinstance(call.args[0].value, cst.Dict)
            and not call.args[0].value.elements
        ):
            self.changed("removed an `os.environ.update` left empty")
            return self.ctx.remove(updated_node)
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        """`dict(os.environ, PJRT_DEVICE="NEURON")`: an env built with keywords."""
        if not (isinstance(updated_node.func, cst.Name) and updated_node.func.value == "dict"):
            return updated_node
        kept = []
        for arg in updated_node.args:
            if arg.keyword is not None and XLA_VARIABLE.match(arg.keyword.value):
                self._removed_setting(arg.keyword.value, arg.value)
            else:
                kept.append(arg)
        if len(kept) == len(updated_node.args):
            return updated_node
        return updated_node.with_changes(args=fix_trailing_comma(kept))

    def leave_Dict(self, original_node: cst.Dict, updated_node: cst.Dict) -> cst.Dict:
        kept = []
        for element in updated_node.elements:
            variable = _key(element.key) if isinstance(element, cst.DictElement) else None
            if variable is None:
                kept.append(element)
            else:
                assert isinstance(element, cst.DictElement)
                self._removed_setting(variable, element.value)
        if len(kept) == len(updated_node.elements):
            return updated_node
        if kept:
            # The new last element takes the old one's trailing comma, or none.
            last = updated_node.elements[-1]
            kept[-1] = kept[-1].with_changes(comma=last.comma)
        return updated_node.with_changes(elements=kept)

    # -- readers --------------------------------------------------------------------------------
    def _reader_variable(self, node: cst.CSTNode) -> str | None:
        """`os.environ.get("X")`, `os.getenv("X")`, `os.environ["X"]` -> "X"."""
        if isinstance(node, cst.Call) and self.qualify(node.func) in GETENV and node.args:
            return _key(node.args[0].value)
        if isinstance(node, cst.Subscript) and self.qualify(node.value) == ENVIRON and len(node.slice) == 1:
            index = node.slice[0].slice
            return _key(index.value) if isinstance(index, cst.Index) else None
        return None

    def _migrating_readers(self) -> bool:
        """Readers need attention in old-stack code, or where this file's own settings went.

        A library that merely reads a user's XLA setting (among other devices) is left alone.
        """
        return self.ctx.old_stack_file or bool(SETTING.search(self.ctx.source))

    def _policy_test(self, variable: str, negate: bool = False) -> cst.BaseExpression | None:
        if not self._migrating_readers():
            return None
        if variable not in PRECISION:
            self.todo(f"`{variable}` configured the XLA runtime; natively it is never set, so this test is always false")
            return None
        dtype = PRECISION[variable]
        if self.policy != dtype:
            self.todo(f"`{variable}` no longer changes precision natively; replace this test with your own flag and set the dtype explicitly")
            return None
        torch = self.ctx.torch()
        self.changed(f"`{variable}` test -> `torch.get_default_dtype() == torch.{dtype}`")
        return self.ctx.group(expr(f"{torch}.get_default_dtype() {'!=' if negate else '=='} {torch}.{dtype}"))

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.BaseExpression:
        if len(updated_node.comparisons) != 1:
            return updated_node
        target = updated_node.comparisons[0]
        operator = target.operator
        # "X" in os.environ
        if isinstance(operator, cst.In | cst.NotIn) and self.qualify(target.comparator) == ENVIRON:
            variable = _key(updated_node.left)
            if variable is not None:
                return self._policy_test(variable, negate=isinstance(operator, cst.NotIn)) or updated_node
            return updated_node
        variable = self._reader_variable(updated_node.left)
        literal = string_value(target.comparator)
        if variable is None or literal is None or not isinstance(operator, cst.Equal | cst.NotEqual):
            return updated_node
        truthy = literal in TRUE_VALUES
        if not truthy and literal not in ("0", "false", "False", ""):
            return updated_node
        negate = isinstance(operator, cst.NotEqual) == truthy
        return self._policy_test(variable, negate=negate) or updated_node

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        """Readers the rewrites above could not turn into a policy test still need a person."""
        stack: list[cst.CSTNode] = [s for s in updated_node.body if id(s) not in self.ctx.removed]
        while stack:
            node = stack.pop()
            variable = self._reader_variable(node)
            if variable is not None:
                self._policy_test_todo(variable)
                continue
            stack.extend(node.children)
        return updated_node

    def _policy_test_todo(self, variable: str) -> None:
        if not self._migrating_readers():
            return
        if variable in PRECISION:
            self.todo(f"`{variable}` no longer changes precision natively; test `torch.get_default_dtype()` or your own flag instead")
        else:
            self.todo(f"`{variable}` configured the XLA runtime; natively it is never set")

    def _bare_test(self, test: cst.BaseExpression) -> cst.BaseExpression:
        variable = self._reader_variable(test)
        if variable is None:
            return test
        return self._policy_test(variable) or test

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        return updated_node.with_changes(test=self._bare_test(updated_node.test))

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.IfExp:
        test = self._bare_test(updated_node.test)
        if id(test) in self.ctx.grouped and len(test.lpar) == 1:
            # A comparison binds tighter than `x if test else y`: no parentheses needed.
            test = test.with_changes(lpar=[], rpar=[])
        return updated_node.with_changes(test=test)
