"""The policy: one model definition shared by the trainer and the inference engine, so that
sampling and training run the same numerics (Qwen3-MoE, Qwen3, Llama and Mixtral layouts,
Hugging Face tensor names), plus importing pretrained models and upcycling them to an MoE."""
