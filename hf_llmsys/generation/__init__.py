"""Decoding that transformers' ``generate`` runs through ``custom_generate``, for any transformers model.

``gnmt_beam_search``: beam search whose finished hypotheses are scored with a selectable length penalty, GNMT's
(Wu et al. 2016; the T5 paper decodes with it, 4 beams, alpha 0.6) or transformers' own:

    from hf_llmsys.generation import beam_search, generate_gnmt

    out = model.generate(ids, num_beams=4, length_penalty=0.6, custom_generate=beam_search, length_penalty_type="gnmt")
    out = generate_gnmt(model, ids, num_beams=4, length_penalty=0.6)  # the same

No model class needs anything for it: plain ``model.generate`` (and remote code without hf_llmsys) is transformers'
beam search, lp = |Y|**alpha.
"""

from .gnmt_beam_search import LENGTH_PENALTIES, beam_search, check_length_penalty_type, generate_gnmt

__all__ = ["LENGTH_PENALTIES", "beam_search", "check_length_penalty_type", "generate_gnmt"]
