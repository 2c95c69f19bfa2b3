"""TextWorldExpress games (coin, twc, cookingworld) as text environments."""
