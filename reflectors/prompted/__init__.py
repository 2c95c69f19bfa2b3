"""The LLM reflectors (they prompt an LLM through reflectors.llm_client):
heuristics (ERL) kept in an ExpeL-style pool, skills (AWM / SEED), rubrics
(RubricEM / CRPO) and golden negatives (ReflectRL). See docs/reflection.md.

They run only in worker processes with an LLM configured (`REFLEXA_LLM__BASE_URL`):
reflectors.registry builds their handlers then, and only then are their triggers
called when a closed trajectory has been indexed (from the exemplar job's write,
so in the same transaction as its exemplars).

| job | for | dedup |
|---|---|---|
| reflect.golden_negative | a failed attempt with `metadata.expert == true` | once per trajectory |
| reflect.heuristics | any other attempt with a known outcome (success or reward) | once per trajectory |
| reflect.skills | a successful attempt | once per trajectory |
| reflect.rubrics | a task whose recent attempts include a success and a failure | coalesced per task |

Every handler reads in short read units, calls the LLM and the embedder with no
transaction open, and returns one write function that the worker runs with the
job's completion: an LLM failure writes nothing, and a job run again writes
nothing twice.
"""
