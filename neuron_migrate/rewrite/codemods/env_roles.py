"""Whose environment a variable setting configures: this program, a child process, or a remote job.

`os.environ["XLA_USE_BF16"] = "1"` changed this program's precision; the same entry in the
`env=` of `subprocess.run` changed the child's, and in the `environment=` of a SageMaker
estimator it configures a job that runs another script. Each needs a different migration, so
the file is read once, before rewriting, to tell them apart.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Visitor, code_of, string_value

ENVIRON = "os.environ"
# Keywords and keys that hand an environment to a job running elsewhere (SageMaker estimators and
# models take `environment=`; boto3's `create_training_job` takes `Environment=`).
REMOTE_KEYS = frozenset({"environment", "Environment"})


class Role(enum.Enum):
    PROCESS = "this program"
    CHILD = "a child process"
    REMOTE = "a remote job"


@dataclass
class EnvRoles:
    """The role of every env dict, `dict(...)` env, `env[...] = ...` and `env.update(...)` in a file."""

    by_node: dict[int, Role] = field(default_factory=dict)
    # The switches this program turns on: (variable, set at module level, unconditionally).
    process_switches: list[tuple[str, bool]] = field(default_factory=list)

    def role(self, node: cst.CSTNode) -> Role:
        return self.by_node.get(id(node), Role.CHILD)


# `NAME`, value -> does setting NAME to value turn a switch on?
SwitchTest = Callable[[str, cst.BaseExpression], bool]


def read_roles(
    module: cst.Module, qualify: Callable[[cst.CSTNode], str | None], is_switch: SwitchTest
) -> EnvRoles:
    finder = _RoleFinder(qualify)
    finder.scan(module)
    return finder.roles(is_switch)


class _RoleFinder(Visitor):
    def __init__(self, qualify: Callable[[cst.CSTNode], str | None]) -> None:
        super().__init__()
        self.qualify = qualify
        self.parents: list[cst.CSTNode] = []
        self.known: dict[int, Role] = {}
        self.by_owner: list[tuple[int, str]] = []  # (node id, variable that holds the environment)
        self.remote_names: set[str] = set()
        self.process_names: set[str] = set()
        # Every `NAME=value` seen: (id of the node whose role decides, NAME, value, unconditional).
        self.settings: list[tuple[int, str | None, cst.BaseExpression, bool]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self._classify(node)
        self.parents.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.parents.pop()

    def roles(self, is_switch: SwitchTest) -> EnvRoles:
        roles = EnvRoles(dict(self.known))
        for node_id, owner in self.by_owner:
            if owner in self.remote_names:
                roles.by_node[node_id] = Role.REMOTE
            elif owner in self.process_names:
                roles.by_node[node_id] = Role.PROCESS
        roles.process_switches = [
            (key, unconditional)
            for node_id, key, value, unconditional in self.settings
            if key is not None
            and roles.by_node.get(node_id) is Role.PROCESS
            and is_switch(key, value)
        ]
        return roles

    # -- what a node is -------------------------------------------------------------------------
    def _classify(self, node: cst.CSTNode) -> None:
        if (
            isinstance(node, cst.Arg)
            and node.keyword is not None
            and node.keyword.value in REMOTE_KEYS
        ):
            self.remote_names.add(code_of(node.value))
        elif isinstance(node, cst.Call):
            self._call(node)
        elif isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            if isinstance(target, cst.Subscript):
                self._owned(node, target.value, _subscript_key(target), node.value)
        if isinstance(node, cst.Dict) or _is_dict_call(node):
            self._environment_value(node)

    def _call(self, call: cst.Call) -> None:
        func = call.func
        name = self.qualify(func)
        if name in ("os.environ.setdefault", "os.putenv") and len(call.args) == 2:
            self.known[id(call)] = Role.PROCESS
            self._setting(call, string_value(call.args[0].value), call.args[1].value)
        elif isinstance(func, cst.Attribute) and func.attr.value == "update":
            for arg in call.args:
                if arg.keyword is not None:
                    self._owned(arg, func.value, arg.keyword.value, arg.value)
                elif self.qualify(func.value) == ENVIRON and not isinstance(arg.value, cst.Dict):
                    self.process_names.add(code_of(arg.value))

    def _owned(
        self,
        node: cst.CSTNode,
        owner: cst.BaseExpression,
        key: str | None,
        value: cst.BaseExpression | None,
    ) -> None:
        """`owner[key] = value`, `owner.update(key=value)`, `owner.update({...})`: the owner decides."""
        if self.qualify(owner) == ENVIRON:
            self.known[id(node)] = Role.PROCESS
        else:
            self.by_owner.append((id(node), code_of(owner)))
        if value is not None:
            self._setting(node, key, value)

    def _environment_value(self, node: cst.CSTNode) -> None:
        """A dict literal or `dict(...)`: whose environment it is follows from where it goes."""
        if isinstance(node, cst.Dict):
            for element in node.elements:
                if isinstance(element, cst.DictElement):
                    self._setting(node, string_value(element.key), element.value)
        else:
            assert isinstance(node, cst.Call)
            for arg in node.args:
                if arg.keyword is not None:
                    self._setting(node, arg.keyword.value, arg.value)
        parent = self.parents[-1] if self.parents else None
        holder = self.parents[-2] if len(self.parents) > 1 else None
        if isinstance(parent, cst.Arg) and isinstance(holder, cst.Call):
            if parent.keyword is not None and parent.keyword.value in REMOTE_KEYS:
                self.known[id(node)] = Role.REMOTE
            elif (
                isinstance(holder.func, cst.Attribute)
                and holder.func.attr.value == "update"
                and parent.keyword is None
            ):
                self._owned(node, holder.func.value, None, None)
        elif isinstance(parent, cst.DictElement) and string_value(parent.key) in REMOTE_KEYS:
            self.known[id(node)] = Role.REMOTE
        elif isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            self.by_owner.append((id(node), code_of(parent.targets[0].target)))

    def _setting(self, node: cst.CSTNode, key: str | None, value: cst.BaseExpression) -> None:
        unconditional = not any(isinstance(p, cst.BaseCompoundStatement) for p in self.parents)
        self.settings.append((id(node), key, value, unconditional))


def _subscript_key(target: cst.Subscript) -> str | None:
    if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
        return None
    return string_value(target.slice[0].slice.value)


def _is_dict_call(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "dict"
    )
