"""Teacher forcing for `generate()`: decode along the original's tokens and keep every logit.

Once two programs have chosen different greedy tokens, their later logits answer different
prefixes and comparing them says nothing. Given the original's sequences, this module makes each
`generate()` call follow them: a logits processor, last in the list, leaves only the original's
next token possible, so the program's own decoding path (its cache, its attention mask, its
static shapes) runs on the original's prefix at every position. The raw logits of every step are
kept for the comparison. Beam search is left alone. Only the standard library and torch.
"""

from __future__ import annotations

# Logits kept per call, at most (elements): past it only the first positions are kept.
MAX_ELEMENTS = 64_000_000


class ForceTokens:
    """A logits processor: every token but the sequences' next one gets -inf."""

    def __init__(self, torch, sequences) -> None:
        self.torch = torch
        self.sequences = sequences

    def __call__(self, input_ids, scores):
        position = input_ids.shape[-1]
        if position >= self.sequences.shape[-1]:
            return scores
        wanted = self.sequences[: scores.shape[0], position].to(scores.device)
        forced = self.torch.full_like(scores, float("-inf"))
        return forced.scatter(1, wanted[:, None], 0.0)


def force(torch, kwargs: dict, sequences, prompt_length: int) -> bool:
    """Adds the forcing processor to a `generate()` call's kwargs; False where it cannot apply."""
    config = kwargs.get("generation_config")
    beams = kwargs.get("num_beams", getattr(config, "num_beams", 1) if config else 1)
    if beams and beams > 1:
        return False
    from transformers.generation.logits_process import LogitsProcessorList

    processors = LogitsProcessorList(kwargs.get("logits_processor") or [])
    processors.append(ForceTokens(torch, sequences))
    kwargs["logits_processor"] = processors
    kwargs.pop("max_length", None)
    kwargs["max_new_tokens"] = int(sequences.shape[-1]) - prompt_length
    return True


def kept_logits(torch, logits) -> tuple[object, bool]:
    """[T, B, V] float32 on the CPU, cut to MAX_ELEMENTS; and whether it was cut."""
    stacked = torch.stack([step.detach().float().cpu() for step in logits])
    per_step = stacked[0].numel() or 1
    keep = max(1, MAX_ELEMENTS // per_step)
    return stacked[:keep].contiguous(), keep < len(stacked)
