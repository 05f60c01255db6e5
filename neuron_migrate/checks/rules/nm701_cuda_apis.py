"""NM701: CUDA-only device APIs (`.cuda()`, `"cuda"`, `torch.cuda.*`, `torch.backends.cudnn`)."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.context import dotted
from neuron_migrate.checks.model import SAFE, UNSAFE
from neuron_migrate.checks.rules.base import Invalid, Rule, constant

# torch.cuda.X() -> torch.accelerator.Y(): the same on CUDA, and raising on a machine without an
# accelerator exactly where the CUDA call raised too, except for the two below.
ACCELERATOR = {
    "is_available": "is_available",
    "device_count": "device_count",
    "synchronize": "synchronize",
    "current_device": "current_device_index",
    "set_device": "set_device_index",
    "empty_cache": "empty_cache",
}
# `torch.cuda.empty_cache()` is a no-op without CUDA; `torch.accelerator.empty_cache()` raises there.
RAISES_WITHOUT_ACCELERATOR = frozenset({"empty_cache"})
LEFT_TO_NM404 = frozenset(
    {"graph", "graphs", "CUDAGraph", "make_graphed_callables", "graph_pool_handle"}
)
DEVICE_KEYWORDS = frozenset({"device", "device_type", "map_location", "device_map"})


_PORTED = re.compile(r"\btorch\.cuda\.(?:{})\b".format("|".join(ACCELERATOR)))
# Code that works on CUDA only even without the word: `DataParallel`, NCCL, cuDNN, CUDA graphs.
_CUDA_ONLY = re.compile(r"(?i)cuda|DataParallel|nccl|cudnn|apex|bitsandbytes|flash_attn|triton")
# `torch.cuda` queries whose answer changes on Neuron (False/0 there, True/N with the
# accelerator): safe to port only as the test of a branch that is itself portable.
ANSWERS_CHANGE = frozenset({"is_available", "device_count"})
# Tests that already pick code per device: `x.device.type == "cuda"`, `"cuda" in str(device)`,
# `t.is_cuda`, `is_torch_cuda_available()`. What they guard is device-aware, not CUDA-only code.
_DEVICE_TEST = re.compile(
    r"""\.type\s*[!=]=\s*['"]cuda['"]|['"]cuda['"]\s*[!=]=\s*[\w.]+\.type|['"]cuda['"]\s+(?:not\s+)?in\b|"""
    r"""\.is_cuda\b|\bis_(?:torch_)?cuda_available\(|\bdevice_type\s*[!=]=\s*['"]cuda['"]"""
)


def _cuda_only(code: str) -> bool:
    """Does `code` still ask for CUDA once its `torch.cuda` calls with an accelerator twin are fixed?"""
    return _CUDA_ONLY.search(_PORTED.sub("", code)) is not None


def cuda_string(node: ast.AST) -> str | None:
    value = constant(node)
    if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
        return value
    return None


class CudaApis(Rule):
    """Flags CUDA-only device code.

    ## What it does
    Finds `.cuda()`, `"cuda"` / `"cuda:N"` device strings (in `torch.device(...)`, `.to(...)`,
    `device=`, `map_location=`, `device_map=`, `torch.autocast(...)`), `torch.cuda.*` (CUDA
    graphs are NM404) and `torch.backends.cudnn.*`.

    ## Why
    Trainium is the PyTorch device `neuron`; CUDA calls fail or do nothing there. Portable code
    asks `torch.accelerator`; code for Trainium only names `"neuron"`.

    ## Example
    ```python
    if torch.cuda.is_available():
        model = model.cuda()
    ```

    ## Use instead
    ```python
    if torch.accelerator.is_available():
        model = model.to(torch.accelerator.current_accelerator())
    ```

    ## Fix safety
    A safe fix behaves as before on a CPU-only machine, on CUDA, and on Trainium. Safe:
    `torch.cuda.{synchronize, current_device, set_device}` become their `torch.accelerator`
    equivalents (the same on CUDA; without CUDA both spellings raise, so nothing that ran
    changes), unless a `try:` around them catches only `AssertionError` or `AttributeError`,
    which the CUDA spellings raise and the accelerator ones do not. `torch.cuda.is_available()`
    and `device_count()` answer differently on Trainium once ported (False/0 becomes True/N), so
    they are safe only as the test of a branch that is itself portable, or (`device_count`) under
    such a test; guarding CUDA-only code (`"cuda" if ... else "cpu"`, `.cuda()`,
    `DataParallel`, NCCL) they are unsafe. `torch.cuda.empty_cache()` is a no-op without CUDA
    where `torch.accelerator.empty_cache()` raises ("Cannot access accelerator device when none
    is available"), so it is safe only under an availability test. With `--target neuron`
    (code for Trainium only), `.cuda()` becomes `.to("neuron")` and `"cuda"` strings become
    `"neuron"`. Code on the CUDA side of a test that already picks code per device
    (`x.device.type == "cuda"`, `t.is_cuda`, `is_torch_cuda_available()`) and the body of a
    `cuda()` method of its own are not flagged.
    """

    code = "NM701"
    name = "cuda-apis"
    summary = "CUDA-only device APIs"
    calls = frozenset({"cuda", "device", "to", "autocast"})
    keywords = DEVICE_KEYWORDS
    requires = ("cuda", "cudnn")  # every finding names one
    attributes = frozenset({"cuda", "cudnn"})
    VALID = (
        "import torch\n\nif torch.accelerator.is_available():\n    model = model.to('neuron')\n",
        "import torch\n\nx = torch.zeros(2, device='cpu')\n",
        "import torch\n\ndef step(x):\n    if x.device.type == 'cuda':\n        torch.cuda.synchronize()\n    return x\n",
        "def f(t, cast):\n    return t.half().cuda() if t.is_cuda else cast(t)\n",
        "class Rotation:\n    def cuda(self):\n        return Rotation(self.mats.cuda())\n",
        "import numpy as np\n\ndef host(x):\n    a = np.asarray(x)\n    return a.cuda()\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\nif torch.cuda.is_available():\n    n = torch.cuda.device_count()\n",
            fixed="import torch\n\nif torch.accelerator.is_available():\n    n = torch.accelerator.device_count()\n",
        ),
        Invalid("model = model.cuda()\n", line=1, fixed=None),
        Invalid(
            "model = model.cuda()\nx = x.to('cuda:0')\n",
            target="neuron",
            fixed="model = model.to(\"neuron\")\nx = x.to('neuron:0')\n",
        ),
        Invalid("import torch\n\ntorch.backends.cudnn.benchmark = True\n", line=3),
        Invalid(
            "import torch\n\nx = torch.zeros(2, device='cuda')\n",
            target="neuron",
            fixed="import torch\n\nx = torch.zeros(2, device='neuron')\n",
        ),
        Invalid("import torch\n\nwith torch.cuda.amp.autocast():\n    y = m(x)\n", line=3),
        Invalid(
            "import torch\n\ntorch.cuda.empty_cache()\n",
            fixed=None,
            unsafe_fixed="import torch\n\ntorch.accelerator.empty_cache()\n",
        ),
        Invalid(
            "import torch\n\nif torch.cuda.is_available():\n    torch.cuda.empty_cache()\n",
            fixed="import torch\n\nif torch.accelerator.is_available():\n    torch.accelerator.empty_cache()\n",
        ),
        Invalid(
            "import torch\n\ntry:\n    torch.cuda.synchronize()\nexcept AssertionError:\n    pass\n",
            fixed=None,
            unsafe_fixed="import torch\n\ntry:\n    torch.accelerator.synchronize()\nexcept AssertionError:\n    pass\n",
        ),
        Invalid(
            "import torch\n\nif torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n",
            fixed=None,
            unsafe_fixed="import torch\n\nif torch.accelerator.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n",
        ),
        Invalid(
            "import torch\n\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
            fixed=None,
            unsafe_fixed="import torch\n\ndevice = 'cuda' if torch.accelerator.is_available() else 'cpu'\n",
        ),
    )

    def _device_guarded(self) -> bool:
        """Inside the CUDA side of a test that already picks code per device."""
        stack = self.ctx.stack
        for index in range(len(stack) - 2, -1, -1):
            node = stack[index]
            child = stack[index + 1]
            if (isinstance(node, ast.If) and any(s is child for s in node.body)) or (isinstance(node, ast.IfExp) and child is node.body):
                if _DEVICE_TEST.search(self.ctx.source(node.test)):
                    return True
            elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
                before = node.values[: next(i for i, v in enumerate(node.values) if v is child)]
                if any(_DEVICE_TEST.search(self.ctx.source(v)) for v in before):
                    return True
        return False

    def visit_attribute(self, node: ast.Attribute) -> None:
        ctx = self.ctx
        if node.attr == "cuda" and self._device_guarded():
            return
        qualified = ctx.qualify(node)
        if qualified == "torch.backends.cudnn":
            self.report(node, "`torch.backends.cudnn` settings are CUDA-only; remove them")
            return
        if qualified != "torch.cuda":
            return
        outer = ctx.parent()
        member = outer.attr if isinstance(outer, ast.Attribute) and outer.value is node else None
        if member in LEFT_TO_NM404:
            return
        fix = None
        call = ctx.parent(2)
        if member in ACCELERATOR and isinstance(call, ast.Call) and call.func is outer:
            torch_name = ctx.aliases.local_for("torch")
            if torch_name and ctx.source(node).startswith(torch_name + "."):
                fix = ctx.fix(
                    ctx.replace(outer, f"{torch_name}.accelerator.{ACCELERATOR[member]}"),
                    f"use `torch.accelerator.{ACCELERATOR[member]}`",
                    SAFE if self._same_everywhere(member, call) else UNSAFE,
                )
        shown = f"torch.cuda.{member}" if member else "torch.cuda"
        hint = (
            f"use `torch.accelerator.{ACCELERATOR[member]}`"
            if member in ACCELERATOR
            else "use `torch.accelerator` or the `neuron` device"
        )
        target: ast.AST = outer if member and outer is not None else node
        self.report(target, f"`{shown}` is CUDA-only; {hint}", fix=fix)

    def _same_everywhere(self, member: str, call: ast.Call) -> bool:
        """Whether the `torch.accelerator` spelling behaves as the CUDA call did on every device."""
        if self._caught_by_type():
            return False
        guard = self._enclosing_condition(call)
        # Under `if torch.cuda.is_available():` it counts what that test found (and the test's
        # own fix decides whether Trainium takes the branch).
        if (
            member == "device_count"
            and guard is not None
            and not guard[0]
            and "is_available" in self.ctx.source(guard[1].test)
        ):
            return True
        if member in ANSWERS_CHANGE:
            # Only as the test of a branch that is not CUDA-only: Trainium would now take it.
            if guard is None or not guard[0]:
                return False
            node = guard[1]
            branch = [node.body] if isinstance(node, ast.IfExp) else node.body
            return not any(_cuda_only(self.ctx.source(part)) for part in branch)
        if member in RAISES_WITHOUT_ACCELERATOR:
            return guard is not None and not guard[0] and "is_available" in self.ctx.source(guard[1].test)
        return True

    def _caught_by_type(self) -> bool:
        """Inside `try:` whose handlers pick exception types: without a device the CUDA calls
        raise AssertionError or AttributeError, the accelerator ones RuntimeError."""
        stack = self.ctx.stack
        for index in range(len(stack) - 2, -1, -1):
            node = stack[index]
            if isinstance(node, ast.Try) and any(s is stack[index + 1] for s in node.body):
                for handler in node.handlers:
                    caught = {n.id for n in ast.walk(handler.type) if isinstance(n, ast.Name)} if handler.type else set()
                    if caught and not caught & {"Exception", "BaseException", "RuntimeError"}:
                        return True
        return False

    def _enclosing_condition(self, call: ast.Call) -> tuple[bool, ast.If | ast.IfExp] | None:
        """The nearest `if` or conditional expression around `call`, and whether `call` is in its test."""
        stack = self.ctx.stack
        for index in range(len(stack) - 2, -1, -1):
            node = stack[index]
            if isinstance(node, ast.If | ast.IfExp):
                return stack[index + 1] is node.test, node
        return None

    def visit_call(self, node: ast.Call, name: str) -> None:
        ctx = self.ctx
        func = node.func
        if name == "cuda":
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Call)
                and dotted(func.value.func) == "super"
            ):
                return  # an override of `Module.cuda` passing the call on
            if not isinstance(func, ast.Attribute) or ctx.qualify(func.value) is not None:
                return
            if any(getattr(f, "name", "") == "cuda" for f in ctx.functions):
                return  # the implementation of a `cuda()` method, passing the call on
            if ctx.kind(func.value) in ("numpy", "python", "read") or self._device_guarded():
                return
            fix = None
            if ctx.neuron_target and not node.args and not node.keywords:
                start = ctx.method_start(node)
                assert start is not None
                end = ctx.span(node)[1]
                from neuron_migrate.checks.model import Edit

                fix = ctx.fix(Edit(start, end, 'to("neuron")'), 'use `.to("neuron")`', SAFE)
            self.report(
                node,
                '`.cuda()` moves to a CUDA device; use `.to(device)` with the accelerator (or "neuron")',
                fix=fix,
                start=ctx.method_start(node),
            )
            return
        if not node.args:
            return
        first = node.args[0]
        if name == "to" and not isinstance(func, ast.Attribute):
            return
        if name in ("device", "autocast") and ctx.qualify(func) not in (
            "torch.device",
            "torch.autocast",
            "torch.amp.autocast",
        ):
            return
        value = cuda_string(first)
        if value is not None:
            self._string(first, value)

    def visit_keyword(self, call: ast.Call, keyword: ast.keyword) -> None:
        value = cuda_string(keyword.value)
        if value is not None:
            self._string(keyword.value, value)

    def _string(self, node: ast.AST, value: str) -> None:
        ctx = self.ctx
        if self._device_guarded():
            return
        fix = None
        if ctx.neuron_target:
            source = ctx.source(node)
            fix = ctx.fix(
                ctx.replace(node, source.replace("cuda", "neuron", 1)), 'use the "neuron" device'
            )
        self.report(
            node,
            f'device {value!r} is CUDA-only; use the accelerator (`torch.accelerator`) or "neuron"',
            fix=fix,
        )
