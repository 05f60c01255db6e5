"""Prints the successive versions of one module, rendering each top-level statement once.

A file is printed three times on its way through a rewrite (the round-trip check, the migrated
module, the module with its imports tidied), and most of its top-level statements are the very
same nodes in all three: the traversal hands back a statement it did not change as it was. A
statement's text does not depend on what stands around it at the top level, so it is kept.
"""

from __future__ import annotations

import libcst as cst


class ModulePrinter:
    def __init__(self) -> None:
        self._texts: dict[int, tuple[cst.CSTNode, str]] = {}  # by id: the statement (kept alive) and its text

    def code(self, module: cst.Module) -> str:
        """`module.code`."""
        if not module.has_trailing_newline:
            return module.code  # the last newline is taken off: rare enough to print whole
        parts = [module.code_for_node(line) for line in module.header]
        for statement in module.body:
            known = self._texts.get(id(statement))
            if known is not None and known[0] is statement:
                parts.append(known[1])
            else:
                text = module.code_for_node(statement)
                self._texts[id(statement)] = (statement, text)
                parts.append(text)
        parts += [module.code_for_node(line) for line in module.footer]
        code = "".join(parts)
        return code or module.default_newline
