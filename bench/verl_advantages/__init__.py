"""bench.verl_advantages: a verl-shaped padded batch through the client's splitting, against numpy."""
