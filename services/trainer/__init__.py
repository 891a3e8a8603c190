"""The trainer: GRPO / PPO updates of the policy from scored trajectories."""
