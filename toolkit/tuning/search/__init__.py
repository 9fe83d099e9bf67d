"""Search over a space guided by a model: simulated annealing (:mod:`.annealing`), Chameleon's PPO agent
(:mod:`.ppo`) and adaptive sampling (:mod:`.sampling`)."""
