"""What torch_xla's gradient averaging, collectives, ranks and launchers meant survives migration.

The numeric checks run the migrated program under torchrun (gloo, CPU) next to a native program
written by hand to do what the torch_xla calls did (read from the torch_xla 2.9 sources), and
compare what each rank computed or wrote. Both programs run in the same workers, one after the
other, so a check costs one launch. The static checks pin the shapes a person would review.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.rewrite.notebook import rewrite_notebook
from tests.helpers import torchrun as torchrun_helper

ROOT = Path(__file__).resolve().parents[1]

# Runs each script given to it in turn, in every torchrun worker, as `__main__`. Each gets a
# rendezvous store of its own: process groups of one script must not meet those of another.
DRIVER = """\
import os
import runpy
import sys

import torch.distributed as dist

os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
for script, port in zip(sys.argv[1:], os.environ["STORE_PORTS"].split(",")):
    os.environ["MASTER_PORT"] = port
    sys.path.insert(0, os.path.dirname(script))
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")
    if dist.is_initialized():  # a script that never tears its process group down
        dist.destroy_process_group()
"""


def migrate(source: str, name: str = "train.py") -> str:
    result = rewrite_source(source, name)
    assert result.error is None, result.error
    return result.migrated


def _env(results: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PJRT_DEVICE", None)
    env.update(RESULTS=str(results), OMP_NUM_THREADS="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    return env


def _free_ports(count: int) -> list[int]:
    """Ports nothing holds now, from below the kernel's ephemeral range: a port the kernel hands
    out itself (a bind to port 0, a connection's own end) could be taken by a worker's sockets
    before the script meant to listen on it starts."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    ports: list[int] = []
    for port in random.sample(range(max(1024, low - 12000), low), 500):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError("no free ports below the ephemeral range")


def torchrun(tmp: Path, scripts: list[Path], nodes: int = 1) -> str:
    """Run `scripts` in turn in two workers: one node of two, or two nodes of one (RANK 0 and 1,
    LOCAL_RANK 0 on both). Returns what the workers printed."""
    driver = tmp / "driver.py"
    driver.write_text(DRIVER)
    results = tmp / "results"
    results.mkdir(exist_ok=True)
    run = [sys.executable, "-m", "torch.distributed.run"]
    env = _env(results)

    def launch_all() -> list[subprocess.CompletedProcess[str]]:
        ports = _free_ports(len(scripts) + 1)  # fresh ones for a second launch too
        env["STORE_PORTS"] = ",".join(map(str, ports[1:]))
        if nodes == 1:
            launches = [[*run, "--standalone", "--nproc_per_node=2"]]
        else:
            launches = [
                [*run, "--nnodes=2", "--nproc_per_node=1", f"--node_rank={rank}",
                 "--master_addr=127.0.0.1", f"--master_port={ports[0]}"]
                for rank in range(2)
            ]
        procs = [
            subprocess.Popen([*launch, str(driver), *map(str, scripts)], cwd=tmp, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for launch in launches
        ]
        outputs = [proc.communicate(timeout=300)[0] for proc in procs]
        return [subprocess.CompletedProcess(p.args, p.returncode, o) for p, o in zip(procs, outputs, strict=True)]

    done = torchrun_helper.again_after_abort(launch_all)
    for node in done:
        assert node.returncode == 0, node.stdout
    return "".join(node.stdout for node in done)


def results(tmp: Path, label: str) -> dict[int, dict]:
    found = sorted((tmp / "results").glob(f"{label}.rank*.json"))
    return {int(p.stem.rsplit("rank", 1)[1]): json.loads(p.read_text()) for p in found}


# -- 1, 2, 3, 6: averaging in a module without a launcher, replica groups, all_reduce, ranks ------

XLA_STEPS = '''\
"""Imported by the training script: nothing here says how many processes run."""
import torch_xla.core.xla_model as xm


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    xm.optimizer_step(optimizer)
'''

XLA_TRAIN = '''\
import json
import os

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr
from xla_steps import train_step

WORLD = xr.world_size()
RANK = xr.global_ordinal()


def _mp_fn(index, out):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    torch.manual_seed(100 + index)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    train_step(model, optimizer, x, y)
    averaged = [p.tolist() for p in model.parameters()]
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    xm.optimizer_step(optimizer, groups=[[0], [1]])
    t = torch.full((3,), float(index + 1))
    alias = t
    t = xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5)
    peak = xm.all_reduce(xm.REDUCE_MAX, alias, groups=[[0, 1]])
    mean = xm.mesh_reduce("mean", torch.tensor(float(index)), lambda values: float(sum(values) / len(values)))
    result = {
        "index": index, "world": WORLD, "rank": RANK, "averaged": averaged,
        "grouped": [p.tolist() for p in model.parameters()],
        "t": t.tolist(), "alias": alias.tolist(), "peak": peak.tolist(), "mean": mean,
    }
    with open(os.path.join(out, f"migrated.rank{xr.global_ordinal()}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    print("launching the workers")
    xmp.spawn(_mp_fn, args=(os.environ["RESULTS"],))
'''

NATIVE_TRAIN = '''\
"""What the torch_xla program computed, with torch.distributed (torch_xla 2.9 semantics)."""
import json
import os

import torch
import torch.distributed as dist

WORLD = int(os.environ["WORLD_SIZE"])  # torch_xla read them from the launcher, before any group
RANK = int(os.environ["RANK"])


def group_of(groups):
    mine = None
    for ranks in groups:  # every rank creates every group
        group = dist.new_group(ranks)
        if dist.get_rank() in ranks:
            mine = group
    return mine


def reduce_gradients(optimizer, groups=None):
    """xm.reduce_gradients: all_reduce(REDUCE_SUM, grads, scale=1 / world_size, groups)."""
    world = dist.get_world_size()
    if world == 1:
        return
    group = group_of(groups) if groups else None
    for param_group in optimizer.param_groups:
        for p in param_group["params"]:
            if p.grad is not None:
                dist.all_reduce(p.grad, group=group)
                p.grad.mul_(1.0 / world)


def all_reduce(op, tensor, scale=1.0, groups=None):
    """xm.all_reduce on one tensor: a new, reduced and scaled tensor; a clone in a world of one."""
    result = tensor.clone()
    if dist.get_world_size() > 1:
        dist.all_reduce(result, op=op, group=group_of(groups) if groups else None)
        result.mul_(scale)
    return result


def mesh_reduce(data, reduce_fn):
    """xm.mesh_reduce: every process's data, moved to the CPU, handed to reduce_fn."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, data.cpu())
    return reduce_fn(gathered)


def main(out):
    dist.init_process_group("gloo")
    index = dist.get_rank()  # xmp.spawn passed the global ordinal
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    torch.manual_seed(100 + index)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    reduce_gradients(optimizer)
    optimizer.step()
    averaged = [p.tolist() for p in model.parameters()]
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    reduce_gradients(optimizer, groups=[[0], [1]])
    optimizer.step()
    t = torch.full((3,), float(index + 1))
    alias = t
    t = all_reduce(dist.ReduceOp.SUM, t, scale=0.5)
    peak = all_reduce(dist.ReduceOp.MAX, alias, groups=[[0, 1]])
    mean = mesh_reduce(torch.tensor(float(index)), lambda values: float(sum(values) / len(values)))
    result = {
        "index": index, "world": WORLD, "rank": RANK, "averaged": averaged,
        "grouped": [p.tolist() for p in model.parameters()],
        "t": t.tolist(), "alias": alias.tolist(), "peak": peak.tolist(), "mean": mean,
    }
    with open(os.path.join(out, f"native.rank{index}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(os.environ["RESULTS"])
'''


def _close(a: object, b: object) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))
    return a == b


@pytest.mark.slow
def test_gradients_groups_all_reduce_and_ranks_compute_what_torch_xla_did(tmp_path: Path) -> None:
    steps = migrate(XLA_STEPS, "xla_steps.py")
    train = migrate(XLA_TRAIN)
    assert "average_gradients(optimizer)" in steps  # no launcher in this module, still averaged
    (tmp_path / "xla_steps.py").write_text(steps)
    (tmp_path / "train.py").write_text(train)
    (tmp_path / "native.py").write_text(NATIVE_TRAIN)
    output = torchrun(tmp_path, [tmp_path / "native.py", tmp_path / "train.py"])

    native, migrated = results(tmp_path, "native"), results(tmp_path, "migrated")
    assert sorted(native) == sorted(migrated) == [0, 1]
    for rank in (0, 1):
        for key, expected in native[rank].items():
            assert _close(migrated[rank][key], expected), (rank, key, migrated[rank][key], expected)
    # The checks can fail: the first step agrees across ranks, the grouped one does not.
    assert native[0]["averaged"] == native[1]["averaged"] and native[0]["grouped"] != native[1]["grouped"]
    assert output.count("launching the workers") == 1  # the parent printed it once


# -- 5, 7: the spawn index is the global rank; xm.save flags and master_print keywords ----------

XLA_SAVE = '''\
import os

import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp


def log(*args, **kwargs):
    xm.master_print(*args, **kwargs)


def _mp_fn(index, out, master_only, global_master):
    state = {"index": index}
    xm.save(state, os.path.join(out, f"migrated.hosts.{index}"), master_only=master_only, global_master=global_master)
    xm.save(state, os.path.join(out, f"migrated.job.{index}"), master_only=master_only, global_master=not global_master)
    xm.save(state, os.path.join(out, f"migrated.every.{index}"), master_only=not master_only)
    log("logged by", index, flush=True)


if __name__ == "__main__":
    xmp.spawn(_mp_fn, args=(os.environ["RESULTS"], True, False))
'''

NATIVE_SAVE = '''\
"""What the torch_xla program wrote: xm.save writes where `not master_only or
is_master_ordinal(local=not global_master)`; xmp.spawn passed the global ordinal."""
import os

import torch
import torch.distributed as dist


def save(data, path, master_only=True, global_master=False):
    ordinal = int(os.environ["RANK"]) if global_master else int(os.environ["LOCAL_RANK"])
    if not master_only or ordinal == 0:
        torch.save(data, path)


def main(out, master_only, global_master):
    dist.init_process_group("gloo")
    index = dist.get_rank()
    state = {"index": index}
    save(state, os.path.join(out, f"native.hosts.{index}"), master_only=master_only, global_master=global_master)
    save(state, os.path.join(out, f"native.job.{index}"), master_only=master_only, global_master=not global_master)
    save(state, os.path.join(out, f"native.every.{index}"), master_only=not master_only)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(os.environ["RESULTS"], True, False)
'''


@pytest.mark.slow
def test_spawn_index_and_save_flags_follow_global_and_local_ranks(tmp_path: Path) -> None:
    (tmp_path / "save.py").write_text(migrate(XLA_SAVE, "save.py"))
    (tmp_path / "native.py").write_text(NATIVE_SAVE)
    output = torchrun(tmp_path, [tmp_path / "native.py", tmp_path / "save.py"], nodes=2)

    def written(label: str) -> set[str]:
        return {p.name.removeprefix(label + ".") for p in (tmp_path / "results").glob(f"{label}.*")}

    # Two hosts of one process: two local masters, one global master.
    assert written("native") == {"hosts.0", "hosts.1", "job.0", "every.0", "every.1"}
    assert written("migrated") == written("native")
    assert output.count("logged by 0") == 1 and "flush" not in output


# -- 4: init_process_group with the XLA device, or the pjrt:// rendezvous ------------------------

XLA_INIT_FROM_DEVICE = '''\
import json
import os

import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

device = "xla"
torch.distributed.init_process_group(device)
world_size = xr.world_size()

total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(2).to(device))
with open(os.path.join(os.environ["RESULTS"], f"device.rank{xr.global_ordinal()}.json"), "w") as f:
    json.dump({"world": world_size, "total": total.tolist()}, f)
'''

XLA_INIT_PJRT = '''\
import json
import os

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def main():
    dist.init_process_group("xla", init_method="pjrt://")
    total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=xm.xla_device()))
    with open(os.path.join(os.environ["RESULTS"], f"pjrt.rank{xr.global_ordinal()}.json"), "w") as f:
        json.dump({"world": xr.world_size(), "total": total.tolist()}, f)


if __name__ == "__main__":
    main()
'''


@pytest.mark.slow
def test_xla_process_group_inits_become_native_inits_that_start(tmp_path: Path) -> None:
    device = migrate(XLA_INIT_FROM_DEVICE, "device.py")
    pjrt = migrate(XLA_INIT_PJRT, "pjrt.py")
    assert "torch.distributed.init_process_group()" in device
    assert "dist.init_process_group()" in pjrt and "pjrt://" not in pjrt
    (tmp_path / "device.py").write_text(device)
    (tmp_path / "pjrt.py").write_text(pjrt)
    torchrun(tmp_path, [tmp_path / "device.py", tmp_path / "pjrt.py"])
    # What torch_xla computed on two processes: a world of two, each summing two ones.
    expected = {"world": 2, "total": [2.0, 2.0]}
    assert results(tmp_path, "device") == results(tmp_path, "pjrt") == {0: expected, 1: expected}


# -- 1, 4: DDP and the process group only on some runs; the other runs still average ------------

XLA_SOMETIMES_DDP = '''\
import json
import os

import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch.nn.parallel import DistributedDataParallel as DDP

USE_DDP = False


def _mp_fn(index):
    if USE_DDP:
        dist.init_process_group("xla", init_method="xla://")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    if USE_DDP:
        model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    torch.manual_seed(100 + xr.global_ordinal())
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    ((model(x) - y) ** 2).mean().backward()
    if USE_DDP:
        optimizer.step()
    else:
        xm.optimizer_step(optimizer)
    name = f"{'ddp' if USE_DDP else 'plain'}.rank{xr.global_ordinal()}.json"
    with open(os.path.join(os.environ["RESULTS"], name), "w") as f:
        json.dump({"world": xr.world_size(), "params": [p.tolist() for p in model.parameters()]}, f)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn)
'''


def _averaged_step() -> list:
    """One SGD step on the mean of both ranks' gradients, computed in one process."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    grads = []
    for rank in (0, 1):
        model.zero_grad()
        torch.manual_seed(100 + rank)
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        ((model(x) - y) ** 2).mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    with torch.no_grad():
        for p, g0, g1 in zip(model.parameters(), *grads, strict=True):
            p -= 0.5 * (g0 + g1) / 2
    return [p.tolist() for p in model.parameters()]


@pytest.mark.slow
def test_a_run_without_ddp_still_averages_and_has_a_process_group(tmp_path: Path) -> None:
    plain = migrate(XLA_SOMETIMES_DDP, "plain.py")
    assert "average_gradients(optimizer)" in plain  # DDP wraps the model on some runs only
    # The launch makes it for every run; the file's own call must not make it twice.
    assert "if not dist.is_initialized():\n            dist.init_process_group()" in plain
    (tmp_path / "plain.py").write_text(plain)
    (tmp_path / "ddp.py").write_text(plain.replace("USE_DDP = False", "USE_DDP = True"))
    torchrun(tmp_path, [tmp_path / "plain.py", tmp_path / "ddp.py"])
    expected = _averaged_step()
    for label in ("plain", "ddp"):
        found = results(tmp_path, label)
        assert sorted(found) == [0, 1]
        for rank in (0, 1):
            assert found[rank]["world"] == 2
            assert _close(found[rank]["params"], expected), (label, rank, found[rank]["params"], expected)


# A DDP wrap in a helper, called on some runs only: before, any wrapper anywhere in the file made
# every step skip the average, and without `USE_DDP` the replicas drifted apart.
XLA_DDP_IN_A_HELPER = XLA_SOMETIMES_DDP.replace(
    "USE_DDP = False\n",
    "USE_DDP = False\n\n\ndef wrap(model):\n    return DDP(model)\n",
).replace(
    "        model = DDP(model)\n", "        model = wrap(model)\n"
).replace(
    "    if USE_DDP:\n        optimizer.step()\n    else:\n        xm.optimizer_step(optimizer)\n",
    "    xm.optimizer_step(optimizer)\n",
)


@pytest.mark.slow
def test_a_ddp_wrap_the_step_cannot_see_keeps_the_average(tmp_path: Path) -> None:
    assert "model = wrap(model)" in XLA_DDP_IN_A_HELPER and "    xm.optimizer_step(optimizer)\n" in XLA_DDP_IN_A_HELPER
    plain = migrate(XLA_DDP_IN_A_HELPER, "plain.py")
    assert "    average_gradients(optimizer)\n    optimizer.step()\n" in plain
    (tmp_path / "plain.py").write_text(plain)
    # With DDP the kept average averages gradients that are equal already: the same step.
    (tmp_path / "ddp.py").write_text(plain.replace("USE_DDP = False", "USE_DDP = True"))
    torchrun(tmp_path, [tmp_path / "plain.py", tmp_path / "ddp.py"])
    expected = _averaged_step()
    for label in ("plain", "ddp"):
        found = results(tmp_path, label)
        assert sorted(found) == [0, 1]
        for rank in (0, 1):
            assert _close(found[rank]["params"], expected), (label, rank, found[rank]["params"], expected)


# -- 5: a notebook's spawn runs in the kernel ---------------------------------------------------

NOTEBOOK_CELLS = [
    "import json\nimport os\nimport torch\nimport torch_xla.core.xla_model as xm\n"
    "import torch_xla.distributed.xla_multiprocessing as xmp\nimport torch_xla.runtime as xr",
    "def _mp_fn(index, scale):\n"
    "    total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(1) * (index + 1) * scale)\n"
    '    with open(os.path.join(os.environ["RESULTS"], f"nb.rank{xr.global_ordinal()}.json"), "w") as f:\n'
    '        json.dump({"index": index, "total": total.item()}, f)',
    "xmp.spawn(_mp_fn, args=(2.0,), nprocs=2, start_method='fork')",
]


def _migrated_cells() -> list[str]:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in NOTEBOOK_CELLS]
    outcome = rewrite_notebook(nbformat.writes(nb), "spawn.ipynb", Options())
    assert outcome.result.error is None, outcome.result.error
    return [cell.source for cell in nbformat.reads(outcome.result.migrated, as_version=4).cells]


def test_notebook_spawn_becomes_notebook_launcher_not_a_torchrun_note() -> None:
    cells = _migrated_cells()
    assert cells[2] == "notebook_launcher(run_on_each_process, args=(_mp_fn, 2.0), num_processes=2)"
    assert "from accelerate import notebook_launcher" in cells[0]
    assert not any("torchrun" in cell for cell in cells)
    # Each process takes its own accelerator, as each process of `xmp.spawn` had its own device.
    assert 'torch.accelerator.set_device_index(int(os.environ["LOCAL_RANK"])' in cells[0]


def test_a_process_count_the_program_reads_stays_the_count() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in (*NOTEBOOK_CELLS[:2], "FLAGS = {'nprocs': 2}\nxmp.spawn(_mp_fn, args=(2.0,), nprocs=FLAGS['nprocs'])")]
    outcome = rewrite_notebook(nbformat.writes(nb), "spawn.ipynb", Options())
    last = nbformat.reads(outcome.result.migrated, as_version=4).cells[2].source
    assert "num_processes=FLAGS['nprocs']" in last


@pytest.mark.slow
def test_notebook_spawn_runs_one_process_per_rank_from_the_kernel(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.py"  # the cells, run one after the other as a kernel would
    kernel.write_text("\n\n".join(_migrated_cells()) + "\n")
    (tmp_path / "results").mkdir()
    proc = subprocess.run([sys.executable, str(kernel)], cwd=tmp_path, env=_env(tmp_path / "results"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # torch_xla: index = global ordinal, and the two processes summed (1 + 2) * 2.
    assert results(tmp_path, "nb") == {0: {"index": 0, "total": 6.0}, 1: {"index": 1, "total": 6.0}}


# -- static shapes a reviewer reads ------------------------------------------------------------

def test_step_inside_an_expression_is_left_with_a_todo_never_hoisted() -> None:
    migrated = migrate(
        "import torch_xla.core.xla_model as xm\n\n\n"
        "def run(model, opt, opts, closure):\n"
        "    model(1).backward()\n"
        "    step = lambda: xm.optimizer_step(opt)\n"
        "    steps = [xm.optimizer_step(o) for o in opts]\n"
        "    while xm.optimizer_step(opt, optimizer_args={'closure': closure}) > 0.1:\n"
        "        pass\n"
        "    return step, steps\n"
    )
    assert "def average_gradients" not in migrated  # nothing was moved before backward()
    assert migrated.count("# TODO(neuron-migrate NM003)") == 1  # one TODO per cause in a function
    assert migrated.count("xm.optimizer_step(") == 3


def test_replica_groups_become_the_process_group_holding_this_rank() -> None:
    migrated = migrate(
        "import torch_xla.core.xla_model as xm\n\n\n"
        "def step(opt, loss, groups):\n"
        "    xm.reduce_gradients(opt, groups=groups)\n"
        "    total = xm.all_reduce(xm.REDUCE_SUM, loss, groups=groups)\n"
        "    xm.optimizer_step(opt, groups=[[0, 1], [2, 3]])\n"
        "    return total\n"
    )
    assert "    average_gradients_in_group(opt, replica_group(groups))\n" in migrated
    assert "dist.all_reduce(total, group=replica_group(groups))" in migrated
    assert "    average_gradients_in_group(opt, replica_group([[0, 1], [2, 3]]))\n    opt.step()\n" in migrated
    assert "dist.new_group(list(ranks))" in migrated


def test_all_reduce_into_the_same_name_still_copies() -> None:
    migrated = migrate(
        "import torch_xla.core.xla_model as xm\n\n\n"
        "def mean(loss):\n"
        "    loss = xm.all_reduce(xm.REDUCE_SUM, loss, scale=0.5)\n"
        "    return loss\n"
    )
    assert "    loss = loss.clone()\n" in migrated
    assert "dist.get_world_size() > 1:\n        dist.all_reduce(loss)\n        loss *= 0.5\n" in migrated


def test_ranks_before_the_process_group_come_from_the_launcher() -> None:
    migrated = migrate(
        "import torch.distributed as dist\nimport torch_xla.runtime as xr\n\n"
        "RANK = xr.global_ordinal()\n\n\n"
        "def setup():\n"
        "    world = xr.world_size()\n"
        "    dist.init_process_group('xla')\n"
        "    return world, xr.world_size()\n"
    )
    assert 'RANK = int(os.environ.get("RANK", 0))' in migrated  # the file's own name: no constant
    assert 'WORLD_SIZE = int(os.environ.get("WORLD_SIZE", 1))\n' in migrated
    assert "    world = WORLD_SIZE\n" in migrated
    assert "    return world, dist.get_world_size()\n" in migrated


def test_spawn_entry_passes_the_global_rank_and_launch_the_local_one() -> None:
    spawn = migrate(
        "import torch_xla.distributed.xla_multiprocessing as xmp\n\n\n"
        "def _mp_fn(index):\n    print(index)\n\n\n"
        'if __name__ == "__main__":\n    xmp.spawn(_mp_fn)\n'
    )
    launch = migrate(
        "import torch_xla\n\n\n"
        "def _mp_fn(index):\n    print(index)\n\n\n"
        'if __name__ == "__main__":\n    torch_xla.launch(_mp_fn)\n'
    )
    assert 'RANK = int(os.environ.get("RANK", 0))' in spawn and "_mp_fn(RANK)" in spawn
    # torch_xla.launch under torchrun
    assert 'LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))' in launch and "_mp_fn(LOCAL_RANK)" in launch


def test_parent_process_code_around_spawn_is_guarded_or_flagged() -> None:
    migrated = migrate(
        "import os\nimport sys\nimport torch_xla.distributed.xla_multiprocessing as xmp\n\n\n"
        "def _mp_fn(index, out):\n    print(index, out)\n\n\n"
        'if __name__ == "__main__":\n'
        "    out = sys.argv[1]\n"
        "    os.makedirs(out, exist_ok=True)\n"
        '    print("starting")\n'
        "    xmp.spawn(_mp_fn, args=(out,))\n"
        '    print("done")\n'
    )
    lines = migrated.splitlines()
    flagged = [lines[i + 1].strip() for i, line in enumerate(lines) if "TODO(neuron-migrate NM005): ran once in the parent" in line]
    assert flagged == ["os.makedirs(out, exist_ok=True)"]  # `out = sys.argv[1]` is the same everywhere
    assert migrated.count("if RANK == 0:\n        print(") == 2


def test_mesh_reduce_takes_a_free_name_and_master_print_forwards_keywords() -> None:
    migrated = migrate(
        "import torch_xla.core.xla_model as xm\n\n\n"
        "def mesh_reduce(values):\n    return values\n\n\n"
        "def report(acc, *args, **kwargs):\n"
        "    xm.master_print(*args, **kwargs)\n"
        "    return xm.mesh_reduce('acc', acc, max)\n"
    )
    assert "def mesh_reduce_2(data, reduce_fn):" in migrated and "return mesh_reduce_2(acc, max)" in migrated
    assert "value.cpu()" in migrated
    assert "print(*args, **kwargs)" in migrated


def test_all_reduce_over_groups_the_old_stack_computes_is_left_whole_and_stable() -> None:
    source = (
        "import torch_xla.core.xla_model as xm\n"
        "from neuronx_distributed.parallel_layers import parallel_state\n\n\n"
        "def mean(loss):\n"
        "    groups = parallel_state.get_data_parallel_group(as_list=True)\n"
        "    total = xm.all_reduce(xm.REDUCE_SUM, loss, groups=parallel_state.get_data_parallel_group(as_list=True))\n"
        "    return total, groups\n"
    )
    once = migrate(source)
    assert "total = xm.all_reduce(" in once  # a TODO marks it, rather than a split no TODO follows
    assert migrate(once) == once


LOCAL_MASTER = (
    "import os\nimport torch_xla.core.xla_model as xm\n\n\n"
    "def prepare():\n    if xm.is_master_ordinal():\n        os.makedirs('data', exist_ok=True)\n    xm.rendezvous('data')\n"
    "    return xm.get_local_ordinal()\n"
)


def test_launcher_variables_are_read_once_where_nothing_changes_them() -> None:
    script = migrate(LOCAL_MASTER)
    assert 'LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))\n' in script
    assert "    if LOCAL_RANK == 0:\n" in script and "    return LOCAL_RANK\n" in script
    # A file that sets its own environment may change the variable after the module loads.
    writes = migrate(LOCAL_MASTER.replace("def prepare():\n", "def configure():\n    os.environ['LOCAL_RANK'] = '0'\n\n\ndef prepare():\n"))
    assert "LOCAL_RANK = " not in writes and 'if int(os.environ.get("LOCAL_RANK", 0)) == 0:' in writes
    # A notebook's kernel reads it before `notebook_launcher` forks the workers.
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LOCAL_MASTER)])
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    cell = json.loads(rewrite_notebook(nbformat.writes(nb), "nb.ipynb", Options()).result.migrated)["cells"][0]
    assert "LOCAL_RANK = " not in "".join(cell["source"])


XLA_BROADCAST = '''\
import json
import os

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _mp_fn(index):
    torch.manual_seed(xr.global_ordinal())  # every process starts from other weights
    model = torch.nn.BatchNorm1d(3)
    model.running_mean.fill_(float(xr.global_ordinal()))
    with torch.no_grad():
        model.weight.mul_(torch.randn(3))
    xm.broadcast_master_param(model)
    state = {k: v.tolist() for k, v in model.state_dict().items()}
    with open(os.path.join(os.environ["RESULTS"], f"broadcast.rank{xr.global_ordinal()}.json"), "w") as f:
        json.dump(state, f)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn)
'''


@pytest.mark.slow
def test_broadcast_master_param_copies_rank_0s_parameters_and_buffers(tmp_path: Path) -> None:
    import torch

    migrated = migrate(XLA_BROADCAST, "broadcast.py")
    assert "    broadcast_master_param(model)\n" in migrated and "import torch_xla" not in migrated
    (tmp_path / "broadcast.py").write_text(migrated)
    torchrun(tmp_path, [tmp_path / "broadcast.py"])
    torch.manual_seed(0)  # what rank 0 built
    model = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        model.weight.mul_(torch.randn(3))
    expected = {k: v.tolist() for k, v in model.state_dict().items()}
    assert results(tmp_path, "broadcast") == {0: expected, 1: expected}


def test_a_launcher_constant_reads_the_environment_through_the_modules_own_import() -> None:
    migrated = migrate(
        "import os as _os\nimport torch_xla.core.xla_model as xm\n\n\n"
        "def main():\n    import os\n\n    return xm.get_local_ordinal(), os.getcwd()\n"
    )
    assert 'LOCAL_RANK = int(_os.environ.get("LOCAL_RANK", 0))\n' in migrated
    assert "    return LOCAL_RANK, os.getcwd()\n" in migrated


# A model the parent built once, moved into every spawned process, spawned again for each fold.
XLA_WRAPPED_FOLDS = '''\
import json
import os

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr

WRAPPED = xmp.MpModelWrapper(torch.nn.Linear(3, 1))


def _mp_fn(index, fold):
    device = xm.xla_device()
    model = WRAPPED.to(device)
    start = model.weight.detach().cpu().flatten().tolist()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(fold)
    model(torch.randn(4, 3, device=device)).pow(2).mean().backward()
    xm.optimizer_step(optimizer)
    with open(os.path.join(os.environ["RESULTS"], f"fold{fold}.rank{xr.global_ordinal()}.json"), "w") as f:
        json.dump(start, f)


if __name__ == "__main__":
    for fold in range(2):
        xmp.spawn(_mp_fn, args=(fold,))
'''


@pytest.mark.slow
def test_a_wrapped_model_starts_every_fold_from_rank_0s_untrained_weights(tmp_path: Path) -> None:
    migrated = migrate(XLA_WRAPPED_FOLDS, "folds.py")
    assert "shared_model_copy(WRAPPED, device)" in migrated and "import torch_xla" not in migrated
    assert "        if not dist.is_initialized():\n            dist.init_process_group()\n" in migrated
    (tmp_path / "folds.py").write_text(migrated)
    torchrun(tmp_path, [tmp_path / "folds.py"])
    starts = [results(tmp_path, f"fold{fold}") for fold in range(2)]
    assert starts[0][0] == starts[0][1] == starts[1][0] == starts[1][1]


SELF_INITIALIZING = [
    "import torch\nimport torch.distributed as dist\nimport torch_xla\nimport torch_xla.distributed.xla_multiprocessing as xmp\n"
    "import torch_xla.distributed.xla_backend",
    "def work(index, scale):\n    device = torch_xla.device()\n    dist.init_process_group('xla', init_method='xla://')\n"
    "    t = torch.ones(2, device=device) * scale\n    dist.all_reduce(t)\n"
    # One write per line: forked processes share the pipe, and print's pieces would interleave.
    "    print(f'rank {index} of {dist.get_world_size()} {t.cpu().tolist()}\\n', end='', flush=True)",
]


@pytest.mark.slow
@pytest.mark.parametrize(("spawn", "expected"), [
    ("xmp.spawn(work, args=(3.0,), start_method='fork')", {"rank 0 of 1 [3.0, 3.0]"}),
    ("xmp.spawn(work, args=(3.0,), nprocs=2, start_method='fork')", {"rank 0 of 2 [6.0, 6.0]", "rank 1 of 2 [6.0, 6.0]"}),
])
def test_a_spawned_function_that_makes_its_own_group_runs_from_the_kernel_alone_or_forked(
    tmp_path: Path, spawn: str, expected: set[str]
) -> None:
    """Alone (no accelerator: `notebook_launcher` runs it in the kernel) the launch helper gives
    the function's own `init_process_group()` a group of one to make; forked, the launcher's."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in (*SELF_INITIALIZING, spawn)])
    outcome = rewrite_notebook(nbformat.writes(nb), "spawn.ipynb", Options())
    assert outcome.result.error is None, outcome.result.error
    kernel = tmp_path / "kernel.py"
    kernel.write_text("\n\n".join(c.source for c in nbformat.reads(outcome.result.migrated, as_version=4).cells) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run([sys.executable, str(kernel)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {line for line in proc.stdout.splitlines() if line.startswith("rank ")} == expected
