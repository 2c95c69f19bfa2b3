"""MiniGrid / BabyAI GoTo levels as text: the agent's egocentric view described in words."""
