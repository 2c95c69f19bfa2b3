"""Every limit on what a request may be, in one package: body size and arrival time
(body.py, before parsing), what storage cannot hold in any field (storable.py, every
route), sizes that depend on meaning (checks.py, after the schema parsed) and the
per-key rate and concurrency limits (per_key.py)."""
