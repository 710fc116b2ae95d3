"""``llmsys chat``: talk to a causal LM in the terminal (streamed replies, a chat template or an SFT prompt template).

- `session`: the conversation (history, system prompt, ``/`` commands) and how it becomes prompt ids; no model;
- `prompt_formats`: the two ways a conversation becomes ids (the tokenizer's chat template, or the text template
  ``llmsys sft`` trained with, e.g. Stanford Alpaca's) and the choice between them;
- `loading`: a folder, Hub id or LoRA adapter folder -> model, tokenizer, prompt format, stop ids;
- `streaming`: one reply generated in a thread and read as text pieces (``TextIteratorStreamer``), interruptible;
- `cli`: argument parsing and the terminal loop (``main(argv)``).

This file imports nothing, so ``llmsys chat --help`` loads no library.
"""
