"""neuronx-distributed's process state, and what a `DeviceMesh` answers in its place.

NxD keeps its tensor-, data- and pipeline-parallel groups in `parallel_state`'s module globals;
natively one ("dp", "tp") `DeviceMesh` holds them. One table, read by the codemod that rewrites
the queries and by the TODOs left where it cannot.
"""

from __future__ import annotations

from neuron_migrate.rewrite.codemods.nxd_layouts import LAYERS_MODULE

STATE = f"{LAYERS_MODULE}.parallel_state"
INITIALIZE = f"{STATE}.initialize_model_parallel"
IS_INITIALIZED = f"{STATE}.model_parallel_is_initialized"
DESTROY = f"{STATE}.destroy_model_parallel"
# NxD's rank layout is [PP, DP, TP] with TP contiguous: a ("dp", "tp") mesh has the same groups.
MESH_QUERIES = {
    f"{STATE}.get_tensor_model_parallel_size": ("tp", "size()"),
    f"{STATE}.get_tensor_model_parallel_rank": ("tp", "get_local_rank()"),
    f"{STATE}.get_tensor_model_parallel_group": ("tp", "get_group()"),
    f"{STATE}.get_data_parallel_size": ("dp", "size()"),
    f"{STATE}.get_data_parallel_rank": ("dp", "get_local_rank()"),
    f"{STATE}.get_data_parallel_group": ("dp", "get_group()"),
}
# The replica groups (lists of ranks) of each mesh dimension: the rows of the ("dp", "tp") mesh
# are its tensor-parallel groups, the columns its data-parallel ones.
REPLICA_GROUPS = {
    f"{STATE}.get_tensor_model_parallel_replica_groups": ("tp", "{mesh}.mesh.tolist()"),
    f"{STATE}.get_data_parallel_replica_groups": ("dp", "{mesh}.mesh.T.tolist()"),
}
# A program migrated to a ("dp", "tp") mesh has no pipeline stages: one stage, stage 0.
PIPELINE_QUERIES = {
    f"{STATE}.get_pipeline_model_parallel_size": "1",
    f"{STATE}.get_pipeline_model_parallel_rank": "0",
}
# `get_*_group(as_list=True)` returns the replica groups rather than the process group.
AS_LIST = {
    f"{STATE}.get_tensor_model_parallel_group": f"{STATE}.get_tensor_model_parallel_replica_groups",
    f"{STATE}.get_data_parallel_group": f"{STATE}.get_data_parallel_replica_groups",
}

# Where the mesh comes from: the advice of every TODO about NxD's groups.
MESH_BUILT = "`mesh` from `init_device_mesh`"
