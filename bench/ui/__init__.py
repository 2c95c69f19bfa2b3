"""bench.ui: operator UI page render times on a store filled to an operator's size
(bench.ui.fill)."""
