"""NM201: keyword arguments the old library versions took, as the native stack's versions take them."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst
import libcst.matchers as m

from neuron_migrate.rewrite.codemods.base import Codemod, code_of, dotted_name, stmt
from neuron_migrate.rewrite.codemods.optimum.support import literal, with_args
from neuron_migrate.rewrite.codemods.upgrade.table import (
    ADAMW_UPDATE,
    KEYWORDS,
    PIPELINE,
    REMOVED_OPTIMIZERS,
    Keyword,
    canonical,
    loader_group,
)

# Library packages whose calls this family upgrades: a file must import one of them.
LIBRARIES = ("transformers", "trl", "peft", "diffusers", "datasets", "huggingface_hub")


def owners(codemod: Codemod, call: cst.Call) -> tuple[str, ...]:
    """The table owners of `call`: the class or function it calls, or for `X.from_pretrained(...)`
    the loaders `X` belongs to."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained":
        owner = codemod.qualify(func.value)
        return loader_group(owner) if owner else ()
    qualified = codemod.qualify(func)
    if qualified is None or qualified.split(".")[0] not in LIBRARIES:
        return ()
    name = canonical(qualified)
    return (name,) if name in KEYWORDS or name == PIPELINE else ()


def upgrade_argument(codemod: Codemod, arg: cst.Arg, entry: Keyword, present: Collection[str]) -> cst.Arg | None:
    """`arg` (which gives `entry.old`) as the new version takes it: renamed or translated, None
    where it goes, or kept under a TODO where only a person can say what it becomes."""
    key = entry.old
    if entry.rule:
        return SPECIAL[entry.rule](codemod, arg, present)
    if entry.new is not None:
        if entry.new in present:
            codemod.changed(f"dropped `{key}=`: `{entry.new}=` is given, and transformers 5 knows only that")
            return None
        codemod.changed(f"`{key}=` -> `{entry.new}=`")
        return arg.with_changes(keyword=cst.Name(entry.new))
    value = literal(arg.value)
    for old, keyword, code in entry.values:
        if value is ... or value != old or type(value) is not type(old):
            continue
        if keyword is None or code is None:
            codemod.changed(f"dropped `{key}={code_of(arg.value)}`: it asks for what now happens anyway")
            return None
        if keyword not in present:
            codemod.changed(f"`{key}={code_of(arg.value)}` -> `{keyword}={code}`")
            return arg.with_changes(keyword=cst.Name(keyword), value=cst.parse_expression(code))
    if entry.drop:
        codemod.changed(f"dropped `{key}=`: {entry.why}")
        return None
    codemod.todo(f"`{key}={_short(arg.value)}` was removed: {entry.why}")
    return arg


def _short(value: cst.BaseExpression) -> str:
    code = code_of(value)
    return code if len(code) <= 24 and "\n" not in code else "..."


def _warmup_ratio(codemod: Codemod, arg: cst.Arg, present: Collection[str]) -> cst.Arg | None:
    if "warmup_steps" in present:
        codemod.changed("dropped `warmup_ratio`: `warmup_steps` overrides it, as before")
        return None
    ratio = literal(arg.value)
    if isinstance(ratio, int | float) and not isinstance(ratio, bool) and 0 <= ratio < 1:
        codemod.changed("`warmup_ratio=` -> `warmup_steps=` (a float below 1 is a ratio in transformers 5)")
    else:
        codemod.todo(
            f"`warmup_ratio={_short(arg.value)}` -> `warmup_steps=`: transformers 5 reads 1 or more as steps, not a ratio: give the steps there"
        )
    return arg.with_changes(keyword=cst.Name("warmup_steps"))


def _logging_dir(codemod: Codemod, arg: cst.Arg, present: Collection[str]) -> cst.Arg | None:
    comment = _arg_comment(arg)
    line = f'{codemod.ctx.os()}.environ["TENSORBOARD_LOGGING_DIR"] = {code_of(arg.value)}'
    codemod.ctx.insert_after(stmt(f"{line}  {comment}\n" if comment else f"{line}\n"))
    codemod.changed("`logging_dir=` -> `TENSORBOARD_LOGGING_DIR` (transformers 5 removed the field)")
    return None


def _arg_comment(arg: cst.Arg) -> str | None:
    """The comment at the end of the argument's line, in a call laid out one per line."""
    comma = arg.comma
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        comment = comma.whitespace_after.first_line.comment
        return comment.value if comment is not None else None
    return None


def _optimizer(codemod: Codemod, arg: cst.Arg, present: Collection[str]) -> cst.Arg | None:
    """`optim="adamw_hf"` (transformers 5 refuses it at start-up) and `optim="adamw_torch_xla"`
    (the Trainer imports it from torch_xla): torch's AdamW computes what they did."""
    name = literal(arg.value)
    if not isinstance(name, str) or name not in REMOVED_OPTIMIZERS:
        return arg
    new, why = REMOVED_OPTIMIZERS[name]
    codemod.changed(f'`optim="{name}"` -> `optim="{new}"` ({why})')
    if name == "adamw_hf":
        codemod.todo(ADAMW_UPDATE)
    return arg.with_changes(value=cst.SimpleString(f'"{new}"'))


def _dtype(codemod: Codemod, arg: cst.Arg, present: Collection[str]) -> cst.Arg | None:
    """`torch_dtype=None` loaded float32 in transformers 4; `dtype=None` loads the checkpoint's dtype."""
    if "dtype" in present:
        codemod.changed("dropped `torch_dtype=`: `dtype=` is given, and transformers 5 knows only that")
        return None
    value = arg.value
    torch = codemod.ctx.torch()
    if isinstance(value, cst.Name) and value.value == "None":
        codemod.changed("`torch_dtype=None` -> `dtype=torch.float32` (transformers 4 loaded float32 then)")
        return arg.with_changes(keyword=cst.Name("dtype"), value=cst.parse_expression(f"{torch}.float32"))
    if dotted_name(value) is not None and codemod.qualify(value) is None:
        # a variable that may hold None, as a `--torch_dtype` flag left unset does
        codemod.changed(f"`torch_dtype={code_of(value)}` -> `dtype={code_of(value)} or torch.float32` (None loaded float32 before)")
        return arg.with_changes(keyword=cst.Name("dtype"), value=cst.parse_expression(f"{code_of(value)} or {torch}.float32"))
    codemod.changed("`torch_dtype=` -> `dtype=`")
    return arg.with_changes(keyword=cst.Name("dtype"))


def _flash_attention(codemod: Codemod, arg: cst.Arg, present: Collection[str]) -> cst.Arg | None:
    """`use_flash_attention_2=x` asked transformers 4 for `attn_implementation="flash_attention_2"`
    where `x` was true, and for the default where it was not; transformers 5 takes only the latter."""
    if "attn_implementation" in present:
        codemod.changed("dropped `use_flash_attention_2=`: `attn_implementation=` is given, and transformers 5 knows only that")
        return None
    flag = literal(arg.value)
    if flag is False:
        codemod.changed("dropped `use_flash_attention_2=False`: it asks for what now happens anyway")
        return None
    value = '"flash_attention_2"' if flag is True else f'"flash_attention_2" if {code_of(arg.value)} else None'
    codemod.changed(f"`use_flash_attention_2={code_of(arg.value)}` -> `attn_implementation={value}`")
    return arg.with_changes(keyword=cst.Name("attn_implementation"), value=cst.parse_expression(value))


def _torchscript(codemod: Codemod, arg: cst.Arg, present: Collection[str]) -> cst.Arg | None:
    """`torchscript=True` made transformers 4 models return tuples. Where the file unpacks what a
    call returns (`(logits,) = model(*inputs)`), outputs stay tuples (`return_dict=False`);
    elsewhere they become `ModelOutput`s, which `[0]` and `["logits"]` read alike, and which some
    models (ViT) need inside their own `forward`."""
    if literal(arg.value) is not False and "return_dict" not in present and _unpacks_calls(codemod.ctx.source):
        codemod.changed(
            "`torchscript=True` -> `return_dict=False` (transformers 5 removed `torchscript`; the file reads outputs as tuples)"
        )
        return arg.with_changes(keyword=cst.Name("return_dict"), value=cst.Name("False"))
    codemod.changed("dropped `torchscript=`: transformers 5 removed it (outputs are `ModelOutput`s, read by `[0]` and `[\"logits\"]` alike)")
    return None


def _formatting_func(codemod: Codemod, arg: cst.Arg, present: Collection[str]) -> cst.Arg | None:
    """A `formatting_func` of the file that returns a list was written for batches."""
    name = arg.value.value if isinstance(arg.value, cst.Name) else None
    if name is not None and name in _batch_formatters(codemod.ctx.source):
        codemod.todo(
            f"`{name}` formats batches (it returns a list): TRL now calls it on one example: return that example's text"
        )
    return arg


@functools.lru_cache(maxsize=1)
def _batch_formatters(source: str) -> frozenset[str]:
    """Module-level functions of `source` that return a list (`[f"..." for q in batch["q"]]`)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    found = set()
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        lists = {
            target.id
            for node in ast.walk(function)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List | ast.ListComp)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        returns = [node.value for node in ast.walk(function) if isinstance(node, ast.Return) and node.value is not None]
        if returns and all(isinstance(r, ast.List | ast.ListComp) or (isinstance(r, ast.Name) and r.id in lists) for r in returns):
            found.add(function.name)
    return frozenset(found)


@functools.lru_cache(maxsize=1)
def _unpacks_calls(source: str) -> bool:
    """Does `source` unpack what a call returns (`a, b = f(x)`, `(logits,) = model(x)`), or ask
    whether a value is a tuple (`isinstance(outputs, tuple)`), which a `ModelOutput` is not?"""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return any(
        (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and any(isinstance(target, ast.Tuple | ast.List) for target in node.targets)
        )
        or _tests_for_tuple(node)
        for node in ast.walk(tree)
    )


def _tests_for_tuple(node: ast.AST) -> bool:
    """`isinstance(x, tuple)` (or `(tuple, list)`), `type(x) is tuple`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" and len(node.args) == 2:
        kinds = node.args[1]
        names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
        return any(isinstance(n, ast.Name) and n.id == "tuple" for n in names)
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) and isinstance(node.left.func, ast.Name):
        return node.left.func.id == "type" and any(isinstance(c, ast.Name) and c.id == "tuple" for c in node.comparators)
    return False


SPECIAL: dict[str, Callable[[Codemod, cst.Arg, Collection[str]], cst.Arg | None]] = {
    "torchscript": _torchscript,
    "formatting_func": _formatting_func,
    "flash_attention": _flash_attention,
    "ratio": _warmup_ratio,
    "environment": _logging_dir,
    "optimizer": _optimizer,
    "dtype": _dtype,
}


def upgrade_call(codemod: Codemod, call: cst.Call, table_owners: tuple[str, ...], own: Collection[str] = ()) -> cst.Call:
    """`call` with every keyword of the table's `table_owners` upgraded, except those named in `own`."""
    entries = {k.old: k for owner in table_owners for k in KEYWORDS.get(owner, ()) if k.old not in own}
    present = {a.keyword.value for a in call.args if a.keyword is not None}
    if not entries.keys() & present:
        return call
    args = []
    for arg in call.args:
        entry = entries.get(arg.keyword.value) if arg.keyword is not None else None
        kept = upgrade_argument(codemod, arg, entry, present) if entry is not None else arg
        if kept is not None:
            args.append(kept)
    return with_args(call, args)


class UpgradeKeywords(Codemod):
    """Moves keyword arguments to the spelling the native stack's transformers and TRL take.

    ## What it does
    In calls of transformers, TRL, peft and diffusers, a keyword the old versions took and the
    new ones do not is renamed where a keyword means the same (`evaluation_strategy=` ->
    `eval_strategy=`, `tokenizer=` -> `processing_class=`, `torch_dtype=` -> `dtype=`,
    `use_auth_token=` -> `token=`), translated where one value has a new spelling
    (`group_by_length=True` -> `train_sampling_strategy="group_by_length"`), dropped where it
    asked for what now happens anyway (`overwrite_output_dir=`, `save_safetensors=True`), and
    otherwise kept under a TODO that says what replaced it.

    ## Why
    optimum-neuron pinned transformers 4 and TRL 0.24; the native stack runs transformers 5 and
    TRL 1.x. A migrated script crosses both at once: `TrainingArguments(evaluation_strategy=...)`
    raises `TypeError` in transformers 5, and a keyword `from_pretrained` no longer knows reaches
    the model's config instead.

    ## Example
    ```python
    args = TrainingArguments("out", evaluation_strategy="epoch", no_cuda=True)
    trainer = Trainer(model, args, tokenizer=tokenizer)
    ```

    ## Use instead
    ```python
    args = TrainingArguments("out", eval_strategy="epoch", use_cpu=True)
    trainer = Trainer(model, args, processing_class=tokenizer)
    ```

    ## Fix safety
    Renames keep the meaning; what has no counterpart keeps its argument under a TODO.
    """

    code = "NM201"
    name = "upgrade-keywords"
    summary = "transformers 4 / TRL 0.x keywords -> their transformers 5 / TRL 1.x spelling"
    markers = LIBRARIES
    runs_alone = True
    manual: ClassVar[dict[str, str]] = {}

    def visit_Module(self, node: cst.Module) -> None:
        self._forwarders = forwarders(self, node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> Any:
        func = updated_node.func
        if isinstance(func, cst.Name) and func.value in self._forwarders:
            key = self.ctx.binding_key(func.value)
            if key is not None and key[0] is self.ctx._table.module:
                forwarder = self._forwarders[func.value]
                return upgrade_call(self, updated_node, forwarder.owners, forwarder.own)
        if dotted_name(func) is None and not isinstance(func, cst.Attribute):
            return updated_node
        table_owners = owners(self, original_node)
        return upgrade_call(self, updated_node, table_owners) if table_owners else updated_node


@dataclass(frozen=True)
class Forwarder:
    """A function or class of the file that hands its `**kwargs` on to library calls."""

    own: frozenset[str]  # the parameters it names: keywords it keeps
    owners: tuple[str, ...]  # the table owners of the calls the rest reach


def forwarders(codemod: Codemod, module: cst.Module) -> dict[str, Forwarder]:
    """The module-level functions and classes whose `**kwargs` go, untouched, only to calls the
    table knows (`def __init__(self, name, **kw): self.m = AutoModel.from_pretrained(name, **kw)`):
    a keyword given to them (`Encoder(name, torchscript=True)`) is a keyword of those calls."""
    found: dict[str, Forwarder] = {}
    for statement in module.body:
        function = statement
        if isinstance(statement, cst.ClassDef):
            function = next(
                (s for s in statement.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), statement
            )
        if not isinstance(function, cst.FunctionDef) or not isinstance(function.params.star_kwarg, cst.Param):
            continue
        kwargs = function.params.star_kwarg.name.value
        spreads = [
            call
            for call in m.findall(function.body, m.Call())
            if isinstance(call, cst.Call) and any(a.star == "**" and m.matches(a.value, m.Name(kwargs)) for a in call.args)
        ]
        if not spreads or len(m.findall(function.body, m.Name(kwargs))) != len(spreads):
            continue  # read or changed on the way (`kw.pop("x")`): what reaches the calls is unknown
        reached = [owners(codemod, call) for call in spreads]
        if not all(reached):
            continue
        params = function.params
        own = frozenset(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))
        found[statement.name.value] = Forwarder(own, tuple(dict.fromkeys(o for group in reached for o in group)))  # type: ignore[union-attr]
    return found
