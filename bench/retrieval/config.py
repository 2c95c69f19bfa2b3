"""What bench.retrieval runs: sizes, query counts and windows (FULL, QUICK, SMOKE), the
names it uses, and the fixed slices of the query pool."""

from __future__ import annotations

from dataclasses import dataclass

from bench import REPO

SECTION = "retrieval"
K = 10
RESULTS = REPO / "bench" / "results" / "retrieval"
CHUNK = 10_000  # texts per cached vector file
MAX_UNIQUE = 40_000  # the corpus queries are held out from, whatever --unique is
QUERY_SOURCE = 10_000  # queries vary states of the first 10k corpus items (present at every size)
BENCH_NS = "bench"
CMP_NS = "cmp"
LAG_NS = "lag"
ID_PREFIX = "bx"
BATCH = 5_000


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...]
    unique: int  # real encoded states; items past this are noisy copies
    seq_queries: int
    warmup: int
    window_s: float  # each concurrent-throughput window
    clients: int
    mem0_items: int
    mem0_queries: int
    lag_backlog: int  # closed 10-step trajectories posted at once to measure searchable throughput
    lag_probes: int  # per mode (without and with the consistency token)
    steps_per_trajectory: int
    sigma: float
    quiet_wait_s: float
    batch_sizes: tuple[int, ...] = (32, 128)  # POST …/retrieve/batch sizes against single retrieves
    batch_states: int = 256  # states per mode and round of the batch-throughput runs
    batch_rounds: int = 3


FULL = Config(
    sizes=(10_000, 100_000, 1_000_000),
    unique=40_000,
    seq_queries=500,
    warmup=30,
    window_s=10.0,
    clients=4,
    mem0_items=2_000,
    mem0_queries=200,
    lag_backlog=60,
    lag_probes=30,
    steps_per_trajectory=10,
    sigma=0.01,
    quiet_wait_s=15.0,
)
QUICK = Config(
    sizes=(10_000,),
    unique=10_000,
    seq_queries=200,
    warmup=10,
    window_s=3.0,
    clients=4,
    mem0_items=300,
    mem0_queries=60,
    lag_backlog=15,
    lag_probes=8,
    steps_per_trajectory=10,
    sigma=0.01,
    quiet_wait_s=3.0,
    batch_states=128,
    batch_rounds=2,
)
# Seconds, not minutes: only shows that every part runs (tests/bench); the numbers mean little.
SMOKE = Config(
    sizes=(300,),
    unique=300,
    seq_queries=20,
    warmup=3,
    window_s=1.0,
    clients=2,
    mem0_items=50,
    mem0_queries=10,
    lag_backlog=3,
    lag_probes=2,
    steps_per_trajectory=3,
    sigma=0.01,
    quiet_wait_s=0.5,
    batch_sizes=(8, 16),
    batch_states=16,
    batch_rounds=1,
)

# The query pool, fixed whatever the config (a config uses a prefix of each slice),
# so the quick and full runs ask the same questions and share cached vectors.
SEQ = (0, 500)  # sequential miss/hit runs; vectors encoded (for ground truth)
CMP = (500, 700)  # mem0 and Reflexa at mem0's size; vectors encoded
WARM = (700, 760)  # warm-up and first (index-building) requests
POOL = (760, 4760)  # concurrent cache-miss runs: text only
BATCH_POOL = (4760, 8260)  # batch-throughput runs, a fresh slice per mode and round: text only
PROFILE_POOL = (8260, 8760)  # --profile's cache-miss run: text only
N_QUERIES = PROFILE_POOL[1]
