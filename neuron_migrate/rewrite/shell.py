"""Shell commands and `%env` magics in notebooks that configure or launch old-stack work.

`!PJRT_DEVICE=NEURON XLA_USE_BF16=1 torchrun ...` loses its XLA variables, `%env PJRT_DEVICE=...`
goes, and the steps that only exist on the XLA stack (`neuron_parallel_compile` pre-compilation,
`optimum-cli export neuron`, the Neuron compile cache) are replaced by a comment saying why.
A command continued over several lines with `\\` is one command: a step goes with all of its
lines, and a variable goes without leaving an empty line behind. Everything else is left exactly
as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from neuron_migrate.core.oldstack import (
    OLD_STACK_COMMANDS,
    OLD_STACK_LAUNCHERS,
    PRECISION,
    REMOVED_STEPS,
    XLA_VARIABLE,
    old_stack_imported_in,
    old_stack_module,
)
from neuron_migrate.rewrite.codemods.optimum.fields import PARALLEL_FIELDS, TRAINING_FIELDS
from neuron_migrate.rewrite.codemods.upgrade.flags import gone_flags
from neuron_migrate.rewrite.codemods.xla_env import TRUE_VALUES
from neuron_migrate.rewrite.verify.siblings import scripts_named

_ENV_MAGIC = re.compile(r"%(?:env|set_env)\s+([A-Za-z_]\w*)(?:\s*=\s*|\s+)?(\S*)")
_SHELL = re.compile(r"(!{1,2}[ \t]*)(.*)", re.S)
_CONTINUATION = re.compile(r"\\\r?\n")
_SEPARATOR = re.compile(r"(?:[ \t]|\\\r?\n)*")
_ASSIGNMENT = re.compile(
    r"""([A-Za-z_]\w*)=(?:'[^']*'|"[^"]*"|\\[^\r\n]|[^\s\\'"])*(?=\s|\\\r?\n|\Z)"""
)
_BLANK_CONTINUATION = re.compile(r"[ \t]*\\\r?")
_RUNNER = re.compile(r"(?:time|env)[ \t]+")


@dataclass(frozen=True)
class ShellRewrite:
    text: str  # the new command (a comment when the step is gone)
    message: str  # what changed, for the report
    code: str = "NM009"  # environment (NM009) or a launch step (NM005)
    removes: bool = False  # the whole command goes; `text` says why
    variables: tuple[str, ...] = ()  # the XLA variables it no longer sets
    # Of those, the precision switches it turned on (`XLA_USE_BF16=1`): for the kernel itself
    # with `%env`, else for the processes the command starts.
    switches: tuple[str, ...] = ()
    kernel: bool = False
    # What a removed export step wrote, and the model it read: (output, model); ("", "") if unknown.
    exported: tuple[str, str] | None = None

    @property
    def precision(self) -> bool:
        return bool(self.switches)


def rewrite_shell_command(command: str) -> ShellRewrite | None:
    """The migrated form of one `!` or `%env` command, all of its lines when it goes on with a
    trailing backslash; None when it needs nothing."""
    env = _ENV_MAGIC.match(command)
    if env and XLA_VARIABLE.match(env.group(1)):
        name = env.group(1)
        precision = name in PRECISION
        why = "XLA's precision switch; natively the dtype is set in the code" if precision else "it configured the XLA runtime"
        return ShellRewrite(
            f"# (removed `%env {name}`: {why})",
            f"removed `%env {name}`",
            removes=True,
            variables=(name,),
            switches=(name,) if precision and _unquoted(env.group(2)) in TRUE_VALUES else (),
            kernel=True,
        )
    shell = _SHELL.fullmatch(command)
    if not shell:
        return None
    prefix, body = shell.groups()
    runner = _RUNNER.match(body)  # `!time XLA_USE_BF16=1 python ...`: the settings follow it
    if runner:
        prefix, body = prefix + runner.group(), body[runner.end() :]
    assignments, rest = _leading_assignments(body)
    words = _CONTINUATION.sub(" ", body[rest:]).split()
    for step, why in REMOVED_STEPS.items():
        if words[: len(step.split())] == step.split():
            return ShellRewrite(
                f"# (removed: {why})",
                f"removed a `{step}` step",
                code="NM005",
                removes=True,
                exported=_export_paths(words) if step == EXPORT else None,
            )
    dropped = [match for match in assignments if XLA_VARIABLE.match(match.group(1))]
    if not dropped:
        return None
    names = [match.group(1) for match in dropped]
    switches = tuple(
        match.group(1)
        for match in dropped
        if match.group(1) in PRECISION and _unquoted(match.group().partition("=")[2]) in TRUE_VALUES
    )
    return ShellRewrite(
        _without(prefix, body, dropped),
        f"removed {', '.join(names)} from a shell command",
        variables=tuple(names),
        switches=switches,
    )




EXPORT = "optimum-cli export neuron"
EXPORT_READ_LATER = (
    "`optimum-cli export neuron` wrote {output}, which this notebook may read later: natively nothing is "
    "exported, so point what reads it at the model itself (`{model}`), loaded with `from_pretrained`, "
    "then remove this step"
)


def _export_paths(words: list[str]) -> tuple[str, str]:
    """The output folder of `optimum-cli export neuron ... OUTPUT` (its last word) and its `--model`."""
    output = words[-1] if len(words) > len(EXPORT.split()) and not words[-1].startswith("-") else ""
    model = next((words[at + 1] for at, word in enumerate(words[:-1]) if word in ("--model", "-m")), "")
    if output in ("", model) or (words[-2].startswith("-") and words[-2] not in ("--model", "-m") and "=" not in words[-2]):
        return "", model  # a trailing option's value, not a positional output
    return _unquoted(output), _unquoted(model)


def _unquoted(value: str) -> str:
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value


def scripts_run(command: str, as_written: bool = False) -> tuple[str, ...]:
    """The file names of the Python scripts a `!` command runs (`torchrun ... train.py`), or with
    `as_written`, their paths as the command writes them (`scripts/train.py`)."""
    shell = _SHELL.fullmatch(command)
    if not shell:
        return ()
    named = scripts_named(_CONTINUATION.sub(" ", shell.group(2)))
    return named if as_written else tuple(dict.fromkeys(script.rsplit("/", 1)[-1] for script in named))


# Flags only optimum-neuron's training arguments take (`overwrite_output_dir` was transformers' own).
_NEURON_FLAGS = frozenset({*PARALLEL_FIELDS, *TRAINING_FIELDS} - {"overwrite_output_dir"})
_FLAG = re.compile(r"--([A-Za-z_][\w-]*)")


def old_stack_command(command: str) -> str | None:
    """Why a `!` command that stays needs the old stack (a TODO goes above it); None if it does not."""
    shell = _SHELL.fullmatch(command)
    if not shell:
        return None
    words = _CONTINUATION.sub(" ", shell.group(2)).split()
    installed = _old_stack_installed(words)
    if installed is not None:
        return f"this installs the old stack (`{installed}`): install TorchNeuron, `torch-neuronx==2.13.*` with `torch==2.13.*`"
    pinned = _old_torch_pinned(words)
    if pinned is not None:
        return f"this pins `{pinned}`, the torch of the old stack; the migrated code needs `torch==2.13.*`"
    for at, word in enumerate(words):
        if word == "optimum-cli" and words[at + 1 : at + 2] == ["neuron"]:
            step = " ".join(words[at : at + 3])
            return (
                f"`{step}` is optimum-neuron's command line, which a native install does not have: native "
                "checkpoints are whole already (`save_pretrained`), and models compile when first called; "
                "run it with the old stack once if you still need its output"
            )
    module = next((words[at + 1] for at, word in enumerate(words[:-1]) if word == "-m" and old_stack_module(words[at + 1])), None)
    if module is not None:
        return OLD_STACK_LAUNCHERS.get(module) or f"`-m {module}` runs a module of the old stack, which a native install does not have: port what it does"
    launcher = next((script for script in scripts_run(command) if script in OLD_STACK_LAUNCHERS), None)
    if launcher is not None:
        return OLD_STACK_LAUNCHERS[launcher]
    imported = old_stack_imported_in(" ".join(words))
    if imported is not None:
        return f"this runs Python that imports `{imported}`, the old stack, which a native install does not have: port it too"
    command_line = next((name for word in words if (name := word.rsplit("/", 1)[-1]) in OLD_STACK_COMMANDS), None)
    if command_line is not None:
        return f"`{command_line}` is {OLD_STACK_COMMANDS[command_line]}, which a native install does not have: port what it does"
    fetched = _old_stack_fetched(words)
    if fetched is not None:
        return f"this fetches code of the old stack (`{fetched}`): migrate what it fetches (`neuron-migrate rewrite`) before it runs"
    flags = sorted({match.group(1).replace("-", "_") for word in words if (match := _FLAG.match(word))} & _NEURON_FLAGS)
    if flags and scripts_run(command):  # a script of the user's; `vllm serve --tensor-parallel-size` is not one
        named = ", ".join(f"`--{flag}`" for flag in flags)
        return (
            f"this runs a script with optimum-neuron training flags ({named}): migrate that script too "
            "(`neuron-migrate rewrite`), then pass a tensor- or pipeline-parallel size as its "
            "`DistributedConfig(tp_size=..., pp_size=...)` and drop the flags the native Trainer does not take"
        )
    gone = gone_flags(" ".join(words)) if scripts_run(command) else {}
    if len(gone) > 1:
        named = ", ".join(f"`{flag}`" for flag in gone)
        return f"transformers 5 has none of {named}, and its parser stops on them: drop or rename them (see NM204)"
    return next(iter(gone.values()), None)


# Commands that fetch code, and what they fetch from: a URL or repository of an old-stack project.
_FETCHERS = frozenset({"wget", "curl", "git", "huggingface-cli", "hf"})


def _old_stack_fetched(words: list[str]) -> str | None:
    """The old-stack project a `wget`/`curl`/`git clone` command fetches from (`optimum-neuron`)."""
    if not _FETCHERS & set(words):
        return None
    for word in words:
        if "/" in word and (match := _OLD_DISTRIBUTIONS.search(word)):
            return match.group(1)
    return None


# What installs a package, and the distributions of the old stack (their wheels' and pins' names).
_INSTALLERS = frozenset({"pip", "pip3", "conda", "mamba", "uv", "dpkg", "apt", "apt-get"})
_OLD_DISTRIBUTIONS = re.compile(
    r"(?:^|[/\s'\"])(torch[_-]?xla|neuronx[_-]distributed(?:[_-]training)?|optimum[_-]neuron|optimum\[neuronx\]|"
    r"transformers[_-]neuronx|libneuronxla|torch[_-]neuron)(?=$|[\s=<>~!\[.,'\"*/-])",
    re.IGNORECASE,
)
# torch-neuronx up to 2.9 was the XLA-based package; from 2.10 on the name is TorchNeuron's.
_XLA_TORCH_NEURONX = re.compile(r"torch[_-]neuronx==(\d+)\.(\d+)", re.IGNORECASE)


def _old_stack_installed(words: list[str]) -> str | None:
    """The first old-stack distribution an install command names (`pip install torch_xla[tpu]`,
    `dpkg -i torchxla.deb`); None for any other command."""
    if not any(word in _INSTALLERS or word.endswith("/pip") for word in words) or not {"install", "-i"} & set(words):
        return None
    for word in words:
        match = _OLD_DISTRIBUTIONS.search(word)
        if match:
            return match.group(1)
        pinned = _XLA_TORCH_NEURONX.search(word)
        if pinned and (int(pinned.group(1)), int(pinned.group(2))) < (2, 10):
            return pinned.group()
    return None


# A pin of torch itself below the native stack's (`torch==1.11.0`, `torch<2.0`).
_TORCH_PIN = re.compile(r"torch(?:==|<=|<|~=)(\d+)(?:\.(\d+))?[\w.*]*", re.IGNORECASE)
NATIVE_TORCH = (2, 13)


def _old_torch_pinned(words: list[str]) -> str | None:
    """The pin of an older torch an install command makes (`pip install torch==1.11.0`)."""
    if not any(word in _INSTALLERS or word.endswith("/pip") for word in words) or "install" not in words:
        return None
    for word in words:
        pinned = _TORCH_PIN.fullmatch(word.strip("'\""))
        if pinned and (int(pinned.group(1)), int(pinned.group(2) or 0)) < NATIVE_TORCH:
            return pinned.group()
    return None


def _leading_assignments(body: str) -> tuple[list[re.Match[str]], int]:
    """The `NAME=value` words that start a command, and where the command proper starts."""
    found: list[re.Match[str]] = []
    position = 0
    while match := _ASSIGNMENT.match(body, position):
        found.append(match)
        position = _SEPARATOR.match(body, match.end()).end()  # type: ignore[union-attr]
    return found, position


def _without(prefix: str, body: str, dropped: list[re.Match[str]]) -> str:
    """`prefix + body` without the `dropped` words, and without a line that only continued them."""
    for match in reversed(dropped):
        start, end = match.span()
        after = end + len(body[end:]) - len(body[end:].lstrip(" \t"))
        if after < len(body) and body[after] not in "\\\r\n":  # another word follows on the line
            body = body[:start] + body[after:]
        else:
            before = len(body[:start].rstrip(" \t"))
            body = body[:before] + body[end:]
    lines = body.split("\n")
    while len(lines) > 1 and _BLANK_CONTINUATION.fullmatch(lines[0]):
        lines[:2] = [lines[1].lstrip(" \t")]  # the first line only continued: the next moves up
    middle = [line for line in lines[1:-1] if not _BLANK_CONTINUATION.fullmatch(line)]
    return prefix + "\n".join(lines[:1] + middle + lines[1:][-1:])
