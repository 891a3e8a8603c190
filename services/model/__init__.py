"""The policy: one model definition shared by the trainer and the inference engine, so that
sampling and training run the same numerics (Qwen3-MoE layout, Hugging Face tensor names)."""
