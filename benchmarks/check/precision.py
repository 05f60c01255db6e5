"""Precision of `check` at its default severity on real model, trainer and diffusion code.

Runs `check` on twelve transformers model files, TRL's SFT and GRPO trainers, the diffusers
UNet and two schedulers (all as installed), and scores every finding against
`judgements.tsv`: a verdict read by hand for each (`real`: a hazard in code that is compiled or
run every step, worded rightly; `false`: anything else). Findings with no verdict, and verdicts
for findings that are gone, are listed so that the file can be brought up to date.

    python benchmarks/check/precision.py
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from neuron_migrate.checks.checker import CheckOptions, check_source  # noqa: E402

FILES = (
    "transformers/models/llama/modeling_llama.py",
    "transformers/models/mistral/modeling_mistral.py",
    "transformers/models/mixtral/modeling_mixtral.py",
    "transformers/models/qwen2_moe/modeling_qwen2_moe.py",
    "transformers/models/gpt2/modeling_gpt2.py",
    "transformers/models/whisper/modeling_whisper.py",
    "transformers/models/bert/modeling_bert.py",
    "transformers/models/t5/modeling_t5.py",
    "transformers/models/qwen2_vl/modeling_qwen2_vl.py",
    "transformers/models/clip/modeling_clip.py",
    "transformers/models/wav2vec2/modeling_wav2vec2.py",
    "transformers/models/gemma3/modeling_gemma3.py",
    "trl/trainer/sft_trainer.py",
    "trl/trainer/grpo_trainer.py",
    "diffusers/models/unets/unet_2d_condition.py",
    "diffusers/schedulers/scheduling_ddpm.py",
    "diffusers/schedulers/scheduling_euler_discrete.py",
)


def load_judgements(path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(file:line, rule) -> (verdict, reason)."""
    judged = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        place, code, verdict, reason = raw.split("\t", 3)
        judged[(place, code)] = (verdict, reason)
    return judged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["purelib"]))
    parser.add_argument("--judgements", type=Path, default=HERE / "judgements.tsv")
    args = parser.parse_args()
    judged = load_judgements(args.judgements)
    seen: set[tuple[str, str]] = set()
    real = false = unjudged = 0
    for name in FILES:
        text = (args.root / name).read_text(encoding="utf-8")
        for d in check_source(text, name, CheckOptions()).diagnostics:
            key = (f"{name}:{d.line}", d.code)
            seen.add(key)
            verdict = judged.get(key, ("?", ""))[0]
            if verdict == "real":
                real += 1
            elif verdict == "false":
                false += 1
                print(f"false    {key[0]} {d.code}: {judged[key][1]}")
            else:
                unjudged += 1
                print(f"UNJUDGED {key[0]} {d.code} {d.severity.label}: {d.text}")
    for key in sorted(set(judged) - seen):
        print(f"gone     {key[0]} {key[1]} (judged {judged[key][0]})")
    total = real + false
    print(f"findings: {real + false + unjudged} in {len(FILES)} files; judged {total}")
    if total:
        print(f"precision: {real}/{total} = {real / total:.0%}")
    return 1 if unjudged else 0


if __name__ == "__main__":
    raise SystemExit(main())
