"""Beam search with a selectable length penalty (GNMT's among them), run by transformers'
``generate(custom_generate=beam_search)``.

Legend: B batch rows, K beams (``num_beams``), C candidates kept per step (``(1 + number of eos ids, at least 2)
* K``), V vocabulary, L ``max_length``, P decoder prompt length (1 for T5: the start token), N = L - P.

Length penalties (``LENGTH_PENALTIES``, name -> lp(|Y|, alpha)); a finished hypothesis Y scores
sum log p(Y) / lp(|Y|), |Y| the generated tokens including the eos:
- "transformers": |Y|**alpha, transformers' own rule (``length_penalty`` is alpha);
- "gnmt": ((5 + |Y|) / (5 + 1))**alpha, Wu et al. 2016 ("Google's Neural Machine Translation System", eq. 14,
  without the coverage term), the penalty the T5 paper decodes with (alpha 0.6, 4 beams).

Why a decoding loop and not a ``LogitsProcessor``: the penalty divides the *summed* score of a hypothesis by a
function of its length when it finishes. A processor can only add to one token's log-probability, and those edited
scores are what beam search ranks when it picks the top C continuations, keeps K of them running and decides
which finished ones fill the K best slots, so changing eos scores changes which candidates survive, not only
how they are reported; the running beams, scored unnormalised, must stay untouched. No processor is exact, so the
length penalty is a parameter of the loop (``beam_search``), where transformers applies its own.

How it runs: ``generate`` does all its preparation (inputs expanded K times, encoder run once, cache, logits
processors, stopping criteria, ``max_length``), then calls ``beam_search`` instead of its private ``_beam_search``.
The loop uses the model's public API (``forward``, ``prepare_inputs_for_generation``, ``Cache.reorder_cache``) and
calls, never overrides, two ``GenerationMixin`` helpers (``_prefill`` for the first forward, with chunked prefill
and cache continuation as transformers does it, and ``_update_model_kwargs_for_generation``). It reproduces
transformers 5.24's beam search step for step (candidate selection, the early-stop heuristic with its
``early_stopping`` True / False / "never" rules, beam sampling, output fields and padding), so with the
"transformers" penalty it returns identical tensors, which ``tests/test_t5_generation.py`` checks; the only change
for another penalty is lp. The stopping bound stays valid for "gnmt": future tokens only lower the summed score,
and lp grows with the length when alpha > 0, so "never" bounds a running beam by lp at ``max_length``.

Use, with hf_llmsys installed, on any transformers model: ``model.generate(..., num_beams=4,
custom_generate=beam_search, length_penalty_type="gnmt")`` (transformers hands the extra keyword to the loop; without
it the loop reads ``length_penalty_type`` from the generation config, else uses "transformers"), or the same through
``generate_gnmt(model, inputs, num_beams=4, ...)``. Without ``custom_generate``, ``length_penalty_type`` means
nothing to transformers: ``generate`` rejects it as an unused model keyword (or, saved in a generation config,
ignores it) and runs its own beam search. Remote-code models (``trust_remote_code=True``, hf_llmsys not installed)
get transformers' beam search, lp = |Y|**alpha.
Not supported by the loop: ``synced_gpus`` (transformers does not pass it to a custom loop) and models that
reorder their cache with a legacy ``_reorder_cache`` method instead of ``Cache.reorder_cache``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers.generation import (
    GenerateBeamDecoderOnlyOutput,
    GenerateBeamEncoderDecoderOutput,
    GenerationConfig,
    GenerationMode,
    LogitsProcessorList,
    StoppingCriteriaList,
)

LENGTH_PENALTIES: dict[str, Callable[[int, float], float]] = {
    "transformers": lambda length, alpha: length**alpha,
    "gnmt": lambda length, alpha: ((5 + length) / (5 + 1)) ** alpha,  # Wu et al. 2016, eq. 14
}
EXCLUDED = -1.0e9  # added to a score to rule a candidate out, as transformers does (finite: -inf - -inf is nan)
BEAM_MODES = (GenerationMode.BEAM_SEARCH, GenerationMode.BEAM_SAMPLE)


def check_length_penalty_type(kind: str) -> str:
    """``kind`` if it names a registered length penalty, else a ValueError listing them."""
    if kind not in LENGTH_PENALTIES:
        raise ValueError(f"length_penalty_type={kind!r} is unknown; choose one of {sorted(LENGTH_PENALTIES)}.")
    return kind


@dataclass
class Beams:
    """Hypotheses per batch row: ``tokens`` (B, M, L) (positions >= the current length hold the fill value),
    ``scores`` (B, M), ``origins`` (B, M, N): per generated position, the flat index b * K + k of the beam it
    extended (-1 where not generated). M is K for running / finished beams, C for a step's candidates."""

    tokens: torch.Tensor
    scores: torch.Tensor
    origins: torch.Tensor

    def take(self, index: torch.Tensor, scores: torch.Tensor | None = None) -> Beams:
        """The hypotheses at ``index`` (B, M') along dim 1; ``scores`` (B, M) replaces the scores taken from."""
        source = self.scores if scores is None else scores
        return Beams(take_rows(self.tokens, index), take_rows(source, index), take_rows(self.origins, index))

    def concat(self, other: Beams, other_scores: torch.Tensor) -> Beams:
        """These hypotheses followed by ``other`` scored by ``other_scores`` along dim 1."""
        return Beams(
            torch.cat((self.tokens, other.tokens), dim=1),
            torch.cat((self.scores, other_scores), dim=1),
            torch.cat((self.origins, other.origins), dim=1),
        )


def take_rows(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``tensor`` (B, M, ...) gathered along dim 1 at ``index`` (B, M')."""
    index = index.reshape(*index.shape, *([1] * (tensor.dim() - index.dim())))
    return torch.take_along_dim(tensor, index, dim=1)


def excluded_where(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``scores`` with ``EXCLUDED`` added where ``mask`` is true (broadcast)."""
    return scores + mask.to(scores.dtype) * EXCLUDED


@dataclass
class SearchSettings:
    """What one beam search needs from the generation config, read once."""

    num_beams: int
    kept: int  # C: candidates kept per step, enough for K running beams even if the best ones all end
    prompt_length: int
    max_length: int
    alpha: float
    penalty: Callable[[int, float], float]
    early_stopping: bool | str
    do_sample: bool
    use_cache: bool

    @classmethod
    def read(cls, config: GenerationConfig, prompt_length: int, length_penalty_type: str, use_cache) -> SearchSettings:
        eos = config._eos_token_tensor
        n_eos = 0 if eos is None else eos.shape[0]
        return cls(
            num_beams=config.num_beams,
            kept=max(2, 1 + n_eos) * config.num_beams,
            prompt_length=prompt_length,
            max_length=config.max_length,
            alpha=config.length_penalty,
            penalty=LENGTH_PENALTIES[check_length_penalty_type(length_penalty_type)],
            early_stopping=config.early_stopping,
            do_sample=bool(config.do_sample),
            use_cache=bool(use_cache),
        )

    def lp(self, length: int) -> float:
        """The length penalty of a hypothesis of ``length`` generated tokens."""
        return self.penalty(length, self.alpha)


def fill_value(config: GenerationConfig) -> int:
    """The id written after a hypothesis' end: transformers' choice (the pad id, or the first eos id when the pad id
    is unset or 0; -1 without an eos id), kept so that outputs are interchangeable with its beam search."""
    eos, pad = config._eos_token_tensor, config._pad_token_tensor
    if eos is None:
        return -1
    return int(pad) if pad is not None and int(pad) != 0 else int(eos[0])


def initial_beams(input_ids: torch.Tensor, settings: SearchSettings, fill: int) -> tuple[Beams, Beams, torch.Tensor]:
    """(running, finished, finished flags (B, K)) from ``input_ids`` (B * K, P). Only beam 0 starts with score 0
    (the others -1e9), so the K copies of the prompt do not yield K copies of each first token."""
    k, length = settings.num_beams, settings.max_length
    rows = input_ids.shape[0] // k
    tokens = input_ids.new_full((rows, k, length), fill)
    tokens[:, :, : input_ids.shape[1]] = input_ids.view(rows, k, -1)
    origins = torch.full((rows, k, length - input_ids.shape[1]), -1, dtype=torch.int32, device=input_ids.device)
    running_scores = torch.zeros((rows, k), dtype=torch.float, device=input_ids.device)
    running_scores[:, 1:] = EXCLUDED
    finished_scores = torch.full_like(running_scores, EXCLUDED)
    finished_flags = torch.zeros((rows, k), dtype=torch.bool, device=input_ids.device)
    return (
        Beams(tokens, running_scores, origins),
        Beams(tokens.clone(), finished_scores, origins.clone()),
        finished_flags,
    )


def top_candidates(log_probs: torch.Tensor, running: Beams, length: int, settings: SearchSettings) -> Beams:
    """The C best (or, beam sampling, C sampled) one-token extensions of the running beams, best first.
    ``log_probs`` (B, K, V): processed next-token log-probabilities; candidate scores are summed log-probs."""
    rows, k, vocab = log_probs.shape
    totals = (log_probs + running.scores[:, :, None]).reshape(rows, k * vocab)
    if settings.do_sample:
        picked = torch.multinomial(nn.functional.softmax(totals, dim=-1), num_samples=settings.kept)
        scores, order = torch.gather(totals, 1, picked).sort(dim=-1, descending=True)
        picked = picked.gather(-1, order)
    else:
        scores, picked = torch.topk(totals, k=settings.kept)
    beam, token = picked // vocab, picked % vocab
    candidates = running.take(beam)
    candidates.scores = scores
    candidates.tokens[:, :, length] = token
    row_offset = torch.arange(rows, device=picked.device).view(-1, 1) * k
    candidates.origins[:, :, length - settings.prompt_length] = beam + row_offset
    return candidates


def next_running(candidates: Beams, ended: torch.Tensor, settings: SearchSettings) -> Beams:
    """The K best candidates that did not end (``ended`` (B, C), from the stopping criteria)."""
    scores = excluded_where(candidates.scores, ended)
    return candidates.take(torch.topk(scores, k=settings.num_beams)[1], scores=scores)


def update_finished(finished: Beams, flags: torch.Tensor, candidates: Beams, ended: torch.Tensor, improvable,
                    length: int, settings: SearchSettings) -> tuple[Beams, torch.Tensor]:  # fmt: skip
    """Keep the K best finished hypotheses: the old ones and the candidates among the first K that just ended,
    scored sum log p / lp(|Y|). None enters a row that cannot improve, or that is full under early_stopping=True."""
    k = settings.num_beams
    just_ended = ended & (torch.arange(settings.kept, device=ended.device) < k)[None, :]
    scores = candidates.scores / settings.lp(length + 1 - settings.prompt_length)
    scores = excluded_where(scores, flags.all(dim=-1, keepdim=True) & (settings.early_stopping is True))
    scores = excluded_where(scores, ~improvable)
    scores = excluded_where(scores, ~just_ended)
    merged, merged_flags = finished.concat(candidates, scores), torch.cat((flags, just_ended), dim=1)
    best = torch.topk(merged.scores, k=k)[1]
    return merged.take(best), take_rows(merged_flags, best)


def still_improvable(improvable, running: Beams, finished: Beams, flags, length: int, settings: SearchSettings):
    """(B, 1): whether a running beam could still beat the worst finished hypothesis: its summed score can only
    fall, so it is bounded by its score now over lp at the current length, or at ``max_length`` under
    early_stopping="never" with alpha > 0 (lp then grows with the length). early_stopping=False uses the current
    length for any alpha: transformers' heuristic, kept as is."""
    exact_bound = settings.early_stopping == "never" and settings.alpha > 0.0
    bound_length = (settings.max_length if exact_bound else length) - settings.prompt_length
    best_running = running.scores[:, :1] / settings.lp(bound_length)
    worst_finished = torch.where(flags, finished.scores.min(dim=1, keepdim=True)[0], EXCLUDED)
    return improvable & (best_running > worst_finished).any(dim=-1, keepdim=True)


def search_goes_on(improvable, flags, ended, settings: SearchSettings) -> bool:
    """False once no row can improve, every row is full under early_stopping=True, or every candidate ended."""
    all_full = bool(flags.all()) and settings.early_stopping is True
    return bool(improvable.any()) and not all_full and not bool(ended.all())


class StepRecorder:
    """The per-step tensors ``return_dict_in_generate`` asks for (scores, logits, attentions, hidden states)."""

    def __init__(self, config: GenerationConfig, is_encoder_decoder: bool):
        wanted = config.return_dict_in_generate
        self.scores = () if wanted and config.output_scores else None
        self.logits = () if wanted and config.output_logits else None
        self.attentions = () if wanted and config.output_attentions else None
        self.cross_attentions = () if wanted and config.output_attentions and is_encoder_decoder else None
        self.hidden_states = () if wanted and config.output_hidden_states else None
        self.is_encoder_decoder = is_encoder_decoder

    def record(self, outputs, logits: torch.Tensor, log_probs: torch.Tensor) -> None:
        """Append this step's raw logits, processed log-probs and the model's attentions / states (B * K, ...)."""
        prefix = "decoder_" if self.is_encoder_decoder else ""
        if self.logits is not None:
            self.logits += (logits.clone(),)
        if self.scores is not None:
            self.scores += (log_probs.clone(),)
        if self.attentions is not None:
            self.attentions += (outputs[f"{prefix}attentions"],)
        if self.cross_attentions is not None:
            self.cross_attentions += (outputs.cross_attentions,)
        if self.hidden_states is not None:
            self.hidden_states += (outputs[f"{prefix}hidden_states"],)


def step_log_probs(model, outputs, running: Beams, length: int, logits_processor: LogitsProcessorList,
                   recorder: StepRecorder) -> torch.Tensor:  # fmt: skip
    """(B, K, V) processed next-token log-probabilities of the running beams from the forward ``outputs``."""
    rows, k = running.scores.shape
    logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32, device=running.tokens.device)
    log_probs = logits_processor(running.tokens[:, :, :length].reshape(rows * k, length), logits.log_softmax(-1))
    recorder.record(outputs, logits, log_probs)
    return log_probs.view(rows, k, -1)


def reorder_cache(model_kwargs: dict, running: Beams, length: int, settings: SearchSettings) -> None:
    """Make cache row b * K + k hold the past of the running beam now in that slot."""
    cache = model_kwargs.get("cache")
    if cache is None:
        return
    if not hasattr(cache, "reorder_cache"):
        raise ValueError(f"{type(cache).__name__} has no reorder_cache(); beam search needs a transformers Cache.")
    cache.reorder_cache(running.origins[:, :, length - settings.prompt_length].flatten())


def beam_search(model, input_ids: torch.LongTensor, logits_processor: LogitsProcessorList,
                stopping_criteria: StoppingCriteriaList, generation_config: GenerationConfig,
                length_penalty_type: str | None = None, **model_kwargs):  # fmt: skip
    """Beam search (or beam sampling) over ``input_ids`` (B * K, P) as prepared by ``generate``, finished
    hypotheses scored with ``LENGTH_PENALTIES[length_penalty_type]`` (None: the generation config's
    ``length_penalty_type``, else "transformers"). Other generation modes are refused (call ``generate`` without
    ``custom_generate`` for them).
    Returns what transformers' beam search returns: sequences (B * R, <= L), R = num_return_sequences, or a
    ``GenerateBeam*Output`` (sequences_scores, scores, logits, beam_indices, attentions, cache) when
    ``return_dict_in_generate``."""
    if generation_config.get_generation_mode() not in BEAM_MODES:
        raise ValueError(
            "custom_generate=beam_search runs beam search only: set num_beams > 1 (or call generate without "
            f"custom_generate for {generation_config.get_generation_mode().value})."
        )
    kind = length_penalty_type or getattr(generation_config, "length_penalty_type", None) or "transformers"
    settings = SearchSettings.read(generation_config, input_ids.shape[1], kind, model_kwargs["use_cache"])
    running, finished, flags = initial_beams(input_ids, settings, fill_value(generation_config))
    improvable = torch.ones((running.scores.shape[0], 1), dtype=torch.bool, device=input_ids.device)
    recorder = StepRecorder(generation_config, model.config.is_encoder_decoder)
    length, outputs = input_ids.shape[1], model._prefill(input_ids, generation_config, model_kwargs)
    while True:
        model_kwargs = model._update_model_kwargs_for_generation(
            outputs, model_kwargs, is_encoder_decoder=model.config.is_encoder_decoder
        )
        log_probs = step_log_probs(model, outputs, running, length, logits_processor, recorder)
        del outputs  # the first step's logits can be large
        candidates = top_candidates(log_probs, running, length, settings)
        flat = candidates.tokens[:, :, : length + 1].flatten(0, 1)
        ended = stopping_criteria(flat, recorder.scores).view(candidates.scores.shape)
        running = next_running(candidates, ended, settings)
        finished, flags = update_finished(finished, flags, candidates, ended, improvable, length, settings)
        reorder_cache(model_kwargs, running, length, settings)
        length += 1
        improvable = still_improvable(improvable, running, finished, flags, length, settings)
        if not search_goes_on(improvable, flags, ended, settings):
            break
        rows_k = running.scores.numel()
        inputs = model.prepare_inputs_for_generation(
            running.tokens[:, :, :length].reshape(rows_k, length),
            next_sequence_length=1 if settings.use_cache else None,
            **model_kwargs,
        )
        outputs = model(**inputs, return_dict=True)
    return beam_outputs(model, finished, generation_config, recorder, model_kwargs, settings)


def beam_outputs(model, finished: Beams, config: GenerationConfig, recorder: StepRecorder, model_kwargs: dict,
                 settings: SearchSettings):  # fmt: skip
    """The R best finished hypotheses per row, cropped to the longest one, in transformers' output types."""
    r = config.num_return_sequences
    tokens, scores = finished.tokens[:, :r].flatten(0, 1), finished.scores[:, :r].flatten(0, 1)
    origins = finished.origins[:, :r].flatten(0, 1)
    generated = (origins >= 0).sum(dim=1).max()
    tokens, origins = tokens[:, : settings.prompt_length + generated], origins[:, :generated]
    if not config.return_dict_in_generate:
        return tokens
    common = dict(
        sequences=tokens,
        sequences_scores=scores if config.output_scores else None,
        scores=recorder.scores,
        logits=recorder.logits,
        beam_indices=origins,
        cache=model_kwargs.get("cache"),
    )
    if not model.config.is_encoder_decoder:
        return GenerateBeamDecoderOnlyOutput(**common, attentions=recorder.attentions,
                                             hidden_states=recorder.hidden_states)  # fmt: skip
    encoder = model_kwargs["encoder_outputs"]
    return GenerateBeamEncoderDecoderOutput(
        **common,
        encoder_attentions=encoder.get("attentions") if config.output_attentions else None,
        encoder_hidden_states=encoder.get("hidden_states") if config.output_hidden_states else None,
        decoder_attentions=recorder.attentions,
        cross_attentions=recorder.cross_attentions,
        decoder_hidden_states=recorder.hidden_states,
    )


def generate_gnmt(model, inputs=None, *, length_penalty_type: str = "gnmt", **generate_kwargs):
    """``model.generate(inputs, custom_generate=beam_search, length_penalty_type=..., **generate_kwargs)``: beam
    search with GNMT's length penalty (or another ``LENGTH_PENALTIES`` name) on any transformers model. Pass
    ``num_beams`` > 1 and ``length_penalty`` (alpha; the T5 paper decodes with 4 beams, alpha 0.6) as usual."""
    check_length_penalty_type(length_penalty_type)
    custom = generate_kwargs.pop("custom_generate", None)
    if custom not in (None, beam_search):
        raise ValueError(
            f"generate_gnmt runs hf-llmsys' beam search as custom_generate; it cannot be combined with another "
            f"custom_generate ({custom!r}). Call model.generate directly to use that one."
        )
    return model.generate(
        inputs, custom_generate=beam_search, length_penalty_type=length_penalty_type, **generate_kwargs
    )


__all__ = ["LENGTH_PENALTIES", "beam_search", "check_length_penalty_type", "generate_gnmt"]
