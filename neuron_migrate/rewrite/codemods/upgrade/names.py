"""NM202: public names the old library versions had, where the native stack's versions keep them."""

from __future__ import annotations

from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    MigrationContext,
    code_of,
    dotted_name,
    stmt,
)
from neuron_migrate.rewrite.codemods.optimum.support import with_import_names
from neuron_migrate.rewrite.codemods.upgrade.keywords import LIBRARIES
from neuron_migrate.rewrite.codemods.upgrade.table import NAMES, Name, canonical


def _entry(qualified: str | None) -> Name | None:
    if qualified is None or qualified.split(".")[0] not in LIBRARIES:
        return None
    return NAMES.get(canonical(qualified))


def _gone(entry: Name, written: str) -> str:
    library = entry.old.split(".")[0]
    return f"`{written}` is gone from {library}: {entry.why}"


class UpgradeNames(Codemod):
    """Moves imports and uses of public names that transformers 5 and TRL 1.x moved or renamed.

    ## What it does
    A name the old versions exported and the new ones keep elsewhere or under a new name is
    imported from there, and its uses follow: the vision `*FeatureExtractor` classes become
    their `*ImageProcessor` (the same class, which they only aliased), `is_torch_tpu_available`
    becomes `is_torch_xla_available`, transformers' `AdamW` becomes `torch.optim.AdamW` (with the
    old defaults written out, see NM203), and TRL's trainers that moved to `trl.experimental` are
    imported from there. A name with no successor gets a TODO at its import.

    ## Why
    transformers 5 and TRL 1.x removed these names: the migrated script stops at its imports.

    ## Example
    ```python
    from transformers import ViTFeatureExtractor
    from trl import ORPOConfig, SFTTrainer
    ```

    ## Use instead
    ```python
    from transformers import ViTImageProcessor
    from trl import SFTTrainer
    from trl.experimental.orpo import ORPOConfig
    ```

    ## Fix safety
    Each new name is the same class or function, or one with the same behaviour.
    """

    code = "NM202"
    name = "upgrade-names"
    summary = "names transformers 5 / TRL 1.x moved or renamed -> where they are now"
    markers = LIBRARIES
    runs_alone = True
    manual: ClassVar[dict[str, str]] = {}

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        self._in_import = 0
        self._not_variables: set[int] = set()  # names that are attributes or keywords
        self._renamed: dict[str, str] = {}  # old qualified name -> the new local name bound for it

    def visit_Import(self, node: cst.Import) -> None:
        self._in_import += 1

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        self._in_import -= 1
        return updated_node

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._in_import += 1

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_variables.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_variables.add(id(node.keyword))

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> Any:
        self._in_import -= 1
        if updated_node.relative or updated_node.module is None or isinstance(updated_node.names, cst.ImportStar):
            return updated_node
        module = dotted_name(updated_node.module)
        if module is None or module.split(".")[0] not in LIBRARIES:
            return updated_node
        kept: list[cst.ImportAlias] = []
        moved: dict[str, list[str]] = {}  # new module -> the names it now imports
        for alias in updated_node.names:
            name = code_of(alias.name)
            entry = _entry(f"{module}.{name}")
            if entry is None:
                kept.append(alias)
                continue
            if entry.new is None:
                self.todo(_gone(entry, name))
                kept.append(alias)
                continue
            new_module, new_name = entry.new.rsplit(".", 1)
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else None
            bound = local or new_name
            if local is None and new_name != name:
                if new_name in (self.ctx.file_names or ()):
                    bound = name  # the new name is taken: keep the old one as its alias
                else:
                    self._renamed[entry.old] = new_name
            spelled = new_name if bound == new_name else f"{new_name} as {bound}"
            self.changed(f"`{name}` -> `{entry.new}`")
            if new_module == module:
                kept.append(alias.with_changes(name=cst.Name(new_name), asname=None if bound == new_name else cst.AsName(name=cst.Name(bound))))
            else:
                moved.setdefault(new_module, []).append(spelled)
        for new_module, names in moved.items():
            self.ctx.insert_after(stmt(f"from {new_module} import {', '.join(names)}\n"))
        if not kept:
            return self.ctx.remove(updated_node)
        return with_import_names(updated_node, kept) if moved or kept != list(updated_node.names) else updated_node

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if self._in_import or id(original_node) in self._not_variables:
            return updated_node
        qualified = self.qualify(original_node)
        new = self._renamed.get(canonical(qualified)) if qualified else None
        return updated_node.with_changes(value=new) if new else updated_node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if self._in_import:
            return updated_node
        qualified = self.qualify(original_node)
        entry = _entry(qualified)
        if entry is None or qualified is None or not isinstance(original_node.value, cst.Name | cst.Attribute):
            return updated_node
        written = dotted_name(original_node) or ""
        if entry.new is None:
            self.todo(_gone(entry, written))
            return updated_node
        new_module, new_name = entry.new.rsplit(".", 1)
        self.changed(f"`{written}` -> `{entry.new}`")
        if qualified.rsplit(".", 1)[0] == new_module:
            return updated_node.with_changes(attr=cst.Name(new_name))
        return cst.parse_expression(f"{self.ctx.need_import(new_module)}.{new_name}")
