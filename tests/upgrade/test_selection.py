"""When the upgrade family runs: with the migration in files that use the old stack, and alone,
on any file, when it is selected by name."""

from __future__ import annotations

from neuron_migrate.rewrite.engine import Options, rewrite_source

PLAIN = 'from transformers import TrainingArguments\nargs = TrainingArguments("out", evaluation_strategy="epoch")\n'


def test_a_file_without_the_old_stack_is_left_alone_by_default() -> None:
    result = rewrite_source(PLAIN, "train.py")
    assert result.migrated == PLAIN


def test_selected_by_name_it_upgrades_any_file_that_uses_the_libraries() -> None:
    result = rewrite_source(PLAIN, "train.py", Options(select=("NM2",)))
    assert 'eval_strategy="epoch"' in result.migrated
    assert [c.code for c in result.changes] == ["NM201", "NM203"]
    only_keywords = rewrite_source(PLAIN, "train.py", Options(select=("NM201",)))
    assert "report_to" not in only_keywords.migrated


def test_selecting_everything_is_not_selecting_it_by_name() -> None:
    assert rewrite_source(PLAIN, "train.py", Options(select=("NM",))).migrated == PLAIN


def test_ignored_it_leaves_transformers_4_code_in_a_migrated_file() -> None:
    source = "import torch_xla.core.xla_model as xm\n" + PLAIN + "device = xm.xla_device()\n"
    result = rewrite_source(source, "train.py", Options(ignore=("NM2",)))
    assert "evaluation_strategy" in result.migrated and "xm." not in result.migrated


def test_running_it_again_changes_nothing() -> None:
    once = rewrite_source(PLAIN, "train.py", Options(select=("NM2",))).migrated
    assert rewrite_source(once, "train.py", Options(select=("NM2",))).migrated == once


def test_a_module_beside_migrated_scripts_moves_with_them(tmp_path) -> None:
    """A folder's `args.py` builds the arguments its XLA script trains with: both move."""
    from neuron_migrate.cli import main

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "args.py").write_text(PLAIN)
    (tmp_path / "src" / "train.py").write_text("import torch_xla.core.xla_model as xm\nfrom args import args\ndevice = xm.xla_device()\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "args.py").write_text(PLAIN)
    main(["rewrite", str(tmp_path), "-q"])
    assert 'eval_strategy="epoch"' in (tmp_path / "src" / "args.py").read_text()
    assert (tmp_path / "other" / "args.py").read_text() == PLAIN  # no old stack in its folder
