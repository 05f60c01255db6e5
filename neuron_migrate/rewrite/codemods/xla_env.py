"""NM009: XLA runtime environment variables go; the bf16 ones become an explicit dtype policy."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.cst_children import children
from neuron_migrate.core.oldstack import PRECISION, is_xla_variable, uses_pytorch_xla
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    FileFacts,
    code_of,
    fix_trailing_comma,
    string_value,
)
from neuron_migrate.rewrite.codemods.env_roles import ENVIRON, EnvRoles, Role, read_roles
from neuron_migrate.rewrite.codemods.precision import PrecisionPolicy

GETENV = ("os.getenv", "os.environ.get")
SETTERS = ("os.environ.setdefault", "os.putenv")
UPDATE = ("os.environ.update",)
SUBPROCESS = tuple(f"subprocess.{name}" for name in ("run", "Popen", "call", "check_call", "check_output"))
SHELL_LAUNCHES = ("os.system", "os.popen")

# An XLA variable being set in this file: `env["XLA_X"] = ...`, `("XLA_X", ...)`, `{"XLA_X": ...}`, `XLA_X=...`.
SETTING = re.compile(r"""['"](?:XLA_\w+|PT_XLA_\w+|PJRT_\w+)['"]\s*(?:\]\s*=[^=]|,|:)|\b(?:XLA_\w+|PJRT_\w+)=""")
TRUE_VALUES = frozenset({"1", "true", "True", "TRUE", "yes"})
FALSE_VALUES = frozenset({"0", "false", "False", ""})
# `XLA_USE_BF16=1 python train.py` in a command string: the child's precision.
# The value must be a shell word followed by more of the command, so that a message such as
# `"XLA_USE_BF16=1: training in bf16"` is not taken for one.
SWITCH_IN_COMMAND = re.compile(
    rf"""(?<![\w-])({'|'.join(PRECISION)})=(?:'[^']*'|"[^"]*"|[\w.,/-]*)\s+[\w./$'"-]"""
    rf"""|\bexport\s+({'|'.join(PRECISION)})=""",
)

# A command that starts a Python process, which a precision switch in its environment reached.
STARTS_PYTHON = re.compile(r"(?<![\w.-])(?:python3?|torchrun|accelerate|deepspeed)(?![\w.-])|\w\.py\b")

REMOTE_TODO = "XLA variables kept for the remote job: migrate its `entry_point`{precision}, then drop them"
REMOTE_PRECISION = " (`{variable}=1`: cast to {dtype})"
CHILDREN_ONLY_TODO = (
    "`{variable}` only reached child processes, natively a no-op: cast to torch.{dtype} in their scripts where data moves to the device"
)
# A module of a program that switches the whole process to bf16 but moves nothing to the device
# itself: no cast here can carry the policy, and a flag nothing reads would drop it silently.
ELSEWHERE_TODO = (
    "`{variable}=1` put the process in {dtype}; this file moves no data: cast where the program does (`.to(device, torch.{dtype})`)"
)
# What the policy acts on in a file: a move to the device, a device argument, a loaded model.
_MOVES = (".to(", "device=", ".cuda(", "xla_device", "from_pretrained", "DeviceLoader", "ParallelLoader")
NXD = "neuronx_distributed"


def _read_in(source: str, variable: str) -> bool:
    """Does the file read `variable` (`os.environ.get("X")`, `os.environ["X"]`, `"X" in os.environ`)?"""
    name = re.escape(variable)
    return bool(
        re.search(rf"""(?:\.get|getenv)\(\s*['"]{name}['"]|\[['"]{name}['"]\](?!\s*=[^=])|['"]{name}['"]\s+(?:not\s+)?in\b""", source)
    )
# neuronx-distributed reads the switches itself (its fp32-master optimizers, layer norms and
# trainer choose their dtypes by them), so they stay while its code does.
NXD_PRECISION_TODO = (
    "`{variable}` is read by NxD too: keep it while this file uses NxD, then drop it and cast to torch.{dtype}"
)
CHILD_PRECISION_TODO = (
    "`{variable}` set this child process's precision, natively a no-op: cast to torch.{dtype} in its script"
)


class XlaEnv(Codemod):
    """Removes XLA runtime environment variables; turns the bf16 switches into a dtype policy.

    ## What it does
    Deletes assignments of `XLA_*`, `PT_XLA_*` and `PJRT_*` variables (`os.environ[...] = ...`,
    `setdefault`, `update` with a dict or keywords, `putenv`, entries of env dicts handed to
    subprocesses, written as literals or as `dict(os.environ, NAME=value)`).
    `XLA_USE_BF16=1` / `XLA_DOWNCAST_BF16=1` set for this program become casts where data moves to
    the device, as the XLA bridge did them: the model (`model.to(device, torch.bfloat16)`), float
    inputs and float tensors created on the device; integer tensors stay as they are, and models the
    file loads with `from_pretrained` / `from_config` get `dtype=torch.bfloat16`. A switch set only
    on some runs, or read back to choose behaviour, becomes the program's own flag `USE_BF16`.
    A reader of another switch than the one this program turns on gets a TODO.

    ## Why
    These variables configured the XLA runtime. `XLA_USE_BF16=1` silently stored every float
    tensor as bf16 on the device, while the model was built and initialised in float32 on the host;
    natively nothing does that, so a plain deletion would change the precision of the whole run
    without a word, and a default dtype of bf16 would initialise other weights than the original.

    ## Example
    ```python
    if args.bf16:
        os.environ["XLA_USE_BF16"] = "1"
    import torch
    ...
    model = Classifier().to(xm.xla_device())
    features, labels = features.to(device), labels.to(device)
    if os.environ.get("XLA_USE_BF16") == "1":
        print("training in bf16")
    ```

    ## Use instead
    ```python
    USE_BF16 = args.bf16
    import torch
    ...
    model = Classifier().to(device, torch.bfloat16 if USE_BF16 else None)
    features, labels = features.to(device, torch.bfloat16 if USE_BF16 else None), labels.to(device)
    if USE_BF16:
        print("training in bf16")
    ```

    ## Fix safety
    A move is cast only where the file shows what moves: a module (a class of the file deriving
    from `nn.Module`, a `torch.nn` layer), or float tensors (`torch.randn`, `.float()`, a function of
    the file returning them); integer tensors and loaded models are left as they are, and any other
    move gets a TODO, as does a device loader (its batches move uncast). A switch set inside a
    function sets the flag as a global (the variable was process-wide). Tensors made on the host keep
    their float32 until they move, exactly as before. A switch in the environment of a child process
    (`subprocess.run(..., env=...)`, a command string) is removed with a TODO: the dtype belongs in
    the script that process runs; so is one this program set for itself where a Python process it
    starts inherits it. A launcher that never imports torch (or a notebook that never loads
    PyTorch/XLA) set the switch only for such children: it gets no policy of its own. A notebook's
    `%env XLA_USE_BF16=1` is the kernel's own switch, set for the whole program. A module that sets
    the switch for its process but moves nothing to the device itself (a helper that other files
    call) gets a TODO: the casts belong where the program moves data. The `environment=`
    of a remote job (a SageMaker estimator) configures that job and is left as it is, with a TODO.
    neuronx-distributed reads the switches itself (its optimizers, norms and trainer choose their
    dtypes by them): a file that uses NxD keeps them until that code is native, then builds the
    model in float32 and casts it and its float inputs where they move.
    `XLA_FLAGS` is left alone in files that do not use PyTorch/XLA (JAX and TensorFlow read it
    too). `NEURON_*` runtime variables are kept. Compare runs with `neuron-migrate validate`, which
    judges bf16 runs against their noise floor.
    """

    code = "NM009"
    name = "xla-env"
    summary = "XLA env vars removed; `XLA_USE_BF16`/`XLA_DOWNCAST_BF16` -> explicit dtype policy"
    markers = ("XLA_", "PJRT_", "CPU_NUM_DEVICES", "TPU_NUM_DEVICES")
    needs_old_stack_import = False  # XLA_*/PJRT_* variables configure only the XLA runtime
    manual: ClassVar[dict[str, str]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pytorch_xla = uses_pytorch_xla(self.ctx.source)
        self.roles = EnvRoles()
        self.precision = PrecisionPolicy(self)
        self.remote_todos: set[str] = set()  # TODO texts left on a remote job's environment
        self.answered: dict[int, cst.CSTNode] = {}  # readers already rewritten or given a TODO
        self.functions: list[str] = []  # the functions being rewritten, innermost last
        self.inherited: list[str] = []  # switches this program turned on, which its children inherit
        self.launches = False  # the file starts a Python process that inherits its environment
        self.kept_for_nxd = False  # the setting just read stays, for neuronx-distributed

    def _key(self, node: cst.CSTNode) -> str | None:
        value = string_value(node)
        return value if value is not None and is_xla_variable(value, self.pytorch_xla) else None

    @classmethod
    def applies(cls, facts: FileFacts, text: str) -> bool:
        return bool(facts.environment) or super().applies(facts, text)

    def visit_Module(self, node: cst.Module) -> None:
        # Readers anywhere in the file follow a policy set anywhere in it: find it first.
        if SETTING.search(self.ctx.source):
            self.roles = read_roles(node, self.qualify, _turns_on)
        # Switches the process started with (`%env XLA_USE_BF16=1` in a notebook): its own
        # environment, as `os.environ[...] = "1"` at the top of the file would have set it.
        environment = self.ctx.facts.environment.items() if self._reads_switches() else ()
        started = [v for v, value in environment if v in PRECISION and value in TRUE_VALUES]
        self.roles.process_switches[:0] = [(variable, True) for variable in started]
        self.inherited = list(dict.fromkeys(variable for variable, _ in self.roles.process_switches))
        if self.inherited:
            self.launches = any(self._inheriting_launch(call) for call in _calls(node))
        if not self._reads_switches() or self.ctx.facts.uses(NXD):
            self.roles.process_switches = []
        self.precision.start(self.roles.process_switches, node)
        if started:  # in force from the first line: every reader sees it
            self.precision.switch(None)

    def _reads_switches(self) -> bool:
        """Does this program's own process read its precision switches? Only the old stack did: a
        notebook (the whole program) that never loads it, or a script that never imports torch
        (a launcher), ran in float32 whatever they said, and set them for its children only. A
        script that uses torch may be one module of an XLA program."""
        return self.ctx.old_stack_file or (not self.ctx.notebook and self.ctx.facts.uses("torch"))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        return self.precision.leave_function(self.functions.pop(), updated_node)

    # -- setters --------------------------------------------------------------------------------
    def _apply_policy(self, variable: str, value: str | None) -> None:
        dtype = PRECISION[variable]
        if value is None or value not in TRUE_VALUES:
            if value is None:
                self.todo(f"`{variable}` is set from a non-literal value: cast explicitly (`model.to(device, torch.{dtype})`, float inputs) or use `torch.autocast`")
            return
        if not self._reads_switches():
            if not self.launches:  # else each launch that inherits it says so
                self.todo(CHILDREN_ONLY_TODO.format(variable=variable, dtype=dtype))
            return
        if not any(move in self.ctx.source for move in _MOVES) and not _read_in(self.ctx.source, variable):
            self.todo(ELSEWHERE_TODO.format(variable=variable, dtype=dtype))
            return
        switch = self.precision.switch(self.functions[-1] if self.functions else None)
        if switch is not None:
            self.ctx.insert_after(cst.SimpleStatementLine([switch]))

    def _setting(self, variable: str, value: cst.BaseExpression | None, role: Role) -> bool:
        """Migrate `variable=value` set for `role`; False when the setting must stay."""
        literal = string_value(value) if value is not None else None
        if role is Role.REMOTE:
            self._remote_job(variable if variable in PRECISION and literal not in FALSE_VALUES else None)
            return False
        if variable in PRECISION and role is Role.PROCESS and self.ctx.facts.uses(NXD):
            self.todo(NXD_PRECISION_TODO.format(variable=variable, dtype=PRECISION[variable]))
            self.kept_for_nxd = True
            return False
        if variable in PRECISION and role is Role.PROCESS:
            self._apply_policy(variable, literal)
        elif variable in PRECISION and literal not in FALSE_VALUES:
            self._child_precision(variable)
        self.changed(f"removed the `{variable}` setting (XLA runtime only)")
        return True

    def _remote_job(self, switch: str | None) -> None:
        """One TODO per statement, naming a precision switch if the statement sets one."""
        message = REMOTE_TODO.format(
            precision=REMOTE_PRECISION.format(variable=switch, dtype=PRECISION[switch]) if switch else ""
        )
        todos = self.ctx.frames[-1].todos
        said = next((todo for todo in todos if todo[1] in self.remote_todos), None)
        if said is not None and (switch is None or said[1] != REMOTE_TODO.format(precision="")):
            return
        if said is not None:
            todos.remove(said)  # the one naming the switch says more
        self.remote_todos.add(message)
        self.todo(message)

    def _child_precision(self, variable: str) -> None:
        dtype = PRECISION[variable]
        self.todo(CHILD_PRECISION_TODO.format(variable=variable, dtype=dtype))
        self.ctx.note(
            self.code,
            f"precision: `{variable}` no longer reaches the processes this file starts; they run in "
            f"float32 until their scripts set the dtype (see the TODOs)",
        )

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:
        if len(updated_node.targets) != 1:
            return updated_node
        target = updated_node.targets[0].target
        if not isinstance(target, cst.Subscript) or len(target.slice) != 1:
            return updated_node
        index = target.slice[0].slice
        if not isinstance(index, cst.Index):
            return updated_node
        variable = self._key(index.value)
        self.kept_for_nxd = False
        if variable is None or not self._setting(variable, updated_node.value, self.roles.role(original_node)):
            if self.kept_for_nxd:
                self.answered[id(target)] = target  # the setting's own TODO says it all
            return updated_node
        return self.ctx.remove(updated_node)

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = updated_node.value
        if not isinstance(call, cst.Call):
            return updated_node
        name = self.qualify(call.func)
        if name in SETTERS and len(call.args) == 2:
            variable = self._key(call.args[0].value)
            if variable is not None and self._setting(variable, call.args[1].value, Role.PROCESS):
                return self.ctx.remove(updated_node)
        if name in UPDATE and _emptied_update(call):
            self.changed("removed an `os.environ.update` left empty")
            return self.ctx.remove(updated_node)
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = updated_node.func
        if isinstance(func, cst.Name) and func.value == "dict":
            # `dict(os.environ, PJRT_DEVICE="NEURON")`: an environment built with keywords.
            return self._without_keywords(updated_node, lambda arg: self.roles.role(original_node))
        if isinstance(func, cst.Attribute) and func.attr.value == "update":
            # `os.environ.update(XLA_USE_BF16="1")`, `env.update(PJRT_DEVICE="NEURON")`
            by_arg = dict(zip(map(id, updated_node.args), original_node.args, strict=False))
            return self._without_keywords(updated_node, lambda arg: self.roles.role(by_arg.get(id(arg), arg)))
        if self.inherited and self._inheriting_launch(original_node):
            for variable in self.inherited:
                self._child_precision(variable)
        call = self._without_emptied_env(original_node, updated_node)
        return self.precision.leave_call(original_node, call, self.functions[-1] if self.functions else None)

    def _inheriting_launch(self, call: cst.Call) -> bool:
        """`subprocess.run([sys.executable, "train.py"])`: a Python process that starts with this
        program's environment (no `env=`, or one made from `os.environ`). A command the code
        builds elsewhere may be one."""
        name = self.qualify(call.func)
        if (name not in SUBPROCESS and name not in SHELL_LAUNCHES) or not call.args or call.args[0].keyword is not None:
            return False
        command = call.args[0].value
        literal = isinstance(command, cst.SimpleString | cst.ConcatenatedString | cst.FormattedString | cst.List | cst.Tuple)
        text = code_of(command)
        if literal and not STARTS_PYTHON.search(text) and "sys.executable" not in text:
            return False
        env = next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "env"), None)
        if isinstance(env, cst.Dict):  # `{**os.environ, ...}` (or another mapping spread into it)
            return any(isinstance(element, cst.StarredDictElement) for element in env.elements)
        if isinstance(env, cst.Call) and isinstance(env.func, cst.Name) and env.func.value == "dict":
            return any(arg.keyword is None for arg in env.args)  # `dict(os.environ, SEED="3")`
        return True  # none given, or a mapping made elsewhere (`os.environ.copy()`)

    def _without_emptied_env(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """`subprocess.run(cmd, env={**os.environ})` once its XLA entries went: the child gets this
        process's environment either way, so the argument goes too."""
        if self.qualify(call.func) not in SUBPROCESS or self._copies_environ(_env_argument(original)):
            return call  # not a child process, or a copy the file made itself
        kept = [arg for arg in call.args if not (arg.value is _env_argument(call) and self._copies_environ(arg.value))]
        return call if len(kept) == len(call.args) else call.with_changes(args=fix_trailing_comma(kept))

    def _copies_environ(self, value: cst.BaseExpression | None) -> bool:
        """`{**os.environ}` or `dict(os.environ)`: a copy of this process's environment, nothing more."""
        if isinstance(value, cst.Dict) and len(value.elements) == 1:
            element = value.elements[0]
            return isinstance(element, cst.StarredDictElement) and self.qualify(element.value) == ENVIRON
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
            return len(value.args) == 1 and value.args[0].keyword is None and self.qualify(value.args[0].value) == ENVIRON
        return False

    def _without_keywords(self, call: cst.Call, role_of: Callable[[cst.Arg], Role]) -> cst.Call:
        kept = []
        for arg in call.args:
            variable = arg.keyword.value if arg.keyword is not None else None
            if variable is None or not is_xla_variable(variable, self.pytorch_xla) or not self._setting(variable, arg.value, role_of(arg)):
                kept.append(arg)
        if len(kept) == len(call.args):
            return call
        return call.with_changes(args=fix_trailing_comma(kept))

    def leave_Dict(self, original_node: cst.Dict, updated_node: cst.Dict) -> cst.Dict:
        role = self.roles.role(original_node)
        kept = []
        for element in updated_node.elements:
            variable = self._key(element.key) if isinstance(element, cst.DictElement) else None
            if variable is None:
                kept.append(element)
                continue
            assert isinstance(element, cst.DictElement)
            if not self._setting(variable, element.value, role):
                kept.append(element)
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
            return self._key(node.args[0].value)
        if isinstance(node, cst.Subscript) and self.qualify(node.value) == ENVIRON and len(node.slice) == 1:
            index = node.slice[0].slice
            return self._key(index.value) if isinstance(index, cst.Index) else None
        return None

    def _migrating_readers(self) -> bool:
        """Readers need attention in old-stack code, or where this file's own settings went.

        A library that merely reads a user's XLA setting (among other devices) is left alone.
        """
        return self.ctx.old_stack_file or bool(SETTING.search(self.ctx.source)) or bool(self.ctx.facts.environment)

    def _policy_test(self, reader: cst.CSTNode, variable: str, negate: bool = False) -> cst.BaseExpression | None:
        if not self._migrating_readers():
            return None
        self.answered[id(reader)] = reader
        if variable not in PRECISION:
            self.todo(f"`{variable}` configured the XLA runtime; natively it is never set, so this test is always false")
            return None
        # Keyed by the variable, not its dtype: `XLA_DOWNCAST_BF16` also meant float64 -> float32,
        # and a file that turns on `XLA_USE_BF16` never set it. Module-level code before any switch
        # reads the environment the program was started in: no flag of the program stands for that
        # (and the same TODO keeps a rerun idempotent).
        switched = {switch for switch, _ in self.roles.process_switches}
        readable = self.precision.readable_here(self.functions[-1] if self.functions else None)
        if switched != {variable} or not readable:
            self.todo(f"`{variable}` no longer changes precision natively; replace this test with your own flag and set the dtype explicitly")
            return None
        test = self.precision.test(negate)
        self.changed(f"`{variable}` test -> the program's own flag `{code_of(test)}`")
        return self.ctx.group(test)

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.BaseExpression:
        if len(updated_node.comparisons) != 1:
            return updated_node
        target = updated_node.comparisons[0]
        operator = target.operator
        # "X" in os.environ
        if isinstance(operator, cst.In | cst.NotIn) and self.qualify(target.comparator) == ENVIRON:
            variable = self._key(updated_node.left)
            if variable is not None:
                return self._policy_test(updated_node, variable, negate=isinstance(operator, cst.NotIn)) or updated_node
            return updated_node
        variable = self._reader_variable(updated_node.left)
        literal = string_value(target.comparator)
        if variable is None or literal is None or not isinstance(operator, cst.Equal | cst.NotEqual):
            return updated_node
        truthy = literal in TRUE_VALUES
        if not truthy and literal not in FALSE_VALUES:
            return updated_node
        negate = isinstance(operator, cst.NotEqual) == truthy
        return self._policy_test(updated_node.left, variable, negate=negate) or updated_node

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        """Readers the rewrites above could not turn into a policy test still need a person, and so
        does a precision switch written into a command for another process."""
        kept = [s for s in updated_node.body if id(s) not in self.ctx.removed]
        self._flag_leftovers(kept)
        if not (len(kept) == 1 and isinstance(kept[0], cst.Expr) and isinstance(kept[0].value, cst.SimpleString)):
            self._flag_commands(kept)  # a docstring is no command
        return updated_node

    def _flag_leftovers(self, roots: Sequence[cst.CSTNode]) -> None:
        stack = list(roots)
        while stack:
            node = stack.pop()
            variable = self._reader_variable(node)
            if variable is not None:
                if id(node) not in self.answered:
                    self._policy_test_todo(variable)
                continue
            stack.extend(children(node))

    def _flag_commands(self, roots: Sequence[cst.CSTNode]) -> None:
        stack = list(roots)
        while stack:
            node = stack.pop()
            if isinstance(node, cst.SimpleString | cst.FormattedStringText):
                for match in SWITCH_IN_COMMAND.finditer(node.value):
                    self._child_precision(match.group(1) or match.group(2))
            stack.extend(children(node))

    def _policy_test_todo(self, variable: str) -> None:
        if not self._migrating_readers():
            return
        if variable in PRECISION:
            self.todo(f"`{variable}` no longer changes precision natively; test a flag of your own instead (the default dtype stays float32)")
        else:
            self.todo(f"`{variable}` configured the XLA runtime; natively it is never set")

    def _truth_test(self, test: cst.BaseExpression) -> cst.BaseExpression:
        """A reader used as a truth value (`if os.getenv("XLA_USE_BF16"):`, `a or b`, `not a`)."""
        if isinstance(test, cst.BooleanOperation):
            either = self._either_switch(test)
            if either is not None:
                return either
            left, right = self._truth_test(test.left), self._truth_test(test.right)
            if code_of(left) == code_of(right):
                return left  # `XLA_USE_BF16 or XLA_DOWNCAST_BF16`: one policy, asked once
            return test.with_changes(left=left, right=right)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return test.with_changes(expression=self._truth_test(test.expression))
        variable = self._reader_variable(test)
        if variable is None:
            return test
        return self._policy_test(test, variable) or test

    def _either_switch(self, test: cst.BooleanOperation) -> cst.BaseExpression | None:
        """`XLA_USE_BF16 or XLA_DOWNCAST_BF16` asks whether any bf16 switch is on: where this
        program turns one of them on, that is the question the default dtype answers."""
        variables = [self._reader_variable(side) for side in (test.left, test.right)]
        switched = {switch for switch, _ in self.roles.process_switches}
        if not isinstance(test.operator, cst.Or) or None in variables or len(switched) != 1:
            return None
        dtypes = {PRECISION.get(variable or "") for variable in variables}
        (variable,) = switched
        if variable not in variables or dtypes != {PRECISION[variable]}:
            return None
        self.answered[id(test.left)] = test.left
        self.answered[id(test.right)] = test.right
        return self._policy_test(test, variable)

    def _header_test(self, test: cst.BaseExpression) -> cst.BaseExpression:
        test = self._truth_test(test)
        self._flag_leftovers([test])
        return test

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If | cst.SimpleStatementLine:
        updated_node = updated_node.with_changes(test=self._header_test(updated_node.test))
        return self.precision.collapsed(updated_node) or updated_node

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> cst.While:
        return updated_node.with_changes(test=self._header_test(updated_node.test))

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.IfExp:
        test = self._truth_test(updated_node.test)
        if id(test) in self.ctx.grouped and len(test.lpar) == 1:
            # A comparison binds tighter than `x if test else y`: no parentheses needed.
            test = test.with_changes(lpar=[], rpar=[])
        return updated_node.with_changes(test=test)


def _env_argument(call: cst.Call) -> cst.BaseExpression | None:
    return next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "env"), None)


def _calls(module: cst.Module) -> list[cst.Call]:
    found: list[cst.Call] = []
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            found.append(node)
        stack.extend(children(node))
    return found


def _turns_on(variable: str, value: cst.BaseExpression) -> bool:
    return variable in PRECISION and string_value(value) in TRUE_VALUES


def _emptied_update(call: cst.Call) -> bool:
    """`os.environ.update({})` or `os.environ.update()`: every setting in it went."""
    if not call.args:
        return True
    return len(call.args) == 1 and isinstance(call.args[0].value, cst.Dict) and not call.args[0].value.elements
