"""torch_xla replica `groups=` (lists of ranks) as native process groups.

torch_xla collectives took `groups=[[0, 1], [2, 3]]` and each replica reduced within the list
holding its rank. Natively that is a `dist.new_group(ranks)`, which every rank must create for
every list, in the same order, even for lists it is not in; the migrated code does it once per
distinct `groups` value, in a small helper, and passes the group that holds this rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.rewrite.codemods.base import MigrationContext, arg_value, code_of

REPLICA_GROUP = '''\
_{name}s = {{}}
def {name}(groups):
    """This process's group among torch_xla replica `groups` (lists of ranks); None is all processes."""
    if not groups or not {dist}.is_initialized():
        return None
    key = tuple(tuple(ranks) for ranks in groups)
    if key not in _{name}s:
        rank = {dist}.get_rank()
        mine = None
        # Every rank creates every group, in the same order, as `dist.new_group` requires.
        for ranks in key:
            group = {dist}.new_group(list(ranks))
            if rank in ranks:
                mine = group
        if mine is None:
            raise ValueError(f"rank {{rank}} is in none of the replica groups {{groups}}")
        _{name}s[key] = mine
    return _{name}s[key]
'''


@dataclass
class MeshGroups:
    """What a migrated `DeviceMesh` (NM025) tells the codemods that take replica groups: the
    groups it already holds as process groups, and that parameters are then DTensors."""

    groups: dict[str, str] = field(default_factory=dict)  # replica-groups expression -> process group
    sharded_parameters: bool = False


def groups_argument(call: cst.Call, position: int) -> cst.BaseExpression | None:
    """The `groups=` a torch_xla collective was given, or None where it means every process."""
    found = arg_value(call, position, "groups")
    if found is None:
        return None
    value = found.value
    if isinstance(value, cst.Name) and value.value == "None":
        return None
    if isinstance(value, cst.List | cst.Tuple) and not value.elements:
        return None
    return value


def process_group(ctx: MigrationContext, groups: cst.BaseExpression) -> str:
    """The expression for this rank's native process group among `groups`, adding the helper."""
    known = ctx.shared(MeshGroups).groups.get(code_of(groups))
    if known is not None:
        return known
    name = ctx.unused_name("replica_group")
    ctx.need_helper(name, REPLICA_GROUP.format(name=name, dist=ctx.dist()))
    return f"{name}({code_of(groups)})"
