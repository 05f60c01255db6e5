"""What `benchmarks/check/library_hazards.py --write` measured for each library hazard: the
library line Dynamo names, graphs per compiled step before and after the fix, and the model
classes the architecture sweep saw take the path. Written by that script; not edited by hand."""

MEASURED = {
    "loss-type": {
        "where": "transformers/modeling_utils.py:4769",
        "graphs": (2, 1),
        "classes": (
            "BertGenerationDecoder",
            "BertLMHeadModel",
            "CTRLLMHeadModel",
            "GPT2LMHeadModel",
            "OpenAIGPTLMHeadModel",
        ),
    },
    "gradient-checkpointing-use-cache": {
        "where": "transformers/utils/generic.py:1043",
        "graphs": (2, 1),
        "classes": (),
    },
    "dynamic-rope": {
        "where": "transformers/modeling_rope_utils.py:101",
        "graphs": (6, 1),
        "classes": (),
    },
}
