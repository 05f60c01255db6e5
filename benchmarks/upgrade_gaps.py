"""The gap list: what scripts written for optimum-neuron's pinned Hugging Face stack lose on the target.

optimum-neuron 0.4.5 pins transformers 4.57.1, trl 0.24.0, peft 0.17.0 and diffusers 0.35; migrated
code runs on the target versions (transformers 5, trl 1, ...). This script lists the public
top-level names, module paths and keyword parameters of commonly called APIs that the pinned
versions have and the target versions lack or only keep as deprecated aliases, says where a
missing name moved to when it still exists deeper in the package, and counts how many of them the
upgrade table (``neuron_migrate.rewrite.codemods.upgrade.table``) covers.

Each interpreter is asked through a probe subprocess (this file with ``--probe``: standard library
only, JSON on stdout), so the two stacks never meet in one process. transformers' names come from
its lazy import structure (``__all__``), without importing every model. Keywords come from
signatures, dataclass fields and the literal keys a function pops from its ``**kwargs``.

    # once: a venv with the pinned versions, borrowing torch from the reference env (~1 min, PyPI)
    python benchmarks/upgrade_gaps.py --build-env [--env DIR] [--torch-from PYTHON]
    # the gap list (Markdown on stdout), about a minute on two cores
    python benchmarks/upgrade_gaps.py --old ~/.cache/neuron-migrate/oldpins/bin/python \\
        --new .venv/bin/python --json benchmarks/upgrade_gaps.json

``--build-env`` needs the network and is never run by tests or CI.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import io
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import warnings
from collections import Counter
from pathlib import Path

LIBRARIES = ("transformers", "trl", "peft", "diffusers")
PINS = ("transformers==4.57.1", "trl==0.24.0", "peft==0.17.0", "diffusers==0.35.*")
CACHE = Path.home() / ".cache" / "neuron-migrate"
DEFAULT_ENV = CACHE / "oldpins"
DEFAULT_TORCH_FROM = CACHE / "refenv" / "bin" / "python"
TABLE_MODULE = "neuron_migrate.rewrite.codemods.upgrade.table"

# Callables that training and inference scripts call with keywords. A tuple adds the keywords of
# the callables it forwards ``**kwargs`` to. A class means its constructor (dataclass fields for
# dataclasses). trl's and peft's exported trainer and config classes are added by the probe.
TARGETS = {
    "transformers": [
        "TrainingArguments",
        "Seq2SeqTrainingArguments",
        "Trainer",
        "Seq2SeqTrainer",
        "Trainer.train",
        "Trainer.push_to_hub",
        "PreTrainedModel.from_pretrained",
        ("AutoModelForCausalLM.from_pretrained", "PreTrainedModel.from_pretrained"),
        ("AutoModelForSeq2SeqLM.from_pretrained", "PreTrainedModel.from_pretrained"),
        ("AutoModel.from_pretrained", "PreTrainedModel.from_pretrained"),
        "AutoConfig.from_pretrained",
        "PreTrainedModel.save_pretrained",
        "PreTrainedModel.gradient_checkpointing_enable",
        "pipeline",
        ("AutoTokenizer.from_pretrained", "PreTrainedTokenizerBase.from_pretrained"),
        "AutoProcessor.from_pretrained",
        "PreTrainedTokenizerBase.__call__",
        "PreTrainedTokenizerBase.apply_chat_template",
        "PreTrainedTokenizerBase.save_pretrained",
        "GenerationMixin.generate",
        "GenerationConfig",
        "BitsAndBytesConfig",
        "DataCollatorForLanguageModeling",
        "DataCollatorForSeq2Seq",
        "DataCollatorWithPadding",
        "EarlyStoppingCallback",
        "TextStreamer",
    ],
    "trl": [
        "SFTTrainer",
        "SFTConfig",
        "DPOTrainer",
        "DPOConfig",
        "GRPOTrainer",
        "GRPOConfig",
        "RewardTrainer",
        "RewardConfig",
        "PPOTrainer",
        "PPOConfig",
        "ModelConfig",
        "ScriptArguments",
        "setup_chat_format",
        "get_peft_config",
        "get_quantization_config",
    ],
    "peft": [
        "LoraConfig",
        "get_peft_model",
        ("PeftModel.from_pretrained", "PeftConfig.from_pretrained"),
        "PeftModel.save_pretrained",
        "prepare_model_for_kbit_training",
        "LoraModel.merge_and_unload",
    ],
    "diffusers": [
        "DiffusionPipeline.from_pretrained",
        "DiffusionPipeline.save_pretrained",
        "DiffusionPipeline.enable_model_cpu_offload",
        "StableDiffusionPipeline",
        "StableDiffusionPipeline.__call__",
        "StableDiffusionImg2ImgPipeline.__call__",
        "StableDiffusionXLPipeline.__call__",
        "StableDiffusionControlNetPipeline.__call__",
        "FluxPipeline.__call__",
        "ModelMixin.from_pretrained",
        "UNet2DConditionModel",
        "AutoencoderKL",
        "DDIMScheduler",
        "DDPMScheduler",
        "EulerDiscreteScheduler",
        "EulerAncestralDiscreteScheduler",
        "DPMSolverMultistepScheduler",
        "PNDMScheduler",
        "LMSDiscreteScheduler",
        "SchedulerMixin.from_pretrained",
    ],
}


# --------------------------------------------------------------------------- the probe
# Runs inside the interpreter under study: standard library only, besides the probed libraries.

_IDENT = re.compile(r"[`'\"]([A-Za-z_][A-Za-z0-9_]*)[`'\"]")
_BC_COMMENT = re.compile(r"#.*\b(BC|backward|back-compat|compat|deprecat|legacy)", re.I)
_REPLACEMENT = re.compile(
    r"(?:\buse|in favou?r of|alias (?:of|for)|replaced (?:by|with)|renamed (?:to|as)|instead,? use)\s+"
    r"(?:the\s+)?(?:argument\s+|parameter\s+)?[`'\"]([A-Za-z_][A-Za-z0-9_.]*)[`'\"]",
    re.I,
)


def _deprecations(text, candidates=None):
    """Identifier -> replacement (or None) for each name a message says is deprecated."""
    found = {}
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", text):
        lower = sentence.lower()
        at = lower.find("deprecat")
        if at < 0:
            continue
        before = [m.group(1) for m in _IDENT.finditer(sentence[:at])]
        if not before:
            continue
        name = before[0]
        if candidates is not None and name not in candidates:
            continue
        repl = _REPLACEMENT.search(text[text.find(sentence) :])
        found[name] = repl.group(1) if repl and repl.group(1) != name else None
    return found


def _strings(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def _source_tree(func):
    try:
        source = textwrap.dedent(inspect.getsource(inspect.unwrap(func)))
        return ast.parse(source)
    except (OSError, TypeError, SyntaxError, ValueError):
        return None


def _bc_pops(func, kwname):
    """Keys popped on a line whose comment says they are kept for backward compatibility."""
    try:
        lines = inspect.getsource(inspect.unwrap(func)).splitlines()
    except (OSError, TypeError):
        return set()
    pop = re.compile(rf"\b{re.escape(kwname)}\.(?:pop|get)\(\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")
    return {m.group(1) for line in lines if _BC_COMMENT.search(line) for m in pop.finditer(line)}


def _popped_keys(tree, kwname):
    """Literal keys read from the ``**kwname`` dict: the keywords a ``**kwargs`` signature documents."""
    keys = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pop", "get", "setdefault")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == kwname
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            keys.add(node.args[0].value)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == kwname
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            keys.add(node.slice.value)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
            and len(node.comparators) == 1
            and isinstance(node.ops[0], ast.In)
            and isinstance(node.comparators[0], ast.Name)
            and node.comparators[0].id == kwname
        ):
            keys.add(node.left.value)
    return {k for k in keys if k.isidentifier()}


def _decorator_renames(func):
    """Keywords a wrapper such as transformers' ``deprecate_kwarg`` still accepts, with their new name."""
    out = {}
    seen = 0
    while func is not None and seen < 10:
        seen += 1
        code = getattr(func, "__code__", None)
        cells = getattr(func, "__closure__", None) or ()
        if code is not None and cells:
            with contextlib.suppress(ValueError):
                free = {n: c.cell_contents for n, c in zip(code.co_freevars, cells, strict=False)}
                old, new = free.get("old_name"), free.get("new_name")
                if isinstance(old, str):
                    out[old] = new if isinstance(new, str) else None
        func = getattr(func, "__wrapped__", None)
    return out


def _callable_keywords(func):
    """(keywords, deprecated -> replacement) for one function."""
    keywords, deprecated = set(), {}
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        sig = None
    kwname = None
    if sig is not None:
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in (
                "self",
                "cls",
            ):
                keywords.add(p.name)
            elif p.kind is p.VAR_KEYWORD:
                kwname = p.name
    tree = _source_tree(func)
    if tree is not None:
        if kwname:
            keywords |= _popped_keys(tree, kwname)
            for key in _bc_pops(func, kwname):
                deprecated.setdefault(key, None)
        for text in _strings(tree):
            if "eprecat" in text:
                deprecated.update(_deprecations(text, keywords))
    for old, new in _decorator_renames(func).items():
        keywords.add(old)
        deprecated[old] = new
    return keywords, deprecated


def _field_deprecated(name, help_text):
    lower = help_text.lower()
    if "deprecat" not in lower:
        return False, None
    hit = re.match(r"\W*(deprecated|\[deprecated)", lower) or re.search(
        r"this (argument|parameter|field|option) (is|has been) deprecated", lower
    )
    found = _deprecations(help_text, {name})
    if hit or name in found:
        repl = _REPLACEMENT.search(help_text)
        return True, found.get(name) or (repl.group(1) if repl else None)
    return False, None


def _class_keywords(cls):
    if dataclasses.is_dataclass(cls):
        keywords, deprecated = set(), {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            keywords.add(f.name)
            is_dep, repl = _field_deprecated(f.name, str(f.metadata.get("help", "")))
            if is_dep or f.metadata.get("deprecated"):
                deprecated[f.name] = repl
        post = getattr(cls, "__post_init__", None)
        tree = _source_tree(post) if post else None
        if tree is not None:
            for text in _strings(tree):
                if "eprecat" in text:
                    for k, v in _deprecations(text, keywords).items():
                        deprecated.setdefault(k, v)
        return keywords, deprecated, "dataclass"
    keywords, deprecated = _callable_keywords(cls.__init__)
    return keywords, deprecated, "init"


def _resolve(path):
    """Import a dotted public path: the top-level package, then attributes."""
    head, *rest = path.split(".")
    obj = importlib.import_module(head)
    for part in rest:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if not inspect.ismodule(obj):
                raise
            obj = importlib.import_module(f"{obj.__name__}.{part}")
    return obj


def _probe_target(path):
    obj = _resolve(path)
    if inspect.isclass(obj):
        return _class_keywords(obj)
    keywords, deprecated = _callable_keywords(obj)
    return keywords, deprecated, "function"


def _package_dir(lib):
    spec = importlib.util.find_spec(lib)
    return Path(next(iter(spec.submodule_search_locations)))


def _module_paths(lib):
    """Public dotted module paths of the package, read from its files, nothing imported."""
    root = _package_dir(lib)
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).parts
        dirnames[:] = [
            d for d in dirnames if not d.startswith(("_", ".")) and d not in ("tests", "test")
        ]
        if "__init__.py" not in filenames and rel:
            dirnames[:] = []
            continue
        prefix = ".".join((lib, *rel))
        if rel:
            out.add(prefix)
        for name in filenames:
            if name.endswith(".py") and not name.startswith("_"):
                out.add(f"{prefix}.{name[:-3]}")
    return out


def _locate(lib, names):
    """Where each name is defined in the package now, preferring a package that re-exports it."""
    if not names:
        return {}
    root = _package_dir(lib)
    alternation = "|".join(map(re.escape, names))
    pattern = re.compile(rf"^(?:class|def)\s+({alternation})\b|^({alternation})\s*[:=]", re.M)
    defined = {}
    init_text = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d for d in dirnames if not d.startswith(("_", ".")) and d not in ("tests", "test")
        ]
        rel = Path(dirpath).relative_to(root).parts
        for fname in filenames:
            if not fname.endswith(".py") or (fname.startswith("_") and fname != "__init__.py"):
                continue
            if "dummy" in fname:
                continue
            try:
                text = (Path(dirpath) / fname).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            module = (
                ".".join((lib, *rel))
                if fname == "__init__.py"
                else ".".join((lib, *rel, fname[:-3]))
            )
            if fname == "__init__.py":
                init_text[module] = text
            for m in pattern.finditer(text):
                defined.setdefault(m.group(1) or m.group(2), set()).add(module)
    out = {}
    for name, modules in defined.items():
        best = None
        for module in modules:
            candidates = [module]
            parts = module.split(".")
            for i in range(1, len(parts)):
                package = ".".join(parts[:i])
                if package != lib and re.search(
                    rf"\b{re.escape(name)}\b", init_text.get(package, "")
                ):
                    candidates.append(package)
            pick = min(candidates, key=lambda p: (p.count("."), p))
            if best is None or (pick.count("."), pick) < (best.count("."), best):
                best = pick
        out[name] = f"{best}.{name}"
    return out


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _check_alias(module, name):
    """Resolve a name missing from ``__all__``: None, or (deprecated?, the name it resolves to)."""
    capture = _Capture()
    loggers = [logging.getLogger(), logging.getLogger(module.__name__)]
    for logger in loggers:
        logger.addHandler(capture)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                value = getattr(module, name)
            except Exception:
                return None
    finally:
        for logger in loggers:
            logger.removeHandler(capture)
    messages = [str(w.message) for w in caught] + capture.messages
    deprecated = any("deprecat" in m.lower() and name in m for m in messages)
    target = getattr(value, "__name__", None)
    return deprecated, target if isinstance(target, str) and target != name else None


def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return sorted(
        {n for n in names if isinstance(n, str) and n.isidentifier() and not n.startswith("_")}
    )


def _target_spec(item):
    return (item, ()) if isinstance(item, str) else (item[0], tuple(item[1:]))


def probe(request):
    """Answer one request: names, modules and keywords of each library, and what the old side lists."""
    result = {
        "python": sys.version.split()[0],
        "versions": {},
        "names": {},
        "modules": {},
        "keywords": {},
        "missing_targets": {},
        "aliases": {},
        "moved": {},
        "module_aliases": {},
    }
    for lib in LIBRARIES:
        try:
            module = importlib.import_module(lib)
        except Exception as exc:  # a library that does not import is reported, not fatal
            result["missing_targets"][lib] = f"import failed: {exc!r}"
            continue
        result["versions"][lib] = getattr(module, "__version__", "?")
        names = _public_names(module)
        result["names"][lib] = names
        result["modules"][lib] = sorted(_module_paths(lib))

        old_names = request.get("names", {}).get(lib)
        missing = sorted(set(old_names) - set(names)) if old_names else []
        unresolved = []
        for name in missing:
            alias = _check_alias(module, name)
            if alias is None:
                unresolved.append(name)
            else:
                result["aliases"][f"{lib}.{name}"] = list(alias)
        result["moved"].update(
            {f"{lib}.{n}": where for n, where in _locate(lib, unresolved).items()}
        )

        old_modules = request.get("modules", {}).get(lib)
        if old_modules:
            have = set(result["modules"][lib])
            for mod in sorted(set(old_modules) - have):
                if mod.rpartition(".")[0] not in have:
                    continue
                with contextlib.suppress(Exception), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if importlib.util.find_spec(mod) is not None:
                        result["module_aliases"][mod] = True

        targets = [_target_spec(t) for t in request.get("targets", {}).get(lib, TARGETS[lib])]
        if lib in ("trl", "peft") and "targets" not in request:
            listed = {t for t, _ in targets}
            suffixes = ("Trainer", "Config") if lib == "trl" else ("Config",)
            targets += [(n, ()) for n in names if n.endswith(suffixes) and n not in listed]
        for path, forwards in targets:
            label = f"{lib}.{path}"
            where = label
            if label in result["moved"]:
                where = result["moved"][label]
            elif (
                path.split(".")[0] not in names and f"{lib}.{path.split('.')[0]}" in result["moved"]
            ):
                where = (
                    result["moved"][f"{lib}.{path.split('.')[0]}"] + path[len(path.split(".")[0]) :]
                )
            if where == label and path.split(".")[0] not in names:
                result["missing_targets"][label] = "not exported by this version"
                continue
            try:
                keywords, deprecated, kind = _probe_target(where)
                for extra in forwards:
                    more, more_dep, _ = _probe_target(f"{lib}.{extra}")
                    keywords |= more
                    for k, v in more_dep.items():
                        deprecated.setdefault(k, v)
            except Exception as exc:
                result["missing_targets"][label] = repr(exc)[:200]
                continue
            result["keywords"][label] = {
                "kind": kind,
                "at": where,
                "forwards": list(forwards),
                "keywords": sorted(keywords),
                "deprecated": {k: v for k, v in sorted(deprecated.items()) if k in keywords},
                "hints": {k: v for k, v in sorted(deprecated.items()) if v},
            }
    return result


def _probe_main():
    request = json.load(sys.stdin)
    real_stdout = sys.stdout
    sys.stdout = io.StringIO()  # libraries that print while importing must not corrupt the JSON
    warnings.simplefilter("ignore")
    try:
        result = probe(request)
    finally:
        sys.stdout = real_stdout
    json.dump(result, real_stdout)


# --------------------------------------------------------------------------- the comparison


def run_probe(python, request, timeout=900):
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONWARNINGS="ignore",
        PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"),
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    proc = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--probe"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"probe failed in {python}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def _keyword_spelling(label, keyword):
    if label.endswith(".__init__"):
        label = label[: -len(".__init__")]
    return f"{label}({keyword})"


def compare(old, new):
    """The gap items: each a dict with library, kind, status, old, new and a note."""
    gaps, silent = [], []
    for lib in LIBRARIES:
        old_names = set(old["names"].get(lib, ()))
        new_names = set(new["names"].get(lib, ()))
        old_modules = set(old["modules"].get(lib, ()))
        for name in sorted(old_names - new_names):
            dotted = f"{lib}.{name}"
            if dotted in old_modules:
                continue  # a submodule listed in the import structure: compared as a module
            item = {"library": lib, "kind": "name", "old": dotted}
            if dotted in new["aliases"]:
                deprecated, target = new["aliases"][dotted]
                replacement = f"{lib}.{target}" if target else None
                if not deprecated:
                    silent.append({**item, "new": replacement})
                    continue
                item.update(status="deprecated", new=replacement)
            elif dotted in new["moved"]:
                item.update(status="moved", new=new["moved"][dotted])
            else:
                item.update(status="removed", new=None)
            gaps.append(item)

        new_mods = set(new["modules"].get(lib, ()))
        for mod in sorted(old_modules - new_mods):
            status = "deprecated" if mod in new["module_aliases"] else "removed"
            gaps.append(
                {"library": lib, "kind": "module", "old": mod, "status": status, "new": None}
            )

    base_fields = set(old["keywords"].get("transformers.TrainingArguments", {}).get("keywords", ()))
    for label, before in sorted(old["keywords"].items()):
        lib = label.split(".")[0]
        after = new["keywords"].get(label)
        if after is None:
            continue  # the callable itself is gone: its name is in the list already
        now = set(after["keywords"])
        hints = {**before["hints"], **after["hints"]}
        for kw in before["keywords"]:
            if kw.startswith("_") or (kw in now and kw not in after["deprecated"]):
                continue
            replacement = after["deprecated"].get(kw) or hints.get(kw)
            item = {
                "library": lib,
                "kind": "keyword",
                "old": _keyword_spelling(label, kw),
                "status": "deprecated" if kw in now else ("renamed" if replacement else "removed"),
                "new": replacement,
            }
            notes = []
            if after["at"] != label:
                notes.append(f"class now at {after['at']}")
            if before["kind"] == "dataclass" and lib != "transformers" and kw in base_fields:
                notes.append("inherited from TrainingArguments")
            if kw in before["deprecated"]:
                notes.append("already deprecated in the old version")
            if notes:
                item["note"] = "; ".join(notes)
            gaps.append(item)
    return gaps, silent


def load_table():
    """The upgrade table's ``.old`` spellings, or None when the module is not there yet."""
    root = Path(__file__).resolve().parents[1]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(TABLE_MODULE)
    except Exception as exc:
        return None, f"{TABLE_MODULE} not importable ({type(exc).__name__}: {exc})"
    return {str(e.old): getattr(e, "new", None) for e in module.ENTRIES}, None


def coverage(gaps, table):
    covered = [g for g in gaps if g["old"] in table]
    per = Counter((g["library"], g["kind"]) for g in covered)
    return {
        "covered": len(covered),
        "not_covered": len(gaps) - len(covered),
        "per_library_kind": {f"{lib}/{kind}": n for (lib, kind), n in sorted(per.items())},
        "table_entries": len(table),
        "table_entries_not_in_gaps": len(set(table) - {g["old"] for g in gaps}),
    }


def markdown(report):
    lines = ["# transformers 4 -> 5 upgrade gaps", ""]
    lines.append("| library | old | new |")
    lines.append("|---|---|---|")
    for lib in LIBRARIES:
        lines.append(
            f"| {lib} | {report['old']['versions'].get(lib)} | {report['new']['versions'].get(lib)} |"
        )
    lines += [
        "",
        "| library | kind | removed | renamed | moved | deprecated | total |",
        "|---|---|---|---|---|---|---|",
    ]
    counts = Counter((g["library"], g["kind"], g["status"]) for g in report["gaps"])
    for lib in LIBRARIES:
        for kind in ("name", "keyword", "module"):
            row = [counts[(lib, kind, s)] for s in ("removed", "renamed", "moved", "deprecated")]
            if sum(row):
                lines.append(
                    f"| {lib} | {kind} | " + " | ".join(map(str, row)) + f" | {sum(row)} |"
                )
    inherited = sum("inherited" in g.get("note", "") for g in report["gaps"])
    lines.append(
        f"\nOf the keyword gaps, {inherited} are `TrainingArguments` fields inherited by trl configs"
        " (the same field once per config)."
    )
    lines.append(
        f"\nSilent aliases (missing from `__all__` but still resolving, no warning): {len(report['aliases'])}"
    )
    if report["missing_targets"]:
        lines.append("\nProbed callables that did not resolve:")
        for side, missing in report["missing_targets"].items():
            for label, why in sorted(missing.items()):
                lines.append(f"- {side}: `{label}`: {why}")
    cov = report.get("coverage")
    lines.append("")
    if isinstance(cov, dict):
        lines.append(
            f"Coverage by the upgrade table: {cov['covered']} covered, {cov['not_covered']} not covered."
        )
    else:
        lines.append(f"Coverage: skipped ({cov}).")
    lines += ["", "## The full list", ""]
    for lib in LIBRARIES:
        for kind in ("name", "keyword", "module"):
            items = [g for g in report["gaps"] if g["library"] == lib and g["kind"] == kind]
            if not items:
                continue
            lines.append(f"### {lib}: {kind}s ({len(items)})\n")
            for g in items:
                new = f" -> `{g['new']}`" if g.get("new") else ""
                note = f" ({g['note']})" if g.get("note") else ""
                lines.append(f"- `{g['old']}` {g['status']}{new}{note}")
            lines.append("")
    return "\n".join(lines)


def build_env(env_dir, torch_from):
    """A venv with the pinned versions; torch comes from another interpreter's site-packages when given."""
    env_dir = Path(env_dir).expanduser()
    base = sys.executable
    site_dir = None
    if torch_from and Path(torch_from).exists():
        info = subprocess.run(
            [
                str(torch_from),
                "-c",
                "import json,sys,sysconfig,torch;"
                "print(json.dumps([sys._base_executable, sysconfig.get_paths()['purelib']]))",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        base, site_dir = json.loads(info.stdout)
    subprocess.run([base, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    pins = list(PINS)
    if site_dir:
        # Appended after the venv's own site-packages, so the pinned versions installed here win.
        Path(purelib, "zz_torch_from.pth").write_text(site_dir + "\n")
    else:
        pins.insert(0, "torch")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)
    print(f"built {env_dir}: run with --old {python}")


def _compact_json(report):
    """Gaps grouped by library and kind, one per line, empty fields left out: small enough to keep."""
    body = {k: v for k, v in report.items() if k not in ("gaps", "aliases")}
    lines = [json.dumps(body, indent=1, sort_keys=True)[:-2] + ","]
    lines.append(' "aliases": ' + json.dumps(report["aliases"], separators=(",", ":")) + ",")
    lines.append(' "gaps": {')
    groups = [(lib, kind) for lib in LIBRARIES for kind in ("name", "keyword", "module")]
    groups = [g for g in groups if any((x["library"], x["kind"]) == g for x in report["gaps"])]
    for i, (lib, kind) in enumerate(groups):
        rows = [
            json.dumps(
                {k: v for k, v in g.items() if v and k not in ("library", "kind")}, sort_keys=True
            )
            for g in report["gaps"]
            if (g["library"], g["kind"]) == (lib, kind)
        ]
        lines.append(
            f'  "{lib}/{kind}": [\n   '
            + ",\n   ".join(rows)
            + "\n  ]"
            + ("," if i < len(groups) - 1 else "")
        )
    lines.append(" }\n}\n")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--build-env", action="store_true", help="create the old-pins venv and exit"
    )
    parser.add_argument("--env", default=str(DEFAULT_ENV), help="where --build-env puts it")
    parser.add_argument(
        "--torch-from",
        default=str(DEFAULT_TORCH_FROM),
        help="an interpreter whose torch the env reuses (else torch is installed)",
    )
    parser.add_argument(
        "--old", default=str(DEFAULT_ENV / "bin" / "python"), help="interpreter with the pins"
    )
    parser.add_argument(
        "--new", default=sys.executable, help="interpreter with the target versions"
    )
    parser.add_argument("--json", help="write the full report here")
    parser.add_argument("--no-coverage", action="store_true", help="do not read the upgrade table")
    args = parser.parse_args(argv)
    if args.probe:
        _probe_main()
        return 0
    if args.build_env:
        build_env(args.env, args.torch_from)
        return 0
    if not Path(args.old).exists():
        print(f"no interpreter at {args.old}: build it with --build-env", file=sys.stderr)
        return 2
    old = run_probe(args.old, {})
    targets = {lib: [] for lib in LIBRARIES}
    for label, info in old["keywords"].items():
        lib, _, path = label.partition(".")
        targets[lib].append([path, *info["forwards"]])
    new = run_probe(
        args.new, {"names": old["names"], "modules": old["modules"], "targets": targets}
    )
    gaps, silent = compare(old, new)
    report = {
        "old": {"python": args.old, "versions": old["versions"]},
        "new": {"python": args.new, "versions": new["versions"]},
        "counts": {
            f"{lib}/{kind}/{status}": n
            for (lib, kind, status), n in sorted(
                Counter((g["library"], g["kind"], g["status"]) for g in gaps).items()
            )
        },
        "missing_targets": {"old": old["missing_targets"], "new": new["missing_targets"]},
        "aliases": silent,
        "gaps": gaps,
    }
    if args.no_coverage:
        report["coverage"] = "not asked"
    else:
        table, why = load_table()
        report["coverage"] = coverage(gaps, table) if table is not None else why
        if table is not None:
            for g in gaps:
                g["covered"] = g["old"] in table
    print(markdown(report))
    if args.json:
        Path(args.json).write_text(_compact_json(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
