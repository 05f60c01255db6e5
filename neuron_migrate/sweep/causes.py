"""Why an architecture fails: each failure gets one cause, the `file:line` Dynamo names and its
reason, so that the table can be read and the static lint measured against it."""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass

from neuron_migrate.core.neuron_backend import BOOLEAN_INDEX_PUT, NeuronRejected, root_cause

# The causes, in the order the table lists them.
CANNOT_BUILD = "cannot build"
EAGER_FAILS = "eager fails"
NO_STATIC_CACHE = "no static cache"
GRAPH_BREAK = "graph break"
DATA_DEPENDENT = "data-dependent shape"
UNSUPPORTED = "unsupported op/dtype"
RECOMPILE = "recompile per shape"
# A guard on a Python value (an attribute of the cache, an int argument) rather than a size: each
# new value compiles a new graph, however static the shapes.
RECOMPILE_VALUE = "recompile per Python value"
# A guard on state the first call changes (a cache initialised lazily): one graph more on the
# first call, none after it.
RECOMPILE_ONCE = "one extra graph, first call only"
NOT_COMPILED = "not compiled"
MISMATCH = "mismatch with eager"
ERROR = "other error"
TIMEOUT = "timeout"
CRASH = "crash"
NOT_RUN = "not run"  # no finished record: the sweep was stopped before it reached this one
# What compiling with static shapes causes: the failures a static lint can be asked to foresee.
COMPILE_CAUSES = (GRAPH_BREAK, DATA_DEPENDENT, UNSUPPORTED, RECOMPILE, RECOMPILE_VALUE, RECOMPILE_ONCE)
CAUSES = (
    CANNOT_BUILD, EAGER_FAILS, NO_STATIC_CACHE, GRAPH_BREAK, DATA_DEPENDENT, UNSUPPORTED, RECOMPILE,
    RECOMPILE_VALUE, RECOMPILE_ONCE, NOT_COMPILED, MISMATCH, ERROR, TIMEOUT, CRASH, NOT_RUN,
)

# Graph breaks whose reason is a value or size only known at run time.
_DATA_DEPENDENT_BREAK = re.compile(
    r"data.dependent|dynamic shape operator|Tensor\.item\(\)|Tensor\.tolist|unbacked|nonzero",
    re.IGNORECASE,
)
_DATA_DEPENDENT_ERRORS = (
    "GuardOnDataDependentSymNode",
    "DataDependentOutputException",
    "DynamicOutputShapeException",
    "PendingUnbackedSymbolNotFound",
)
# A guard's source line, as Dynamo prints it: "...  # is_full = ...  # transformers/cache_utils.py:550 in update"
_GUARD_SOURCE = re.compile(r"#\s*(\S+\.py:\d+) in \S+\s*$")
_EXPECTED_RECOMPILE = "tensor 'kwargs['input_ids']' size mismatch"  # a new bucket
_UNSUPPORTED_ERRORS = ("UnsupportedOperatorException", "UnsupportedFakeTensorException", "NotImplementedError")


@dataclass
class Failure:
    cause: str
    reason: str  # one line
    where: str | None = None  # "file:line" of the user code the failure points at


def classify(error: BaseException) -> Failure:
    """The cause of an exception raised by a compiled run."""
    import torch._dynamo.exc as dynamo

    root = root_cause(error)
    chain = {type(e).__name__ for e in _chain(error)}
    where = _where(error) or _where(root)
    if isinstance(root, NeuronRejected):
        cause = UNSUPPORTED if str(root) == BOOLEAN_INDEX_PUT else DATA_DEPENDENT
        return Failure(cause, _line(root), root.where or where)
    if chain & set(_DATA_DEPENDENT_ERRORS):
        return Failure(DATA_DEPENDENT, _line(root), where)
    if isinstance(error, dynamo.Unsupported):
        cause = DATA_DEPENDENT if _DATA_DEPENDENT_BREAK.search(str(error)) else GRAPH_BREAK
        return Failure(cause, _line(error), where)
    if isinstance(error, dynamo.RecompileError) or "FailOnRecompileLimitHit" in chain:
        return Failure(RECOMPILE, _line(error), where)
    deepest = _chain(error)[-1]  # past Dynamo's wrappers, to the error the model raised
    if chain & set(_UNSUPPORTED_ERRORS) or "not supported" in str(deepest).lower():
        return Failure(UNSUPPORTED, f"{type(deepest).__name__}: {_line(deepest)}", where)
    return Failure(ERROR, f"{type(deepest).__name__}: {_line(deepest)}", where)


def cache_failure(error: BaseException) -> Failure | None:
    """A failure to set up the static cache (a model whose state is not a key/value cache)."""
    frames = traceback.extract_tb(error.__traceback__)
    if any(f.name == "_prepare_cache_for_generation" for f in frames):
        return Failure(NO_STATIC_CACHE, f"{type(error).__name__}: {_line(error)}", _where(error))
    return None


def recompile_failure(recompiles: list[str], graphs: int) -> Failure:
    """Recompiles beyond one per bucket: the first whose guard is not a new bucket's size, and the
    source line of that guard; a guard on a tensor's size is a recompile per shape, any other
    guard one per Python value."""
    unexpected = [r for r in recompiles if _EXPECTED_RECOMPILE not in r] or recompiles
    if not unexpected:
        return Failure(RECOMPILE, f"{graphs} graphs")
    # "wrapper in generic.py:937: <guard>  # <its source line>  # <file:line> in <function>"
    guard = unexpected[0].split(": ", 1)[-1]
    found = _GUARD_SOURCE.search(guard)
    parts = [p.strip() for p in _GUARD_SOURCE.sub("", guard).split("  # ")]
    if parts[0].startswith("tensor "):  # "tensor 'x' size mismatch at index 0. expected 4, actual 5"
        return Failure(RECOMPILE, parts[0], found[1] if found else None)
    reason = f"guard `{parts[0]}` failed" + (f" (`{parts[1]}`)" if len(parts) > 1 else "")
    return Failure(RECOMPILE_VALUE, reason, found[1] if found else None)


def uncompiled_failure(error: BaseException, context: str = "") -> Failure:
    """The run failed without compiling: not a static-shape problem, but nothing to compare to."""
    return Failure(EAGER_FAILS, f"{context}{type(error).__name__}: {_line(error)}", _where(error))


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = getattr(current, "inner_exception", None) or current.__cause__ or current.__context__
    return seen


def _line(error: BaseException) -> str:
    """The first line of the message, with Dynamo's explanation where it gives one."""
    text = str(getattr(error, "msg", None) or error).strip()
    if not text:
        return type(error).__name__
    lines = [line.strip() for line in text.splitlines()]
    explanation = next((line for line in lines if line.startswith("Explanation: ")), None)
    first = f"{lines[0]}: {explanation.removeprefix('Explanation: ')}" if explanation else lines[0]
    return first[:300]


def _where(error: BaseException) -> str | None:
    """The innermost frame of the model's code: Dynamo's user stack where it kept one, else the
    traceback's innermost frame inside transformers."""
    stack = getattr(error, "real_stack", None)
    frames = list(stack) if stack else list(traceback.extract_tb(error.__traceback__))
    for frame in reversed(frames):
        if _is_model_code(frame.filename):
            return f"{frame.filename}:{frame.lineno}"
    return None


def _is_model_code(filename: str) -> bool:
    return f"{os.sep}transformers{os.sep}" in filename and f"{os.sep}generation{os.sep}" not in filename
