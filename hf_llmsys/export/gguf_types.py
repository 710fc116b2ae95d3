"""The GGUF ``--dtype`` names (standard library only: ``llmsys export --help`` lists them without importing gguf).

Written here with gguf's quantiser: f32, f16, bf16, q8_0 (``gguf_format.py``). Made by llama.cpp's own quantiser
through llama-cpp-python: the k-quants q6_K, q5_K_M, q4_K_M (``llama_cpp_quantize.py``).
"""

WRITTEN_TYPES = ("f32", "f16", "bf16", "q8_0")
LLAMA_CPP_TYPES = ("q6_K", "q5_K_M", "q4_K_M")
GGUF_DTYPES = (*WRITTEN_TYPES, *LLAMA_CPP_TYPES)
