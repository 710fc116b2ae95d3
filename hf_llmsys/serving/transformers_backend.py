"""transformers' own server (``transformers serve``) serving a model the way ``llmsys chat`` talks to it.

What ``transformers serve`` does with a model folder (transformers 5.25, ``cli/serving/model_manager.py``): the API
process reads the config, generation config and processor (``ModelLoader.load_config`` / ``load_processor``); a
model process, started with ``multiprocessing``'s *spawn*, loads the weights (``ModelLoader._load_model``: the class
``getattr(transformers, config.architectures[0])``). For our folders that class is ``LlmsysLlamaForCausalLM``, which
the ``transformers`` module does not have: the model process fails with "module transformers has no attribute
LlmsysLlamaForCausalLM", with ``--trust-remote-code`` too. A spawned process also starts without ``import
hf_llmsys``, so nothing registered in the parent reaches it.

`PluginModelLoader` is transformers' ``ModelLoader`` with the three loads replaced; it is pickled into the model
process, whose unpickling imports this module and so ``hf_llmsys`` (our Auto registrations) first. What it serves is
what ``llmsys chat MODEL --template T`` resolves (`chat.loading.resolve_chat_source`: the folder, an adapter folder
over its base, any transformers causal LM or Hub id):

- weights: ``data.pretrained_sources.load_causal_lm`` (the loader every ``llmsys`` command uses) with the server's
  ``--device`` / ``--dtype``;
- processor: the resolved tokenizer; with an SFT text template (``prompt_template.json`` of ``llmsys sft --template
  alpaca``) or ``--template FILE.jinja``, its chat template is the one that renders ``llmsys chat``'s prompt
  (`text_template_chat.py`); the server renders ``apply_chat_template(messages, add_generation_prompt=True)``;
- generation config: the folder's, with ``eos_token_id`` the stop ids of ``llmsys chat`` (the generation config's
  EOS ids, the tokenizer's EOS, the template's end-of-turn token), so a reply ends where a chat reply ends.

`PluginServe` is transformers' ``Serve`` with that loader and the socket ``listening.py`` bound; everything else
(routes, SSE streaming, request validation, the model process, generation) is transformers' own.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from types import SimpleNamespace

from transformers import GenerationConfig
from transformers.cli.serve import Serve
from transformers.cli.serving.model_manager import ModelLoader

import hf_llmsys  # noqa: F401  (our Auto registrations, in the model process too: unpickling the loader imports this)

from ..chat.loading import ChatSource, resolve_chat_source, stop_ids
from ..chat.prompt_formats import TextTemplateFormat
from ..data.pretrained_sources import load_causal_lm
from .text_template_chat import text_template_chat


@dataclass
class ServedModel:
    """What one server serves: MODEL as ``llmsys chat`` resolves it, the processor and the stop ids."""

    source: str
    config: object
    tokenizer: object  # its chat_template renders the prompts of llmsys chat
    generation_config: GenerationConfig  # eos_token_id: llmsys chat's stop ids
    trust_remote_code: bool
    prompts: str  # how prompts are made, for the start-up line


def served_model(source: str, template: str = "auto", trust_remote_code: bool = False) -> ServedModel:
    """MODEL checked and read without its weights (ValueError naming what to fix), ready to serve."""
    resolved = resolve_chat_source(source, template, trust_remote_code)
    tokenizer, prompt_format = resolved.tokenizer, resolved.prompt_format
    if isinstance(prompt_format, TextTemplateFormat):
        tokenizer.chat_template = text_template_chat(prompt_format)
    generation = _generation_config(resolved)
    stops = stop_ids(SimpleNamespace(generation_config=generation), tokenizer, prompt_format)
    generation.eos_token_id = stops
    return ServedModel(resolved.source, resolved.config, tokenizer, generation, trust_remote_code,
                       prompt_format.description)  # fmt: skip


def _generation_config(resolved: ChatSource) -> GenerationConfig:
    """The generation config the model loads with: MODEL's own, else an adapter base's, else from the config."""
    for place in (resolved.source, resolved.base):
        if place is None:
            continue
        try:
            return GenerationConfig.from_pretrained(place)
        except OSError:
            continue
    return GenerationConfig.from_model_config(resolved.config)


class PluginModelLoader(ModelLoader):
    """transformers' model loader loading ``served`` through hf-llmsys (see the module docstring)."""

    def __init__(self, served: ServedModel, **settings):
        super().__init__(**settings)
        self.served = served

    def load_config(self, model_id: str):
        return self.served.config, self.served.generation_config

    def load_processor(self, model_id: str):
        return self.served.tokenizer

    def _load_model(self, model_id: str, tqdm_class=None, progress_callback=None):
        kwargs = dict(dtype=self.dtype, device_map=self.device, trust_remote_code=self.served.trust_remote_code)
        if self.attn_implementation is not None:
            kwargs["attn_implementation"] = self.attn_implementation
        return load_causal_lm(self.served.source, "MODEL", **kwargs).eval()


class PluginServe(Serve):
    """transformers' ``Serve`` with `PluginModelLoader` and an already bound socket.

    ``Serve.__init__`` builds its own loader from its settings and ends by calling ``run``; ``run`` swaps ours in.
    """

    def __init__(self, loader: PluginModelLoader, listening: socket.socket, **serve_settings):
        self.plugin_loader, self.listening = loader, listening
        super().__init__(**serve_settings)

    def run(self, socket: socket.socket | None = None, engine_connection: tuple | None = None) -> None:
        self.loader = self.plugin_loader
        super().run(socket or self.listening, engine_connection)


def serve_with_transformers(served: ServedModel, listening: socket.socket, device: str, dtype: str) -> None:
    """Serve ``served`` on ``listening`` until the server stops (Ctrl-C)."""
    host, port = listening.getsockname()[:2]
    loader = PluginModelLoader(served, device=device, dtype=dtype, trust_remote_code=served.trust_remote_code)
    PluginServe(loader, listening, force_model=served.source, device=device, dtype=dtype, host=host, port=port,
                trust_remote_code=served.trust_remote_code)  # fmt: skip
