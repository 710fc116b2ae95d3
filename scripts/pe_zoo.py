#!/usr/bin/env python
"""Positional-encoding zoo: train one tiny model per encoding, compare perplexity at 0.5x..8x the training length.

Writes OUT/zoo.json, OUT/zoo.png, OUT/tokenizer/ and OUT/checkpoints/<encoding>/ (format: the docstring of
hf_llmsys/experiments/positional_zoo.py; the options: hf_llmsys/cli/zoo.py). Default: all encodings, 500 steps
each, about 20 minutes on 2 cores.
``--preset demo`` is the smaller zoo `llmsys demo` trains on first run; ``--quick`` a smoke test.
"""

from hf_llmsys.cli.zoo import main

if __name__ == "__main__":
    main()
