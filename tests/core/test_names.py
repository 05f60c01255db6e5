"""Which calls a file surely makes: the facts launches and gradient averaging rely on."""

from __future__ import annotations

import ast
import textwrap

from neuron_migrate.core.names import ImportTable, unconditional_calls


def test_unconditional_calls_are_those_no_branch_decides() -> None:
    source = textwrap.dedent(
        """\
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        def sometimes(args, model):
            if args.ddp:
                dist.init_process_group()
            return DDP(model) if args.ddp else model

        def after_an_early_return(args):
            if not args.ddp:
                return None
            dist.init_process_group()

        def always(model):
            dist.barrier()
            return [dist.get_rank() for _ in range(2)]
        """
    )
    tree = ast.parse(source)
    assert unconditional_calls(tree, ImportTable.from_ast(tree)) == {"torch.distributed.barrier"}


def test_a_call_made_on_both_branches_of_an_if_is_made_surely() -> None:
    source = textwrap.dedent(
        """\
        import os
        import torch.distributed as dist

        def init():
            if os.environ.get("OLD_TORCH"):
                dist.init_process_group("gloo", init_method="env://")
            else:
                dist.init_process_group("gloo")
                dist.barrier()
            if os.environ.get("DEBUG"):
                dist.get_rank()
        """
    )
    tree = ast.parse(source)
    assert unconditional_calls(tree, ImportTable.from_ast(tree)) == {"torch.distributed.init_process_group"}


def test_a_script_entry_point_runs_whenever_the_file_runs_as_a_script() -> None:
    source = textwrap.dedent(
        """\
        import torch.distributed as dist

        if __name__ == "__main__":
            if dist.is_available():
                dist.init_process_group("gloo", init_method="env://")
            else:
                dist.init_process_group("gloo")
            dist.barrier()
        """
    )
    tree = ast.parse(source)
    assert unconditional_calls(tree, ImportTable.from_ast(tree)) == {
        "torch.distributed.init_process_group",
        "torch.distributed.barrier",
    }
